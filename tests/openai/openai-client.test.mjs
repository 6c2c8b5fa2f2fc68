// tests/openai/openai-client.test.mjs — `weft serve` through the official `openai` npm client.
//
// Starts `weft serve --port 0 -np 4` (the built-in stories260K model: no -m) and a second server
// with --api-key, then runs every check below through the client, one after another. A failed
// check is printed with its reason and the run goes on with the next one; the script exits 1 when
// any check failed (0 when all passed). The servers are stopped at the end, on failure, and on
// SIGINT/SIGTERM.
//
//   WEFT_BINARY=./build/weft node tests/openai/openai-client.test.mjs   (or tests/openai/run.sh)
//
// WEFT_BINARY: the weft binary (relative paths from the current directory); default
// build/weft under the repository root. WEFT_TEST_LOGS=1: print the servers' logs at the end.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { packageVersion, runChecks, serverPool } from '../common/weft-serve.mjs';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const binary = process.env.WEFT_BINARY
  ? path.resolve(process.env.WEFT_BINARY)
  : path.join(repoRoot, 'build', 'weft');

const CHECK_TIMEOUT_MS = 30_000; // one check
const WATCHDOG_MS = 120_000; // the whole script, whatever hangs

const pool = serverPool(binary, 'openai-client test', WATCHDOG_MS);

// --- the checks

const checks = [];
const check = (name, fn) => checks.push({ name, fn });

let main; // the server with -np 4
let auth; // the server with --api-key secret
let client;
let model;

const PROMPT = 'Once upon a time';
const CHAT = [{ role: 'user', content: 'Tell me a story about a cat.' }];

function checkUsage(usage, what) {
  assert.ok(usage, `${what}: usage is missing`);
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
    assert.ok(Number.isInteger(usage[k]) && usage[k] >= 0, `${what}: usage.${k} = ${usage[k]}`);
  assert.ok(usage.prompt_tokens > 0, `${what}: usage.prompt_tokens is 0`);
  assert.equal(
    usage.total_tokens,
    usage.prompt_tokens + usage.completion_tokens,
    `${what}: total_tokens != prompt_tokens + completion_tokens`,
  );
}

// Reads a stream: every chunk, the text of each choice, its finish reasons, the usage chunks.
async function collect(stream, chat) {
  const chunks = [];
  const text = [];
  const finish = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const c of chunk.choices ?? []) {
      const piece = chat ? c.delta?.content : c.text;
      if (typeof piece === 'string') text[c.index] = (text[c.index] ?? '') + piece;
      if (c.finish_reason != null) (finish[c.index] ??= []).push(c.finish_reason);
    }
  }
  return { chunks, text, finish };
}

// The usage chunk of a stream with include_usage: the last chunk, choices empty; the others null.
function checkUsageChunk(chunks, expected, what) {
  assert.ok(chunks.length >= 2, `${what}: only ${chunks.length} chunks`);
  const last = chunks.at(-1);
  assert.ok(last.usage, `${what}: the last chunk has no usage: ${JSON.stringify(last)}`);
  assert.deepEqual(last.choices, [], `${what}: the usage chunk has choices`);
  checkUsage(last.usage, what);
  assert.deepEqual(
    { ...last.usage },
    { ...expected },
    `${what}: the streamed usage differs from the non-streamed one`,
  );
  for (const c of chunks.slice(0, -1))
    assert.ok(c.usage == null, `${what}: a chunk before the last has usage: ${JSON.stringify(c)}`);
}

check('models.list: one model with an id', async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1, `models: ${JSON.stringify(page.data)}`);
  const m = page.data[0];
  assert.equal(typeof m.id, 'string');
  assert.ok(m.id.length > 0, 'the model id is empty');
  assert.equal(m.object, 'model');
  model = m.id;
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
});

let greedyCompletion; // the non-streamed text, max_tokens 16
let greedyUsage;
check('completions.create: greedy, max_tokens 16', async () => {
  const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(typeof c.text, 'string');
  assert.ok(c.text.length > 0, 'the text is empty');
  assert.equal(c.finish_reason, 'length');
  checkUsage(r.usage, 'completion');
  assert.equal(r.usage.completion_tokens, 16, 'completion_tokens != max_tokens with finish "length"');
  greedyCompletion = c.text;
  greedyUsage = r.usage;
});

