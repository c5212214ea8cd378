// LanguageModel as a driver of ModelCompilePipeline: one template per phase and output
// kind however many prompt lengths run, a second model start loads every executable's
// specialized module from the AOT disk cache (same logits), an entry that went bad is
// recompiled, prepare_generation compiles everything a generation needs up front, and
// the executables share one KV cache storage.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rlx/models/generate.h"
#include "rlx/models/language_model.h"
#include "rlx/models/synth.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

fs::path test_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / "rlx_pipeline_driver_test" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string tiny_model() {
  const fs::path p = fs::temp_directory_path() / "rlx_pipeline_driver_test" / "tiny-f32.gguf";
  if (!fs::exists(p)) {
    fs::create_directories(p.parent_path());
    SynthOptions o;
    o.seed = 11;
    EXPECT_TRUE(write_synthetic_gguf(o, p.string()).ok());
  }
  return p.string();
}

std::vector<int32_t> tokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(3 + (i * 37) % 500);
  return t;
}

TEST(PipelineDriver, OneTemplatePerPhaseAcrossPromptLengths) {
  LoadOptions lo;
  lo.ctx = 256;
  lo.threads = 2;
  lo.compile_cache = false;
  auto m = LanguageModel::load(tiny_model(), lo);
  ASSERT_TRUE(m) << m.error().to_string();
  for (int64_t n : {3, 17, 40, 100}) {  // buckets 16, 32, 64, 128
    (*m)->reset();
    ASSERT_TRUE((*m)->forward(tokens(n), false));
    const int32_t next = 7;
    ASSERT_TRUE((*m)->forward(std::span<const int32_t>(&next, 1), false));  // decode
  }
  const CompileStats& s = (*m)->compile_stats();
  EXPECT_EQ(s.templates, 2) << "one lowering + pass pipeline for prefill, one for decode";
  EXPECT_EQ(s.executables, 5) << "four prefill buckets and the decode step";
  EXPECT_EQ((*m)->pipeline().stats().template_builds, 2);
  EXPECT_EQ((*m)->pipeline().stats().specializations, 5);
  EXPECT_EQ(s.aot_loads, 0);
  EXPECT_GT(s.compile_ms, 0.0);
}

TEST(PipelineDriver, SecondStartLoadsFromTheAotCache) {
  const fs::path cache = test_dir("aot");
  LoadOptions lo;
  lo.ctx = 128;
  lo.threads = 2;
  lo.cache_dir = cache.string();
  auto run = [&](CompileStats* stats) -> std::vector<float> {
    auto m = LanguageModel::load(tiny_model(), lo);
    EXPECT_TRUE(m) << m.error().to_string();
    if (!m) return {};
    auto prefill = (*m)->forward(tokens(20), true);
    EXPECT_TRUE(prefill) << prefill.error().to_string();
    const int32_t next = 9;
    auto step = (*m)->forward(std::span<const int32_t>(&next, 1), true);
    EXPECT_TRUE(step) << step.error().to_string();
    *stats = (*m)->compile_stats();
    std::vector<float> out = prefill ? *prefill : std::vector<float>{};
    if (step) out.insert(out.end(), step->begin(), step->end());
    return out;
  };
  CompileStats cold, warm, again;
  const std::vector<float> first = run(&cold);
  EXPECT_EQ(cold.executables, 2);
  EXPECT_EQ(cold.aot_loads, 0);
  EXPECT_EQ(cold.templates, 2);
  size_t entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache)) entries += e.path().extension() == ".rlxaot";
  EXPECT_EQ(entries, 2u) << "one AOT entry per executable";

  const std::vector<float> second = run(&warm);
  EXPECT_EQ(warm.executables, 2);
  EXPECT_EQ(warm.aot_loads, 2) << "both executables came from the disk cache";
  EXPECT_EQ(warm.templates, 0) << "nothing was lowered or optimized again";
  EXPECT_EQ(warm.graphs, 0) << "the entries' keys stand for the graph: it was not even built";
  EXPECT_EQ(first, second);

  // A damaged entry is recompiled (and rewritten), never trusted.
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    if (e.path().extension() != ".rlxaot") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(e.path()) / 2));
    f.put('\x5a');
    f.put('\xa5');
    break;
  }
  const std::vector<float> third = run(&again);
  EXPECT_EQ(again.aot_loads, 1);
  EXPECT_EQ(again.templates, 1);
  EXPECT_EQ(again.graphs, 1);
  EXPECT_EQ(first, third);
}

TEST(PipelineDriver, PrepareGenerationCompilesEverythingUpFront) {
  LoadOptions lo;
  lo.ctx = 128;
  lo.threads = 2;
  lo.compile_cache = false;
  lo.max_chunk = 32;
  auto m = LanguageModel::load(tiny_model(), lo);
  ASSERT_TRUE(m) << m.error().to_string();
  // 70 tokens: chunks of 32, 32 and 6 rows; the last one picks the token on the device.
  ASSERT_TRUE((*m)->prepare_generation(70, LanguageModel::Output::kGreedy).ok());
  const int64_t made = (*m)->compile_stats().executables;
  EXPECT_EQ(made, 3) << "the 32-row chunk (logits), the 16-row bucket (greedy), decode (greedy)";
  ASSERT_TRUE((*m)->forward_greedy(tokens(70)));
  const int32_t next = 5;
  ASSERT_TRUE((*m)->forward_greedy(std::span<const int32_t>(&next, 1)));
  EXPECT_EQ((*m)->compile_stats().executables, made) << "generation compiled nothing more";
  EXPECT_FALSE((*m)->prepare_generation(0, LanguageModel::Output::kLogits).ok());
}

// Prefill and decode read and write one cache: the same storage object is bound into
// every executable (no copies when moving between them), and decoding after a prefill
// equals running every token through the decode step.
TEST(PipelineDriver, ExecutablesShareOneKvCacheStorage) {
  LoadOptions lo;
  lo.ctx = 64;
  lo.threads = 2;
  lo.compile_cache = false;
  auto m = LanguageModel::load(tiny_model(), lo);
  ASSERT_TRUE(m) << m.error().to_string();
  auto batch = (*m)->forward(tokens(9), true);
  ASSERT_TRUE(batch) << batch.error().to_string();
  CompiledGraph* prefill = (*m)->last_executable();
  (*m)->reset();
  std::vector<float> inc;
  for (int32_t t : tokens(9)) {
    auto r = (*m)->forward(std::span<const int32_t>(&t, 1), true);
    ASSERT_TRUE(r) << r.error().to_string();
    inc.insert(inc.end(), r->begin(), r->end());
  }
  CompiledGraph* decode = (*m)->last_executable();
  ASSERT_NE(prefill, decode);
  auto a = prefill->handle_storage();
  auto b = decode->handle_storage();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.get(), b[i].second.get()) << a[i].first << " is not shared";
  }
  ASSERT_EQ(batch->size(), inc.size());
  double worst = 0;
  for (size_t i = 0; i < inc.size(); ++i) worst = std::max(worst, double(std::fabs((*batch)[i] - inc[i])));
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
}  // namespace rlx::models
