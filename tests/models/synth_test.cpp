// rlx synth: every preset's vocabulary has unique pieces and valid token types; the
// llama-3.2-1b preset is laid out like a Llama 3.2 1B GGUF from llama.cpp's converter
// (the keys, tensors and shapes listed below, taken from such a file); a written file
// holds exactly its layout; the Llama 3 vocabulary builds a working byte-level BPE
// tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "models/synth_vocab.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/model_config.h"
#include "rlx/models/synth.h"
#include "rlx/models/tokenizer.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

TEST(Synth, EveryPresetHasUniquePiecesAndValidTypes) {
  const std::map<std::string, std::string> family = {{"llama-3.2-1b", "llama"}, {"llama-3-8b", "llama"}, {"qwen3-0.6b", "qwen3"},
                                                     {"gemma-2-2b", "gemma2"}, {"qwen3-30b-a3b-4l", "qwen3moe"}, {"moe-tiny", "qwen3moe"},
                                                     {"bert-base", "bert"},     {"bert-tiny", "bert"},
                                                     {"qwen35-hybrid-8l", "qwen35"}, {"qwen35-tiny", "qwen35"}};
  for (const std::string arch : {"", "llama", "qwen3", "gemma2", "qwen3moe", "bert", "qwen35"})
    for (const std::string& preset : synth_presets()) {
      SynthOptions o;
      o.arch = arch;
      o.preset = preset;
      auto l = synth_layout(o);
      const bool generic = preset == "tiny" || preset == "tiny-untied" || preset == "tiny-256";  // any family's shapes
      if (!arch.empty() && !generic && family.at(preset) != arch) {
        ASSERT_FALSE(l) << arch << " " << preset;  // a real model's preset takes only its own family
        EXPECT_NE(l.error().to_string().find("does not fit it"), std::string::npos) << l.error().to_string();
        continue;
      }
      if (arch == "bert" && generic) {  // an encoder needs an encoder preset
        ASSERT_FALSE(l);
        EXPECT_NE(l.error().to_string().find("needs an encoder preset"), std::string::npos) << l.error().to_string();
        continue;
      }
      if (arch == "qwen35" && generic) {  // a hybrid needs its delta-net shapes
        ASSERT_FALSE(l);
        EXPECT_NE(l.error().to_string().find("needs a hybrid preset"), std::string::npos) << l.error().to_string();
        continue;
      }
      if (arch == "qwen3moe" && generic) {  // experts need a MoE preset
        ASSERT_FALSE(l);
        EXPECT_NE(l.error().to_string().find("mixture-of-experts preset"), std::string::npos) << l.error().to_string();
        continue;
      }
      ASSERT_TRUE(l) << l.error().to_string();
      std::set<std::string> seen;
      for (size_t i = 0; i < l->tokens.size(); ++i)
        ASSERT_TRUE(seen.insert(l->tokens[i]).second)
            << arch << " " << preset << ": piece '" << l->tokens[i] << "' repeats at id " << i;
    }
  for (int64_t n : {int64_t{300}, int64_t{1024}, int64_t{30522}}) {  // WordPiece: specials, pieces, unused fill
    const detail::SynthVocab v = detail::make_wordpiece_vocab(n);
    ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n);
    ASSERT_EQ(v.types.size(), v.tokens.size());
    EXPECT_EQ(v.tokens[static_cast<size_t>(v.cls)], "[CLS]");
    EXPECT_EQ(v.tokens[static_cast<size_t>(v.sep)], "[SEP]");
    for (int32_t t : v.types) EXPECT_TRUE(t == 1 || t == 2 || t == 3 || t == 5) << t;
  }
  for (int64_t n : {int64_t{300}, int64_t{512}, int64_t{32000}}) {
    const detail::SynthVocab v = detail::make_spm_vocab(n);
    ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n);
    ASSERT_EQ(v.types.size(), v.tokens.size());
    ASSERT_EQ(v.scores.size(), v.tokens.size());
    for (int32_t t : v.types) EXPECT_TRUE(t == 1 || t == 2 || t == 3 || t == 6) << t;
    for (size_t i = 1; i < v.scores.size(); ++i)
      if (v.types[i] == 1 && v.types[i - 1] == 1) {
        EXPECT_LT(v.scores[i], v.scores[i - 1]) << "id " << i;
      }
  }
}

