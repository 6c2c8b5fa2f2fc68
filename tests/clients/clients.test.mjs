// tests/clients/clients.test.mjs — the Anthropic Messages, OpenAI Responses and Ollama routes of
// `weft serve` through their official npm clients: @anthropic-ai/sdk, openai (responses) and ollama.
//
// Starts `weft serve --port 0 -np 2` (the built-in stories260K model: no -m) with a Jinja chat
// template that renders tools (tool calls are forced with a grammar, which the routes take as the
// reference's extension field), and, when ../shared holds the fixtures, a second server with the
// tiny BERT encoder for /api/embed. Each check is printed ok or FAIL with its reason; the script
// exits 1 when any failed. The servers are stopped at the end, on failure, and on SIGINT/SIGTERM
// (tests/common/weft-serve.mjs).
//
//   WEFT_BINARY=./build/weft node tests/clients/clients.test.mjs   (or tests/clients/run.sh)
//
// WEFT_TEST_LOGS=1: print the servers' logs at the end.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import { packageVersion, runChecks, serverPool } from '../common/weft-serve.mjs';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const binary = process.env.WEFT_BINARY
  ? path.resolve(process.env.WEFT_BINARY)
  : path.join(repoRoot, 'build', 'weft');
const bertFile = path.join(repoRoot, '..', 'shared', 'fixtures', 'models', 'tiny-bert-F32.gguf');

const CHECK_TIMEOUT_MS = 30_000;
const WATCHDOG_MS = 240_000;

// A ChatML-like Jinja template that lists the tools offered (as tests/server/api_test_server.h).
const TOOLS_TEMPLATE =
  '{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}' +
  '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}' +
  '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';
// One call of get_weather in the Hermes form; its arguments' keys are not in sorted order.
const CALL_ARGUMENTS = '{"unit": "celsius", "city": "Paris"}';
const CALL_GRAMMAR = `root ::= ${JSON.stringify(`<tool_call>{"name": "get_weather", "arguments": ${CALL_ARGUMENTS}}</tool_call>`)}`;
const WEATHER_SCHEMA = {
  type: 'object',
  properties: { unit: { type: 'string' }, city: { type: 'string' } },
  required: ['city'],
};
// A reply that ends by itself (the grammar is whole, then only the end of text can come).
const SHORT_GRAMMAR = 'root ::= "Once upon a time."';

const pool = serverPool(binary, 'clients test', WATCHDOG_MS);

// --- the checks

const checks = [];
const check = (name, fn) => checks.push({ name, fn });

let main; // the built-in model with the tools template
let bert; // the BERT encoder (null without ../shared)
let anthropic;
let openai;
let ollama;
let model;

const SYSTEM = 'You tell stories.';
const TURNS = [
  { role: 'user', content: 'Tell me a story.' },
  { role: 'assistant', content: 'Once there was a cat.' },
  { role: 'user', content: 'And then?' },
];

// --- Anthropic Messages

let anthropicText; // greedy, max_tokens 12
let anthropicUsage;
check('anthropic messages.create: system, multi-turn, max_tokens', async () => {
  const m = await anthropic.messages.create({ model, system: SYSTEM, messages: TURNS, max_tokens: 12, temperature: 0 });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.stop_sequence, null);
  assert.equal(m.content.length, 1, JSON.stringify(m.content));
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0, 'empty text');
  assert.equal(m.usage.output_tokens, 12);
  assert.ok(m.usage.input_tokens > 0);
  anthropicText = m.content[0].text;
  anthropicUsage = m.usage;
  const again = await anthropic.messages.create({ model, system: SYSTEM, messages: TURNS.slice(0, 1), max_tokens: 12, temperature: 0 });
  assert.ok(again.usage.input_tokens < m.usage.input_tokens, 'the turns are not all in the prompt');
});

