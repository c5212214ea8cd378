// Rope settings from model files: GGUF rope keys and factor tensors (rope_freqs,
// LongRoPE's short / long pair), HF rope_scaling objects (yarn, longrope), the errors for
// what RLX cannot honour, and the warning for tensors a model does not read. Every file
// here is a tiny llama written by the test itself.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <type_traits>

#include "models/rope_config.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/models/language_model.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using formats::GgmlType;
using formats::GgufWriter;

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / "rlx_rope_config_test";
  fs::create_directories(dir);
  return dir;
}

// A one-layer llama (dim 16, 2 heads of 8, ffn 32, vocab 32) with seeded weights; `extra`
// adds keys and tensors. Returns the path.
std::string write_tiny(const std::string& name, const std::function<void(GgufWriter&)>& extra = {}) {
  GgufWriter w;
  EXPECT_TRUE(w.add_string("general.architecture", "llama").ok());
  EXPECT_TRUE(w.add_u32("llama.embedding_length", 16).ok());
  EXPECT_TRUE(w.add_u32("llama.block_count", 1).ok());
  EXPECT_TRUE(w.add_u32("llama.attention.head_count", 2).ok());
  EXPECT_TRUE(w.add_u32("llama.attention.head_count_kv", 2).ok());
  EXPECT_TRUE(w.add_u32("llama.feed_forward_length", 32).ok());
  EXPECT_TRUE(w.add_u32("llama.context_length", 128).ok());
  EXPECT_TRUE(w.add_u32("llama.rope.dimension_count", 8).ok());
  EXPECT_TRUE(w.add_u32("llama.vocab_size", 32).ok());
  uint32_t seed = 1;
  auto tensor = [&](const std::string& n, std::vector<int64_t> dims, bool norm) {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) {
      seed = seed * 1664525u + 1013904223u;
      const float u = static_cast<float>(seed >> 8) / 16777216.0f - 0.5f;
      x = norm ? 1.0f + 0.1f * u : 0.6f * u;
    }
    EXPECT_TRUE(w.add_tensor_f32(n, GgmlType::F32, std::move(dims), v).ok()) << n;
  };
  tensor("token_embd.weight", {16, 32}, false);
  tensor("blk.0.attn_norm.weight", {16}, true);
  tensor("blk.0.attn_q.weight", {16, 16}, false);
  tensor("blk.0.attn_k.weight", {16, 16}, false);
  tensor("blk.0.attn_v.weight", {16, 16}, false);
  tensor("blk.0.attn_output.weight", {16, 16}, false);
  tensor("blk.0.ffn_norm.weight", {16}, true);
  tensor("blk.0.ffn_gate.weight", {16, 32}, false);
  tensor("blk.0.ffn_up.weight", {16, 32}, false);
  tensor("blk.0.ffn_down.weight", {32, 16}, false);
  tensor("output_norm.weight", {16}, true);
  if (extra) extra(w);
  const std::string path = (temp_dir() / (name + ".gguf")).string();
  EXPECT_TRUE(w.write_file(path).ok());
  return path;
}

void add_factors(GgufWriter& w, const std::string& name, const std::vector<float>& f) {
  EXPECT_TRUE(w.add_tensor_f32(name, GgmlType::F32, {static_cast<int64_t>(f.size())}, f).ok());
}

Expected<ModelConfig> gguf_config(const std::string& path) {
  ASSIGN_OR_RETURN(formats::GgufFile f, formats::GgufFile::open(path));
  return config_from_gguf(f);
}

std::string error_of(const Expected<ModelConfig>& c) { return c ? std::string("ok") : c.error().to_string(); }

