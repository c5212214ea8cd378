// The scheduler of `rlx serve` on a tiny synthetic model: requests run together equal
// each run alone and the unbatched generate(); a prompt sharing a prefix with a free
// slot's cache computes only its new tokens; cancelling frees the slot; stop strings,
// max_tokens, logprobs and the queue limit behave as documented. No timing is asserted:
// tests wait for events (bounded by a generous timeout that only guards against hangs).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "rlx/models/generate.h"
#include "rlx/models/synth.h"
#include "rlx/serve/api.h"
#include "rlx/serve/scheduler.h"

namespace rlx::serve {
namespace {

namespace fs = std::filesystem;

const std::string& tiny_model() {
  static const std::string path = [] {
    const fs::path dir = fs::temp_directory_path() / "rlx_serve_test";
    fs::create_directories(dir);
    const fs::path p = dir / "tiny-f32.gguf";
    if (!fs::exists(p)) {
      models::SynthOptions o;
      o.seed = 11;
      Status s = models::write_synthetic_gguf(o, p.string());
      EXPECT_TRUE(s.ok()) << s.error().to_string();
    }
    return p.string();
  }();
  return path;
}

std::unique_ptr<models::LanguageModel> load(int64_t batch, int64_t ctx = 256) {
  models::LoadOptions lo;
  lo.batch = batch;
  lo.ctx = ctx;
  lo.threads = 2;
  auto m = models::LanguageModel::load(tiny_model(), lo);
  EXPECT_TRUE(m) << m.error().to_string();
  return m ? std::move(*m) : nullptr;
}

// What a request produced, gathered from its events.
struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<StepLogprobs> logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

// Reads events until the final one. The bound only keeps a broken scheduler from
// hanging the test run; it is no speed requirement.
Outcome collect(RequestHandle& h) {
  Outcome o;
  for (int waited = 0; waited < 600 && o.finish == FinishReason::kNone; ++waited) {
    auto e = h.next(std::chrono::milliseconds(1000));
    if (!e) continue;
    o.tokens.insert(o.tokens.end(), e->tokens.begin(), e->tokens.end());
    o.text += e->text;
    for (auto& l : e->logprobs) o.logprobs.push_back(l);
    o.finish = e->finish;
    o.error = e->error;
  }
  EXPECT_NE(o.finish, FinishReason::kNone) << "the request never finished";
  return o;
}

GenerationParams greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0.0f;
  return p;
}

std::shared_ptr<RequestHandle> submit(Scheduler& s, GenerationParams p) {
  SubmitRefusal why = SubmitRefusal::kNone;
  std::string error;
  auto h = s.submit(std::move(p), &why, &error);
  EXPECT_TRUE(h) << error;
  return h;
}

std::vector<int32_t> prompt_of(int i, size_t len) {
  std::vector<int32_t> p{1};
  for (size_t k = 1; k < len; ++k) p.push_back(static_cast<int32_t>(3 + (i * 37 + static_cast<int>(k) * 11) % 500));
  return p;
}

// Two prompts that share `system` and then differ.
std::pair<std::vector<int32_t>, std::vector<int32_t>> two_prompts_after(const std::vector<int32_t>& system) {
  std::vector<int32_t> a = system, b = system;
  a.insert(a.end(), {7, 8, 9});
  b.insert(b.end(), {10, 11, 12, 13});
  return {a, b};
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = load_tokenizer_from_gguf(tiny_model());
    ASSERT_TRUE(t) << t.error().to_string();
    tok = std::move(*t);
  }
  // The greedy tokens of `prompt` on a fresh one-sequence model (generate()).
  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int32_t max_tokens, int64_t ctx = 256) {
    auto solo = load(1, ctx);
    EXPECT_TRUE(solo);
    if (!solo) return {};
    models::GenerateOptions go;
    go.max_tokens = max_tokens;
    auto r = models::generate(*solo, *tok, prompt, go, nullptr);
    EXPECT_TRUE(r) << (r ? "" : r.error().to_string());
    return r ? r->tokens : std::vector<int32_t>{};
  }
  void check_concurrent_greedy(const SchedulerOptions& so);
  std::unique_ptr<Tokenizer> tok;
  Metrics metrics;
};

