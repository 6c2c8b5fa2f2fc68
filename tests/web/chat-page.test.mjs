// tests/web/chat-page.test.mjs — the chat page of `weft serve` (GET /) in headless Chromium.
//
// Starts `weft serve --port 0 -np 2 -c 16384` (the built-in stories260K model: no -m; -c gives
// each of the 2 slots 8192 tokens, so that the long reply below runs for seconds instead of the
// ~1 s that 2000 tokens take), opens the page in Debian's /usr/bin/chromium through
// playwright-core, and checks as a person would use it:
//   1. the model name shows (the id that GET /v1/models gives);
//   2. Shift+Enter makes a newline; Enter sends "Tell me a story"; the reply streams in, the
//      generation ends and the stats show tokens/s;
//   3. with Max tokens 8000, a second message; Stop is clicked once text has appeared: Send is
//      enabled again, the partial reply stays and stops growing, and the server's log line for
//      that request says it was cancelled ("client went away" / "finish cancelled");
//   4. a third message still works, and its request carries the whole conversation, the partial
//      reply included;
//   5. a setting the page refuses (temperature -1) shows its message and sends nothing; one the
//      server refuses (max_tokens 2000000) shows the server's OpenAI error message and puts the
//      text back into the input;
//   6. "New chat" starts a second conversation; the API key field (in the settings, opened first
//      with #settings-toggle) is kept in localStorage and sent as "Authorization: Bearer";
//   7. against a stand-in server that writes its SSE a few bytes at a time (events, lines and
//      UTF-8 characters split across reads, CRLF, comment lines), the reply reads exactly right;
//   8. the conversation survives a reload (messages, the stopped mark, each reply's tokens/s and
//      context used, the list, the settings); the Image button hides (GET /props: no vision);
//   9. Regenerate sends the conversation up to the reply again and replaces it; Edit replaces a
//      message and what followed it;
//  10. every sampler setting goes out with its type (numbers, mirostat, stop strings, sequence
//      breakers, sampler order, logit bias, a grammar that the reply then follows); a bad JSON
//      schema is refused by the page; the server's defaults show as placeholders; Reset empties;
//  11. conversations open, rename (a name with markup stays text) and delete, across reloads;
//  12. dark mode follows the system, and the toggle chooses light or dark and is kept;
//  13. against a stand-in server that takes images: markdown renders (headings, emphasis, lists,
//      quote, table, code spans, links), a python block is highlighted and its Copy button puts
//      the code on the clipboard, hostile markup and javascript:/data: links stay text and run
//      nothing, reasoning_content shows apart and collapsed and is not sent back, the statistics
//      use usage and timings, an attached image goes out and shows, and all survives a reload.
// Exits 0 when every check passed, 1 on the first failure (with the reason, the server's log and
// the page's text). The server and the browser are stopped at the end, on failure and on signals.
//
//   WEFT_BINARY=build/weft node tests/web/chat-page.test.mjs   (or tests/web/run.sh)
//
// WEFT_BINARY: the weft binary (a relative path is taken from the current directory); default
// build/weft under the repository root. CHROMIUM: the browser (default /usr/bin/chromium).
// WEFT_TEST_LOGS=1: print the server's whole log at the end, also when every check passed.

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const binary = process.env.WEFT_BINARY
  ? path.resolve(process.env.WEFT_BINARY)
  : path.join(repoRoot, 'build', 'weft');
const browserPath = process.env.CHROMIUM || '/usr/bin/chromium';

const STEP_MS = 30_000; // one wait
const WATCHDOG_MS = 180_000; // the whole script, whatever hangs
const LONG_MAX_TOKENS = 8000;

let server = null; // { proc, url, log }
let browser = null;
let page = null;
let step = 'starting';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (msg) => console.log(`chat-page test: ${msg}`);
const tail = (text, lines = 40) => text.split('\n').slice(-lines).join('\n');

function killServer(signal = 'SIGKILL') {
  if (server && server.proc.exitCode === null && server.proc.signalCode === null) server.proc.kill(signal);
}
process.on('exit', () => killServer());
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(sig, () => {
    console.error(`chat-page test: ${sig}, stopping`);
    killServer();
    process.exit(1);
  });

async function pageText() {
  try {
    return await page.evaluate(() =>
      [...document.querySelectorAll('#messages .msg')]
        .map((m) => `[${m.className}] ${m.querySelector('.content').textContent.slice(0, 300)}`)
        .concat([`#stats: ${document.getElementById('stats').textContent}`,
                 `#error: ${document.getElementById('error').textContent}`])
        .join('\n'),
    );
  } catch (e) {
    return `(cannot read the page: ${e.message})`;
  }
}

async function fail(reason) {
  console.error(`chat-page test: FAIL at "${step}": ${reason}`);
  if (page) console.error(`--- the page ---\n${await pageText()}`);
  if (server) console.error(`--- the server's stderr (last lines) ---\n${tail(server.log)}`);
  killServer();
  if (browser) await browser.close().catch(() => {});
  process.exit(1);
}

const watchdog = setTimeout(() => {
  fail(`the whole run took over ${WATCHDOG_MS / 1000} s`);
}, WATCHDOG_MS);
watchdog.unref();

function check(cond, reason) {
  if (!cond) throw new Error(reason);
}