// The MoE preset: llama.cpp's qwen3moe keys and tensor names, stacked experts with
// GGUF dims [cols, rows, experts], the router left in f32.
TEST(Synth, MoePresetHasStackedExperts) {
  SynthOptions o;
  o.preset = "qwen3-30b-a3b-4l";
  o.type = "q4_k_m";
  auto l = synth_layout(o);
  ASSERT_TRUE(l) << l.error().to_string();
  for (const char* key : {"qwen3moe.expert_count", "qwen3moe.expert_used_count", "qwen3moe.expert_feed_forward_length"})
    EXPECT_NE(std::find(l->keys.begin(), l->keys.end(), key), l->keys.end()) << key;
  std::map<std::string, const SynthLayout::Tensor*> by_name;
  for (const auto& t : l->tensors) by_name[t.name] = &t;
  ASSERT_TRUE(by_name.count("blk.3.ffn_gate_exps.weight"));
  EXPECT_EQ(by_name["blk.3.ffn_gate_exps.weight"]->dims, (std::vector<int64_t>{2048, 768, 128}));
  EXPECT_EQ(by_name["blk.3.ffn_down_exps.weight"]->dims, (std::vector<int64_t>{768, 2048, 128}));
  EXPECT_EQ(by_name["blk.0.ffn_gate_inp.weight"]->dims, (std::vector<int64_t>{2048, 128}));
  EXPECT_EQ(by_name["blk.0.ffn_gate_inp.weight"]->type, "F32");
  EXPECT_EQ(by_name["blk.0.ffn_up_exps.weight"]->type, "Q4_K");
  EXPECT_FALSE(by_name.count("blk.0.ffn_gate.weight"));
}

// The layout of llama.cpp's converter output for meta-llama/Llama-3.2-1B(-Instruct):
// its metadata keys, and its 147 tensors with their GGUF dims (innermost first).
TEST(Synth, Llama32PresetIsShapedLikeTheRealFile) {
  const std::vector<std::string> real_keys = {
      "general.architecture", "general.type", "general.name", "general.finetune", "general.basename",
      "general.size_label", "general.license", "general.tags", "general.languages", "llama.block_count",
      "llama.context_length", "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
      "llama.attention.head_count_kv", "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon",
      "llama.attention.key_length", "llama.attention.value_length", "general.file_type", "llama.vocab_size",
      "llama.rope.dimension_count", "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
      "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
      "tokenizer.ggml.eos_token_id", "tokenizer.chat_template", "general.quantization_version"};
  std::map<std::string, std::vector<int64_t>> real_tensors = {
      {"rope_freqs.weight", {32}}, {"token_embd.weight", {2048, 128256}}, {"output_norm.weight", {2048}}};
  for (int il = 0; il < 16; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    real_tensors[b + "attn_norm.weight"] = {2048};
    real_tensors[b + "attn_q.weight"] = {2048, 2048};
    real_tensors[b + "attn_k.weight"] = {2048, 512};
    real_tensors[b + "attn_v.weight"] = {2048, 512};
    real_tensors[b + "attn_output.weight"] = {2048, 2048};
    real_tensors[b + "ffn_norm.weight"] = {2048};
    real_tensors[b + "ffn_gate.weight"] = {2048, 8192};
    real_tensors[b + "ffn_up.weight"] = {2048, 8192};
    real_tensors[b + "ffn_down.weight"] = {8192, 2048};
  }
  SynthOptions o;
  o.preset = "llama-3.2-1b";
  o.type = "q4_k_m";
  auto l = synth_layout(o);
  ASSERT_TRUE(l) << l.error().to_string();
  EXPECT_EQ(l->keys, real_keys);
  std::map<std::string, std::vector<int64_t>> got;
  std::map<std::string, int> types;
  for (const auto& t : l->tensors) {
    got[t.name] = t.dims;
    ++types[t.type];
  }
  EXPECT_EQ(l->tensors.size(), 147u);
  EXPECT_EQ(got, real_tensors);
  // llama.cpp's Q4_K_M of that model: 34 f32, 96 q4_K, 17 q6_K tensors.
  EXPECT_EQ(types, (std::map<std::string, int>{{"F32", 34}, {"Q4_K", 96}, {"Q6_K", 17}}));
  ASSERT_EQ(l->tokens.size(), 128256u);
  EXPECT_EQ(l->tokens[128000], "<|begin_of_text|>");
  EXPECT_EQ(l->tokens[128009], "<|eot_id|>");
  EXPECT_EQ(l->tokens[128255], "<|reserved_special_token_247|>");
}

