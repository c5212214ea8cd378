// The KV cache's memory (LoadOptions::kv_memory, language_model_kv.cpp): on the CPU a
// large cache is a memory mapping that memory backs page by page, so a model of many
// sequences with a long context holds what its sequences wrote; the budget refuses a run
// it cannot hold (kResourceExhausted) until memory is given back, and rows a sequence
// no longer holds are given back first. Results do not depend on any of it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "rlx/models/language_model.h"
#include "rlx/models/synth.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

std::string tiny_llama() {
  const fs::path dir = fs::temp_directory_path() / "rlx_models_test";
  fs::create_directories(dir);
  const fs::path path = dir / "llama-tiny-f32-kv.gguf";
  if (!fs::exists(path)) {
    SynthOptions o;
    o.arch = "llama";
    o.type = "f32";
    o.seed = 11;
    Status s = write_synthetic_gguf(o, path.string());
    EXPECT_TRUE(s.ok()) << s.error().to_string();
  }
  return path.string();
}

// Four sequences of a long context: the tiny model's caches (2 layers, k and v, rows of
// 2 heads x 16 floats) are 4 x 65536 x 128 bytes = 32 MiB each, 128 MiB in all.
constexpr int64_t kBatch = 4, kCtx = 65536;
constexpr int64_t kReserved = 4 * kBatch * kCtx * 128;

std::vector<std::vector<int32_t>> prompt_for(int64_t seq) {
  std::vector<std::vector<int32_t>> tokens(kBatch);
  for (int32_t i = 0; i < 9 + seq; ++i) tokens[static_cast<size_t>(seq)].push_back(static_cast<int32_t>(3 + 37 * i + seq) % 500);
  return tokens;
}

std::unique_ptr<LanguageModel> load(int64_t ctx, int64_t kv_memory = 0) {
  LoadOptions lo;
  lo.ctx = ctx;
  lo.batch = kBatch;
  lo.kv_memory = kv_memory;
  lo.compile_cache = false;
  auto m = LanguageModel::load(tiny_llama(), lo);
  EXPECT_TRUE(m) << m.error().to_string();
  return m ? std::move(*m) : nullptr;
}

TEST(KvMemory, PagedCacheHoldsWhatTheSequencesWrote) {
  auto m = load(kCtx);
  auto whole = load(64);  // small caches: heap memory, backed whole
  ASSERT_TRUE(m && whole);
  auto out = m->forward_batch(prompt_for(0), false);
  ASSERT_TRUE(out) << out.error().to_string();
  const KvMemoryState one = m->kv_memory_state();
  EXPECT_TRUE(one.paged);
  EXPECT_EQ(one.reserved, kReserved);
  EXPECT_EQ(one.budget, kReserved);
  // One sequence of four has backed whole pages for its 9 rows (and the read-ahead):
  // far below its share of the reservation.
  EXPECT_GT(one.backed, 0);
  EXPECT_LT(one.backed, kReserved / kBatch);
  EXPECT_GT(one.resident, 0);
  EXPECT_LT(one.resident, kReserved / kBatch);

  // Every sequence, then a decode step for all: the logits equal a model whose caches are
  // allocated whole.
  ASSERT_TRUE(whole->forward_batch(prompt_for(0), false));
  for (int64_t b = 1; b < kBatch; ++b) {
    auto paged = m->forward_batch(prompt_for(b), false);
    auto plain = whole->forward_batch(prompt_for(b), false);
    ASSERT_TRUE(paged && plain);
    EXPECT_EQ((*paged)[static_cast<size_t>(b)], (*plain)[static_cast<size_t>(b)]) << "sequence " << b;
  }
  std::vector<std::vector<int32_t>> step(kBatch, std::vector<int32_t>{42});
  auto paged = m->forward_batch(step, false);
  auto plain = whole->forward_batch(step, false);
  ASSERT_TRUE(paged && plain);
  EXPECT_EQ(*paged, *plain);
  const KvMemoryState all = m->kv_memory_state();
  EXPECT_EQ(all.backed, kBatch * one.backed);
  EXPECT_LT(all.resident, kReserved / 2);

  // A sequence given back: its memory goes, the others keep theirs and their results.
  ASSERT_TRUE(m->release_sequence(1).ok());
  EXPECT_EQ(m->n_past(1), 0);
  const KvMemoryState after = m->kv_memory_state();
  EXPECT_EQ(after.backed, all.backed - one.backed);
  EXPECT_LT(after.resident, all.resident);
  std::vector<std::vector<int32_t>> next(kBatch);
  next[2] = {7};
  auto a = m->forward_batch(next, false);
  auto b = whole->forward_batch(next, false);
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*a)[2], (*b)[2]);
  EXPECT_FALSE(m->release_sequence(kBatch).ok());
}