check('anthropic stop_sequences: stop_reason stop_sequence, the text cut before it', async () => {
  assert.ok(anthropicText.length >= 4, `text too short: ${JSON.stringify(anthropicText)}`);
  const stop = anthropicText.slice(2, 4);
  const m = await anthropic.messages.create({
    model, system: SYSTEM, messages: TURNS, max_tokens: 12, temperature: 0, stop_sequences: [stop],
  });
  assert.equal(m.stop_reason, 'stop_sequence', JSON.stringify(m));
  assert.equal(m.stop_sequence, stop);
  assert.equal(m.content[0].text, anthropicText.slice(0, anthropicText.indexOf(stop)));
});

check('anthropic messages.stream: the event sequence, the same text', async () => {
  const stream = anthropic.messages.stream({ model, system: SYSTEM, messages: TURNS, max_tokens: 12, temperature: 0 });
  const names = [];
  let text = '';
  for await (const ev of stream) {
    if (names.at(-1) !== ev.type) names.push(ev.type);
    if (ev.type === 'content_block_delta') {
      assert.equal(ev.delta.type, 'text_delta');
      text += ev.delta.text;
    }
  }
  assert.deepEqual(names, [
    'message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop',
  ]);
  assert.equal(text, anthropicText);
  const final = await stream.finalMessage();
  assert.equal(final.content[0].text, anthropicText);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 12);
});

check('anthropic messages.countTokens: the input tokens of the message', async () => {
  const r = await anthropic.messages.countTokens({ model, system: SYSTEM, messages: TURNS });
  assert.equal(r.input_tokens, anthropicUsage.input_tokens);
});

check('anthropic tool use: a tool_use block (key order kept), the result sent back', async () => {
  const tools = [{ name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER_SCHEMA }];
  const messages = [{ role: 'user', content: 'The weather in Paris?' }];
  const m = await anthropic.messages.create({ model, messages, tools, max_tokens: 128, temperature: 0, grammar: CALL_GRAMMAR });
  assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m));
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(m.content));
  assert.equal(use.name, 'get_weather');
  assert.match(use.id, /^toolu_/);
  assert.deepEqual(Object.entries(use.input), Object.entries(JSON.parse(CALL_ARGUMENTS)));
  const streamed = anthropic.messages.stream({ model, messages, tools, max_tokens: 128, temperature: 0, grammar: CALL_GRAMMAR });
  const final = await streamed.finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  assert.deepEqual(final.content.map((b) => b.type), ['tool_use']);
  assert.deepEqual(final.content[0].input, JSON.parse(CALL_ARGUMENTS));
  const next = await anthropic.messages.create({
    model, tools, max_tokens: 4, temperature: 0,
    messages: [
      ...messages,
      { role: 'assistant', content: [use] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 degrees' }] },
    ],
  });
  assert.equal(next.content[0].type, 'text');
});

check('anthropic errors: BadRequestError with the invalid_request_error shape', async () => {
  await assert.rejects(
    anthropic.messages.create({ model, messages: TURNS }),
    (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, String(e));
      assert.equal(e.status, 400);
      assert.equal(e.error.type, 'error');
      assert.equal(e.error.error.type, 'invalid_request_error');
      assert.match(e.error.error.message, /max_tokens/);
      return true;
    },
  );
});

// --- OpenAI Responses

check('openai responses.create: a string input, instructions, max_output_tokens', async () => {
  const r = await openai.responses.create({ model, input: 'Tell me a story.', max_output_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.output[0].type, 'message');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.usage.output_tokens, 8);
  const withInstructions = await openai.responses.create({
    model, input: 'Tell me a story.', instructions: SYSTEM, max_output_tokens: 8, temperature: 0,
  });
  assert.equal(withInstructions.instructions, SYSTEM);
  assert.ok(withInstructions.usage.input_tokens > r.usage.input_tokens, 'the instructions are not in the prompt');
});