// Requests run alone and together (more than the slots, so newcomers join while others
// decode) give what generate() gives on a one-sequence model.
void SchedulerTest::check_concurrent_greedy(const SchedulerOptions& so) {
  constexpr int kRequests = 7;  // more than the slots: some wait in the queue
  constexpr int32_t kMax = 12;
  auto solo = load(1);
  ASSERT_TRUE(solo);
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < kRequests; ++i) {
    models::GenerateOptions go;
    go.max_tokens = kMax;
    auto r = models::generate(*solo, *tok, prompt_of(i, 5 + 9 * static_cast<size_t>(i)), go, nullptr);
    ASSERT_TRUE(r) << r.error().to_string();
    expected.push_back(r->tokens);
  }
  auto model = load(4);
  ASSERT_TRUE(model);
  Scheduler s(*model, *tok, metrics, so);
  for (int i = 0; i < kRequests; ++i) {  // one at a time
    auto h = submit(s, greedy(prompt_of(i, 5 + 9 * static_cast<size_t>(i)), kMax));
    ASSERT_TRUE(h);
    EXPECT_EQ(collect(*h).tokens, expected[static_cast<size_t>(i)]) << "alone, request " << i;
    // (read after the final event: the scheduler runs nothing more until the next submit)
    EXPECT_EQ(model->last_run_sequences(), 1) << "a request alone runs on the lowest slot, without the others";
  }
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = kRequests - 1; i >= 0; --i) handles.push_back(submit(s, greedy(prompt_of(i, 5 + 9 * static_cast<size_t>(i)), kMax)));
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(handles[static_cast<size_t>(i)]);
    const Outcome o = collect(*handles[static_cast<size_t>(i)]);
    EXPECT_EQ(o.tokens, expected[static_cast<size_t>(kRequests - 1 - i)]) << "together, request " << kRequests - 1 - i;
    EXPECT_TRUE(o.finish == FinishReason::kStop || o.finish == FinishReason::kLength);
  }
  EXPECT_EQ(metrics.slots_busy.load(), 0);
  EXPECT_EQ(metrics.queue_length.load(), 0);
}

TEST_F(SchedulerTest, ConcurrentGreedyEqualsAloneAndGenerate) {
  SchedulerOptions so;
  so.prefill_chunk = 16;  // prompts longer than this prefill over several steps
  check_concurrent_greedy(so);
}

// With a step-rows limit, a newcomer prefills in 16-row chunks while others decode (4
// sequences x 16 rows) and in 64-row chunks otherwise: the same tokens.
TEST_F(SchedulerTest, StepRowsLimitKeepsResults) {
  SchedulerOptions so;
  so.prefill_chunk = 64;
  so.step_rows = 64;
  check_concurrent_greedy(so);
}

TEST(SchedulerStepRows, ChunkIsTheLargestPowerOfTwoWithinTheLimit) {
  // (chunk, step_rows, sequences, min_bucket) -> chunk
  EXPECT_EQ(chunk_within_step_rows(64, 256, 16, 16), 16);
  EXPECT_EQ(chunk_within_step_rows(64, 256, 4, 16), 64);
  EXPECT_EQ(chunk_within_step_rows(64, 256, 8, 16), 32);
  EXPECT_EQ(chunk_within_step_rows(64, 256, 1, 16), 64);   // never above the chunk
  EXPECT_EQ(chunk_within_step_rows(64, 256, 64, 16), 16);  // a multi-token run pads to min_bucket anyway
  EXPECT_EQ(chunk_within_step_rows(64, 0, 64, 16), 64);    // 0: no limit
  EXPECT_EQ(chunk_within_step_rows(512, 4096, 16, 16), 256);
  EXPECT_EQ(chunk_within_step_rows(512, 100, 2, 8), 32);   // 2 x 32 <= 100 < 2 x 64
  EXPECT_EQ(chunk_within_step_rows(64, 256, 16, 0), 16);   // a min_bucket below 1 counts as 1
}