check('completions.create: streamed equals non-streamed, usage chunk', async () => {
  assert.ok(greedyCompletion, 'needs the non-streamed completion');
  const stream = await client.completions.create({
    model,
    prompt: PROMPT,
    max_tokens: 16,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  const { chunks, text, finish } = await collect(stream, false);
  assert.equal(text.length, 1, 'choices other than index 0 in the stream');
  assert.equal(text[0], greedyCompletion, 'the streamed text differs from the non-streamed one');
  assert.deepEqual(finish[0], ['length'], 'finish_reason of the stream');
  for (const c of chunks) if (c.choices.length) assert.equal(c.object, 'text_completion');
  checkUsageChunk(chunks, greedyUsage, 'streamed completion');
});

let greedyChat;
let greedyChatUsage;
check('chat.completions.create: greedy', async () => {
  const r = await client.chat.completions.create({ model, messages: CHAT, max_tokens: 24, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0, 'the content is empty');
  assert.equal(c.finish_reason, 'length');
  checkUsage(r.usage, 'chat');
  assert.equal(r.usage.completion_tokens, 24);
  greedyChat = c.message.content;
  greedyChatUsage = r.usage;
});

check('chat.completions.create: streamed equals non-streamed, role, usage chunk', async () => {
  assert.ok(greedyChat, 'needs the non-streamed chat');
  const stream = await client.chat.completions.create({
    model,
    messages: CHAT,
    max_tokens: 24,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  const { chunks, text, finish } = await collect(stream, true);
  assert.ok(chunks.length > 0);
  const first = chunks[0];
  assert.equal(first.object, 'chat.completion.chunk');
  assert.equal(first.choices[0]?.delta?.role, 'assistant', `first chunk: ${JSON.stringify(first)}`);
  assert.equal(text[0], greedyChat, 'the streamed content differs from the non-streamed one');
  assert.deepEqual(finish[0], ['length'], 'finish_reason of the stream');
  checkUsageChunk(chunks, greedyChatUsage, 'streamed chat');
});

check('stop: a string of the greedy text ends it early (streamed too)', async () => {
  // the greedy text of 32 tokens; stop strings: its first word of 3+ letters after the start
  // (ends inside a token), and 10 characters from its fourth word on (spans several tokens)
  const full = (await client.completions.create({ model, prompt: PROMPT, max_tokens: 32, temperature: 0 }))
    .choices[0].text;
  const word = /[A-Za-z]{3,}/.exec(full.slice(4));
  assert.ok(word, `no word to stop at in ${JSON.stringify(full)}`);
  const fourth = [...full.matchAll(/\S+/g)][3];
  assert.ok(fourth && fourth.index + 10 <= full.length, `no fourth word in ${JSON.stringify(full)}`);
  for (const stop of [word[0], full.slice(fourth.index, fourth.index + 10)]) {
    const what = `stop ${JSON.stringify(stop)} in ${JSON.stringify(full)}`;
    const expected = full.slice(0, full.indexOf(stop));
    const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 32, temperature: 0, stop });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', `${what}: finish_reason`);
    assert.equal(c.text, expected, what);
    checkUsage(r.usage, 'stop');
    assert.ok(r.usage.completion_tokens < 32, `${what}: completion_tokens not below max_tokens`);
    const s = await collect(
      await client.completions.create({
        model,
        prompt: PROMPT,
        max_tokens: 32,
        temperature: 0,
        stop: [stop],
        stream: true,
      }),
      false,
    );
    assert.equal(s.text[0], expected, `${what}: the streamed text`);
    assert.deepEqual(s.finish[0], ['stop'], `${what}: finish_reason of the stream`);
  }

  // chat: the same with an array of stop strings
  assert.ok(greedyChat, 'needs the non-streamed chat');
  const cm = /[A-Za-z]{3,}/.exec(greedyChat.slice(2));
  assert.ok(cm, `no word to stop at in ${JSON.stringify(greedyChat)}`);
  const chatExpected = greedyChat.slice(0, greedyChat.indexOf(cm[0]));
  const what = `chat stop ${JSON.stringify(cm[0])} in ${JSON.stringify(greedyChat)}`;
  const rc = await client.chat.completions.create({
    model,
    messages: CHAT,
    max_tokens: 24,
    temperature: 0,
    stop: [cm[0], 'zzzzzz'],
  });
  assert.equal(rc.choices[0].finish_reason, 'stop', `${what}: finish_reason`);
  assert.equal(rc.choices[0].message.content, chatExpected, what);
  const sc = await collect(
    await client.chat.completions.create({
      model,
      messages: CHAT,
      max_tokens: 24,
      temperature: 0,
      stop: [cm[0], 'zzzzzz'],
      stream: true,
    }),
    true,
  );
  assert.equal(sc.text[0] ?? '', chatExpected, `${what}: the streamed content`);
  assert.deepEqual(sc.finish[0], ['stop'], `${what}: finish_reason of the stream`);
});

check('seed: same seed same text, another seed another text (temperature 1)', async () => {
  const ask = async (seed) =>
    (await client.chat.completions.create({ model, messages: CHAT, max_tokens: 32, temperature: 1.0, seed }))
      .choices[0].message.content;
  const a = await ask(42);
  const b = await ask(42);
  const c = await ask(4242);
  assert.equal(a, b, 'seed 42 twice gave different texts');
  assert.notEqual(a, c, 'seeds 42 and 4242 gave the same 32-token text (very unlikely)');
  // completions too
  const askc = async (seed) =>
    (await client.completions.create({ model, prompt: PROMPT, max_tokens: 32, temperature: 1.0, seed }))
      .choices[0].text;
  assert.equal(await askc(42), await askc(42), 'completions: seed 42 twice gave different texts');
});

check('n: 3 choices with indexes 0, 1, 2', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: CHAT,
    max_tokens: 8,
    temperature: 1.0,
    seed: 5,
    n: 3,
  });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(
    r.choices.map((c) => c.index),
    [0, 1, 2],
  );
  for (const c of r.choices) {
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.equal(c.finish_reason, 'length');
  }
  assert.ok(new Set(r.choices.map((c) => c.message.content)).size > 1, 'the three choices are identical');
  checkUsage(r.usage, 'n=3');
  assert.equal(r.usage.completion_tokens, 24, 'completion_tokens of 3 choices of 8 tokens');

  const rc = await client.completions.create({ model, prompt: PROMPT, max_tokens: 4, temperature: 1.0, n: 3 });
  assert.deepEqual(
    rc.choices.map((c) => c.index),
    [0, 1, 2],
  );

  // streamed, the same request: the same three texts, each index with its role and one finish
  const s = await collect(
    await client.chat.completions.create({
      model,
      messages: CHAT,
      max_tokens: 8,
      temperature: 1.0,
      seed: 5,
      n: 3,
      stream: true,
      stream_options: { include_usage: true },
    }),
    true,
  );
  assert.deepEqual(
    s.text,
    r.choices.map((c) => c.message.content),
    'the streamed n=3 texts differ from the non-streamed ones',
  );
  for (let k = 0; k < 3; ++k) {
    const first = s.chunks.find((ch) => ch.choices.some((c) => c.index === k));
    assert.equal(first.choices.find((c) => c.index === k).delta.role, 'assistant', `choice ${k}: no role first`);
    assert.deepEqual(s.finish[k], ['length'], `choice ${k}: finish_reason of the stream`);
  }
  checkUsageChunk(s.chunks, r.usage, 'streamed n=3');
});

