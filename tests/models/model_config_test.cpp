// Hostile model configs: every numeric parameter of a GGUF file or a config.json is
// range-checked (NaN included) where it is read, and a value of the wrong JSON type is
// an error naming the key, never a silent default. Each file is written by the test.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/models/model_config.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using formats::GgufWriter;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / "rlx_model_config_test";
  fs::create_directories(dir);
  return dir;
}

std::string error_of(const Expected<ModelConfig>& c) { return c ? std::string("ok") : c.error().to_string(); }

// The metadata of a small llama (dim 64, 4 heads, 1 layer); `extra` adds or overrides keys.
Expected<ModelConfig> gguf_config(const std::string& name, const std::function<void(GgufWriter&)>& extra) {
  GgufWriter w;
  EXPECT_TRUE(w.add_string("general.architecture", "llama").ok());
  EXPECT_TRUE(w.add_u32("llama.embedding_length", 64).ok());
  EXPECT_TRUE(w.add_u32("llama.block_count", 1).ok());
  EXPECT_TRUE(w.add_u32("llama.attention.head_count", 4).ok());
  EXPECT_TRUE(w.add_u32("llama.feed_forward_length", 32).ok());
  EXPECT_TRUE(w.add_u32("llama.vocab_size", 32).ok());
  extra(w);
  const std::string path = (temp_dir() / (name + ".gguf")).string();
  EXPECT_TRUE(w.write_file(path).ok());
  ASSIGN_OR_RETURN(formats::GgufFile f, formats::GgufFile::open(path));
  return config_from_gguf(f);
}

// A small llama config.json; `extra` is spliced in as further top-level members (later
// duplicates of a key win in nlohmann::json, so `extra` may override the defaults).
Expected<ModelConfig> hf_config(const std::string& name, const std::string& extra,
                                const std::string& model_type = "llama") {
  const fs::path dir = temp_dir() / name;
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": ")" << model_type << R"(", "vocab_size": 32,
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 32)"
                                     << (extra.empty() ? "" : ", ") << extra << "}";
  return config_from_hf((dir / "config.json").string());
}

void expect_error(const Expected<ModelConfig>& c, const std::string& needle) {
  EXPECT_FALSE(c) << "accepted; wanted an error with '" << needle << "'";
  EXPECT_NE(error_of(c).find(needle), std::string::npos) << error_of(c);
}

TEST(ModelConfigHostile, GgufRopeThetaAndEps) {
  ASSERT_TRUE(gguf_config("ok", [](GgufWriter&) {})) << error_of(gguf_config("ok", [](GgufWriter&) {}));
  for (float theta : {-1.0f, 0.0f, kNaN}) {
    auto c = gguf_config("theta", [&](GgufWriter& w) { EXPECT_TRUE(w.add_f32("llama.rope.freq_base", theta).ok()); });
    expect_error(c, "rope theta");
  }
  for (float eps : {-1e-5f, kNaN}) {
    auto c = gguf_config("eps", [&](GgufWriter& w) {
      EXPECT_TRUE(w.add_f32("llama.attention.layer_norm_rms_epsilon", eps).ok());
    });
    expect_error(c, "norm eps");
  }
  expect_error(gguf_config("kv3", [](GgufWriter& w) { EXPECT_TRUE(w.add_u32("llama.attention.head_count_kv", 3).ok()); }),
               "n_head_kv");
  expect_error(gguf_config("kv0", [](GgufWriter& w) { EXPECT_TRUE(w.add_u32("llama.attention.head_count_kv", 0).ok()); }),
               "n_head_kv must be positive");
  expect_error(gguf_config("swa", [](GgufWriter& w) { EXPECT_TRUE(w.add_i32("llama.attention.sliding_window", -4).ok()); }),
               "sliding_window");
  expect_error(gguf_config("linear0", [](GgufWriter& w) {
                 EXPECT_TRUE(w.add_string("llama.rope.scaling.type", "linear").ok());
                 EXPECT_TRUE(w.add_f32("llama.rope.scaling.factor", 0.0f).ok());
               }),
               "positive factor");
}

