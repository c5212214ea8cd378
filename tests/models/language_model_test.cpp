// Self-contained model tests on synthetic tiny models of each family (written by
// write_synthetic_gguf into a temp folder): batch vs incremental logits, padded vs
// unpadded prefill, f16 KV cache close to f32, context overflow errors, sampling
// determinism, and quantized copies staying close to the f32 model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "rlx/formats/gguf.h"
#include "rlx/models/generate.h"
#include "rlx/models/language_model.h"
#include "rlx/models/quantize.h"
#include "rlx/models/synth.h"
#include "rlx/models/tokenizer.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

std::string synth_model(const std::string& arch, const std::string& type) {
  const fs::path dir = fs::temp_directory_path() / "rlx_models_test";
  fs::create_directories(dir);
  const fs::path path = dir / (arch + "-tiny-" + type + ".gguf");
  if (!fs::exists(path)) {
    SynthOptions o;
    o.arch = arch;
    o.type = type;
    o.seed = 7;
    Status s = write_synthetic_gguf(o, path.string());
    EXPECT_TRUE(s.ok()) << s.error().to_string();
  }
  return path.string();
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

const std::vector<int32_t> kTokens = {1, 40, 300, 77, 12, 499, 260, 8, 100, 33, 5};

class FamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyTest, BatchAndIncrementalLogitsAgree) {
  LoadOptions lo;
  lo.ctx = 64;
  lo.threads = 2;
  auto m = LanguageModel::load(synth_model(GetParam(), "f32"), lo);
  ASSERT_TRUE(m) << m.error().to_string();
  auto batch = (*m)->forward(kTokens, true);
  ASSERT_TRUE(batch) << batch.error().to_string();
  (*m)->reset();
  std::vector<float> inc;
  for (int32_t t : kTokens) {
    auto r = (*m)->forward(std::span<const int32_t>(&t, 1), true);
    ASSERT_TRUE(r) << r.error().to_string();
    inc.insert(inc.end(), r->begin(), r->end());
  }
  EXPECT_LT(max_abs_diff(*batch, inc), 1e-4);
  // Last-row logits equal the last row of the full output.
  (*m)->reset();
  auto last = (*m)->forward(kTokens, false);
  ASSERT_TRUE(last);
  const std::vector<float> tail(batch->end() - static_cast<std::ptrdiff_t>(last->size()), batch->end());
  EXPECT_LT(max_abs_diff(*last, tail), 1e-5);
}

TEST_P(FamilyTest, PaddedPrefillEqualsUnpadded) {
  const std::string path = synth_model(GetParam(), "f32");
  const std::vector<int32_t> eight(kTokens.begin(), kTokens.begin() + 8);
  LoadOptions exact;
  exact.ctx = 64;
  exact.min_bucket = 8;  // bucket == 8 rows: no padding
  LoadOptions padded = exact;
  padded.min_bucket = 32;  // 24 padded rows, masked by the active extent
  auto a = LanguageModel::load(path, exact);
  auto b = LanguageModel::load(path, padded);
  ASSERT_TRUE(a && b);
  auto la = (*a)->forward(eight, true);
  auto lb = (*b)->forward(eight, true);
  ASSERT_TRUE(la && lb);
  EXPECT_LT(max_abs_diff(*la, *lb), 1e-5);
}

TEST_P(FamilyTest, HalfPrecisionKvCacheStaysClose) {
  const std::string path = synth_model(GetParam(), "f32");
  LoadOptions f32;
  f32.ctx = 64;
  LoadOptions f16 = f32;
  f16.kv_dtype = ir::DType::F16;
  auto a = LanguageModel::load(path, f32);
  auto b = LanguageModel::load(path, f16);
  ASSERT_TRUE(a && b);
  auto la = (*a)->forward(kTokens, true);
  auto lb = (*b)->forward(kTokens, true);
  ASSERT_TRUE(la && lb) << (lb ? "" : lb.error().to_string());
  const double d = max_abs_diff(*la, *lb);
  EXPECT_LT(d, 1e-2);
  EXPECT_GT(d, 0.0);  // the cache really is rounded
}

