// The client side of tests/serve/openai_test.sh: the official `openai` npm package (and
// plain fetch for the malformed requests it would never send) against `rlx serve`.
// Usage: node openai_client.cjs NPM_DIR BASE_URL API_KEY. Exits 1 naming the first
// failed check. Nothing here depends on timing: waits are bounded only to end a hang.
'use strict';
const path = require('path');
const assert = require('assert/strict');

const [npmDir, base, apiKey] = process.argv.slice(2);
const mod = require(path.join(npmDir, 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 600000 });
const MODEL = 'tiny';

function log(msg) { console.log(`ok: ${msg}`); }

async function metric(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  assert.ok(m, `/metrics has no ${name}`);
  return Number(m[1]);
}

async function health() { return (await fetch(`${base}/health`)).json(); }

// Polls until `pred` holds (a hang guard of 600 tries, not a speed check).
async function until(what, pred) {
  for (let i = 0; i < 600; i++) {
    if (await pred()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`never happened: ${what}`);
}

async function streamChat(messages, extra = {}) {
  const stream = await client.chat.completions.create({ model: MODEL, messages, stream: true, ...extra });
  let text = '';
  let finish = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, chunks };
}

async function rawPost(pathname, body, headers = {}) {
  const res = await fetch(`${base}${pathname}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}`, ...headers },
    body,
  });
  let json = null;
  try { json = await res.json(); } catch { json = null; }
  return { status: res.status, json };
}

async function expectError(what, status, pathname, body, headers) {
  const r = await rawPost(pathname, body, headers);
  assert.equal(r.status, status, `${what}: HTTP ${r.status}, expected ${status}`);
  assert.ok(r.json && r.json.error && typeof r.json.error.message === 'string', `${what}: no OpenAI error body`);
  log(`${what} -> ${status} (${r.json.error.message})`);
}