TEST(ModelConfigHostile, HfRanges) {
  ASSERT_TRUE(hf_config("ok", "")) << error_of(hf_config("ok", ""));
  expect_error(hf_config("theta0", R"("rope_theta": 0)"), "rope theta");
  expect_error(hf_config("theta_neg", R"("rope_theta": -10000.0)"), "rope theta");
  expect_error(hf_config("eps_neg", R"("rms_norm_eps": -1e-6)"), "norm eps");
  expect_error(hf_config("factor0", R"("rope_scaling": {"rope_type": "linear", "factor": 0})"), "positive factor");
  expect_error(hf_config("factor_neg", R"("rope_scaling": {"rope_type": "linear", "factor": -2})"), "positive factor");
  expect_error(hf_config("heads", R"("num_key_value_heads": 3)"), "n_head_kv");
  expect_error(hf_config("head_dim0", R"("head_dim": 0)"), "head_dim must be positive");
  expect_error(hf_config("swa_neg", R"("sliding_window": -1)", "mistral"), "sliding_window");
  expect_error(hf_config("softcap", R"("attn_logit_softcapping": -50.0)", "gemma2"), "attn_softcap");
  expect_error(hf_config("final_softcap", R"("final_logit_softcapping": -30.0)", "gemma2"), "final_softcap");
  expect_error(hf_config("local_theta", R"("rope_local_base_freq": -1)", "gemma3_text"), "rope_theta_local");
}

// A value of the wrong JSON type is an error naming the key, not the default.
TEST(ModelConfigHostile, HfStrictTypes) {
  expect_error(hf_config("swa_str", R"("sliding_window": "8")", "mistral"), "'sliding_window' must be an integer");
  expect_error(hf_config("eps_str", R"("rms_norm_eps": "1e-6")"), "'rms_norm_eps' must be a number");
  expect_error(hf_config("tie_str", R"("tie_word_embeddings": "true")"), "'tie_word_embeddings' must be true or false");
  expect_error(hf_config("theta_str", R"("rope_theta": "10000")"), "'rope_theta' must be a number");
  expect_error(hf_config("kv_frac", R"("num_key_value_heads": 1.5)"), "'num_key_value_heads' must be an integer");
  expect_error(hf_config("vocab_big", R"("vocab_size": 18446744073709551615)"), "'vocab_size' is out of range");
  expect_error(hf_config("bias_num", R"("attention_bias": 1)"), "'attention_bias' must be true or false");
  expect_error(hf_config("eos_str", R"("eos_token_id": "2")"), "'eos_token_id' must be an integer");
  expect_error(hf_config("layer_int", R"("sliding_window": 4, "layer_types": [0, 1])", "gemma3_text"),
               "layer_types[0]");
  expect_error(hf_config("layer_obj", R"("layer_types": {"a": 1})", "gemma3_text"), "'layer_types' must be an array");
  expect_error(hf_config("local_str", R"("rope_local_base_freq": "10000")", "gemma3_text"),
               "'rope_local_base_freq' must be a number");
  expect_error(hf_config("pre_attn", R"("query_pre_attn_scalar": -256)", "gemma2"), "query_pre_attn_scalar");
  expect_error(hf_config("pre_attn_str", R"("query_pre_attn_scalar": "256")", "gemma2"), "query_pre_attn_scalar");
  expect_error(hf_config("scaling_str", R"("rope_scaling": "linear")"), "rope parameters must be an object");
  expect_error(hf_config("rope_type_num", R"("rope_scaling": {"rope_type": 3, "factor": 2})"),
               "rope 'rope_type' must be a string");
  expect_error(hf_config("local_theta0", R"("rope_parameters": {"full_attention": {"rope_theta": 1e6},
    "sliding_attention": {"rope_theta": 0}})", "gemma3_text"), "rope theta");
  // What stays accepted: nulls, integral floats, a list of eos ids (Llama 3).
  auto c = hf_config("lenient", R"("sliding_window": null, "rope_scaling": null, "max_position_embeddings": 4096.0,
    "eos_token_id": [5, 6], "bos_token_id": null)");
  ASSERT_TRUE(c) << error_of(c);
  EXPECT_EQ(c->n_ctx_train, 4096);
  EXPECT_EQ(c->eos_id, 5);
  EXPECT_EQ(c->bos_id, -1);
  EXPECT_EQ(c->sliding_window, 0);
  auto g3 = hf_config("g3_layers", R"("sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"])",
                      "gemma3_text");
  ASSERT_TRUE(g3) << error_of(g3);
  EXPECT_TRUE(g3->layer_is_sliding(0));
  EXPECT_FALSE(g3->layer_is_sliding(1));
}