// Polls fn() until it returns a truthy value; throws with `what` after `ms`.
async function until(what, fn, ms = STEP_MS, every = 50) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`);
    await sleep(every);
  }
}

// --- the server

async function startServer(args) {
  check(existsSync(binary), `no weft binary at ${binary} (set WEFT_BINARY)`);
  const proc = spawn(binary, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  server = { proc, url: null, log: '' };
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => { server.log += d; });
  const exited = new Promise((resolve) => {
    proc.on('exit', (code, sig) => resolve(`exited (${code ?? sig})`));
    proc.on('error', (e) => resolve(`could not start (${e.message})`));
  });
  const m = await Promise.race([
    until('the "listening on" line', () => server.log.match(/weft serve: listening on (http:\/\/\S+)/), 15_000),
    exited.then((how) => { throw new Error(`weft serve ${how} before listening`); }),
  ]);
  server.url = m[1].replace(/\/$/, '');
  await until('GET /health to answer 200 {"status":"ok"}', async () => {
    try {
      const r = await fetch(`${server.url}/health`);
      return r.status === 200 && (await r.json()).status === 'ok';
    } catch {
      return false;
    }
  });
}

// The server's log lines for POST /v1/chat/completions, in the order they were answered.
const chatLogLines = () =>
  server.log.split('\n').filter((l) => /^weft serve: \S+ POST \/v1\/chat\/completions -> /.test(l));

// --- the page

const state = () =>
  page.evaluate(() => {
    const q = (s) => [...document.querySelectorAll(s)];
    const assistants = q('#messages .msg.assistant');
    const last = assistants[assistants.length - 1];
    return {
      users: q('#messages .msg.user').length,
      assistants: assistants.length,
      msgs: q('#messages .msg').length,
      reply: last ? last.querySelector('.content').textContent : null,
      lastClass: last ? last.className : null,
      sendDisabled: document.getElementById('send').disabled,
      stopDisabled: document.getElementById('stop').disabled,
      stats: document.getElementById('stats').textContent,
      error: document.getElementById('error').hidden ? '' : document.getElementById('error').textContent,
      input: document.getElementById('input').value,
      stored: (() => { // the shown conversation as localStorage keeps it
        const id = localStorage.getItem('weft.currentConversation');
        const c = id && JSON.parse(localStorage.getItem('weft.conversation.' + id) || 'null');
        return c ? c.messages.map((m) => m.content) : [];
      })(),
      listed: q('#conversations li.conversation .open').map((b) => b.textContent),
    };
  });
// Text without its whitespace: a reply as shown (markdown: paragraphs are elements) against its text.
const squash = (t) => t.replace(/\s+/g, '');

const idle = (s) => !s.sendDisabled && s.stopDisabled;
const generating = (s) => s.sendDisabled && !s.stopDisabled;

// Sends `text` with Enter (or a click on Send) and waits for the reply to end; returns the state.
async function sendAndWait(text, { click = false } = {}) {
  const before = await state();
  await page.fill('#input', text);
  if (click) await page.click('#send');
  else await page.press('#input', 'Enter');
  const s = await until('the reply to end (Send enabled, Stop disabled, a non-empty reply)', async () => {
    const s = await state();
    if (idle(s) && s.error) throw new Error(`the page shows an error: ${s.error}`);
    return s.assistants === before.assistants + 1 && idle(s) && s.reply ? s : null;
  });
  check(s.users === before.users + 1, `expected ${before.users + 1} user messages, got ${s.users}`);
  const lastUser = await page.evaluate(() => {
    const u = [...document.querySelectorAll('#messages .msg.user .content')];
    return u[u.length - 1].textContent;
  });
  check(lastUser === text, `the last user message reads ${JSON.stringify(lastUser)}, not ${JSON.stringify(text)}`);
  check(s.input === '', `the input still holds ${JSON.stringify(s.input)} after sending`);
  return s;
}

// The page against a stand-in server (node's http, on 127.0.0.1) that writes its SSE answer a few
// bytes at a time: lines, events and UTF-8 characters split across reads, CRLF line ends, comment
// lines, and a usage chunk. The reply must read exactly the text sent.
async function splitStreamCheck(html) {
  const pieces = ['Once upon a time, ', 'a café ', 'by the 🦊 fox', ' said "hi" <b>not bold</b>.', '\nThe end.'];
  const chunk = (obj) => 'data: ' + JSON.stringify({ object: 'chat.completion.chunk', ...obj }) + '\n\n';
  let sse = ': a comment line, to be ignored\r\n\r\n';
  pieces.forEach((p, k) => {
    const c = chunk({ choices: [{ index: 0, delta: k ? { content: p } : { role: 'assistant', content: p }, finish_reason: null }], usage: null });
    sse += k === 2 ? c.replace(/\n/g, '\r\n') : c;
    if (k === 1) sse += ': waiting\n\n';
  });
  sse += chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: null });
  sse += chunk({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 17, total_tokens: 20 } });
  sse += 'data: [DONE]\n\n';
  const bytes = Buffer.from(sse, 'utf8');
  // where a read must end: inside 'é' and '🦊', between '\r' and '\n', inside "data:", inside [DONE]
  const at = (text, plus) => Buffer.byteLength(sse.slice(0, sse.indexOf(text)), 'utf8') + plus;
  const splits = [at('é', 1), at('🦊', 2), at('\r\n', 1), at('data: {', 3), at('[DONE]', 3)].sort((x, y) => x - y);
  const fake = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/') {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' }).end(html);
    } else if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'Content-Type': 'application/json' })
        .end(JSON.stringify({ object: 'list', data: [{ id: 'stand-in', object: 'model' }] }));
    } else if (req.method === 'POST' && req.url === '/v1/chat/completions') {
      req.resume();
      req.on('end', async () => {
        res.socket.setNoDelay(true);
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
        for (let i = 0; i < bytes.length; ) {
          const split = splits.find((x) => x > i);
          const end = Math.min(i + 5, split ?? bytes.length);
          res.write(bytes.subarray(i, end));
          await sleep(end === split ? 40 : 2); // long enough for the page to read up to a split
          i = end;
        }
        res.end();
      });
    } else {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":{"message":"not here"}}');
    }
  });
  await new Promise((resolve) => fake.listen(0, '127.0.0.1', resolve));
  const p = await browser.newPage();
  try {
    await p.goto(`http://127.0.0.1:${fake.address().port}/`);
    await until('#model to read "stand-in"', async () => (await p.textContent('#model')).trim() === 'stand-in');
    await p.fill('#input', 'Tell me a story');
    await p.press('#input', 'Enter');
    await p.waitForFunction(() => !document.getElementById('send').disabled, null, { timeout: STEP_MS });
    check(await p.$('.msg.assistant'), `no reply shows; #error: ${await p.textContent('#error')}`);
    const got = await p.evaluate(() => ({
      reply: document.querySelector('.msg.assistant .content').textContent,
      html: document.querySelector('.msg.assistant .content').innerHTML,
      stats: document.getElementById('stats').textContent,
      error: document.getElementById('error').textContent,
    }));
    check(!got.error, `the stand-in stream gave an error: ${got.error}`);
    check(got.reply === pieces.join(''), `the split stream reads ${JSON.stringify(got.reply)}, not ${JSON.stringify(pieces.join(''))}`);
    check(!got.html.includes('<b>'), 'the reply was rendered as HTML');
    check(/^17 tokens in .* tokens\/s/.test(got.stats), `the stats do not use the usage chunk: ${JSON.stringify(got.stats)}`);
    log(`split stream: ${bytes.length} bytes in 5-byte writes, split inside characters and lines, read back exactly`);
  } finally {
    await p.close();
    fake.close();
  }
}