check('openai responses.create streamed: created ... output_text.delta ... completed', async () => {
  const whole = await openai.responses.create({ model, input: 'Tell me a story.', grammar: SHORT_GRAMMAR, temperature: 0 });
  assert.equal(whole.status, 'completed');
  assert.equal(whole.output_text, 'Once upon a time.');
  const stream = await openai.responses.create({ model, input: 'Tell me a story.', grammar: SHORT_GRAMMAR, temperature: 0, stream: true });
  const types = [];
  let text = '';
  let seq = -1;
  let last;
  for await (const ev of stream) {
    assert.equal(ev.sequence_number, seq + 1, 'sequence numbers');
    seq = ev.sequence_number;
    if (types.at(-1) !== ev.type) types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    last = ev;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.ok(types.includes('response.output_text.delta'), types.join(' '));
  assert.equal(types.at(-1), 'response.completed');
  assert.equal(text, 'Once upon a time.');
  assert.equal(last.response.output_text ?? last.response.output[0].content[0].text, 'Once upon a time.');
});

check('openai responses.create: input items (messages of three roles, content parts)', async () => {
  const r = await openai.responses.create({
    model, max_output_tokens: 4, temperature: 0,
    input: [
      { role: 'developer', content: SYSTEM },
      { role: 'user', content: [{ type: 'input_text', text: 'Tell me a story.' }] },
      { role: 'assistant', content: 'Once there was a cat.' },
      { type: 'message', role: 'user', content: 'And then?' },
    ],
  });
  assert.equal(r.output[0].type, 'message');
  assert.ok(r.usage.input_tokens > 10);
});

check('openai responses function tools: a function_call item, the output sent back', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'The weather', parameters: WEATHER_SCHEMA }];
  const r = await openai.responses.create({
    model, input: 'The weather in Paris?', tools, max_output_tokens: 128, temperature: 0, grammar: CALL_GRAMMAR,
  });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  assert.equal(call.arguments.replace(/\s/g, ''), CALL_ARGUMENTS.replace(/\s/g, ''));
  const stream = await openai.responses.create({
    model, input: 'The weather in Paris?', tools, max_output_tokens: 128, temperature: 0, grammar: CALL_GRAMMAR, stream: true,
  });
  let done;
  for await (const ev of stream) if (ev.type === 'response.function_call_arguments.done') done = ev;
  assert.ok(done, 'no response.function_call_arguments.done');
  assert.deepEqual(JSON.parse(done.arguments), JSON.parse(CALL_ARGUMENTS));
  const next = await openai.responses.create({
    model, tools, max_output_tokens: 4, temperature: 0,
    input: [
      { role: 'user', content: 'The weather in Paris?' },
      { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: 'function_call_output', call_id: call.call_id, output: '21 degrees' },
    ],
  });
  assert.equal(next.output[0].type, 'message');
});

// --- Ollama

const OPTIONS = { temperature: 0, num_predict: 8 };
let ollamaChatText;
check('ollama chat: stream false, then streamed to the same text', async () => {
  const r = await ollama.chat({ model, messages: TURNS, options: OPTIONS, stream: false });
  assert.equal(r.done, true);
  assert.equal(r.done_reason, 'length');
  assert.equal(r.message.role, 'assistant');
  assert.ok(r.message.content.length > 0);
  assert.equal(r.eval_count, 8);
  assert.ok(r.prompt_eval_count > 0);
  ollamaChatText = r.message.content;
  const parts = await ollama.chat({ model, messages: TURNS, options: OPTIONS, stream: true });
  let text = '';
  let final;
  for await (const p of parts) {
    text += p.message.content;
    if (p.done) final = p;
  }
  assert.equal(text, ollamaChatText);
  assert.ok(final, 'no done line');
  assert.equal(final.eval_count, 8);
});

check('ollama generate: NDJSON stream and stream false agree', async () => {
  const r = await ollama.generate({ model, prompt: 'Once upon a time', options: OPTIONS, stream: false });
  assert.equal(r.done, true);
  assert.ok(r.response.length > 0);
  const parts = await ollama.generate({ model, prompt: 'Once upon a time', options: OPTIONS, stream: true });
  let text = '';
  let n = 0;
  for await (const p of parts) {
    text += p.response;
    ++n;
  }
  assert.ok(n >= 2, `${n} lines`);
  assert.equal(text, r.response);
  const raw = await ollama.generate({ model, prompt: 'Once upon a time', raw: true, options: OPTIONS, stream: false });
  assert.ok(raw.prompt_eval_count < r.prompt_eval_count, 'raw: the chat template was applied');
});