check('logprobs: chat (logprobs true, top_logprobs 3)', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: CHAT,
    max_tokens: 8,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
  });
  const c = r.choices[0];
  const content = c.logprobs?.content;
  assert.ok(Array.isArray(content), `logprobs: ${JSON.stringify(c.logprobs)}`);
  assert.equal(content.length, r.usage.completion_tokens, 'one entry per generated token');
  for (const e of content) {
    assert.equal(typeof e.token, 'string');
    assert.ok(typeof e.logprob === 'number' && e.logprob <= 0, `logprob ${e.logprob}`);
    assert.equal(e.top_logprobs.length, 3, `top_logprobs of ${JSON.stringify(e)}`);
    for (const t of e.top_logprobs) {
      assert.equal(typeof t.token, 'string');
      assert.ok(typeof t.logprob === 'number' && t.logprob <= 0, `top logprob ${t.logprob}`);
    }
    for (let i = 1; i < 3; ++i)
      assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob, 'top_logprobs not sorted');
    // greedy: the chosen token is the most likely one
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
  }
  assert.equal(content.map((e) => e.token).join(''), c.message.content, 'the tokens do not make the content');

  // streamed: the chunks' logprobs together are the same entries
  const stream = await client.chat.completions.create({
    model,
    messages: CHAT,
    max_tokens: 8,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
    stream: true,
  });
  const streamed = [];
  for await (const chunk of stream)
    for (const ch of chunk.choices) streamed.push(...(ch.logprobs?.content ?? []));
  assert.deepEqual(streamed, content, 'the streamed logprobs differ from the non-streamed ones');
});

check('logprobs: completions (logprobs 2)', async () => {
  const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 2 });
  const c = r.choices[0];
  const lp = c.logprobs;
  assert.ok(lp, 'logprobs missing');
  assert.equal(lp.tokens.length, 8);
  assert.equal(lp.token_logprobs.length, 8);
  assert.equal(lp.top_logprobs.length, 8);
  assert.equal(lp.text_offset.length, 8);
  assert.equal(lp.tokens.join(''), c.text, 'the tokens do not make the text');
  for (let i = 0; i < 8; ++i) {
    assert.ok(lp.token_logprobs[i] <= 0, `token_logprobs[${i}] = ${lp.token_logprobs[i]}`);
    const top = Object.entries(lp.top_logprobs[i]);
    assert.equal(top.length, 2, `top_logprobs[${i}] = ${JSON.stringify(lp.top_logprobs[i])}`);
    for (const [, v] of top) assert.ok(v <= 0);
    assert.ok(lp.tokens[i] in lp.top_logprobs[i], `greedy token ${i} not among its top_logprobs`);
    if (i > 0)
      assert.equal(lp.text_offset[i] - lp.text_offset[i - 1], lp.tokens[i - 1].length, 'text_offset steps');
  }
});