std::vector<float> logits_of(const std::string& path, int64_t ctx = 64) {
  LoadOptions lo;
  lo.ctx = ctx;
  lo.threads = 1;
  auto m = LanguageModel::load(path, lo);
  EXPECT_TRUE(m) << m.error().to_string();
  if (!m) return {};
  const std::vector<int32_t> tokens = {1, 7, 3, 30, 12, 5, 9, 21, 17, 2, 11, 4};
  auto l = (*m)->forward(tokens, true);
  EXPECT_TRUE(l) << l.error().to_string();
  return l ? *l : std::vector<float>{};
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

// rope_freqs.weight divides each pair's frequency: all-ones factors change nothing,
// others change the logits (this file had them ignored before).
TEST(GgufRope, RopeFreqsTensorIsRead) {
  const std::string plain = write_tiny("plain");
  const std::string ones = write_tiny("ones", [](GgufWriter& w) { add_factors(w, "rope_freqs.weight", {1, 1, 1, 1}); });
  const std::string scaled =
      write_tiny("scaled", [](GgufWriter& w) { add_factors(w, "rope_freqs.weight", {1, 1.5, 8, 32}); });
  auto c = gguf_config(scaled);
  ASSERT_TRUE(c) << error_of(c);
  EXPECT_EQ(c->rope.freq_factors, (std::vector<double>{1, 1.5, 8, 32}));
  EXPECT_EQ(c->rope.scaling, ir::RopeScaling::None);
  const auto base = logits_of(plain);
  EXPECT_LT(max_diff(logits_of(ones), base), 1e-6);
  EXPECT_GT(max_diff(logits_of(scaled), base), 1e-3);
}

TEST(GgufRope, YarnKeys) {
  auto c = gguf_config(write_tiny("yarn", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_string("llama.rope.scaling.type", "yarn").ok());
    EXPECT_TRUE(w.add_f32("llama.rope.scaling.factor", 4.0f).ok());
    EXPECT_TRUE(w.add_u32("llama.rope.scaling.original_context_length", 64).ok());
  }));
  ASSERT_TRUE(c) << error_of(c);
  EXPECT_EQ(c->rope.scaling, ir::RopeScaling::Yarn);
  EXPECT_EQ(c->rope.factor, 4.0);
  EXPECT_EQ(c->rope.original_context, 64);
  EXPECT_EQ(c->rope.beta_fast, 32.0);
  EXPECT_EQ(c->rope.beta_slow, 1.0);
  EXPECT_NEAR(c->rope.attn_factor, 1.138629436111989, 1e-12);  // 0.1 ln 4 + 1

  auto tuned = gguf_config(write_tiny("yarn_tuned", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_string("llama.rope.scaling.type", "yarn").ok());
    EXPECT_TRUE(w.add_f32("llama.rope.scaling.factor", 4.0f).ok());
    EXPECT_TRUE(w.add_f32("llama.rope.scaling.yarn_attn_factor", 0.5f).ok());
    EXPECT_TRUE(w.add_f32("llama.rope.scaling.yarn_beta_fast", 16.0f).ok());
    EXPECT_TRUE(w.add_f32("llama.rope.scaling.yarn_ext_factor", 0.0f).ok());
  }));
  ASSERT_TRUE(tuned) << error_of(tuned);
  EXPECT_EQ(tuned->rope.original_context, 128);  // context_length when the key is absent
  EXPECT_EQ(tuned->rope.beta_fast, 16.0);
  EXPECT_EQ(tuned->rope.ext_factor, 0.0);
  EXPECT_EQ(tuned->rope.attn_factor, 0.5);  // no extrapolation: no magnitude growth
  // And the model runs with it (the yarn table on the CPU backend).
  EXPECT_GT(max_diff(logits_of(write_tiny("yarn_run", [](GgufWriter& w) {
              EXPECT_TRUE(w.add_string("llama.rope.scaling.type", "yarn").ok());
              EXPECT_TRUE(w.add_f32("llama.rope.scaling.factor", 4.0f).ok());
              EXPECT_TRUE(w.add_u32("llama.rope.scaling.original_context_length", 4).ok());
            })),
                     logits_of(write_tiny("plain"))),
            1e-3);
}

// LongRoPE (Phi-3): short factors up to the original context, long ones beyond, chosen
// by the context the model is built for; the attention factor key scales the pairs.
TEST(GgufRope, LongRopePicksFactorsByContext) {
  const std::string path = write_tiny("longrope", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_u32("llama.rope.scaling.original_context_length", 32).ok());
    EXPECT_TRUE(w.add_f32("llama.rope.scaling.attn_factor", 1.19f).ok());
    add_factors(w, "rope_factors_short.weight", {1, 1.25, 1.5, 2});
    add_factors(w, "rope_factors_long.weight", {1, 4, 16, 64});
  });
  auto c = gguf_config(path);
  ASSERT_TRUE(c) << error_of(c);
  EXPECT_EQ(c->rope.freq_factors, (std::vector<double>{1, 1.25, 1.5, 2}));
  EXPECT_EQ(c->rope_long_factors, (std::vector<double>{1, 4, 16, 64}));
  EXPECT_NEAR(c->rope.attn_factor, 1.19, 1e-6);
  EXPECT_EQ(c->rope_for_context(32).freq_factors, c->rope.freq_factors);
  EXPECT_EQ(c->rope_for_context(33).freq_factors, c->rope_long_factors);
  // The same tokens in a model built for a long context rotate by the long factors.
  EXPECT_GT(max_diff(logits_of(path, 32), logits_of(path, 64)), 1e-3);
}