check('ollama chat tools: tool_calls with the arguments in their order', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: WEATHER_SCHEMA } }];
  const r = await ollama.chat({
    model, messages: [{ role: 'user', content: 'The weather in Paris?' }], tools, stream: false,
    options: { temperature: 0, num_predict: 128 }, grammar: CALL_GRAMMAR,
  });
  const calls = r.message.tool_calls;
  assert.ok(calls?.length === 1, JSON.stringify(r.message));
  assert.equal(calls[0].function.name, 'get_weather');
  assert.deepEqual(Object.entries(calls[0].function.arguments), Object.entries(JSON.parse(CALL_ARGUMENTS)));
  const next = await ollama.chat({
    model, tools, stream: false, options: OPTIONS,
    messages: [
      { role: 'user', content: 'The weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: calls },
      { role: 'tool', content: '21 degrees', tool_name: 'get_weather' },
    ],
  });
  assert.equal(next.done, true);
});

check('ollama list, show, ps, version', async () => {
  const list = await ollama.list();
  assert.equal(list.models.length, 1);
  const entry = list.models[0];
  assert.ok(entry.name.endsWith(':latest'), entry.name);
  assert.equal(entry.details.format, 'gguf');
  const show = await ollama.show({ model: entry.name });
  assert.ok(show.capabilities.includes('completion'), JSON.stringify(show.capabilities));
  assert.ok(show.capabilities.includes('tools'));
  assert.equal(show.details.family, 'llama');
  assert.ok(show.model_info['general.parameter_count'] > 0);
  const ps = await ollama.ps();
  assert.equal(ps.models.length, 1);
  assert.equal(ps.models[0].name, entry.name);
  assert.ok(ps.models[0].context_length > 0);
  const v = await ollama.version();
  assert.match(v.version, /^\d+\.\d+\.\d+$/);
});

check('ollama embed: a decoder refuses with the reason; the BERT encoder gives unit vectors', async () => {
  await assert.rejects(ollama.embed({ model, input: 'hello' }), (e) => {
    assert.equal(e.status_code, 400, String(e));
    assert.match(e.error, /does not produce embeddings/);
    return true;
  });
  if (!bert) {
    console.log('      (the BERT part skipped: ../shared/fixtures/models/tiny-bert-F32.gguf is missing)');
    return;
  }
  const client = new Ollama({ host: bert.url });
  const r = await client.embed({ model: 'bert', input: ['hello world', 'a cat'] });
  assert.equal(r.embeddings.length, 2);
  for (const v of r.embeddings) {
    const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-4, `norm ${norm}`);
  }
  assert.notDeepEqual(r.embeddings[0], r.embeddings[1]);
  assert.ok(r.prompt_eval_count > 0);
});

// --- the run

await runChecks(pool, 'clients test', checks, CHECK_TIMEOUT_MS, async () => {
  if (!existsSync(binary)) throw new Error(`no weft binary at ${binary} (set WEFT_BINARY)`);
  main = await pool.start('weft serve (built-in model)', ['-np', '2', '--chat-template', TOOLS_TEMPLATE]);
  bert = existsSync(bertFile) ? await pool.start('weft serve (bert)', ['-m', bertFile, '-np', '1']) : null;
  anthropic = new Anthropic({ baseURL: main.url, apiKey: 'any-key', maxRetries: 0, timeout: 20_000 });
  openai = new OpenAI({ baseURL: `${main.url}/v1`, apiKey: 'any-key', maxRetries: 0, timeout: 20_000 });
  ollama = new Ollama({ host: main.url });
  model = (await openai.models.list()).data[0].id;
  const v = (name) => packageVersion(import.meta.url, name);
  console.log(
    `clients test: @anthropic-ai/sdk ${v('@anthropic-ai/sdk')}, openai ${v('openai')}, ollama ${v('ollama')}; ` +
      `server at ${main.url}`,
  );
});