TEST(KvMemory, BudgetRefusesARunUntilMemoryIsGivenBack) {
  int64_t page = 0;  // what one sequence's short prompt backs: one page of every cache
  {
    auto probe = load(kCtx);
    ASSERT_TRUE(probe);
    ASSERT_TRUE(probe->forward_batch(prompt_for(0), false));
    page = probe->kv_memory_state(false).backed;
    ASSERT_EQ(page % 4, 0);
  }
  // Sequence 0 reads a long prompt (several pages, alone in its runs); then a run for
  // sequence 1 covers all four sequences (a bucket of 4), each backing at least a page.
  auto m = load(kCtx, 4 * page + page / 2);
  ASSERT_TRUE(m);
  std::vector<std::vector<int32_t>> tokens(kBatch);
  for (int32_t i = 0; i < 100; ++i) tokens[0].push_back((5 + 11 * i) % 500);
  ASSERT_TRUE(m->forward_batch(tokens, false));
  const int64_t long_prompt = m->kv_memory_state(false).backed;
  EXPECT_GE(long_prompt, 3 * page);
  EXPECT_LE(long_prompt, 4 * page + page / 2);

  auto need = m->kv_shortfall(prompt_for(1));
  ASSERT_TRUE(need);
  EXPECT_EQ(*need, long_prompt + 3 * page - (4 * page + page / 2));
  auto refused = m->forward_batch(prompt_for(1), false);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.error().message().find("KV memory"), std::string::npos) << refused.error().message();
  EXPECT_EQ(m->n_past(0), 100);
  EXPECT_EQ(m->n_past(1), 0);

  // Sequence 0 truncated to 10 tokens holds one page: the run takes the rest of its
  // memory back and fits.
  ASSERT_TRUE(m->truncate(0, 10).ok());
  need = m->kv_shortfall(prompt_for(1));
  ASSERT_TRUE(need);
  EXPECT_EQ(*need, 0);
  auto fits = m->forward_batch(prompt_for(1), false);
  ASSERT_TRUE(fits) << fits.error().to_string();
  EXPECT_EQ(m->kv_memory_state(false).backed, 4 * page);
  EXPECT_EQ(m->n_past(0), 10);
  EXPECT_EQ(m->n_past(1), 10);
}

// The hybrid model's recurrent states are one block a sequence: with 256 sequences they
// are paged too, backed with a sequence's first rows and given back with it.
TEST(KvMemory, RecurrentStatesArePagedPerSequence) {
  const fs::path path = fs::temp_directory_path() / "rlx_models_test" / "qwen35-tiny-f32-kv.gguf";
  if (!fs::exists(path)) {
    SynthOptions o;
    o.arch = "qwen35";
    o.preset = "qwen35-tiny";
    o.type = "f32";
    o.seed = 3;
    ASSERT_TRUE(write_synthetic_gguf(o, path.string()).ok());
  }
  LoadOptions lo;
  lo.batch = 256;  // states of 256 x 4 KiB: a mapping
  lo.ctx = 1024;
  lo.compile_cache = false;
  auto m = LanguageModel::load(path.string(), lo);
  LoadOptions solo = lo;
  solo.batch = 1;
  auto one = LanguageModel::load(path.string(), solo);
  ASSERT_TRUE(m && one) << (m ? one.error().to_string() : m.error().to_string());
  std::vector<std::vector<int32_t>> tokens(256);
  tokens[0] = {4, 8, 15, 16, 23, 42};
  auto a = (*m)->forward_batch(tokens, false);
  auto b = (*one)->forward(tokens[0], false);
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*a)[0], *b);
  const KvMemoryState s = (*m)->kv_memory_state();
  EXPECT_TRUE(s.paged);
  EXPECT_GT(s.backed, 0);
  EXPECT_LT(s.backed, s.reserved / 64);
  // Given back and run again from nothing: the same logits (its state starts at zero).
  ASSERT_TRUE((*m)->release_sequence(0).ok());
  EXPECT_LT((*m)->kv_memory_state(false).backed, s.backed);  // (small states stay: not paged)
  a = (*m)->forward_batch(tokens, false);
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)[0], *b);
}

TEST(KvMemory, BadBudgetsAreErrors) {
  LoadOptions lo;
  lo.kv_memory = -1;
  auto bad = LanguageModel::load(tiny_llama(), lo);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("KV memory budget"), std::string::npos) << bad.error().message();

  // The reference backend allocates its caches whole: a budget below them is refused at
  // the first run, naming both sizes.
  LoadOptions ref;
  ref.device = Device::reference();
  ref.ctx = 256;
  ref.kv_memory = 1024;
  ref.compile_cache = false;
  auto m = LanguageModel::load(tiny_llama(), ref);
  ASSERT_TRUE(m) << m.error().to_string();
  const std::vector<int32_t> tokens{1, 2, 3};
  auto out = (*m)->forward(tokens, false);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message().find("allocates the whole KV cache"), std::string::npos) << out.error().message();
}

}  // namespace
}  // namespace rlx::models