TEST_F(SchedulerTest, SharedPrefixPrefillsOnlyNewTokens) {
  auto model = load(2);
  ASSERT_TRUE(model);
  Scheduler s(*model, *tok, metrics, {});
  const std::vector<int32_t> system = prompt_of(3, 100);
  const auto [a, b] = two_prompts_after(system);
  auto ha = submit(s, greedy(a, 4));
  ASSERT_TRUE(ha);
  Outcome oa = collect(*ha);
  EXPECT_EQ(metrics.prefill_tokens.load(), static_cast<int64_t>(a.size()));
  EXPECT_EQ(ha->cached_tokens(), 0);
  auto hb = submit(s, greedy(b, 4));
  ASSERT_TRUE(hb);
  Outcome ob = collect(*hb);
  EXPECT_EQ(hb->cached_tokens(), static_cast<int64_t>(system.size()));
  EXPECT_EQ(metrics.prefill_tokens.load(), static_cast<int64_t>(a.size() + 4));
  EXPECT_EQ(metrics.prefix_hit_tokens.load(), static_cast<int64_t>(system.size()));

  // The reused cache gives what a cold model gives.
  const std::vector<int32_t> cold = alone(b, 4);
  EXPECT_EQ(ob.tokens, cold);
  // The same prompt again reuses all but its last token.
  auto hc = submit(s, greedy(b, 4));
  ASSERT_TRUE(hc);
  EXPECT_EQ(collect(*hc).tokens, cold);
  EXPECT_EQ(hc->cached_tokens(), static_cast<int64_t>(b.size() - 1));
}

// A prompt sharing a prefix with a busy slot (a system prompt a running request already
// computed) takes that slot's KV rows by a copy on the device: it computes only its new
// tokens and gives what a cold model gives.
TEST_F(SchedulerTest, SharedPrefixIsCopiedFromABusySlot) {
  constexpr int64_t kCtx = 1024;
  constexpr int32_t kLong = 800;  // a runs this long unless cancelled: it is busy when b arrives
  const std::vector<int32_t> system = prompt_of(4, 90);
  const auto [a, b] = two_prompts_after(system);
  // Greedy, a makes the same tokens as alone: it must not end early on its own.
  if (alone(a, kLong, kCtx).size() < static_cast<size_t>(kLong)) GTEST_SKIP() << "the model ends request a early";
  auto model = load(2, kCtx);
  ASSERT_TRUE(model);
  Scheduler s(*model, *tok, metrics, {});
  auto ha = submit(s, greedy(a, kLong));
  ASSERT_TRUE(ha);
  // Once a's first token arrives, its prompt is in slot 0's cache and a is still running.
  std::optional<GenerationEvent> first;
  for (int waited = 0; waited < 600 && !(first && !first->tokens.empty()); ++waited)
    first = ha->next(std::chrono::milliseconds(1000));
  ASSERT_TRUE(first && !first->tokens.empty());
  auto hb = submit(s, greedy(b, 4));
  ASSERT_TRUE(hb);
  Outcome ob = collect(*hb);
  ha->cancel();
  const Outcome oa = collect(*ha);
  // Only if this thread stalled for all of a's 800 steps did a end before b came in.
  if (oa.finish != FinishReason::kCancelled) GTEST_SKIP() << "request a ended before b was admitted";
  EXPECT_EQ(hb->cached_tokens(), static_cast<int64_t>(system.size()));
  EXPECT_EQ(metrics.prefix_copied_tokens.load(), static_cast<int64_t>(system.size()));
  EXPECT_EQ(metrics.prefill_tokens.load(), static_cast<int64_t>(a.size() + 4));
  EXPECT_EQ(ob.tokens, alone(b, 4, kCtx));
}

TEST_F(SchedulerTest, CancelFreesTheSlot) {
  auto model = load(1, 512);
  ASSERT_TRUE(model);
  Scheduler s(*model, *tok, metrics, {});
  GenerationParams p = greedy(prompt_of(1, 8), 400);
  p.sampling.temperature = 1.0f;  // sampled: unlikely to stop early
  p.sampling.seed = 5;
  auto h = submit(s, p);
  ASSERT_TRUE(h);
  // Wait for a first token, then cancel.
  std::optional<GenerationEvent> first;
  for (int i = 0; i < 600 && !first; ++i) first = h->next(std::chrono::milliseconds(1000));
  ASSERT_TRUE(first);
  if (first->finish != FinishReason::kNone) GTEST_SKIP() << "the request ended at its first token";
  h->cancel();
  const Outcome o = collect(*h);
  EXPECT_EQ(o.finish, FinishReason::kCancelled);
  EXPECT_EQ(metrics.slots_busy.load(), 0);
  EXPECT_EQ(metrics.requests_cancelled.load(), 1);
  // The one slot serves the next request.
  auto next = submit(s, greedy(prompt_of(2, 6), 3));
  ASSERT_TRUE(next);
  const FinishReason f = collect(*next).finish;
  EXPECT_TRUE(f == FinishReason::kStop || f == FinishReason::kLength);
}