// What JSON cannot spell (NaN, infinity) still reaches ModelConfig through code; validate
// catches it for every floating-point field.
TEST(ModelConfigHostile, ValidateRejectsNaN) {
  ModelConfig ok;
  ok.n_vocab = 32;
  ok.n_embd = 64;
  ok.n_layer = 1;
  ok.n_head = 4;
  ok.n_head_kv = 4;
  ok.head_dim = 16;
  ok.n_ff = 32;
  ok.rope.head_dim = ok.rope.n_rot = 16;
  ASSERT_TRUE(ok.validate().ok()) << ok.validate().error().to_string();
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  auto fails = [&](const std::function<void(ModelConfig&)>& edit, const std::string& needle) {
    ModelConfig c = ok;
    edit(c);
    Status s = c.validate();
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.error().to_string().find(needle), std::string::npos) << s.error().to_string();
  };
  fails([&](ModelConfig& c) { c.norm_eps = nan; }, "norm eps");
  fails([&](ModelConfig& c) { c.norm_eps = inf; }, "norm eps");
  fails([&](ModelConfig& c) { c.rope.theta = nan; }, "rope theta");
  fails([&](ModelConfig& c) { c.rope.theta = inf; }, "rope theta");
  fails([&](ModelConfig& c) {
    c.rope.scaling = ir::RopeScaling::Linear;
    c.rope.factor = nan;
  }, "positive factor");
  fails([&](ModelConfig& c) { c.rope.attn_factor = nan; }, "attn_factor");
  fails([&](ModelConfig& c) { c.rope_theta_local = nan; }, "rope_theta_local");
  fails([&](ModelConfig& c) { c.attn_softcap = nan; }, "attn_softcap");
  fails([&](ModelConfig& c) { c.final_softcap = nan; }, "final_softcap");
  fails([&](ModelConfig& c) { c.attn_scale = nan; }, "attn_scale");
  fails([&](ModelConfig& c) { c.rope_long_factors.assign(8, nan); }, "rope long factor");
  fails([&](ModelConfig& c) { c.n_head_kv = 8; }, "n_head");
  fails([&](ModelConfig& c) { c.n_head = 1 << 20; }, "implausible");
  fails([&](ModelConfig& c) { c.sliding_window = -1; }, "sliding_window");
}

// The keys one family reads that llama.cpp's converters write: the rope sections of
// qwen35 (text tokens turn every pair with their position only when the three sections
// cover all of them), the sliding layers' base of gemma3, an explicit attention scale,
// and the exact-GELU mark of `rlx convert`.
Expected<ModelConfig> family_config(const std::string& name, const std::string& arch,
                                    const std::function<void(GgufWriter&)>& extra) {
  GgufWriter w;
  auto u32 = [&](const std::string& key, uint32_t v) { EXPECT_TRUE(w.add_u32(arch + "." + key, v).ok()); };
  EXPECT_TRUE(w.add_string("general.architecture", arch).ok());
  u32("embedding_length", 64);
  u32("block_count", 2);
  u32("attention.head_count", 4);
  u32("attention.head_count_kv", 2);
  u32("attention.key_length", 16);
  u32("feed_forward_length", 32);
  u32("vocab_size", 32);
  if (arch == "qwen35") {
    u32("rope.dimension_count", 16);  // 8 rotary pairs
    u32("full_attention_interval", 2);
    u32("ssm.conv_kernel", 4);
    u32("ssm.state_size", 16);
    u32("ssm.group_count", 2);
    u32("ssm.time_step_rank", 4);
    u32("ssm.inner_size", 64);
  }
  extra(w);
  const std::string path = (temp_dir() / (name + ".gguf")).string();
  EXPECT_TRUE(w.write_file(path).ok());
  ASSIGN_OR_RETURN(formats::GgufFile f, formats::GgufFile::open(path));
  return config_from_gguf(f);
}

