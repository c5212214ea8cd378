// The client side of tests/serve/openai_test.sh for an encoder: the official `openai` npm
// package's embeddings.create against `rlx serve` on a synthetic BERT. The client asks
// for base64 by default and decodes it; that must equal encoding_format "float". Every
// input form, dimensions, concurrent requests, and the refusals (as the client's errors).
// Usage: node openai_embeddings.cjs NPM_DIR BASE_URL API_KEY. Exits 1 naming the first
// failed check. Nothing here depends on timing.
'use strict';
const path = require('path');
const assert = require('assert/strict');

const [npmDir, base, apiKey] = process.argv.slice(2);
const mod = require(path.join(npmDir, 'node_modules', 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 600000 });
const MODEL = 'enc';
const DIM = 128;  // bert-tiny

function log(msg) { console.log(`ok: ${msg}`); }

function assertClose(a, b, what) {
  assert.equal(a.length, b.length, `${what}: lengths ${a.length} and ${b.length}`);
  for (let i = 0; i < a.length; i++) assert.ok(Math.abs(a[i] - b[i]) <= 1e-5, `${what}: [${i}] ${a[i]} != ${b[i]}`);
}

async function refused(what, status, pattern, call) {
  let error = null;
  try {
    await call();
  } catch (e) {
    error = e;
  }
  assert.ok(error, `${what}: not refused`);
  assert.equal(error.status, status, `${what}: HTTP ${error.status}, expected ${status} (${error.message})`);
  assert.match(error.message, pattern, `${what}: ${error.message}`);
  log(`${what} -> ${status} (${error.message})`);
}

async function main() {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  log('models list');

  // The client's default: base64 on the wire, decoded to floats.
  const texts = ['hello world', 'a longer sentence to embed, with several more words', 'x'];
  const b64 = await client.embeddings.create({ model: MODEL, input: texts });
  assert.equal(b64.object, 'list');
  assert.equal(b64.model, MODEL);
  assert.equal(b64.data.length, texts.length);
  b64.data.forEach((d, i) => {
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, DIM);
  });
  assert.ok(b64.usage.prompt_tokens >= texts.length * 2 && b64.usage.total_tokens === b64.usage.prompt_tokens);
  const floats = await client.embeddings.create({ model: MODEL, input: texts, encoding_format: 'float' });
  floats.data.forEach((d, i) => {
    assert.ok(Array.isArray(d.embedding), 'encoding_format float gives arrays of numbers');
    assertClose(Array.from(b64.data[i].embedding), d.embedding, `text ${i} base64 vs float`);
  });
  assert.ok(floats.data[0].embedding.some((x, k) => Math.abs(x - floats.data[1].embedding[k]) > 1e-3),
            'two different texts embed the same');
  log(`embeddings of ${texts.length} texts (${b64.usage.prompt_tokens} tokens), base64 equals float`);

  // One string alone equals its row in the list.
  const one = await client.embeddings.create({ model: MODEL, input: texts[1], encoding_format: 'float' });
  assertClose(one.data[0].embedding, floats.data[1].embedding, 'one string');
  log('one string equals its row of a list');

  // Token ids: a flat list is one input; a list of lists several.
  const ids = [[2, 100, 200, 300, 3], [2, 7, 3]];
  const flat = await client.embeddings.create({ model: MODEL, input: ids[0], encoding_format: 'float' });
  const lists = await client.embeddings.create({ model: MODEL, input: ids, encoding_format: 'float' });
  assert.equal(flat.data.length, 1);
  assert.equal(lists.data.length, 2);
  assert.equal(lists.usage.prompt_tokens, 8);
  assertClose(flat.data[0].embedding, lists.data[0].embedding, 'token ids');
  log('token-id inputs');

  // dimensions: the first values, renormalized.
  const short = await client.embeddings.create({ model: MODEL, input: texts[0], dimensions: 32, encoding_format: 'float' });
  const v = short.data[0].embedding;
  assert.equal(v.length, 32);
  const head = floats.data[0].embedding.slice(0, 32);
  const norm = Math.sqrt(head.reduce((s, x) => s + x * x, 0));
  assertClose(v, head.map((x) => x / norm), 'dimensions 32');
  log('dimensions 32 truncates and renormalizes');

  // 16 concurrent requests each get their own embeddings.
  const inputs = Array.from({ length: 16 }, (_, i) => `request ${i} about ${'abcdefghijklmnop'[i]}`);
  const alone = [];
  for (const input of inputs) alone.push((await client.embeddings.create({ model: MODEL, input, encoding_format: 'float' })).data[0].embedding);
  const together = await Promise.all(inputs.map((input) => client.embeddings.create({ model: MODEL, input, encoding_format: 'float' })));
  together.forEach((r, i) => assertClose(r.data[0].embedding, alone[i], `concurrent request ${i}`));
  log('16 concurrent requests equal each alone');

  // Refusals, as the client reports them; the server keeps serving.
  await refused('empty string', 400, /must not be an empty string/, () => client.embeddings.create({ model: MODEL, input: '' }));
  await refused('empty list', 400, /empty list/, () => client.embeddings.create({ model: MODEL, input: [] }));
  await refused('too long', 400, /the model takes at most 128/,
                () => client.embeddings.create({ model: MODEL, input: 'word '.repeat(300) }));
  await refused('token id outside the vocabulary', 400, /outside the vocabulary/,
                () => client.embeddings.create({ model: MODEL, input: [2, 99999] }));
  await refused('dimensions too large', 400, /'dimensions'/,
                () => client.embeddings.create({ model: MODEL, input: 'x', dimensions: 4096 }));
  await refused('unknown model', 404, /does not exist/, () => client.embeddings.create({ model: 'gpt-17', input: 'x' }));
  await refused('chat sent to an encoder', 400, /is an embedding model/,
                () => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }));
  await refused('bad API key', 401, /API key/,
                () => new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 }).embeddings.create({ model: MODEL, input: 'x' }));
  const after = await client.embeddings.create({ model: MODEL, input: 'still there?' });
  assert.equal(after.data[0].embedding.length, DIM);
  log('the server keeps serving after bad requests');
}

main().then(
  () => console.log('openai embeddings test: all checks passed'),
  (e) => {
    console.error(`FAIL: ${e.stack || e}`);
    process.exit(1);
  },
);