TEST_F(SchedulerTest, StopStringMaxTokensAndLogprobs) {
  auto model = load(2);
  ASSERT_TRUE(model);
  Scheduler s(*model, *tok, metrics, {});
  GenerationParams p = greedy(prompt_of(4, 12), 24);
  p.top_logprobs = 3;
  auto h = submit(s, p);
  ASSERT_TRUE(h);
  const Outcome full = collect(*h);
  ASSERT_EQ(full.logprobs.size(), full.tokens.size());
  for (size_t i = 0; i < full.logprobs.size(); ++i) {
    const StepLogprobs& l = full.logprobs[i];
    EXPECT_EQ(l.chosen.token, full.tokens[i]);
    ASSERT_EQ(l.top.size(), 3u);
    EXPECT_EQ(l.top[0].token, l.chosen.token);  // greedy picks the best
    EXPECT_LE(l.chosen.logprob, 0.0f);
    EXPECT_GE(l.top[0].logprob, l.top[1].logprob);
  }
  if (full.finish == FinishReason::kLength) {
    EXPECT_EQ(full.tokens.size(), 24u);
  }
  if (full.text.size() < 8) GTEST_SKIP() << "too little text to cut with a stop string";
  GenerationParams q = greedy(p.prompt, 24);
  const std::string stop = full.text.substr(4, 3);
  q.stop = {stop};
  auto hs = submit(s, q);
  ASSERT_TRUE(hs);
  const Outcome cut = collect(*hs);
  EXPECT_EQ(cut.finish, FinishReason::kStop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
}

TEST_F(SchedulerTest, RefusesBadParamsAndAFullQueue) {
  auto model = load(1, 64);
  ASSERT_TRUE(model);
  SchedulerOptions so;
  so.max_queue = 0;
  Scheduler s(*model, *tok, metrics, so);
  SubmitRefusal why = SubmitRefusal::kNone;
  std::string error;
  EXPECT_FALSE(s.submit(greedy({}, 4), &why, &error));
  EXPECT_EQ(why, SubmitRefusal::kInvalid);
  EXPECT_FALSE(s.submit(greedy(prompt_of(0, 64), 4), &why, &error));
  EXPECT_EQ(why, SubmitRefusal::kInvalid);
  EXPECT_NE(error.find("context length"), std::string::npos);
  EXPECT_FALSE(s.submit(greedy({1, 999999}, 4), &why, &error));
  EXPECT_EQ(why, SubmitRefusal::kInvalid);
  EXPECT_FALSE(s.submit(greedy({1, 2}, 0), &why, &error));
  EXPECT_EQ(why, SubmitRefusal::kInvalid);
  EXPECT_FALSE(s.submit(greedy({1, 2}, 4), &why, &error));
  EXPECT_EQ(why, SubmitRefusal::kQueueFull);
  s.stop();
  Scheduler other(*model, *tok, metrics, {});
  other.stop();
  EXPECT_FALSE(other.submit(greedy({1, 2}, 4), &why, &error));
  EXPECT_EQ(why, SubmitRefusal::kStopping);
}

TEST_F(SchedulerTest, LengthEndsAtTheContext) {
  auto model = load(1, 32);
  ASSERT_TRUE(model);
  Scheduler s(*model, *tok, metrics, {});
  GenerationParams p = greedy(prompt_of(5, 28), 100);
  p.sampling.temperature = 1.0f;
  p.sampling.seed = 9;
  auto h = submit(s, p);
  ASSERT_TRUE(h);
  const Outcome o = collect(*h);
  EXPECT_TRUE(o.finish == FinishReason::kStop || o.finish == FinishReason::kLength) << o.error;
  EXPECT_LE(o.tokens.size(), 5u);  // 28 prompt + 4 fed + the last one sampled
}

// The prefix cache's primitive: a truncated sequence continues as if only the kept
// prefix had been fed; bad arguments are errors.
TEST_F(SchedulerTest, TruncateKeepsAPrefix) {
  auto model = load(2);
  ASSERT_TRUE(model);
  const std::vector<int32_t> p = prompt_of(6, 20);
  std::vector<std::vector<int32_t>> in{p, {}};
  ASSERT_TRUE(model->forward_batch(in, false));
  ASSERT_TRUE(model->truncate(0, 12).ok());
  EXPECT_EQ(model->n_past(0), 12);
  in = {std::vector<int32_t>(p.begin() + 12, p.end()), {}};
  auto again = model->forward_batch(in, false);
  ASSERT_TRUE(again);
  model->reset();
  in = {p, {}};
  auto fresh = model->forward_batch(in, false);
  ASSERT_TRUE(fresh);
  ASSERT_EQ((*again)[0].size(), (*fresh)[0].size());
  double diff = 0;
  for (size_t i = 0; i < (*fresh)[0].size(); ++i) diff = std::max(diff, double(std::fabs((*again)[0][i] - (*fresh)[0][i])));
  EXPECT_LT(diff, 1e-4);
  EXPECT_FALSE(model->truncate(0, 21).ok());
  EXPECT_FALSE(model->truncate(0, -1).ok());
  EXPECT_FALSE(model->truncate(2, 0).ok());
  EXPECT_FALSE(model->truncate(-1, 0).ok());
}

// The cross-slot primitive: a sequence given another's first rows continues as if it
// had been fed them; bad arguments are errors.
TEST_F(SchedulerTest, CopyPrefixHandsRowsToAnotherSequence) {
  auto model = load(3);
  ASSERT_TRUE(model);
  const std::vector<int32_t> p = prompt_of(8, 20);
  std::vector<std::vector<int32_t>> in{p, {}, {}};
  ASSERT_TRUE(model->forward_batch(in, false));
  ASSERT_TRUE(model->copy_prefix(0, 2, 12).ok());
  EXPECT_EQ(model->n_past(2), 12);
  EXPECT_EQ(model->n_past(0), 20);
  in = {{}, {}, std::vector<int32_t>(p.begin() + 12, p.end())};
  auto copied = model->forward_batch(in, false);
  ASSERT_TRUE(copied);
  model->reset();
  in = {{}, {}, p};
  auto fresh = model->forward_batch(in, false);
  ASSERT_TRUE(fresh);
  ASSERT_EQ((*copied)[2].size(), (*fresh)[2].size());
  double diff = 0;
  for (size_t i = 0; i < (*fresh)[2].size(); ++i)
    diff = std::max(diff, double(std::fabs((*copied)[2][i] - (*fresh)[2][i])));
  EXPECT_LT(diff, 1e-4);
  EXPECT_FALSE(model->copy_prefix(2, 2, 1).ok());
  EXPECT_FALSE(model->copy_prefix(2, 3, 1).ok());
  EXPECT_FALSE(model->copy_prefix(-1, 0, 1).ok());
  EXPECT_FALSE(model->copy_prefix(2, 0, 21).ok());  // more than sequence 2 holds
  EXPECT_FALSE(model->copy_prefix(2, 0, -1).ok());
  EXPECT_FALSE(model->copy_prefix(0, 2, 1).ok());  // sequence 0 holds nothing now
  EXPECT_EQ(model->n_past(2), 20);                  // refused copies change nothing
}

TEST_F(SchedulerTest, StreamChunksParse) {
  GenerationEvent e;
  e.text = "hé";
  e.tokens = {5};
  e.logprobs.push_back({{5, -0.5f}, {{5, -0.5f}}});
  ApiRequest req;
  req.top_logprobs = 1;
  const ResponseMeta meta{"chatcmpl-1", 7, "tiny"};
  const std::string chunk = stream_chunk(Endpoint::kChat, meta, e, /*first=*/true, req, *tok);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  const auto j = nlohmann::json::parse(chunk.substr(6));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "hé");
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["logprob"], -0.5);
  e.finish = FinishReason::kLength;
  const auto k = nlohmann::json::parse(stream_chunk(Endpoint::kCompletion, meta, e, false, req, *tok).substr(6));
  EXPECT_EQ(k["object"], "text_completion");
  EXPECT_EQ(k["choices"][0]["text"], "hé");
  EXPECT_EQ(k["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(k["choices"][0]["logprobs"]["token_logprobs"][0], -0.5);
}

// A KV budget (LoadOptions::kv_memory) below what the slots would hold: a request that
// needs memory an idle slot's cached prefix holds gets it (the prefix is evicted), and a
// request the budget cannot hold even alone fails with a clear error while the server
// keeps serving. Sizes are counted in pages of every cache (the CPU's 4 KiB pages).
TEST_F(SchedulerTest, KvBudgetEvictsIdlePrefixesThenRefusesWhatCannotFit) {
  constexpr int64_t kCtx = 4096;  // caches of 1 MiB and more are paged
  auto load_with = [&](int64_t kv_memory) {
    models::LoadOptions lo;
    lo.batch = 2;
    lo.ctx = kCtx;
    lo.threads = 2;
    lo.kv_memory = kv_memory;
    auto m = models::LanguageModel::load(tiny_model(), lo);
    EXPECT_TRUE(m) << m.error().to_string();
    return m ? std::move(*m) : nullptr;
  };
  int64_t page = 0;  // one page of every cache, one sequence
  {
    auto probe = load_with(0);
    ASSERT_TRUE(probe);
    const std::vector<int32_t> one{1};
    ASSERT_TRUE(probe->forward_batch(std::vector<std::vector<int32_t>>{one, {}}, false));
    ASSERT_TRUE(probe->kv_memory_state().paged);
    page = probe->kv_memory_state().backed;
  }
  auto model = load_with(31 * page);
  ASSERT_TRUE(model);
  SchedulerOptions so;
  so.prefill_chunk = 16;
  Scheduler s(*model, *tok, metrics, so);
  auto tokens_from = [](int32_t first, size_t n) {
    std::vector<int32_t> p{first};
    for (size_t k = 1; k < n; ++k) p.push_back(static_cast<int32_t>(3 + (first * 13 + static_cast<int>(k) * 7) % 500));
    return p;
  };
  // a: 900 prompt tokens in chunks of 16 (57 steps; rows up to 912: 29 pages) in slot 0;
  // b, submitted meanwhile, runs in slot 1.
  const std::vector<int32_t> a = tokens_from(5, 900), b = tokens_from(9, 10);
  auto ha = submit(s, greedy(a, 2));
  auto hb = submit(s, greedy(b, 2));
  ASSERT_TRUE(ha && hb);
  collect(*hb);
  if (metrics.slots_busy.load() == 0) GTEST_SKIP() << "request a ended before b ran beside it";
  const Outcome oa = collect(*ha);
  ASSERT_EQ(oa.error, "");
  // (its last token was sent, never fed: the cache holds the others)
  const int64_t a_cached = static_cast<int64_t>(a.size() + oa.tokens.size()) - 1;

  // c extends b (slot 1, reusing b's prompt) to 200 tokens: 7 pages next to a's 29 pass
  // the budget of 31, so slot 0's idle cache goes.
  std::vector<int32_t> c = b;
  const std::vector<int32_t> tail = tokens_from(11, 190);
  c.insert(c.end(), tail.begin(), tail.end());
  auto hc = submit(s, greedy(c, 3));
  ASSERT_TRUE(hc);
  const Outcome oc = collect(*hc);
  EXPECT_EQ(oc.error, "");
  EXPECT_EQ(hc->cached_tokens(), static_cast<int64_t>(b.size()));
  EXPECT_EQ(metrics.kv_evicted_tokens.load(), a_cached);
  EXPECT_EQ(oc.tokens, alone(c, 3, kCtx));

  // d: 1000 prompt tokens need 32 pages, more than the whole budget: after evicting c's
  // cache it still does not fit, so d alone fails, naming the KV memory.
  auto hd = submit(s, greedy(tokens_from(13, 1000), 2));
  ASSERT_TRUE(hd);
  const Outcome od = collect(*hd);
  EXPECT_EQ(od.finish, FinishReason::kError);
  EXPECT_NE(od.error.find("KV memory"), std::string::npos) << od.error;
  EXPECT_EQ(metrics.kv_refused_requests.load(), 1);
  EXPECT_LE(metrics.kv_backed_bytes.load(), 31 * page);
  EXPECT_EQ(metrics.kv_budget_bytes.load(), 31 * page);

  // The server keeps serving.
  auto he = submit(s, greedy(tokens_from(17, 20), 2));
  ASSERT_TRUE(he);
  const Outcome oe = collect(*he);
  EXPECT_EQ(oe.error, "");
  EXPECT_EQ(oe.tokens, alone(tokens_from(17, 20), 2, kCtx));
}

}  // namespace
}  // namespace rlx::serve