TEST(GgufRope, WhatCannotBeHonouredIsAnErrorNamingIt) {
  auto expect_error = [](const std::string& name, const std::function<void(GgufWriter&)>& extra,
                         const std::string& want) {
    auto c = gguf_config(write_tiny(name, extra));
    EXPECT_NE(error_of(c).find(want), std::string::npos) << name << ": " << error_of(c);
  };
  auto key = [](const char* k, auto v) {
    return [k, v](GgufWriter& w) {
      if constexpr (std::is_same_v<decltype(v), uint32_t>) {
        EXPECT_TRUE(w.add_u32(k, v).ok());
      } else {
        EXPECT_TRUE(w.add_string(k, v).ok());
      }
    };
  };
  expect_error("unknown_key", key("llama.rope.dimension_sections", uint32_t{3}),
               "rope key 'llama.rope.dimension_sections' is not supported");
  expect_error("llama3_type", key("llama.rope.scaling.type", "llama3"), "'llama.rope.scaling.type' is 'llama3'");
  expect_error("yarn_no_factor", key("llama.rope.scaling.type", "yarn"), "needs 'llama.rope.scaling.factor'");
  expect_error("factor_text", key("llama.rope.scaling.factor", "8"), "'llama.rope.scaling.factor' is not a number");
  expect_error("freqs_short", [](GgufWriter& w) { add_factors(w, "rope_freqs.weight", {1, 2, 4}); },
               "'rope_freqs.weight' must hold 4 factors");
  expect_error("freqs_zero", [](GgufWriter& w) { add_factors(w, "rope_freqs.weight", {1, 0, 4, 8}); },
               "'rope_freqs.weight' factor 1 is 0");
  expect_error("freqs_q8", [](GgufWriter& w) {
    std::vector<float> v(32, 1.0f);
    EXPECT_TRUE(w.add_tensor_f32("rope_freqs.weight", GgmlType::Q8_0, {32}, v).ok());
  }, "'rope_freqs.weight' must hold 4 factors");
  expect_error("long_only", [](GgufWriter& w) { add_factors(w, "rope_factors_long.weight", {1, 2, 4, 8}); },
               "only one of rope_factors_short.weight and rope_factors_long.weight");
  expect_error("longrope_no_tensors", key("llama.rope.scaling.type", "longrope"),
               "needs the tensors rope_factors_short.weight");
  expect_error("orig_ctx_huge", key("llama.rope.scaling.original_context_length", uint32_t{4000000000u}),
               "'llama.rope.scaling.original_context_length' 4000000000 is outside [0, 2^31] positions");
}

// A stored tensor the model does not read is named in a warning (and listed); rope
// factors read into the config are not.
TEST(GgufRope, UnusedTensorIsNamedInAWarning) {
  const std::string path = write_tiny("unused", [](GgufWriter& w) {
    add_factors(w, "rope_freqs.weight", {1, 1, 2, 4});
    add_factors(w, "blk.0.attn_mystery.weight", {1, 2, 3});
  });
  LoadOptions lo;
  lo.ctx = 32;
  lo.threads = 1;
  testing::internal::CaptureStderr();
  auto m = LanguageModel::load(path, lo);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ((*m)->unused_tensors(), (std::vector<std::string>{"blk.0.attn_mystery.weight"}));
  EXPECT_NE(err.find("tensor 'blk.0.attn_mystery.weight' is not used"), std::string::npos) << err;
  EXPECT_EQ(err.find("rope_freqs"), std::string::npos) << err;

  auto clean = LanguageModel::load(write_tiny("clean"), lo);
  ASSERT_TRUE(clean) << clean.error().to_string();
  EXPECT_TRUE((*clean)->unused_tensors().empty());
}

// HF config.json rope objects.
Expected<ModelConfig> hf_config(const std::string& name, const std::string& rope_json,
                                const std::string& extra_top = "") {
  const fs::path dir = temp_dir() / name;
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "vocab_size": 32, "hidden_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 32, "max_position_embeddings": 131072,
    "rope_theta": 10000.0, )" << extra_top
                                     << R"("rope_scaling": )" << rope_json << "}";
  return config_from_hf((dir / "config.json").string());
}