// Llama 3.2's rope_freqs (factor 32, low 1, high 4, original context 8192, θ 500000):
// dividing the base frequencies by them gives the table of HF's llama3 rule, as the
// IR computes it from the scaling parameters.
TEST(Synth, Llama32RopeFactorsEqualTheLlama3Rule) {
  SynthOptions o;
  o.preset = "llama-3.2-1b";
  auto l = synth_layout(o);
  ASSERT_TRUE(l) << l.error().to_string();
  ASSERT_EQ(l->tensors[0].name, "rope_freqs.weight");
  const std::vector<float>& f = l->tensors[0].values;
  ASSERT_EQ(f.size(), 32u);
  ir::RopeAttrs with_factors, llama3;
  with_factors.head_dim = llama3.head_dim = 64;
  with_factors.n_rot = llama3.n_rot = 64;
  with_factors.theta = llama3.theta = 500000;
  with_factors.freq_factors.assign(f.begin(), f.end());
  llama3.scaling = ir::RopeScaling::Llama3;
  llama3.factor = 32;
  llama3.low_freq_factor = 1;
  llama3.high_freq_factor = 4;
  llama3.original_context = 8192;
  const auto a = ir::rope_inv_freq(with_factors), b = ir::rope_inv_freq(llama3);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i] / b[i], 1.0, 1e-6) << "pair " << i;
  EXPECT_EQ(f.front(), 1.0f);  // the fastest pair keeps its frequency
  EXPECT_EQ(f.back(), 32.0f);  // the slowest is divided by the factor
}

// A written file holds exactly its layout, read back through the GGUF reader.
TEST(Synth, WrittenFileMatchesItsLayout) {
  SynthOptions o;
  o.preset = "tiny";
  o.type = "q8_0";
  auto l = synth_layout(o);
  ASSERT_TRUE(l) << l.error().to_string();
  const fs::path path = fs::temp_directory_path() / "rlx_synth_test_tiny.gguf";
  ASSERT_TRUE(write_synthetic_gguf(o, path.string()).ok());
  auto f = formats::GgufFile::open(path.string());
  ASSERT_TRUE(f) << f.error().to_string();
  std::vector<std::string> keys;
  for (const auto& kv : f->metadata()) keys.push_back(kv.key);
  EXPECT_EQ(keys, l->keys);
  ASSERT_EQ(f->tensors().size(), l->tensors.size());
  for (size_t i = 0; i < l->tensors.size(); ++i) {
    EXPECT_EQ(f->tensors()[i].name, l->tensors[i].name);
    EXPECT_EQ(f->tensors()[i].dims, l->tensors[i].dims) << l->tensors[i].name;
    EXPECT_EQ(formats::ggml_type_name(f->tensors()[i].type), l->tensors[i].type) << l->tensors[i].name;
  }
  auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens);
  EXPECT_EQ(std::vector<std::string>(tokens->begin(), tokens->end()), l->tokens);
  EXPECT_TRUE(config_from_gguf(*f).has_value());
  fs::remove(path);
}

TEST(Synth, Llama3VocabularyIsAWorkingBpeTokenizer) {
  const detail::SynthVocab v = detail::make_llama3_vocab();
  ASSERT_EQ(v.tokens.size(), 128256u);
  ASSERT_EQ(v.types.size(), v.tokens.size());
  EXPECT_EQ(v.merges.size(), 128000u - 256u);  // every piece past the byte symbols enters by one merge
  VocabSpec spec;
  spec.model = v.model;
  spec.pre = v.pre;
  spec.tokens = v.tokens;
  for (int32_t t : v.types) spec.token_types.push_back(static_cast<TokenType>(t));
  spec.merges = v.merges;
  spec.ids.bos = static_cast<int32_t>(v.bos);
  spec.ids.eos = static_cast<int32_t>(v.eos);
  spec.source = "synth llama3";
  auto tok = make_tokenizer(spec);
  ASSERT_TRUE(tok) << tok.error().to_string();
  const std::string text = "Once upon a time, there was a little girl named Lily.\nShe liked 42 blue trees!";
  const std::vector<int32_t> ids = (*tok)->encode(text, false);
  EXPECT_LT(ids.size(), text.size() / 2) << "merges should join most letters";
  auto back = (*tok)->decode(ids);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, text);
  EXPECT_EQ((*tok)->encode(" the", false), (std::vector<int32_t>{*(*tok)->token_id("\xC4\xA0the")}));
  EXPECT_EQ((*tok)->encode("<|eot_id|>", false, /*parse_special=*/true), (std::vector<int32_t>{128009}));
}

}  // namespace
}  // namespace rlx::models
