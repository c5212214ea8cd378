// A language model on a CPU tensor-parallel group (cpu:0,1: two ranks, each with half of
// the heads, FFN columns and vocabulary) gives the logits of the whole model on one CPU
// backend: prefill, then decode steps through the sharded KV cache, and the greedy token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <utility>

#include "rlx/models/language_model.h"
#include "rlx/models/synth.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

std::string synth(const std::string& arch, const std::string& preset, const std::string& type) {
  const fs::path dir = fs::temp_directory_path() / "rlx_tp_test";
  fs::create_directories(dir);
  const fs::path path = dir / (arch + "-" + preset + "-" + type + ".gguf");
  if (!fs::exists(path)) {
    SynthOptions o;
    o.arch = arch;
    o.preset = preset;
    o.type = type;
    o.seed = 11;
    Status s = write_synthetic_gguf(o, path.string());
    EXPECT_TRUE(s.ok()) << s.error().to_string();
  }
  return path.string();
}

// max |a - b| / max |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return m > 0 ? d / m : d;
}

// The model at `path` loaded with `one` on the CPU backend and on the group cpu:0,1.
std::pair<std::unique_ptr<LanguageModel>, std::unique_ptr<LanguageModel>> load_pair(const std::string& path,
                                                                                    LoadOptions one) {
  one.threads = 1;
  one.min_bucket = 4;
  one.compile_cache = false;
  LoadOptions two = one;
  two.device = *Device::parse("cpu:0,1");
  auto a = LanguageModel::load(path, one);
  auto b = LanguageModel::load(path, two);
  EXPECT_TRUE(a) << a.error().to_string();
  EXPECT_TRUE(b) << b.error().to_string();
  if (!a || !b) return {};
  return {std::move(*a), std::move(*b)};
}

struct Case {
  std::string arch, preset, type;
};

class TensorParallelModel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelModel, GroupLogitsEqualOneDevice) {
  const Case& c = GetParam();
  const std::string path = synth(c.arch, c.preset, c.type);
  LoadOptions one;
  one.ctx = 64;
  auto [a, b] = load_pair(path, one);
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> prompt = {1, 40, 300, 77, 12, 499, 260};
  auto pa = a->forward(prompt, true);
  auto pb = b->forward(prompt, true);
  ASSERT_TRUE(pa) << pa.error().to_string();
  ASSERT_TRUE(pb) << pb.error().to_string();
  EXPECT_LT(rel_diff(*pb, *pa), 1e-4);
  for (int32_t t : {5, 99, 402}) {
    auto da = a->forward(std::span<const int32_t>(&t, 1), false);
    auto db = b->forward(std::span<const int32_t>(&t, 1), false);
    ASSERT_TRUE(da) << da.error().to_string();
    ASSERT_TRUE(db) << db.error().to_string();
    EXPECT_LT(rel_diff(*db, *da), 1e-4) << "decode token " << t;
  }
  auto greedy = b->forward_greedy(std::vector<int32_t>{7});
  ASSERT_TRUE(greedy) << greedy.error().to_string();
  ASSERT_NE(b->last_executable(), nullptr);
  EXPECT_NE(b->last_executable()->executable().describe().find("tensor parallel over cpu:0,1"), std::string::npos);
}

// Serving's batched form (rlx serve --parallel N on a group): three sequences, one run a
// step, each with its own sharded KV caches, equal to the same batch on one CPU backend;
// the last step runs the first sequence alone (over the front of the sharded caches).
LoadOptions three_sequences() {
  LoadOptions o;
  o.ctx = 64;
  o.batch = 3;
  return o;
}

TEST(TensorParallelModelBatch, BatchedSequencesEqualOneDevice) {
  auto [a, b] = load_pair(synth("llama", "tiny-untied", "f32"), three_sequences());
  ASSERT_TRUE(a && b);
  const std::vector<std::vector<int32_t>> prompts = {{1, 40, 300, 77}, {1, 12}, {1, 499, 260, 8, 100, 33}};
  const std::vector<std::vector<std::vector<int32_t>>> steps = {{{5}, {}, {9}}, {{7}, {8}, {10}}, {{11}, {}, {}}};
  auto pa = a->forward_batch(prompts, true);
  auto pb = b->forward_batch(prompts, true);
  ASSERT_TRUE(pa) << pa.error().to_string();
  ASSERT_TRUE(pb) << pb.error().to_string();
  for (size_t s = 0; s < prompts.size(); ++s)
    EXPECT_LT(rel_diff((*pb)[s], (*pa)[s]), 1e-4) << "prefill, sequence " << s;
  for (size_t k = 0; k < steps.size(); ++k) {
    auto da = a->forward_batch(steps[k], true);
    auto db = b->forward_batch(steps[k], true);
    ASSERT_TRUE(da) << da.error().to_string();
    ASSERT_TRUE(db) << db.error().to_string();
    for (size_t s = 0; s < prompts.size(); ++s)
      EXPECT_LT(rel_diff((*db)[s], (*da)[s]), 1e-4) << "step " << k << " seq " << s;
  }
  EXPECT_EQ(a->last_run_sequences(), 1);
  EXPECT_EQ(b->last_run_sequences(), 1);
}

// A prefix handed between sequences (the server's cross-slot prefix cache) copies every
// rank's part of the sharded caches: sequence 1 given sequence 2's first 4 tokens then
// fed the rest equals the one-device model doing the same.
TEST(TensorParallelModelBatch, CopiedPrefixEqualsOneDevice) {
  auto [a, b] = load_pair(synth("llama", "tiny-untied", "f32"), three_sequences());
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> p = {1, 499, 260, 8, 100, 33};
  const std::vector<std::vector<int32_t>> prompts = {{}, {}, p};
  ASSERT_TRUE(a->forward_batch(prompts, false));
  ASSERT_TRUE(b->forward_batch(prompts, false));
  ASSERT_TRUE(a->copy_prefix(2, 1, 4).ok());
  ASSERT_TRUE(b->copy_prefix(2, 1, 4).ok());
  const std::vector<std::vector<int32_t>> rest = {{}, {100, 33}, {}};
  auto ra = a->forward_batch(rest, true);
  auto rb = b->forward_batch(rest, true);
  ASSERT_TRUE(ra && rb);
  EXPECT_LT(rel_diff((*rb)[1], (*ra)[1]), 1e-4);
}

// tiny ties its LM head to the embedding (the head stays whole on every rank);
// tiny-untied has its own, split by vocabulary and all-gathered; moe-tiny splits each of
// its 8 experts' hidden units.
INSTANTIATE_TEST_SUITE_P(Types, TensorParallelModel,
                         ::testing::Values(Case{"llama", "tiny", "f32"}, Case{"llama", "tiny-untied", "f32"},
                                           Case{"llama", "tiny-untied", "q8_0"}, Case{"qwen3", "tiny", "f16"},
                                           Case{"gemma2", "tiny", "f32"}, Case{"qwen3moe", "moe-tiny", "f32"},
                                           Case{"qwen3moe", "moe-tiny", "q8_0"}),
                         [](const auto& info) {
                           std::string n = info.param.arch + "_" + info.param.preset + "_" + info.param.type;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace rlx::models
