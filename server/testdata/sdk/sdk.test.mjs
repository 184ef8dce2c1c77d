// The official OpenAI and Anthropic JavaScript clients against a kt server.
// Run by server/sdk_test.go, which starts the server (a fake model whose
// answers are scripted by markers in the prompt) and passes its URL and API
// key: node sdk.test.mjs URL KEY.
import assert from 'node:assert/strict';
import test from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const [url, apiKey] = process.argv.slice(2);
const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: url, apiKey, maxRetries: 0 });

const weather = {
  type: 'object',
  properties: { city: { type: 'string' } },
  required: ['city'],
};

test('openai chat.completions.create', async () => {
  const r = await openai.chat.completions.create({
    model: 'any-name',
    messages: [{ role: 'user', content: 'PLAIN hi' }],
    temperature: 0,
  });
  assert.equal(r.choices[0].message.content, 'Just an answer.');
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('openai responses.create: text, instructions, usage', async () => {
  const r = await openai.responses.create({
    model: 'any-name',
    input: 'PLAIN hi',
    instructions: 'Be brief.',
    temperature: 0,
  });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.model, 'any-name');
  assert.equal(r.output_text, 'Just an answer.');
  assert.deepEqual(r.output.map((o) => o.type), ['message']);
  assert.match(r.output[0].id, /^msg_/);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.usage.output_tokens, 'Just an answer.'.length + 1);
});

test('openai responses.create: max_output_tokens cuts the answer', async () => {
  const r = await openai.responses.create({ model: 'm', input: 'PLAIN', max_output_tokens: 3, temperature: 0 });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.output_text, 'Jus');
});

test('openai responses.create: function tools, then the tool output', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city', parameters: weather, strict: false }];
  const r = await openai.responses.create({ model: 'm', input: 'WEATHER? in Paris', tools, temperature: 0 });
  assert.deepEqual(r.output.map((o) => o.type), ['message', 'function_call']);
  const call = r.output[1];
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
  assert.match(call.call_id, /^call_/);
  assert.match(call.id, /^fc_/);

  const r2 = await openai.responses.create({
    model: 'm',
    tools,
    temperature: 0,
    input: [
      { role: 'user', content: 'WEATHER? in Paris' },
      ...r.output,
      { type: 'function_call_output', call_id: call.call_id, output: 'RESULT-SUNNY' },
    ],
  });
  assert.equal(r2.output_text, 'It is sunny in Paris.');
});

test('openai responses.stream: reasoning then text, events in order', async () => {
  const stream = openai.responses.stream({ model: 'm', input: 'THINK', temperature: 0 });
  const types = [];
  let text = '';
  stream.on('response.output_text.delta', (e) => {
    text += e.delta;
    assert.equal(e.snapshot, text);
  });
  for await (const event of stream) {
    if (types.at(-1) !== event.type || !event.type.endsWith('.delta')) types.push(event.type);
  }
  const r = await stream.finalResponse();
  assert.deepEqual(types, [
    'response.created', 'response.in_progress',
    'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta',
    'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.completed',
  ]);
  assert.equal(text, 'Hello there!');
  assert.equal(r.output_text, 'Hello there!');
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].text, 'The user greets.\n');
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
});

test('openai responses.stream: function call arguments', async () => {
  const stream = openai.responses.stream({
    model: 'm',
    input: 'WEATHER?',
    tools: [{ type: 'function', name: 'get_weather', parameters: weather, strict: false }],
    temperature: 0,
  });
  const r = await stream.finalResponse();
  const call = r.output.find((o) => o.type === 'function_call');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
});

test('openai responses errors are typed', async () => {
  await assert.rejects(
    openai.responses.create({ model: 'm', input: 'hi', previous_response_id: 'resp_1' }),
    (err) => err instanceof OpenAI.BadRequestError && err.status === 400 && err.param === 'previous_response_id',
  );
});