// The page against a stand-in server that answers each chat request with the next scripted reply
// (its SSE whole) and says in GET /props that it takes images: markdown renders (code highlighted
// and copyable), hostile markup stays text, reasoning shows apart and collapsed, the statistics come
// from usage and timings, an image goes out and shows, and all of it survives a reload.
const MARKDOWN_REPLY = [
  '## A *small* **answer**', '', 'Some `inline code`, ~~old~~ and a [link](https://example.com/a_b).', '',
  '- one', '- two', '  - nested', '', '1. first', '2. second', '', '> quoted', '', '| x | y |', '|---|--:|', '| 1 | 2 |', '',
  '```python', 'def add(a, b):', '    return a + b  # sum', '```', '',
  'Hostile: <img src=x onerror="window.__xss=1"> <script>window.__xss=2</script>',
  '[click](javascript:window.__xss=3) [tab](java\tscript:window.__xss=4) [data](data:text/html,<b>x</b>)',
  '![pic](javascript:window.__xss=5) <javascript:window.__xss=6>',
].join('\n');
const REASONING = 'The user wants a number. <b>Think</b> hard.';
// Markdown built to make a naive renderer quadratic or overflow its stack (183,000 characters):
// nested emphasis that closes at the end, unclosed links and code spans, a quote 3,000 deep, URLs
// that do not parse.
const HOSTILE_REPLY = '*x _x '.repeat(4000) + 'x_ x* '.repeat(4000) + '\n\n' + '[](' .repeat(20000) + '\n\n' +
  '>'.repeat(3000) + ' deep\n\n' + '`a'.repeat(20000) + '\n\n' + 'http://['.repeat(4000);