TEST(GgufFamilyKeys, Qwen35RopeSectionsMustCoverEveryPair) {
  auto sections = [](std::vector<int32_t> v) {
    return [v](GgufWriter& w) { EXPECT_TRUE(w.add_i32_array("qwen35.rope.dimension_sections", v).ok()); };
  };
  EXPECT_TRUE(family_config("q35_none", "qwen35", [](GgufWriter&) {}));
  EXPECT_TRUE(family_config("q35_tight", "qwen35", sections({3, 3, 2, 0}))) << "pairs 0..7: t 0,3,6; h 1,4,7; w 2,5";
  EXPECT_TRUE(family_config("q35_wide", "qwen35", sections({11, 11, 10, 0})));
  expect_error(family_config("q35_short", "qwen35", sections({2, 3, 2, 0})),
               "leaves rotary pair 6 of 8 to the fourth position component");
  expect_error(family_config("q35_few", "qwen35", sections({3, 3})), "has 2 entries");
  expect_error(family_config("q35_negative", "qwen35", sections({-1, 3, 3, 0})), "entry 0 is -1");
  expect_error(family_config("q35_type", "qwen35", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_f32_array("qwen35.rope.dimension_sections", {3, 3, 2, 0}).ok());
  }), "must be an array of integers");
  // Another family does not read the key, so it is refused rather than ignored.
  expect_error(family_config("llama_sections", "llama", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_i32_array("llama.rope.dimension_sections", {3, 3, 2, 0}).ok());
  }), "rope key 'llama.rope.dimension_sections' is not supported");
}

TEST(GgufFamilyKeys, Gemma3LocalBaseAttentionScaleAndExactGelu) {
  auto g3 = family_config("gemma3_keys", "gemma3", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_f32("gemma3.rope.freq_base_swa", 500.0f).ok());
    EXPECT_TRUE(w.add_f32("gemma3.attention.scale", 0.125f).ok());
  });
  ASSERT_TRUE(g3) << error_of(g3);
  EXPECT_EQ(g3->rope_theta_local, 500.0);
  EXPECT_EQ(g3->attn_scale, 0.125);
  EXPECT_TRUE(g3->gelu_f16_rounding);  // llama.cpp's f16 GELU table, unless the file says otherwise
  auto plain = family_config("gemma3_plain", "gemma3", [](GgufWriter&) {});
  ASSERT_TRUE(plain) << error_of(plain);
  EXPECT_EQ(plain->rope_theta_local, 10000.0);
  EXPECT_EQ(plain->attn_scale, 0.0);
  auto exact = family_config("gemma3_exact", "gemma3", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_bool(kGgufExactGeluKey, true).ok());
  });
  ASSERT_TRUE(exact) << error_of(exact);
  EXPECT_FALSE(exact->gelu_f16_rounding);
  expect_error(family_config("gemma3_nan_scale", "gemma3", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_f32("gemma3.attention.scale", kNaN).ok());
  }), "attn_scale");
  // The sliding layers' base is a gemma3 / modern-bert key; for llama it is refused.
  expect_error(family_config("llama_swa_base", "llama", [](GgufWriter& w) {
    EXPECT_TRUE(w.add_f32("llama.rope.freq_base_swa", 500.0f).ok());
  }), "rope key 'llama.rope.freq_base_swa' is not supported");
}

}  // namespace
}  // namespace rlx::models