TEST(HfRope, Yarn) {
  auto c = hf_config("yarn", R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
  ASSERT_TRUE(c) << error_of(c);
  EXPECT_EQ(c->rope.scaling, ir::RopeScaling::Yarn);
  EXPECT_EQ(c->rope.original_context, 32768);
  EXPECT_NEAR(c->rope.attn_factor, 1.138629436111989, 1e-12);
  // DeepSeek-style mscale / mscale_all_dim: (0.1·1·ln 40 + 1) / (0.1·0.707·ln 40 + 1).
  auto ds = hf_config("yarn_ds", R"({"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 0.707,
    "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1})");
  ASSERT_TRUE(ds) << error_of(ds);
  EXPECT_NEAR(ds->rope.attn_factor, (0.1 * std::log(40.0) + 1) / (0.1 * 0.707 * std::log(40.0) + 1), 1e-12);
  auto given = hf_config("yarn_af", R"({"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.8})");
  ASSERT_TRUE(given) << error_of(given);
  EXPECT_EQ(given->rope.attn_factor, 0.8);
  EXPECT_EQ(given->rope.original_context, 131072);  // max_position_embeddings when not given
  EXPECT_NE(error_of(hf_config("yarn_trunc", R"({"rope_type": "yarn", "factor": 4.0, "truncate": false})"))
                .find("'truncate': false"),
            std::string::npos);
  EXPECT_NE(error_of(hf_config("yarn_nofactor", R"({"rope_type": "yarn"})")).find("needs 'factor'"),
            std::string::npos);
}

// LongRoPE: factor = max / original positions = 32, attention factor sqrt(1 + ln 32 /
// ln 4096) = sqrt(17/12).
TEST(HfRope, LongRope) {
  auto c = hf_config("longrope", R"({"type": "longrope", "short_factor": [1, 1, 1.5, 2, 2, 3, 3, 4],
    "long_factor": [1, 2, 4, 8, 16, 16, 32, 32]})", R"("original_max_position_embeddings": 4096, )");
  ASSERT_TRUE(c) << error_of(c);
  EXPECT_EQ(c->rope.scaling, ir::RopeScaling::None);
  EXPECT_EQ(c->rope.original_context, 4096);
  EXPECT_EQ(c->rope.freq_factors, (std::vector<double>{1, 1, 1.5, 2, 2, 3, 3, 4}));
  EXPECT_EQ(c->rope_long_factors, (std::vector<double>{1, 2, 4, 8, 16, 16, 32, 32}));
  EXPECT_NEAR(c->rope.attn_factor, std::sqrt(17.0 / 12.0), 1e-12);
  EXPECT_NEAR(detail::longrope_mscale(32, 4096), 1.1902380714238083, 1e-12);
  auto bad = hf_config("longrope_bad", R"({"type": "longrope", "short_factor": [1, 2], "long_factor": [1, 2]})",
                       R"("original_max_position_embeddings": 4096, )");
  EXPECT_NE(error_of(bad).find("'short_factor' has 2 factors, the rotary dims need 8"), std::string::npos)
      << error_of(bad);
  EXPECT_NE(error_of(hf_config("longrope_noorig", R"({"type": "longrope", "short_factor": [], "long_factor": []})"))
                .find("needs 'original_max_position_embeddings'"),
            std::string::npos);
  // A context length that no int64 holds (found by rlx_fuzz_hf_config), in each place it is read.
  const std::string huge = "1.7e127";
  EXPECT_NE(error_of(hf_config("longrope_huge", R"({"type": "longrope", "short_factor": [], "long_factor": []})",
                               R"("original_max_position_embeddings": )" + huge + ", "))
                .find("'original_max_position_embeddings' 1.7e+127 is outside [0, 2^31] positions"),
            std::string::npos);
  EXPECT_NE(error_of(hf_config("yarn_huge", R"({"rope_type": "yarn", "factor": 4.0,
    "original_max_position_embeddings": -5})")).find("is outside [0, 2^31] positions"),
            std::string::npos);
  EXPECT_NE(error_of(hf_config("llama3_huge", R"({"rope_type": "llama3", "factor": 8.0,
    "original_max_position_embeddings": 1e300})")).find("is outside [0, 2^31] positions"),
            std::string::npos);
  EXPECT_NE(error_of(hf_config("dynamic", R"({"type": "dynamic", "factor": 2})")).find("rope type 'dynamic'"),
            std::string::npos);
  EXPECT_NE(error_of(hf_config("mrope", R"({"type": "default", "mrope_section": [16, 24, 24]})"))
                .find("rope parameter 'mrope_section' is not supported"),
            std::string::npos);
}

}  // namespace
}  // namespace rlx::models
