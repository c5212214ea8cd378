// Synthetic GGUF writer: architecture presets, a generated vocabulary (synth_vocab.h)
// and per-tensor seeded N(0, 0.02²) weights (norm weights 1 + 0.02·N(0,1)). The
// llama-3.2-1b preset is laid out like a Llama 3.2 1B GGUF from
// llama.cpp's converter: its keys, its byte-level BPE vocabulary of 128,256 tokens, its
// rope_freqs.weight (Llama 3 rope factors) and its tensors.
#include "rlx/models/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "models/rope_config.h"
#include "models/synth_vocab.h"
#include "rlx/base/hash.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/formats/quant.h"
#include "rlx/models/quantize.h"

namespace rlx::models {
namespace {

using formats::GgmlType;
using formats::GgufMetaValue;

struct Preset {
  int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
  double rope_theta;
  std::string arch;     ///< the family a real-model preset belongs to ("" = any)
  bool llama3 = false;  ///< Llama 3's vocabulary, rope factors and keys
  int64_t n_expert = 0, n_expert_used = 0;  ///< a mixture of experts of width n_ff each
  /// Hybrid (qwen35): gated delta-net layers of ssm_k_heads / ssm_v_heads heads of
  /// ssm_head_dim, every full_every-th layer gated full attention.
  int64_t ssm_k_heads = 0, ssm_v_heads = 0, ssm_head_dim = 0, full_every = 0;
  bool untied = false;  ///< an LM head of its own (output.weight), not the token embedding
};

// Llama 3.1 / 3.2's rope scaling, from which the converter computes rope_freqs.
constexpr double kLlama3Factor = 32.0, kLlama3LowFreq = 1.0, kLlama3HighFreq = 4.0;
constexpr int64_t kLlama3OriginalContext = 8192;

Expected<Preset> find_preset(const std::string& name) {
  static const std::map<std::string, Preset> kPresets = {
      {"tiny", {64, 2, 4, 2, 16, 128, 512, 512, 10000.0, "", false}},
      {"tiny-untied", {64, 2, 4, 2, 16, 128, 512, 512, 10000.0, "", false, 0, 0, 0, 0, 0, 0, true}},
      // Rows of 256 and 512 values: whole blocks of the 256-value types (K-, i-quants, ternary).
      {"tiny-256", {256, 2, 4, 2, 64, 512, 512, 512, 10000.0, "", false}},
      {"llama-3.2-1b", {2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0, "llama", true}},
      // Llama-3.1-8B's shapes: the model that first needs two GPUs' worth of bandwidth.
      {"llama-3-8b", {4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000.0, "llama", true, 0, 0, 0, 0, 0, 0, true}},
      {"qwen3-0.6b", {1024, 28, 16, 8, 128, 3072, 32000, 4096, 1000000.0, "qwen3", false}},
      {"gemma-2-2b", {2304, 26, 8, 4, 256, 9216, 32000, 4096, 10000.0, "gemma2", false}},
      // Qwen3-30B-A3B's layer shapes (128 experts of width 768, 8 per token) with 4 of its
      // 48 layers: what one MoE layer costs, at a size a benchmark host can hold.
      {"qwen3-30b-a3b-4l", {2048, 4, 32, 4, 128, 768, 32000, 4096, 1000000.0, "qwen3moe", false, 128, 8}},
      // The same layout at test size: 8 experts of width 64, 2 per token.
      {"moe-tiny", {64, 2, 4, 2, 16, 64, 512, 512, 1000000.0, "qwen3moe", false, 8, 2}},
      // BERT-base's shapes (bge-base, all-mpnet-style embedders): an encoder with a WordPiece vocabulary.
      {"bert-base", {768, 12, 12, 12, 64, 3072, 30522, 512, 10000.0, "bert", false}},
      {"bert-tiny", {128, 2, 4, 4, 32, 256, 1024, 128, 10000.0, "bert", false}},
      // A Qwen3.5-style hybrid with Qwen3-Next's layer shapes (hidden 2048; delta-net 16
      // key / 32 value heads of 128; gated attention 16 q / 2 kv heads of 256, a quarter
      // rotary) and a dense FFN of 6144: 8 layers, every 4th full attention.
      {"qwen35-hybrid-8l", {2048, 8, 16, 2, 256, 6144, 32000, 4096, 10000000.0, "qwen35", false, 0, 0, 16, 32, 128, 4}},
      {"qwen35-tiny", {64, 4, 4, 2, 16, 128, 512, 512, 10000000.0, "qwen35", false, 0, 0, 2, 4, 16, 2}},
  };
  auto it = kPresets.find(name);
  if (it == kPresets.end())
    return Error::invalid_argument(
        "unknown preset '{}' (tiny, tiny-untied, tiny-256, llama-3.2-1b, llama-3-8b, qwen3-0.6b, gemma-2-2b, qwen3-30b-a3b-4l, moe-tiny, bert-base, bert-tiny, "
        "qwen35-hybrid-8l, qwen35-tiny)", name);
  return it->second;
}

// xoshiro256** seeded by splitmix64: fast, reproducible everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  float normal() {  // Box-Muller
    const double u1 = std::max(uniform(), 1e-300), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};


// The per-pair divisors llama.cpp's converter writes as rope_freqs.weight for Llama 3
// rope scaling: the base frequency over the scaled one (HF's llama3 rule).
std::vector<float> llama3_rope_factors(int64_t n_rot, double theta) {
  constexpr double kPi = 3.14159265358979323846;
  std::vector<float> out;
  const double ctx = static_cast<double>(kLlama3OriginalContext);
  const double low_wl = ctx / kLlama3LowFreq, high_wl = ctx / kLlama3HighFreq;
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    const double wavelen = 2 * kPi / freq;
    double f = 1.0;
    if (wavelen > low_wl) {
      f = kLlama3Factor;
    } else if (wavelen >= high_wl) {
      const double smooth = (ctx / wavelen - kLlama3LowFreq) / (kLlama3HighFreq - kLlama3LowFreq);
      f = 1.0 / ((1 - smooth) / kLlama3Factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

uint32_t file_type_of(const std::string& type) { return mix_file_type(type); }

// A tensor of the plan: rows = 0 is a vector of cols; `factors` holds fixed values.
struct PlannedTensor {
  std::string name;
  int64_t rows = 0, cols = 0, layer = -1;
  int64_t experts = 0;  ///< > 0: stacked [experts, rows, cols]
  GgmlType type = GgmlType::F32;
  std::vector<float> factors;
};

struct Plan {
  std::vector<std::pair<std::string, GgufMetaValue>> metadata;
  std::vector<PlannedTensor> tensors;
  std::vector<std::string> tokens;
};

std::vector<GgufMetaValue> strings(const std::vector<std::string>& v) {
  std::vector<GgufMetaValue> out;
  out.reserve(v.size());
  for (const auto& s : v) out.push_back(GgufMetaValue::string(s));
  return out;
}

// Llama 3's chat format, short: the key matters to tools that look for it.
constexpr const char* kLlama3ChatTemplate =
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if "
    "add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}";

// Appends a tensor of rows x cols (rows = 0: a vector) in the type o.type's mix gives it.
Status add_planned(Plan& plan, const SynthOptions& o, const Preset& p, std::string name, int64_t rows, int64_t cols,
                   int64_t layer) {
  PlannedTensor t{std::move(name), rows, cols, layer, 0, GgmlType::F32, {}};
  if (rows > 0) {
    ASSIGN_OR_RETURN(t.type, mix_weight_type(o.type, t.name, rows, cols, layer, p.n_layer, /*tied_embeddings=*/true));
  }
  plan.tensors.push_back(std::move(t));
  return {};
}

// An encoder in llama.cpp's bert layout: learned positions, token types, post-norm
// LayerNorms with biases, GELU FFN, every projection with a bias; CLS pooling.
Expected<Plan> make_bert_plan(const SynthOptions& o, const Preset& p) {
  Plan plan;
  auto meta = [&](std::string key, GgufMetaValue v) { plan.metadata.emplace_back(std::move(key), std::move(v)); };
  auto u32 = [](int64_t v) { return GgufMetaValue::u32(static_cast<uint32_t>(v)); };
  const std::string a = "bert";
  meta("general.architecture", GgufMetaValue::string(a));
  meta("general.type", GgufMetaValue::string("model"));
  meta("general.name", GgufMetaValue::string(fmt::format("rlx-synth {} {} {} seed {}", a, o.preset, o.type, o.seed)));
  meta(a + ".block_count", u32(p.n_layer));
  meta(a + ".context_length", u32(p.n_ctx));
  meta(a + ".embedding_length", u32(p.n_embd));
  meta(a + ".feed_forward_length", u32(p.n_ff));
  meta(a + ".attention.head_count", u32(p.n_head));
  meta(a + ".attention.layer_norm_epsilon", GgufMetaValue::f32(1e-12f));
  meta(a + ".attention.causal", GgufMetaValue::boolean(false));
  meta(a + ".pooling_type", u32(2));  // cls
  meta("general.file_type", u32(file_type_of(o.type)));
  detail::SynthVocab v = detail::make_wordpiece_vocab(p.n_vocab);
  meta("tokenizer.ggml.model", GgufMetaValue::string(v.model));
  meta("tokenizer.ggml.tokens", GgufMetaValue::array(formats::GgufValueType::kString, strings(v.tokens)));
  std::vector<GgufMetaValue> ty;
  for (int32_t x : v.types) ty.push_back(GgufMetaValue::i32(x));
  meta("tokenizer.ggml.token_type", GgufMetaValue::array(formats::GgufValueType::kI32, std::move(ty)));
  meta("tokenizer.ggml.token_type_count", u32(2));
  meta("tokenizer.ggml.unknown_token_id", u32(v.unk));
  meta("tokenizer.ggml.seperator_token_id", u32(v.sep));  // sic: llama.cpp's spelling
  meta("tokenizer.ggml.padding_token_id", u32(v.pad));
  meta("tokenizer.ggml.cls_token_id", u32(v.cls));
  meta("tokenizer.ggml.add_bos_token", GgufMetaValue::boolean(true));
  meta("tokenizer.ggml.add_eos_token", GgufMetaValue::boolean(true));
  meta("general.quantization_version", u32(2));
  plan.tokens = std::move(v.tokens);
  auto add = [&](std::string name, int64_t rows, int64_t cols, int64_t layer) {
    return add_planned(plan, o, p, std::move(name), rows, cols, layer);
  };
  TRY(add("token_embd.weight", p.n_vocab, p.n_embd, -1));
  plan.tensors.push_back({"token_types.weight", 2, p.n_embd, -1, 0, GgmlType::F32, {}});
  plan.tensors.push_back({"position_embd.weight", p.n_ctx, p.n_embd, -1, 0, GgmlType::F32, {}});
  TRY(add("token_embd_norm.weight", 0, p.n_embd, -1));
  TRY(add("token_embd_norm.bias", 0, p.n_embd, -1));
  for (int64_t il = 0; il < p.n_layer; ++il) {
    auto n = [il](const char* s) { return fmt::format("blk.{}.{}", il, s); };
    for (const char* proj : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
      TRY(add(n(proj) + ".weight", p.n_embd, p.n_embd, il));
      TRY(add(n(proj) + ".bias", 0, p.n_embd, il));
    }
    TRY(add(n("attn_output_norm.weight"), 0, p.n_embd, il));
    TRY(add(n("attn_output_norm.bias"), 0, p.n_embd, il));
    TRY(add(n("ffn_up.weight"), p.n_ff, p.n_embd, il));
    TRY(add(n("ffn_up.bias"), 0, p.n_ff, il));
    TRY(add(n("ffn_down.weight"), p.n_embd, p.n_ff, il));
    TRY(add(n("ffn_down.bias"), 0, p.n_embd, il));
    TRY(add(n("layer_output_norm.weight"), 0, p.n_embd, il));
    TRY(add(n("layer_output_norm.bias"), 0, p.n_embd, il));
  }
  return plan;
}

Expected<Plan> make_plan(const SynthOptions& o) {
  ASSIGN_OR_RETURN(Preset p, find_preset(o.preset));
  const std::string a = !o.arch.empty() ? o.arch : !p.arch.empty() ? p.arch : "llama";
  if (a != "llama" && a != "qwen3" && a != "gemma2" && a != "qwen3moe" && a != "bert" && a != "qwen35")
    return Error::invalid_argument("unknown --arch '{}' (llama, qwen3, gemma2, qwen3moe, bert, qwen35)", a);
  if (!p.arch.empty() && a != p.arch)
    return Error::invalid_argument("preset '{}' is a {} model; --arch {} does not fit it (leave --arch out)", o.preset,
                                   p.arch, a);
  if (a == "qwen35" && p.full_every == 0)
    return Error::invalid_argument("--arch qwen35 needs a hybrid preset (qwen35-hybrid-8l, qwen35-tiny)");
  if (a == "qwen3moe" && p.n_expert == 0)
    return Error::invalid_argument("--arch qwen3moe needs a mixture-of-experts preset (qwen3-30b-a3b-4l, moe-tiny)");
  bool type_ok = false;
  for (const auto& t : synth_types()) type_ok |= t == o.type;
  if (!type_ok) return Error::invalid_argument("unknown --type '{}' ({})", o.type, quant_mix_names());
  if (a == "bert") {
    if (p.arch != "bert") return Error::invalid_argument("--arch bert needs an encoder preset (bert-base, bert-tiny)");
    return make_bert_plan(o, p);
  }
  const bool gemma = a == "gemma2";
  const bool llama3 = p.llama3;
  Plan plan;
  auto meta = [&](std::string key, GgufMetaValue v) { plan.metadata.emplace_back(std::move(key), std::move(v)); };
  auto u32 = [](int64_t v) { return GgufMetaValue::u32(static_cast<uint32_t>(v)); };
  meta("general.architecture", GgufMetaValue::string(a));
  meta("general.type", GgufMetaValue::string("model"));
  meta("general.name",
       GgufMetaValue::string(fmt::format("rlx-synth {} {} {} seed {}", a, o.preset, o.type, o.seed)));
  if (llama3) {
    meta("general.finetune", GgufMetaValue::string("synthetic"));
    meta("general.basename", GgufMetaValue::string("rlx-synth-llama-3.2"));
    meta("general.size_label", GgufMetaValue::string("1B"));
    meta("general.license", GgufMetaValue::string("apache-2.0"));
    meta("general.tags", GgufMetaValue::array(formats::GgufValueType::kString, strings({"rlx", "synthetic"})));
    meta("general.languages", GgufMetaValue::array(formats::GgufValueType::kString, strings({"en"})));
  }
  meta(a + ".block_count", u32(p.n_layer));
  meta(a + ".context_length", u32(p.n_ctx));
  meta(a + ".embedding_length", u32(p.n_embd));
  meta(a + ".feed_forward_length", u32(p.n_ff));
  meta(a + ".attention.head_count", u32(p.n_head));
  meta(a + ".attention.head_count_kv", u32(p.n_head_kv));
  meta(a + ".rope.freq_base", GgufMetaValue::f32(static_cast<float>(p.rope_theta)));
  meta(a + ".attention.layer_norm_rms_epsilon", GgufMetaValue::f32(gemma ? 1e-6f : 1e-5f));
  meta(a + ".attention.key_length", u32(p.head_dim));
  meta(a + ".attention.value_length", u32(p.head_dim));
  if (gemma) {
    meta(a + ".attn_logit_softcapping", GgufMetaValue::f32(50.0f));
    meta(a + ".final_logit_softcapping", GgufMetaValue::f32(30.0f));
    meta(a + ".attention.sliding_window", u32(4096));
  }
  meta("general.file_type", u32(file_type_of(o.type)));
  meta(a + ".vocab_size", u32(p.n_vocab));
  const bool hybrid = a == "qwen35";
  meta(a + ".rope.dimension_count", u32(hybrid ? p.head_dim / 4 : p.head_dim));
  if (hybrid) {
    std::vector<GgufMetaValue> sections;
    for (int32_t s : detail::text_rope_sections(p.head_dim / 4)) sections.push_back(GgufMetaValue::i32(s));
    meta(a + ".rope.dimension_sections", GgufMetaValue::array(formats::GgufValueType::kI32, std::move(sections)));
    meta(a + ".full_attention_interval", u32(p.full_every));
    meta(a + ".ssm.conv_kernel", u32(4));
    meta(a + ".ssm.state_size", u32(p.ssm_head_dim));
    meta(a + ".ssm.group_count", u32(p.ssm_k_heads));
    meta(a + ".ssm.time_step_rank", u32(p.ssm_v_heads));
    meta(a + ".ssm.inner_size", u32(p.ssm_v_heads * p.ssm_head_dim));
  }
  if (p.n_expert > 0) {
    meta(a + ".expert_count", u32(p.n_expert));
    meta(a + ".expert_used_count", u32(p.n_expert_used));
    meta(a + ".expert_feed_forward_length", u32(p.n_ff));
  }
  detail::SynthVocab v = llama3 ? detail::make_llama3_vocab() : detail::make_spm_vocab(p.n_vocab);
  meta("tokenizer.ggml.model", GgufMetaValue::string(v.model));
  if (!v.pre.empty()) meta("tokenizer.ggml.pre", GgufMetaValue::string(v.pre));
  meta("tokenizer.ggml.tokens", GgufMetaValue::array(formats::GgufValueType::kString, strings(v.tokens)));
  if (!v.scores.empty()) {
    std::vector<GgufMetaValue> sc;
    for (float x : v.scores) sc.push_back(GgufMetaValue::f32(x));
    meta("tokenizer.ggml.scores", GgufMetaValue::array(formats::GgufValueType::kF32, std::move(sc)));
  }
  std::vector<GgufMetaValue> ty;
  for (int32_t x : v.types) ty.push_back(GgufMetaValue::i32(x));
  meta("tokenizer.ggml.token_type", GgufMetaValue::array(formats::GgufValueType::kI32, std::move(ty)));
  if (!v.merges.empty())
    meta("tokenizer.ggml.merges", GgufMetaValue::array(formats::GgufValueType::kString, strings(v.merges)));
  meta("tokenizer.ggml.bos_token_id", u32(v.bos));
  meta("tokenizer.ggml.eos_token_id", u32(v.eos));
  if (v.unk >= 0) meta("tokenizer.ggml.unknown_token_id", u32(v.unk));
  if (llama3) {
    meta("tokenizer.chat_template",
         GgufMetaValue::string(o.chat_template.empty() ? std::string(kLlama3ChatTemplate) : o.chat_template));
  } else {
    meta("tokenizer.ggml.add_bos_token", GgufMetaValue::boolean(true));
    meta("tokenizer.ggml.add_eos_token", GgufMetaValue::boolean(false));
    if (!o.chat_template.empty()) meta("tokenizer.chat_template", GgufMetaValue::string(o.chat_template));
  }
  meta("general.quantization_version", u32(2));
  plan.tokens = std::move(v.tokens);

  // Tensors in the converter's order; rows x cols is the row-major [out][in] matrix.
  auto add = [&](std::string name, int64_t rows, int64_t cols, int64_t layer) {
    return add_planned(plan, o, p, std::move(name), rows, cols, layer);
  };
  if (llama3) {
    plan.tensors.push_back(
        {"rope_freqs.weight", 0, p.head_dim / 2, -1, 0, GgmlType::F32, llama3_rope_factors(p.head_dim, p.rope_theta)});
  }
  TRY(add("token_embd.weight", p.n_vocab, p.n_embd, -1));
  const int64_t q = p.n_head * p.head_dim, kv = p.n_head_kv * p.head_dim;
  for (int64_t il = 0; il < p.n_layer; ++il) {
    auto n = [il](const char* s) { return fmt::format("blk.{}.{}", il, s); };
    TRY(add(n("attn_norm.weight"), 0, p.n_embd, il));
    if (hybrid && (il + 1) % p.full_every != 0) {  // a gated delta-net layer
      const int64_t kw = p.ssm_k_heads * p.ssm_head_dim, vw = p.ssm_v_heads * p.ssm_head_dim;
      TRY(add(n("attn_qkv.weight"), 2 * kw + vw, p.n_embd, il));
      TRY(add(n("attn_gate.weight"), vw, p.n_embd, il));
      TRY(add(n("ssm_beta.weight"), p.ssm_v_heads, p.n_embd, il));
      TRY(add(n("ssm_alpha.weight"), p.ssm_v_heads, p.n_embd, il));
      plan.tensors.push_back({n("ssm_conv1d.weight"), 2 * kw + vw, 4, il, 0, GgmlType::F32, {}});
      TRY(add(n("ssm_dt.bias"), 0, p.ssm_v_heads, il));
      std::vector<float> decay_rate(static_cast<size_t>(p.ssm_v_heads));  // -A in [1, 16], as HF initializes it
      for (size_t h = 0; h < decay_rate.size(); ++h)
        decay_rate[h] = -(1.0f + 15.0f * static_cast<float>(h) / static_cast<float>(decay_rate.size()));
      plan.tensors.push_back({n("ssm_a"), 0, p.ssm_v_heads, il, 0, GgmlType::F32, decay_rate});
      TRY(add(n("ssm_norm.weight"), 0, p.ssm_head_dim, il));
      TRY(add(n("ssm_out.weight"), p.n_embd, vw, il));
      TRY(add(n("post_attention_norm.weight"), 0, p.n_embd, il));  // llama.cpp's name in qwen35
      TRY(add(n("ffn_gate.weight"), p.n_ff, p.n_embd, il));
      TRY(add(n("ffn_up.weight"), p.n_ff, p.n_embd, il));
      TRY(add(n("ffn_down.weight"), p.n_embd, p.n_ff, il));
      continue;
    }
    TRY(add(n("attn_q.weight"), hybrid ? 2 * q : q, p.n_embd, il));
    TRY(add(n("attn_k.weight"), kv, p.n_embd, il));
    TRY(add(n("attn_v.weight"), kv, p.n_embd, il));
    TRY(add(n("attn_output.weight"), p.n_embd, q, il));
    if (a == "qwen3" || a == "qwen3moe" || hybrid) {
      TRY(add(n("attn_q_norm.weight"), 0, p.head_dim, il));
      TRY(add(n("attn_k_norm.weight"), 0, p.head_dim, il));
    }
    if (gemma || hybrid) TRY(add(n("post_attention_norm.weight"), 0, p.n_embd, il));
    if (!hybrid) TRY(add(n("ffn_norm.weight"), 0, p.n_embd, il));
    if (p.n_expert > 0) {  // the router stays f32, as llama.cpp's quantizer leaves it
      plan.tensors.push_back({n("ffn_gate_inp.weight"), p.n_expert, p.n_embd, il, 0, GgmlType::F32, {}});
      for (auto [name, rows, cols] : {std::tuple{"ffn_gate_exps.weight", p.n_ff, p.n_embd},
                                      {"ffn_down_exps.weight", p.n_embd, p.n_ff},
                                      {"ffn_up_exps.weight", p.n_ff, p.n_embd}}) {
        TRY(add(n(name), rows, cols, il));
        plan.tensors.back().experts = p.n_expert;
      }
      continue;
    }
    TRY(add(n("ffn_gate.weight"), p.n_ff, p.n_embd, il));
    TRY(add(n("ffn_up.weight"), p.n_ff, p.n_embd, il));
    TRY(add(n("ffn_down.weight"), p.n_embd, p.n_ff, il));
    if (gemma) TRY(add(n("post_ffw_norm.weight"), 0, p.n_embd, il));
  }
  TRY(add("output_norm.weight", 0, p.n_embd, -1));
  if (p.untied) TRY(add("output.weight", p.n_vocab, p.n_embd, -1));
  return plan;
}

}  // namespace

std::vector<std::string> synth_presets() {
  return {"tiny",     "tiny-untied", "tiny-256", "llama-3.2-1b", "llama-3-8b", "qwen3-0.6b",       "gemma-2-2b", "qwen3-30b-a3b-4l",
          "moe-tiny",  "bert-base", "bert-tiny",   "qwen35-hybrid-8l", "qwen35-tiny"};
}
std::vector<std::string> synth_types() { return quant_mixes(); }

Expected<SynthLayout> synth_layout(const SynthOptions& o) {
  ASSIGN_OR_RETURN(Plan plan, make_plan(o));
  SynthLayout l;
  for (const auto& [key, value] : plan.metadata) l.keys.push_back(key);
  for (const PlannedTensor& t : plan.tensors) {
    SynthLayout::Tensor lt;
    lt.name = t.name;
    lt.type = std::string(formats::ggml_type_name(t.type));
    lt.dims = t.rows > 0 ? std::vector<int64_t>{t.cols, t.rows} : std::vector<int64_t>{t.cols};
    if (t.experts > 0) lt.dims.push_back(t.experts);
    lt.values = t.factors;
    l.tensors.push_back(std::move(lt));
  }
  l.tokens = std::move(plan.tokens);
  return l;
}

namespace {

// A tensor's seeded values (seeded by its name: the same on every machine and thread).
std::vector<float> synth_values(const SynthOptions& o, const PlannedTensor& t) {
  StableHasher h;
  h.u64(o.seed);
  h.str(t.name);
  Rng rng(h.digest());
  const bool is_norm = t.rows == 0;
  const int64_t count = is_norm ? t.cols : t.rows * t.cols * std::max<int64_t>(t.experts, 1);
  std::vector<float> values(static_cast<size_t>(count));
  const bool is_bias = t.name.size() > 5 && t.name.substr(t.name.size() - 5) == ".bias";
  for (float& x : values) x = is_norm && !is_bias ? 1.0f + 0.02f * rng.normal() : 0.02f * rng.normal();
  return values;
}

}  // namespace

Status write_synthetic_gguf(const SynthOptions& o, const std::string& path) {
  ASSIGN_OR_RETURN(Plan plan, make_plan(o));
  formats::GgufWriter w;
  for (auto& [key, value] : plan.metadata) TRY(w.add(key, std::move(value)));
  // The values of a batch of tensors are drawn and encoded on one thread each (an 8B
  // model has 8 billion; the i-quant scale searches cost more than drawing), then added
  // in file order.
  const size_t n = plan.tensors.size();
  const size_t batch = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  struct Encoded {
    std::vector<uint8_t> bytes;
    Status status;
  };
  auto encode = [&](const PlannedTensor& t) {
    Encoded e;
    const std::vector<float> v = t.factors.empty() ? synth_values(o, t) : t.factors;
    const GgmlType type = t.rows == 0 ? GgmlType::F32 : t.type;
    e.bytes.resize(static_cast<size_t>(formats::ggml_bytes_for(type, static_cast<int64_t>(v.size())).value_or(0)));
    e.status = formats::quantize_row(type, v.data(), e.bytes.data(), static_cast<int64_t>(v.size()));
    return e;
  };
  for (size_t b0 = 0; b0 < n; b0 += batch) {
    const size_t b1 = std::min(n, b0 + batch);
    std::vector<Encoded> encoded(b1 - b0);
    {
      std::vector<std::thread> threads;
      for (size_t ti = b0; ti < b1; ++ti) threads.emplace_back([&, ti] { encoded[ti - b0] = encode(plan.tensors[ti]); });
      for (std::thread& t : threads) t.join();
    }
    for (size_t ti = b0; ti < b1; ++ti) {
      const PlannedTensor& t = plan.tensors[ti];
      Encoded& e = encoded[ti - b0];
      if (!e.status.ok()) return e.status.error().with_context(t.name);
      if (t.rows == 0) {
        TRY(w.add_tensor(t.name, GgmlType::F32, {t.cols}, std::move(e.bytes)));
      } else if (t.experts > 0) {
        TRY(w.add_tensor(t.name, t.type, {t.cols, t.rows, t.experts}, std::move(e.bytes)));
      } else {
        TRY(w.add_tensor(t.name, t.type, {t.cols, t.rows}, std::move(e.bytes)));
      }
      if (o.progress) o.progress(0.9 * static_cast<double>(ti + 1) / static_cast<double>(n));
    }
  }
  const std::string tmp = path + ".tmp";
  TRY(w.write_file(tmp));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Error::io("cannot move '{}' to '{}': {}", tmp, path, ec.message());
  if (o.progress) o.progress(1.0);
  return {};
}

}  // namespace rlx::models