async function standInChecks(html) {
  const sse = (deltas, usage, timings) =>
    deltas.map((d) => `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: d, finish_reason: null }] })}\n\n`).join('') +
    `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n` +
    `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [], usage, timings })}\n\ndata: [DONE]\n\n`;
  const replies = [
    sse([{ role: 'assistant', content: MARKDOWN_REPLY.slice(0, 40) }, { content: MARKDOWN_REPLY.slice(40) }],
        { prompt_tokens: 10, completion_tokens: 90, total_tokens: 100 }, { predicted_per_second: 42.5 }),
    sse([{ role: 'assistant', reasoning_content: REASONING.slice(0, 10) }, { reasoning_content: REASONING.slice(10) }, { content: 'It is **7**.' }],
        { prompt_tokens: 120, completion_tokens: 20, total_tokens: 140 }, { predicted_per_second: 12.5 }),
    sse([{ role: 'assistant', content: 'A tiny picture.' }], { prompt_tokens: 200, completion_tokens: 4, total_tokens: 204 }, {}),
    sse([{ role: 'assistant', content: HOSTILE_REPLY }], { prompt_tokens: 300, completion_tokens: 9, total_tokens: 309 }, {}),
  ];
  const bodies = [];
  const fake = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/') {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' }).end(html);
    } else if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ object: 'list', data: [{ id: 'stand-in', object: 'model' }] }));
    } else if (req.method === 'GET' && req.url === '/props') {
      res.writeHead(200, { 'Content-Type': 'application/json' })
        .end(JSON.stringify({ n_ctx_slot: 4096, modalities: { vision: true }, default_generation_settings: { temperature: 0.8 } }));
    } else if (req.method === 'POST' && req.url === '/v1/chat/completions') {
      let body = '';
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        bodies.push(JSON.parse(body));
        res.writeHead(200, { 'Content-Type': 'text/event-stream' }).end(replies[bodies.length - 1] || sse([{ content: 'more' }], {}, {}));
      });
    } else {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":{"message":"not here"}}');
    }
  });
  await new Promise((resolve) => fake.listen(0, '127.0.0.1', resolve));
  const context = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] });
  const p = await context.newPage();
  const errors = [];
  p.on('pageerror', (e) => errors.push(String(e)));
  const url = `http://127.0.0.1:${fake.address().port}/`;
  const turn = async (text, n) => {
    await p.fill('#input', text);
    await p.press('#input', 'Enter');
    await p.waitForFunction((n) => document.querySelectorAll('.msg.assistant').length === n && !document.getElementById('send').disabled,
                            n, { timeout: STEP_MS });
  };
  const reply = (n) => `.msg.assistant:nth-of-type(${2 * n})`;
  try {
    await p.goto(url);
    await until('#model to read "stand-in"', async () => (await p.textContent('#model')).trim() === 'stand-in');
    check(await p.isVisible('#attach'), 'the Image button is hidden though GET /props says modalities.vision');

    // markdown, and what must stay text
    await turn('Show me markdown', 1);
    const md = await p.$eval(reply(1) + ' .content', (c) => ({
      h2: c.querySelector('h2')?.textContent, em: c.querySelector('h2 em')?.textContent, strong: c.querySelector('h2 strong')?.textContent,
      code: c.querySelector('p code')?.textContent, del: c.querySelector('del')?.textContent,
      links: [...c.querySelectorAll('a')].map((a) => [a.getAttribute('href'), a.rel, a.textContent]),
      ul: c.querySelectorAll('ul > li').length, nested: c.querySelectorAll('ul ul li').length, ol: c.querySelectorAll('ol > li').length,
      quote: c.querySelector('blockquote')?.textContent.trim(), th: [...c.querySelectorAll('th')].map((t) => t.textContent),
      right: c.querySelector('td:nth-child(2)')?.style.textAlign,
      pre: c.querySelector('pre code')?.textContent, lang: c.querySelector('.code-lang')?.textContent,
      keyword: [...c.querySelectorAll('pre .tok-keyword')].map((t) => t.textContent), comment: c.querySelector('pre .tok-comment')?.textContent,
      tags: [...c.querySelectorAll('img, script, iframe, object, b')].length, text: c.textContent,
      handlers: [...c.querySelectorAll('*')].some((e) => [...e.attributes].some((a) => /^on/i.test(a.name))),
    }));
    check(md.h2 === 'A small answer' && md.em === 'small' && md.strong === 'answer', `the heading: ${JSON.stringify(md)}`);
    check(md.code === 'inline code' && md.del === 'old', `code span or strikethrough: ${md.code}, ${md.del}`);
    check(md.ul === 3 && md.nested === 1 && md.ol === 2 && md.quote === 'quoted', `lists or quote: ${JSON.stringify(md)}`);
    check(JSON.stringify(md.th) === '["x","y"]' && md.right === 'right', `the table: ${JSON.stringify(md.th)} ${md.right}`);
    check(md.pre === 'def add(a, b):\n    return a + b  # sum' && md.lang === 'python' &&
          md.keyword.includes('def') && md.keyword.includes('return') && md.comment === '# sum', `the code block: ${JSON.stringify(md)}`);
    check(md.links.length === 1 && md.links[0][0] === 'https://example.com/a_b' && /noopener/.test(md.links[0][1]),
          `the links: ${JSON.stringify(md.links)}`);
    check(md.tags === 0 && !md.handlers && md.text.includes('<img src=x onerror="window.__xss=1">') && md.text.includes('<script>'),
          'hostile markup was not kept as text');
    check(!(await p.evaluate(() => window.__xss)), 'a hostile reply ran script');
    await p.click(reply(1) + ' .copy-code');
    const copied = await p.evaluate(() => navigator.clipboard.readText());
    check(copied === md.pre, `Copy put ${JSON.stringify(copied)} on the clipboard`);
    check(/90 tokens · 42\.5 tokens\/s · context 100 \/ 4096 \(2%\)/.test(await p.textContent(reply(1) + ' .msg-stats')),
          `the reply's statistics: ${await p.textContent(reply(1) + ' .msg-stats')}`);

    // reasoning: apart, collapsed, not sent back
    await turn('Think about a number', 2);
    const r = await p.$eval(reply(2), (m) => ({
      open: m.querySelector('details.reasoning').open, hidden: m.querySelector('details.reasoning').hidden,
      reasoning: m.querySelector('details.reasoning .reasoning-text').textContent,
      visible: m.querySelector('details.reasoning .reasoning-text').checkVisibility(),
      content: m.querySelector('.content').textContent, strong: m.querySelector('.content strong')?.textContent,
    }));
    check(!r.open && !r.hidden && !r.visible && r.reasoning === REASONING, `the reasoning: ${JSON.stringify(r)}`);
    check(r.content === 'It is 7.' && r.strong === '7', `the answer: ${JSON.stringify(r)}`);
    await p.click(reply(2) + ' details.reasoning summary');
    check(await p.$eval(reply(2) + ' .reasoning-text', (e) => e.checkVisibility()), 'the reasoning does not open');
    check(/12\.5 tokens\/s · context 140 \/ 4096/.test(await p.textContent(reply(2) + ' .msg-stats')), 'the statistics of the second reply');

    // an image
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
    await p.setInputFiles('#image-file', { name: 'dot.png', mimeType: 'image/png', buffer: png });
    await until('#attached to name the image', async () => (await p.textContent('#attached')) === 'dot.png' || null, 5_000);
    await turn('What is this?', 3);
    const sentParts = bodies[2].messages[bodies[2].messages.length - 1].content;
    check(Array.isArray(sentParts) && sentParts[1].type === 'image_url' && /^data:image\/png;base64,/.test(sentParts[1].image_url.url),
          `the image did not go out: ${JSON.stringify(sentParts).slice(0, 200)}`);
    check(bodies[2].messages[3].content === 'It is **7**.' && !JSON.stringify(bodies[2]).includes('wants a number'),
          'the reasoning was sent back, or the answer was not');

    // all of it after a reload
    await p.reload();
    await p.waitForFunction(() => document.querySelectorAll('.msg').length === 6, null, { timeout: STEP_MS });
    const after = await p.evaluate(() => ({
      pre: document.querySelector('.msg.assistant pre code')?.textContent,
      reasoning: document.querySelector('details.reasoning:not([hidden])')?.open,
      img: document.querySelector('.msg.user img')?.src.slice(0, 22),
    }));
    check(after.pre && after.reasoning === false && after.img === 'data:image/png;base64,', `after a reload: ${JSON.stringify(after)}`);

    // a reply built to be slow to render still renders, quickly
    const t0 = Date.now();
    await turn('Be hostile', 4);
    const hostileMs = Date.now() - t0;
    const shown = await p.$eval(reply(4) + ' .content', (c) => c.textContent.length);
    // (quadratic would take minutes; two shared cores can make a fair render take seconds)
    check(shown > 100000 && hostileMs < 15000, `the hostile reply: ${shown} characters shown after ${hostileMs} ms`);
    log(`hostile markdown (${HOSTILE_REPLY.length} characters): rendered in ${hostileMs} ms`);
    check(errors.length === 0, `the page threw: ${errors.join('; ')}`);
    log('stand-in: markdown, highlighting, copy, hostile markup kept as text, reasoning collapsed, statistics, an image, a reload');
  } finally {
    await context.close();
    fake.close();
  }
}