check('max_completion_tokens is honoured', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: CHAT,
    max_completion_tokens: 5,
    temperature: 0,
  });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 5);
  // it is the greedy text's beginning
  assert.ok(greedyChat, 'needs the non-streamed chat');
  assert.ok(greedyChat.startsWith(r.choices[0].message.content), 'not a prefix of the greedy text');
});

check('16 concurrent greedy chats equal the same sent one by one', async () => {
  const subjects = [
    'a cat', 'a dog', 'a big tree', 'the sun', 'a little boy', 'a red ball', 'a bird', 'the sea',
    'a girl named Lily', 'a car', 'a fish', 'the moon', 'a small bear', 'a cake', 'a toy', 'a garden',
  ];
  const req = (i) => ({
    model,
    messages: [{ role: 'user', content: `Tell me a story about ${subjects[i]}.` }],
    max_tokens: 16 + (i % 4) * 4, // slots finish at different steps
    temperature: 0,
  });
  const pick = (r) => ({ text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: { ...r.usage } });
  const together = (await Promise.all(subjects.map((_, i) => client.chat.completions.create(req(i))))).map(pick);
  const alone = [];
  for (let i = 0; i < subjects.length; ++i) alone.push(pick(await client.chat.completions.create(req(i))));
  const differ = [];
  for (let i = 0; i < subjects.length; ++i)
    if (JSON.stringify(together[i]) !== JSON.stringify(alone[i]))
      differ.push(`#${i}: concurrent ${JSON.stringify(together[i])}\n      alone      ${JSON.stringify(alone[i])}`);
  assert.equal(differ.length, 0, `${differ.length} of 16 differ:\n${differ.join('\n')}`);
  assert.ok(new Set(alone.map((x) => x.text)).size > 1, 'all 16 texts are the same');
});

check('a bad request raises BadRequestError (400)', async () => {
  const bad = [
    ['messages: "hi"', () => client.chat.completions.create({ model, messages: 'hi' })],
    ['temperature: -1', () => client.chat.completions.create({ model, messages: CHAT, temperature: -1 })],
    ['no prompt', () => client.completions.create({ model })],
    ['n: 0', () => client.completions.create({ model, prompt: PROMPT, n: 0 })],
  ];
  for (const [what, call] of bad) {
    let err;
    try {
      await call();
    } catch (e) {
      err = e;
    }
    assert.ok(err, `${what}: no error`);
    assert.ok(err instanceof OpenAI.BadRequestError, `${what}: ${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, 400, what);
    assert.equal(typeof err.error?.message, 'string', `${what}: the error object has no message`);
  }
});

check('--api-key: wrong key AuthenticationError (401), right key works', async () => {
  const wrong = new OpenAI({ baseURL: `${auth.url}/v1`, apiKey: 'not-the-key', maxRetries: 0, timeout: 20_000 });
  for (const [what, call] of [
    ['models.list', () => wrong.models.list()],
    ['chat', () => wrong.chat.completions.create({ model, messages: CHAT, max_tokens: 4 })],
  ]) {
    let err;
    try {
      await call();
    } catch (e) {
      err = e;
    }
    assert.ok(err, `${what} with the wrong key: no error`);
    assert.ok(err instanceof OpenAI.AuthenticationError, `${what}: ${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, 401);
  }
  const right = new OpenAI({ baseURL: `${auth.url}/v1`, apiKey: 'secret', maxRetries: 0, timeout: 20_000 });
  const page = await right.models.list();
  assert.equal(page.data.length, 1);
  const r = await right.chat.completions.create({ model: page.data[0].id, messages: CHAT, max_tokens: 4, temperature: 0 });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 4);
});

// --- the run

await runChecks(pool, 'openai-client test', checks, CHECK_TIMEOUT_MS, async () => {
  if (!existsSync(binary)) throw new Error(`no weft binary at ${binary} (set WEFT_BINARY)`);
  [main, auth] = await Promise.all([
    pool.start('weft serve -np 4', ['-np', '4']),
    pool.start('weft serve --api-key', ['-np', '1', '--api-key', 'secret']),
  ]);
  client = new OpenAI({ baseURL: `${main.url}/v1`, apiKey: 'any-key', maxRetries: 0, timeout: 20_000 });
  console.log(
    `openai-client test: openai ${packageVersion(import.meta.url, 'openai')}, servers at ${main.url} and ${auth.url}`,
  );
});