TEST_P(FamilyTest, QuantizedCopyStaysClose) {
  const std::string f32 = synth_model(GetParam(), "f32");
  const std::string q8 = (fs::temp_directory_path() / "rlx_models_test" / (GetParam() + "-requant-q8_0.gguf")).string();
  QuantizeOptions qo;
  qo.mix = "q8_0";
  ASSERT_TRUE(quantize_gguf(f32, q8, qo).ok());
  auto file = formats::GgufFile::open(q8);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->find_tensor("blk.0.attn_q.weight")->type, formats::GgmlType::Q8_0);
  EXPECT_EQ(file->find_tensor("blk.0.attn_norm.weight")->type, formats::GgmlType::F32);
  EXPECT_EQ(*file->get_string("tokenizer.ggml.model"), "llama");
  LoadOptions lo;
  lo.ctx = 64;
  auto a = LanguageModel::load(f32, lo);
  auto b = LanguageModel::load(q8, lo);
  ASSERT_TRUE(a && b);
  auto la = (*a)->forward(kTokens, true);
  auto lb = (*b)->forward(kTokens, true);
  ASSERT_TRUE(la && lb);
  double sq = 0;
  for (float v : *la) sq += double(v) * v;
  const double rms = std::sqrt(sq / la->size());
  EXPECT_LT(max_abs_diff(*la, *lb), 0.1 * rms + 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTest, ::testing::Values("llama", "qwen3", "gemma2"),
                         [](const auto& info) { return info.param; });

TEST(LanguageModel, ContextOverflowIsAnError) {
  LoadOptions lo;
  lo.ctx = 8;
  auto m = LanguageModel::load(synth_model("llama", "f32"), lo);
  ASSERT_TRUE(m);
  auto r = (*m)->forward(kTokens, false);  // 11 tokens > 8
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("context overflow"), std::string::npos);
  const int32_t bad = 100000;
  auto r2 = (*m)->forward(std::span<const int32_t>(&bad, 1), false);
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message().find("outside the vocabulary"), std::string::npos);
}

TEST(LanguageModel, MissingFileAndBadOptionsAreErrors) {
  auto m = LanguageModel::load("/nonexistent/model.gguf", LoadOptions{});
  ASSERT_FALSE(m);
  LoadOptions lo;
  lo.ctx = 0;
  EXPECT_FALSE(LanguageModel::load(synth_model("llama", "f32"), lo));
}

TEST(Generate, SameSeedSameText) {
  const std::string path = synth_model("llama", "f32");
  auto tok = load_tokenizer_from_gguf(path);
  ASSERT_TRUE(tok) << tok.error().to_string();
  LoadOptions lo;
  lo.ctx = 128;
  auto m = LanguageModel::load(path, lo);
  ASSERT_TRUE(m);
  GenerateOptions go;
  go.max_tokens = 12;
  go.stop_at_eos = false;
  go.sampling.temperature = 0.9f;
  go.sampling.top_k = 40;
  go.sampling.seed = 1234;
  const auto prompt = (*tok)->encode("Once upon a time", true, false);
  auto a = generate(**m, **tok, prompt, go, nullptr);
  auto b = generate(**m, **tok, prompt, go, nullptr);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->text, b->text);
  EXPECT_EQ(a->tokens.size(), 12u);
  go.sampling.seed = 99;
  auto c = generate(**m, **tok, prompt, go, nullptr);
  ASSERT_TRUE(c);
  EXPECT_NE(a->tokens, c->tokens);
}

TEST(QuantMix, StandardRules) {
  using formats::GgmlType;
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.5.attn_q.weight", 2048, 2048, 5, 16, true), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.0.attn_v.weight", 512, 2048, 0, 16, true), GgmlType::Q6_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.15.ffn_down.weight", 2048, 8192, 15, 16, true), GgmlType::Q6_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.3.ffn_down.weight", 2048, 8192, 3, 16, true), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "token_embd.weight", 32000, 2048, -1, 16, true), GgmlType::Q6_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.0.ffn_down.weight", 64, 172, 0, 5, true), GgmlType::F16);
  EXPECT_EQ(*mix_weight_type("q8_0", "blk.0.attn_norm.weight", 1, 2048, 0, 16, true), GgmlType::F32);
  EXPECT_EQ(*mix_weight_type("q5_k_m", "blk.4.attn_k.weight", 512, 2048, 4, 16, true), GgmlType::Q5_K);
  auto bad = mix_weight_type("q3_x", "w", 2, 256, 0, 1, false);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("q3_x"), std::string::npos);
}

}  // namespace
}  // namespace rlx::models