async function main() {
  step = 'start weft serve';
  await startServer(['-np', '2', '-c', '16384']);
  log(`server at ${server.url}`);
  const models = await (await fetch(`${server.url}/v1/models`)).json();
  const modelId = models.data[0].id;

  step = 'start chromium';
  check(existsSync(browserPath), `no browser at ${browserPath}`);
  browser = await chromium.launch({ executablePath: browserPath, headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  const chatBodies = []; // the JSON bodies the page posted to /v1/chat/completions
  let lastAuth = null; // the Authorization header of the last one
  page.on('request', (r) => {
    if (r.method() !== 'POST' || new URL(r.url()).pathname !== '/v1/chat/completions') return;
    chatBodies.push(JSON.parse(r.postData() || 'null'));
    lastAuth = r.headers().authorization ?? null;
  });

  step = 'open the page';
  const res = await page.goto(`${server.url}/`);
  check(res && res.status() === 200, `GET / answered ${res && res.status()}`);
  for (const id of ['messages', 'input', 'send', 'stop', 'new-chat', 'model', 'stats', 'conversations', 'settings-toggle', 'theme-toggle'])
    check(await page.$(`#${id}`), `the page has no #${id}`);
  check(await page.isHidden('#settings'), 'the settings show before they are asked for');
  await page.click('#settings-toggle');
  check(await page.isVisible('#max-tokens'), 'the settings do not open');
  check(await page.isHidden('#attach'), 'the Image button shows on a server without --mmproj (GET /props modalities.vision is false)');

  step = 'the model name shows';
  await until(`#model to read "${modelId}"`, async () => (await page.textContent('#model')).trim() === modelId);
  const s0 = await state();
  check(idle(s0), 'Send should be enabled and Stop disabled before anything is sent');
  log(`model "${modelId}" shown`);

  step = 'Shift+Enter makes a newline';
  await page.click('#input');
  await page.keyboard.type('line one');
  await page.keyboard.press('Shift+Enter');
  await page.keyboard.type('line two');
  const typed = await page.inputValue('#input');
  check(typed === 'line one\nline two', `Shift+Enter gave ${JSON.stringify(typed)}`);
  check((await state()).msgs === 0, 'Shift+Enter sent the message');

  step = 'first message (Enter)';
  const s1 = await sendAndWait('Tell me a story');
  check(/[\d.]+ tokens\/s/.test(s1.stats), `the stats do not show tokens/s: ${JSON.stringify(s1.stats)}`);
  check(/first token/.test(s1.stats), `the stats do not show the time to the first token: ${JSON.stringify(s1.stats)}`);
  check(chatBodies.length === 1, `expected 1 chat request, saw ${chatBodies.length}`);
  const b1 = chatBodies[0];
  check(b1.stream === true && b1.stream_options?.include_usage === true,
        `the request is not streamed with include_usage: ${JSON.stringify(b1)}`);
  check(b1.messages.length === 1 && b1.messages[0].role === 'user' && b1.messages[0].content === 'Tell me a story',
        `the first request's messages: ${JSON.stringify(b1.messages)}`);
  log(`reply 1: ${s1.reply.length} chars; stats: ${s1.stats}`);

  step = 'second message, stopped';
  await page.fill('#max-tokens', String(LONG_MAX_TOKENS));
  await page.fill('#input', 'Tell me a long story');
  await page.click('#send');
  await until('Stop enabled and Send disabled while generating', async () => generating(await state()), 10_000, 10);
  // Stop as soon as some text has appeared: wait in the page itself, so that no poll interval is lost
  await page.waitForFunction(() => {
    const a = document.querySelectorAll('#messages .msg.assistant .content');
    return a.length === 2 && a[1].textContent.length > 0;
  }, null, { timeout: STEP_MS, polling: 'raf' });
  check(generating(await state()), 'the long reply ended before Stop could be clicked');
  await page.click('#stop');
  const s2 = await until('Send enabled again after Stop', async () => {
    const s = await state();
    return idle(s) ? s : null;
  }, 10_000);
  check(s2.assistants === 2 && s2.reply.length > 0, `the partial reply is gone: ${JSON.stringify(s2)}`);
  check(/\bstopped\b/.test(s2.lastClass), `the stopped reply is not marked stopped (class "${s2.lastClass}")`);
  check(!s2.error, `an error shows after Stop: ${s2.error}`);
  check(/stopped/i.test(s2.stats), `the stats do not say it stopped: ${JSON.stringify(s2.stats)}`);
  await sleep(1500);
  const s2b = await state();
  check(s2b.reply === s2.reply, `the reply kept growing after Stop (${s2.reply.length} -> ${s2b.reply.length} chars)`);
  check(chatBodies.length === 2 && chatBodies[1].max_tokens === LONG_MAX_TOKENS,
        `the second request did not carry max_tokens ${LONG_MAX_TOKENS}: ${JSON.stringify(chatBodies[1] ?? null)}`);
  const line2 = await until("the server's log line for the stopped request", () => chatLogLines()[1], 15_000);
  check(/client went away|finish cancelled/.test(line2), `the server did not cancel the stopped request: ${line2}`);
  const generated = Number((line2.match(/(\d+) generated/) || [])[1]);
  check(!(generated >= LONG_MAX_TOKENS), `the stopped request still generated all ${generated} tokens: ${line2}`);
  log(`stopped after ${s2.reply.length} chars; server: ${line2.replace(/^weft serve: /, '')}`);

  step = 'third message';
  await page.fill('#max-tokens', '64');
  const s3 = await sendAndWait('What happened next?', { click: true });
  check(s3.users === 3 && s3.assistants === 3, `expected 3 + 3 messages, got ${s3.users} + ${s3.assistants}`);
  check(/[\d.]+ tokens\/s/.test(s3.stats), `the stats do not show tokens/s: ${JSON.stringify(s3.stats)}`);
  const b3 = chatBodies[2];
  check(b3 && b3.max_tokens === 64, `the third request's max_tokens: ${JSON.stringify(b3?.max_tokens)}`);
  const roles = b3.messages.map((m) => m.role).join(',');
  check(roles === 'user,assistant,user,assistant,user', `the third request's roles: ${roles}`);
  check(b3.messages[1].content === s3.stored[1] && squash(s3.stored[1]) === squash(s1.reply),
        'the third request does not carry the first reply as shown and kept');
  check(b3.messages[3].content === s3.stored[3] && squash(s3.stored[3]) === squash(s2.reply),
        'the third request does not carry the partial (stopped) reply as shown and kept');
  log(`reply 3: ${s3.reply.length} chars; stats: ${s3.stats}`);

  step = 'the conversation survives a reload';
  const perMessage = await page.$$eval('.msg.assistant .msg-stats', (l) => l.map((e) => e.textContent));
  check(/tokens\/s/.test(perMessage[0]) && /context \d+ \/ 8192 \(\d+%\)/.test(perMessage[0]),
        `the first reply's own statistics show no tokens/s or context used: ${JSON.stringify(perMessage[0])}`);
  check(/^Stopped/.test(s2.stats) && perMessage[1] !== undefined, 'the stopped reply has no statistics line');
  check(s3.listed.length === 1 && s3.listed[0] === 'Tell me a story', `the conversation list: ${JSON.stringify(s3.listed)}`);
  await page.reload();
  await until('the conversation to show again after the reload', async () => (await state()).msgs === 6);
  const r = await state();
  check(r.reply === s3.reply && r.lastClass === 'msg assistant', `the last reply reads differently after the reload: ${JSON.stringify(r.reply.slice(0, 80))}`);
  check(await page.$eval('.msg.assistant:nth-of-type(4)', (e) => e.classList.contains('stopped')), 'the stopped reply is no longer marked stopped');
  check(JSON.stringify(r.stored) === JSON.stringify(s3.stored) && JSON.stringify(r.listed) === JSON.stringify(s3.listed),
        'the stored conversation or its list changed across the reload');
  check(/context \d+ \/ 8192/.test(await page.textContent('.msg.assistant .msg-stats')), 'the statistics are gone after the reload');
  await page.click('#settings-toggle');
  check(await page.inputValue('#max-tokens') === '64', 'the settings were not kept across the reload');
  log(`reload: ${r.msgs} messages and the list (${r.listed.join(', ')}) read back from localStorage`);

  step = 'errors show';
  // a value the page itself refuses: nothing is sent
  await page.fill('#temperature', '-1');
  await page.fill('#input', 'This one fails');
  await page.click('#send');
  const s4 = await until('#error to show the page\'s own message', async () => {
    const s = await state();
    return s.error && idle(s) ? s : null;
  }, 10_000);
  check(/temperature/i.test(s4.error), `the error does not name the temperature: ${s4.error}`);
  check(chatBodies.length === 3, 'a request went out with a temperature the page refuses');
  await page.fill('#temperature', '');
  // a value the server refuses: its OpenAI error message shows, the turn is taken back
  await page.fill('#max-tokens', '2000000');
  await page.click('#send');
  const s5 = await until("#error to show the server's message", async () => {
    const s = await state();
    return s.error && !/temperature/i.test(s.error) && idle(s) ? s : null;
  }, 10_000);
  check(chatBodies.length === 4, `expected a 4th request, saw ${chatBodies.length}`);
  check(/400/.test(s5.error) && /'max_tokens' must be in/.test(s5.error),
        `the error does not show the server's message: ${s5.error}`);
  check(s5.users === 3 && s5.assistants === 3, `the failed turn left messages behind: ${s5.users} + ${s5.assistants}`);
  check(s5.input === 'This one fails', `the failed message is not back in the input: ${JSON.stringify(s5.input)}`);
  await page.fill('#max-tokens', '32');

  step = 'an attached image';
  // this server has no --mmproj: the image goes out as a data: URI part and comes back as a 400
  await page.setInputFiles('#image-file', { name: 'pic.ppm', mimeType: 'image/x-portable-pixmap', buffer: Buffer.from('P6\n1 1\n255\n\x00\x00\x00', 'latin1') });
  await until('#attached to name the image', async () => (await page.textContent('#attached')) === 'pic.ppm' || null, 5_000);
  await page.fill('#input', 'What is this?');
  await page.click('#send');
  const s5b = await until("#error to show the server's image message", async () => {
    const s = await state();
    return s.error && /mmproj/.test(s.error) && idle(s) ? s : null;
  }, 10_000);
  const imageBody = chatBodies[chatBodies.length - 1];
  const parts = imageBody.messages[imageBody.messages.length - 1].content;
  check(Array.isArray(parts) && parts[0].type === 'text' && parts[0].text === 'What is this?' &&
        parts[1].type === 'image_url' && /^data:image\/x-portable-pixmap;base64,/.test(parts[1].image_url.url),
        `the image did not go out as a data: URI part: ${JSON.stringify(parts).slice(0, 200)}`);
  check(s5b.input === 'What is this?' && (await page.textContent('#attached')) === 'pic.ppm',
        'the failed turn did not give back its text and image');
  await page.click('#new-chat');
  check((await page.textContent('#attached')) === '', 'New chat kept the attached image');

  step = 'New chat, with an API key';
  await page.click('#new-chat');
  const s6 = await state();
  check(s6.msgs === 0 && !s6.error, `New chat left ${s6.msgs} messages (error: ${s6.error})`);
  await page.fill('#api-key', 'test-key'); // this server has no key: it ignores the header
  await page.dispatchEvent('#api-key', 'change');
  const stored = await page.evaluate(() => localStorage.getItem('weft.apiKey'));
  check(stored === 'test-key', `the API key is not kept in localStorage (${JSON.stringify(stored)})`);
  const s7 = await sendAndWait('Tell me a story');
  check(s7.msgs === 2, `expected 2 messages after New chat and one turn, got ${s7.msgs}`);
  const last = chatBodies[chatBodies.length - 1];
  check(last.messages.length === 1, 'the request after New chat still carries the old conversation');
  check(lastAuth === 'Bearer test-key', `the request's Authorization header: ${JSON.stringify(lastAuth)}`);
  check(s7.listed.length === 2, `expected 2 conversations listed, got ${JSON.stringify(s7.listed)}`);

  step = 'regenerate a reply';
  const nBodies = chatBodies.length;
  await page.click('.msg.assistant .regenerate');
  const s8 = await until('the regenerated reply', async () => {
    const s = await state();
    return chatBodies.length === nBodies + 1 && idle(s) && s.assistants === 1 && s.reply ? s : null;
  });
  check(JSON.stringify(chatBodies[nBodies].messages) === JSON.stringify(last.messages),
        `regenerate sent other messages: ${JSON.stringify(chatBodies[nBodies].messages)}`);
  check(s8.msgs === 2 && s8.stored.length === 2 && squash(s8.stored[1]) === squash(s8.reply),
        `after regenerate: ${s8.msgs} messages shown, ${s8.stored.length} kept`);

  step = 'edit a message';
  await page.click('.msg.user .edit');
  await page.fill('.msg.user .edit-box', 'Tell me about a cat');
  await page.click('.msg.user .edit-save');
  const s9 = await until('the reply to the edited message', async () => {
    const s = await state();
    return chatBodies.length === nBodies + 2 && idle(s) && s.assistants === 1 && s.reply ? s : null;
  });
  const edited = chatBodies[nBodies + 1].messages;
  check(edited.length === 1 && edited[0].content === 'Tell me about a cat', `the edited request: ${JSON.stringify(edited)}`);
  check(s9.msgs === 2 && s9.stored[0] === 'Tell me about a cat' &&
        (await page.textContent('.msg.user .content')) === 'Tell me about a cat', 'the edited message is not what shows and is kept');
  log('regenerate and edit: each sent the conversation up to the turn, and replaced it');

  step = 'every sampler setting';
  check((await page.getAttribute('#top-k', 'placeholder')) === '40' && (await page.getAttribute('#dry-base', 'placeholder')) === '1.75',
        'the settings do not show the server\'s defaults (GET /props default_generation_settings)');
  const numbers = { 'top-k': 20, 'top-p': 0.9, 'min-p': 0.1, 'typical-p': 0.95, 'top-n-sigma': 2, 'dynatemp-range': 0.2,
                    'dynatemp-exponent': 1.5, 'xtc-probability': 0.1, 'xtc-threshold': 0.2, 'repeat-penalty': 1.1,
                    'repeat-last-n': 32, 'presence-penalty': 0.5, 'frequency-penalty': 0.25, 'dry-multiplier': 0.8,
                    'dry-base': 1.5, 'dry-allowed-length': 3, 'dry-penalty-last-n': 64, 'mirostat-tau': 4, 'mirostat-eta': 0.2,
                    seed: 42, 'n-keep': 4, temperature: 0.7 };
  for (const [id, v] of Object.entries(numbers)) await page.fill(`#${id}`, String(v));
  await page.selectOption('#mirostat', '2');
  await page.fill('#stop-strings', 'The end\\n\nTHE END');
  await page.fill('#dry-sequence-breakers', '\\n\n:');
  await page.fill('#samplers', 'top_k;temperature');
  await page.fill('#logit-bias', '{"1": -1}');
  await page.fill('#json-schema', '{"type": "object"}');
  await page.fill('#json-schema', '{"type": ');
  await page.fill('#input', 'Settings');
  await page.click('#send');
  const s10 = await until('the page to refuse the JSON schema', async () => { const s = await state(); return s.error ? s : null; }, 10_000);
  check(/JSON schema/.test(s10.error) && chatBodies.length === nBodies + 2, `a bad JSON schema: ${s10.error}`);
  await page.fill('#json-schema', '');
  await page.fill('#grammar', 'root ::= "Once upon a time" [ a-z]*');
  const s11 = await sendAndWait('Settings', { click: true });
  const sent = chatBodies[chatBodies.length - 1];
  for (const [id, v] of Object.entries(numbers)) {
    const key = id.replace(/-/g, '_');
    check(sent[key] === v, `${key} went out as ${JSON.stringify(sent[key])}, not ${v}`);
  }
  check(sent.mirostat === 2 && JSON.stringify(sent.stop) === '["The end\\n","THE END"]' &&
        JSON.stringify(sent.dry_sequence_breakers) === '["\\n",":"]' && JSON.stringify(sent.samplers) === '["top_k","temperature"]' &&
        JSON.stringify(sent.logit_bias) === '{"1":-1}' && /^root ::=/.test(sent.grammar),
        `the other settings went out as ${JSON.stringify(sent)}`);
  check(s11.reply.startsWith('Once upon a time'), `the grammar did not hold: ${JSON.stringify(s11.reply)}`);
  await page.click('#reset-settings');
  check((await page.inputValue('#top-k')) === '' && (await page.inputValue('#grammar')) === '', 'Reset left settings behind');
  await page.fill('#max-tokens', '32');
  log(`settings: ${Object.keys(numbers).length + 7} sampler fields sent as typed and accepted by the server; Reset empties them`);

  step = 'conversations: open, rename, delete';
  page.on('dialog', (d) => d.accept());
  let c = await state();
  check(c.listed.length === 2, `expected 2 conversations, got ${JSON.stringify(c.listed)}`);
  await page.click('#conversations li.conversation:nth-child(2) .open');
  c = await until('the older conversation to show', async () => { const s = await state(); return s.msgs === 6 ? s : null; });
  check(c.stored.length === 6, 'the opened conversation is not the one kept');
  await page.click('#conversations li.conversation:nth-child(2) .rename');
  await page.fill('#conversations .rename-input', 'Frogs <b>and</b> parks');
  await page.press('#conversations .rename-input', 'Enter');
  c = await state();
  check(c.listed[1] === 'Frogs <b>and</b> parks' && !(await page.$('#conversations b')), `after the rename: ${JSON.stringify(c.listed)}`);
  await page.click('#conversations li.conversation:nth-child(1) .delete');
  c = await state();
  check(c.listed.length === 1 && c.msgs === 6, `after deleting the other conversation: ${JSON.stringify(c.listed)}, ${c.msgs} messages`);
  await page.reload();
  c = await until('the renamed conversation after a reload', async () => { const s = await state(); return s.msgs === 6 ? s : null; });
  check(JSON.stringify(c.listed) === '["Frogs <b>and</b> parks"]', `after a reload: ${JSON.stringify(c.listed)}`);
  await page.click('#conversations li.conversation .delete');
  c = await state();
  const keys = await page.evaluate(() => Object.keys(localStorage).filter((k) => k.startsWith('weft.conversation')));
  check(c.listed.length === 0 && c.msgs === 0 && keys.length === 0, `after deleting the last one: ${JSON.stringify(c.listed)}, ${keys}`);
  log('conversations: opened, renamed (kept as text), deleted, across reloads');

  step = 'dark mode';
  const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.emulateMedia({ colorScheme: 'light' });
  const light = await background();
  await page.emulateMedia({ colorScheme: 'dark' });
  const dark = await background();
  check(light === 'rgb(246, 246, 244)' && dark === 'rgb(23, 24, 27)', `the page does not follow the system: ${light}, ${dark}`);
  await page.click('#theme-toggle'); // system -> light
  check((await background()) === light, 'the toggle did not choose light');
  await page.reload();
  check((await background()) === light && (await page.textContent('#theme-toggle')) === 'Theme: light', 'the theme was not kept');
  await page.click('#theme-toggle'); // light -> dark
  await page.emulateMedia({ colorScheme: 'light' });
  check((await background()) === dark, 'the toggle did not choose dark');
  await page.click('#theme-toggle'); // dark -> system
  check((await background()) === light, 'the toggle did not go back to the system');
  log(`dark mode: follows the system (${light} / ${dark}); the toggle chooses light or dark and is kept`);

  step = 'SSE split across reads';
  const html = await (await fetch(`${server.url}/`)).text();
  await splitStreamCheck(html);
  step = 'markdown, reasoning, statistics and images (a stand-in server)';
  await standInChecks(html);

  check(pageErrors.length === 0, `the page threw: ${pageErrors.join('; ')}`);

  step = 'stop';
  await browser.close();
  browser = null;
  server.proc.kill('SIGTERM');
  await until('weft serve to exit after SIGTERM', () => server.proc.exitCode !== null || server.proc.signalCode !== null, 10_000);
  if (process.env.WEFT_TEST_LOGS) console.error(`--- the server's stderr ---\n${server.log}`);
  log('PASS');
}

main().then(
  () => process.exit(0),
  (e) => fail(e && e.stack ? e.stack : String(e)),
);