test('anthropic messages.create: system, text, usage', async () => {
  const m = await anthropic.messages.create({
    model: 'claude-any',
    max_tokens: 50,
    system: 'Be brief.',
    messages: [{ role: 'user', content: 'PLAIN hi' }],
    temperature: 0,
  });
  assert.match(m.id, /^msg_/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, 'claude-any');
  assert.deepEqual(m.content, [{ type: 'text', text: 'Just an answer.' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.equal(m.usage.output_tokens, 'Just an answer.'.length + 1);

  const counted = await anthropic.messages.countTokens({
    model: 'claude-any',
    system: 'Be brief.',
    messages: [{ role: 'user', content: 'PLAIN hi' }],
  });
  assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('anthropic messages.create: stop_sequences and max_tokens', async () => {
  const stopped = await anthropic.messages.create({
    model: 'm', max_tokens: 50, messages: [{ role: 'user', content: 'PLAIN' }], stop_sequences: ['answer'], temperature: 0,
  });
  assert.equal(stopped.content[0].text, 'Just an ');
  assert.equal(stopped.stop_reason, 'stop_sequence');
  assert.equal(stopped.stop_sequence, 'answer');
  const cut = await anthropic.messages.create({ model: 'm', max_tokens: 3, messages: [{ role: 'user', content: 'PLAIN' }] });
  assert.equal(cut.content[0].text, 'Jus');
  assert.equal(cut.stop_reason, 'max_tokens');
});

test('anthropic messages.create: tool_use, then tool_result', async () => {
  const tools = [{ name: 'get_weather', description: 'Weather of a city', input_schema: weather }];
  const messages = [{ role: 'user', content: 'WEATHER? in Paris' }];
  const m = await anthropic.messages.create({ model: 'm', max_tokens: 100, messages, tools, temperature: 0 });
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content.map((b) => b.type), ['text', 'tool_use']);
  const use = m.content[1];
  assert.match(use.id, /^toolu_/);
  assert.equal(use.name, 'get_weather');
  assert.deepEqual(use.input, { city: 'Paris' });

  const m2 = await anthropic.messages.create({
    model: 'm',
    max_tokens: 100,
    tools,
    temperature: 0,
    messages: [
      ...messages,
      { role: 'assistant', content: m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'RESULT-SUNNY' }] },
    ],
  });
  assert.deepEqual(m2.content, [{ type: 'text', text: 'It is sunny in Paris.' }]);
  assert.equal(m2.stop_reason, 'end_turn');
});

test('anthropic messages.stream: thinking then text, events in order', async () => {
  const stream = anthropic.messages.stream({
    model: 'm', max_tokens: 80, messages: [{ role: 'user', content: 'THINK' }], temperature: 0,
    thinking: { type: 'enabled', budget_tokens: 1024 },
  });
  const types = [];
  let text = '';
  stream.on('text', (delta) => { text += delta; });
  for await (const event of stream) {
    if (types.at(-1) !== event.type || event.type !== 'content_block_delta') types.push(event.type);
  }
  const m = await stream.finalMessage();
  assert.deepEqual(types, [
    'message_start', 'content_block_start', 'content_block_delta', 'content_block_stop',
    'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop',
  ]);
  assert.equal(text, 'Hello there!');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, 'The user greets.\n');
  assert.equal(m.content[1].text, 'Hello there!');
  assert.equal(m.stop_reason, 'end_turn');
  assert.ok(m.usage.output_tokens > 0);
});

test('anthropic messages.stream: tool_use input from partial JSON', async () => {
  const stream = anthropic.messages.stream({
    model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'WEATHER?' }], temperature: 0,
    tools: [{ name: 'get_weather', input_schema: weather }],
  });
  const m = await stream.finalMessage();
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content.at(-1).input, { city: 'Paris' });
});

test('anthropic errors are typed', async () => {
  await assert.rejects(
    anthropic.messages.create({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'x' } }] }] }),
    (err) => err instanceof Anthropic.BadRequestError && err.status === 400 && err.error.error.type === 'invalid_request_error',
  );
  const wrong = new Anthropic({ baseURL: url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(
    wrong.messages.create({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
    (err) => err instanceof Anthropic.AuthenticationError && err.error.error.type === 'authentication_error',
  );
});