async function main() {
  const user = (content) => [{ role: 'user', content }];

  // Models list.
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  log('models list');

  // A chat completion.
  const chat = await client.chat.completions.create({ model: MODEL, messages: user('Hello there'), max_tokens: 8,
                                                      temperature: 0 });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.equal(typeof chat.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(chat.choices[0].finish_reason));
  assert.ok(chat.usage.prompt_tokens > 0 && chat.usage.completion_tokens >= 1);
  log(`chat completion: ${JSON.stringify(chat.choices[0].message.content)}`);

  // The same, streamed: the same greedy text.
  const streamed = await streamChat(user('Hello there'), { max_tokens: 8, temperature: 0 });
  assert.equal(streamed.text, chat.choices[0].message.content);
  assert.equal(streamed.finish, chat.choices[0].finish_reason);
  log(`streamed chat completion (${streamed.chunks} chunks)`);

  // A completion, with logprobs.
  const comp = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6,
                                                 temperature: 0, logprobs: 2 });
  assert.equal(comp.object, 'text_completion');
  assert.equal(typeof comp.choices[0].text, 'string');
  assert.equal(comp.choices[0].logprobs.token_logprobs.length, comp.usage.completion_tokens);
  log(`completion: ${JSON.stringify(comp.choices[0].text)}`);

  // 16 concurrent greedy streams equal each run alone.
  const prompts = Array.from({ length: 16 }, (_, i) => `Request number ${i}: tell me about ${'abcdefghijklmnop'[i]}`);
  const alone = [];
  for (const p of prompts) alone.push((await streamChat(user(p), { max_tokens: 16, temperature: 0 })).text);
  const together = await Promise.all(prompts.map((p) => streamChat(user(p), { max_tokens: 16, temperature: 0 })));
  together.forEach((r, i) => assert.equal(r.text, alone[i], `stream ${i} differs when run concurrently`));
  log('16 concurrent streams equal each run alone');

  // A stream cancelled mid-way frees its slot.
  const cancelledBefore = await metric('rlx_requests_cancelled_total');
  let cancelled = false;
  for (let attempt = 0; attempt < 5 && !cancelled; attempt++) {
    const stream = await client.chat.completions.create({ model: MODEL, messages: user('Talk for a long time'),
                                                          stream: true, max_tokens: 900, temperature: 1,
                                                          seed: 100 + attempt });
    let chunks = 0;
    let finished = false;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.finish_reason) finished = true;
      if (++chunks === 3) break;  // leaving the loop aborts the request
    }
    cancelled = !finished;
  }
  assert.ok(cancelled, 'every attempt finished before it could be cancelled');
  await until('the cancelled request freed its slot', async () => (await health()).slots_busy === 0);
  await until('the cancellation was counted',
              async () => (await metric('rlx_requests_cancelled_total')) > cancelledBefore);
  log('a cancelled stream freed its slot');

  // Bad requests get 4xx and the server keeps serving.
  const good = JSON.stringify({ model: MODEL, messages: user('hi'), max_tokens: 2 });
  await expectError('malformed JSON', 400, '/v1/chat/completions', '{"model": "tiny", "messages": [');
  await expectError('wrong type', 400, '/v1/chat/completions',
                    JSON.stringify({ model: MODEL, messages: user('hi'), temperature: 'hot' }));
  await expectError('missing messages', 400, '/v1/chat/completions', JSON.stringify({ model: MODEL }));
  await expectError('n = 2', 400, '/v1/chat/completions', JSON.stringify({ model: MODEL, messages: user('hi'), n: 2 }));
  await expectError('huge body', 413, '/v1/chat/completions',
                    JSON.stringify({ model: MODEL, messages: user('x'.repeat(2 << 20)) }));
  await expectError('unknown model', 404, '/v1/chat/completions',
                    JSON.stringify({ model: 'gpt-17', messages: user('hi') }));
  await expectError('bad API key', 401, '/v1/chat/completions', good, { Authorization: 'Bearer wrong' });
  await expectError('missing API key', 401, '/v1/chat/completions', good, { Authorization: '' });
  await expectError('prompt past the context', 400, '/v1/completions',
                    JSON.stringify({ model: MODEL, prompt: Array(2000).fill(5) }));
  let refusedEmbeddings = null;
  try {
    await client.embeddings.create({ model: MODEL, input: 'hello' });
  } catch (e) {
    refusedEmbeddings = e;
  }
  assert.ok(refusedEmbeddings && refusedEmbeddings.status === 400, 'embeddings from a language model were not refused');
  assert.match(refusedEmbeddings.message, /is a language model: it has no embeddings/);
  log(`embeddings from a language model -> 400 (${refusedEmbeddings.message})`);
  let rejected = false;
  try {
    await new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list();
  } catch (e) {
    rejected = e.status === 401;
  }
  assert.ok(rejected, 'the client with a wrong key was not refused with 401');
  const after = await client.chat.completions.create({ model: MODEL, messages: user('still there?'), max_tokens: 3 });
  assert.equal(after.object, 'chat.completion');
  assert.equal((await health()).status, 'ok');
  log('the server keeps serving after bad requests');

  // Prefix cache: a second conversation sharing a long system prompt prefills only its
  // new tokens.
  const system = { role: 'system', content: Array.from({ length: 30 }, (_, i) => `rule ${i} is kept`).join('; ') };
  await client.chat.completions.create({ model: MODEL, messages: [system, ...user('first question')], max_tokens: 2,
                                         temperature: 0 });
  const before = await metric('rlx_prefill_tokens_total');
  const second = await client.chat.completions.create({ model: MODEL, messages: [system, ...user('another one')],
                                                        max_tokens: 2, temperature: 0 });
  const prefilled = (await metric('rlx_prefill_tokens_total')) - before;
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  assert.equal(prefilled, second.usage.prompt_tokens - cached, 'prefilled tokens != prompt - cached');
  assert.ok(second.usage.prompt_tokens > 300, `the system prompt is only ${second.usage.prompt_tokens} tokens`);
  // Only the user turn and the assistant opening differ (the tiny model's vocabulary
  // spells them in a few dozen tokens); the system prompt is reused.
  assert.ok(prefilled < second.usage.prompt_tokens / 8,
            `the second request prefilled ${prefilled} of ${second.usage.prompt_tokens} tokens`);
  log(`prefix cache: the second request prefilled ${prefilled} of ${second.usage.prompt_tokens} prompt tokens`);
}

main().then(
  () => console.log('openai client test: all checks passed'),
  (e) => {
    console.error(`FAIL: ${e.stack || e}`);
    process.exit(1);
  },
);
