// convert_hf_to_gguf: a Hugging Face decoder folder rewritten as llama.cpp's converter
// lays it out — architecture keys, tensor names (the weight source already serves HF
// tensors under GGUF names, experts stacked), q/k row order for the llama graph, rope
// scaling as llama.cpp reads it — with each matrix encoded at the mix's type.
#include "rlx/models/convert.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "models/rope_config.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/formats/quant.h"
#include "rlx/models/chat.h"
#include "rlx/models/model_config.h"
#include "rlx/models/quantize.h"
#include "rlx/models/tokenizer.h"
#include "rlx/models/weight_source.h"
#include "rlx/runtime/tensor.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using formats::GgmlType;

// The GGUF architecture name of a config, or an error for the families not converted.
Expected<std::string> gguf_arch(const ModelConfig& c, const std::string& dir) {
  switch (c.arch) {
    case Arch::Llama: return std::string("llama");
    case Arch::Qwen2: return std::string("qwen2");
    case Arch::Qwen3: return std::string("qwen3");
    case Arch::Qwen3Moe: return std::string("qwen3moe");
    case Arch::Gemma: return std::string("gemma");
    case Arch::Gemma2: return std::string("gemma2");
    case Arch::Gemma3: return std::string("gemma3");
    case Arch::Phi3: return std::string("phi3");
    case Arch::Qwen35:
      // llama.cpp's names: Qwen3-Next keeps its grouped projections (qwen3next), Qwen3.5
      // dense and MoE do not.
      if (c.ssm_grouped_projections) return std::string("qwen3next");
      return std::string(c.n_expert > 0 ? "qwen35moe" : "qwen35");
    case Arch::MiniCPM3: return std::string("minicpm3");
    default: break;
  }
  return Error::unsupported("{}: rlx convert does not write {} models yet (llama, mistral, mixtral, qwen2, qwen3, "
                            "qwen3_moe, gemma, gemma2, gemma3_text, phi3, qwen3_5_text, qwen3_5_moe_text, qwen3_next, "
                            "minicpm3)", dir, arch_name(c.arch));
}

// llama.cpp's q/k permutation for its llama graph: within each head, HF's rows
// [first half | second half] of the rotary dims become interleaved pairs (row 2j + s
// takes row s * head_dim / 2 + j). `cols` values per row (1 for a bias).
std::vector<float> interleave_heads(const std::vector<float>& v, int64_t n_heads, int64_t head_dim, int64_t cols) {
  std::vector<float> out(v.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t s = 0; s < 2; ++s) {
        const float* src = v.data() + (h * head_dim + s * half + j) * cols;
        std::copy_n(src, cols, out.data() + (h * head_dim + 2 * j + s) * cols);
      }
  return out;
}

// The GGUF sliding layout each family's reader assumes (llama.cpp's), which the
// config's per-layer choice must equal: all layers for llama / phi3 (Mistral), every
// even layer for gemma2, five of every six for gemma3.
bool layer_slides_in_gguf(const std::string& a, int64_t il) {
  if (a == "gemma2") return il % 2 == 0;
  if (a == "gemma3") return (il + 1) % 6 != 0;
  return true;
}

// Sliding window, softcaps and the attention scale, as far as GGUF can say them.
Status add_attention_shape(formats::GgufWriter& w, const ModelConfig& c, const std::string& a, const std::string& dir) {
  bool any_sliding = false;
  for (int64_t il = 0; il < c.n_layer; ++il) any_sliding |= c.layer_is_sliding(il);
  const bool gemma = a == "gemma" || a == "gemma2" || a == "gemma3";
  if (any_sliding || a == "gemma2" || a == "gemma3") {
    if (a == "gemma" || a == "qwen2" || a == "qwen3" || a == "qwen3moe" || a == "qwen35" || a == "qwen35moe")
      return Error::unsupported("{}: a sliding attention window, which GGUF's {} layout cannot say", dir, a);
    for (int64_t il = 0; il < c.n_layer; ++il)
      if (c.layer_is_sliding(il) != (c.sliding_window > 0 && layer_slides_in_gguf(a, il)))
        return Error::unsupported("{}: layer {} is {} attention, but GGUF's {} layout makes it {}", dir, il,
                                  c.layer_is_sliding(il) ? "sliding" : "full", a,
                                  layer_slides_in_gguf(a, il) ? "sliding" : "full");
    if (c.sliding_window > 0)
      TRY(w.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(c.sliding_window)));
  }
  if (c.attn_softcap > 0) {
    if (a != "gemma2") return Error::unsupported("{}: attention logit softcapping, which GGUF's {} layout cannot say", dir, a);
    TRY(w.add_f32(a + ".attn_logit_softcapping", static_cast<float>(c.attn_softcap)));
  }
  if (c.final_softcap > 0) {
    if (a != "gemma2" && a != "gemma3")
      return Error::unsupported("{}: final logit softcapping, which GGUF's {} layout cannot say", dir, a);
    TRY(w.add_f32(a + ".final_logit_softcapping", static_cast<float>(c.final_softcap)));
  }
  // The checkpoint's GELU is exact; llama.cpp's f16 table is its own rounding.
  if (c.ffn == FfnKind::GeGLU) TRY(w.add_bool(kGgufExactGeluKey, true));
  if (a == "gemma3" && c.rope_theta_local > 0) TRY(w.add_f32(a + ".rope.freq_base_swa", static_cast<float>(c.rope_theta_local)));
  // Gemma's query_pre_attn_scalar: the default 1/sqrt(head_dim) needs no key.
  if (c.attn_scale > 0 && std::abs(c.attn_scale * std::sqrt(static_cast<double>(c.head_dim)) - 1.0) > 1e-9) {
    if (!gemma) return Error::unsupported("{}: an attention scale other than 1/sqrt(head_dim), which GGUF's {} layout cannot say", dir, a);
    TRY(w.add_f32(a + ".attention.scale", static_cast<float>(c.attn_scale)));
  }
  return {};
}

Status add_metadata(formats::GgufWriter& w, const ModelConfig& c, const std::string& a, const std::string& mix,
                    const std::string& dir) {
  auto u32 = [&](const std::string& key, int64_t v) { return w.add_u32(a + "." + key, static_cast<uint32_t>(v)); };
  TRY(w.add_string("general.architecture", a));
  TRY(w.add_string("general.type", "model"));
  TRY(w.add_string("general.name", c.name));
  TRY(w.add_u32("general.file_type", mix_file_type(mix)));
  TRY(w.add_u32("general.quantization_version", 2));
  TRY(u32("block_count", c.n_layer));
  TRY(u32("context_length", c.n_ctx_train));
  TRY(u32("embedding_length", c.n_embd));
  TRY(u32("feed_forward_length", c.n_ff));
  TRY(u32("attention.head_count", c.n_head));
  TRY(u32("attention.head_count_kv", c.n_head_kv));
  TRY(u32("attention.key_length", c.head_dim));
  TRY(u32("attention.value_length", c.latent_attention() ? c.v_head_dim : c.head_dim));
  if (c.latent_attention()) {
    if (c.latent_q_rank > 0) TRY(u32("attention.q_lora_rank", c.latent_q_rank));
    TRY(u32("attention.kv_lora_rank", c.latent_kv_rank));
    if (c.latent_norm_eps != c.norm_eps) TRY(w.add_f32(kGgufLatentNormEpsKey, static_cast<float>(c.latent_norm_eps)));
  }
  // MiniCPM's scales, always written for minicpm3 (a reader without them assumes
  // MiniCPM3-4B's).
  if (a == "minicpm3" || c.embedding_scale != 1.0 || c.residual_scale != 1.0 || c.logit_scale != 1.0) {
    if (a != "minicpm3")
      return Error::unsupported("{}: embedding, residual or logit scales, which GGUF's {} layout does not say", dir, a);
    TRY(w.add_f32(a + ".embedding_scale", static_cast<float>(c.embedding_scale)));
    TRY(w.add_f32(a + ".residual_scale", static_cast<float>(c.residual_scale)));
    TRY(w.add_f32(a + ".logit_scale", static_cast<float>(c.logit_scale)));
  }
  TRY(w.add_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps)));
  TRY(w.add_f32(a + ".rope.freq_base", static_cast<float>(c.rope.theta)));
  TRY(u32("rope.dimension_count", c.rope.n_rot));
  TRY(u32("vocab_size", c.n_vocab));
  TRY(add_attention_shape(w, c, a, dir));
  if (c.n_expert > 0) {
    for (int64_t il = 0; il < c.n_layer; ++il)
      if (!c.layer_is_moe(il))
        return Error::unsupported("{}: layer {} has a dense FFN inside a mixture of experts (mlp_only_layers / "
                                  "decoder_sparse_step), which GGUF's {} layout cannot say", dir, il, a);
    // llama.cpp renormalizes the chosen experts' weights (and RLX reads GGUF so).
    if (!c.expert_weights_norm)
      return Error::unsupported("{}: norm_topk_prob is false (the chosen experts' weights are not renormalized), which "
                                "GGUF's {} layout cannot say", dir, a);
    TRY(u32("expert_count", c.n_expert));
    TRY(u32("expert_used_count", c.n_expert_used));
    if (a == "qwen3moe" || a == "qwen35moe" || a == "qwen3next") TRY(u32("expert_feed_forward_length", c.n_ff_expert));
    if (c.n_ff_shared > 0) TRY(u32("expert_shared_feed_forward_length", c.n_ff_shared));
  }
  switch (c.rope.scaling) {
    case ir::RopeScaling::None:
    case ir::RopeScaling::Llama3: break;  // llama3: the rope_freqs tensor
    case ir::RopeScaling::Linear:
      TRY(w.add_string(a + ".rope.scaling.type", "linear"));
      TRY(w.add_f32(a + ".rope.scaling.factor", static_cast<float>(c.rope.factor)));
      break;
    case ir::RopeScaling::Yarn:
      TRY(w.add_string(a + ".rope.scaling.type", "yarn"));
      TRY(w.add_f32(a + ".rope.scaling.factor", static_cast<float>(c.rope.factor)));
      TRY(u32("rope.scaling.original_context_length", c.rope.original_context));
      break;
  }
  if (!c.rope_long_factors.empty()) {
    // Phi-3's LongRoPE: the short / long factor tensors (written with the weights), the
    // magnitude scale, and the context the short factors hold for.
    TRY(w.add_f32(a + ".rope.scaling.attn_factor", static_cast<float>(c.rope.attn_factor)));
    TRY(u32("rope.scaling.original_context_length", c.rope.original_context));
  }
  if (c.has_recurrent_layers()) {
    // GGUF says which layers are full attention by one interval: the layer types must
    // follow it.
    int64_t every = 0;
    for (int64_t il = 0; il < c.n_layer && every == 0; ++il)
      if (!c.layer_is_recurrent(il)) every = il + 1;
    for (int64_t il = 0; il < c.n_layer; ++il)
      if (every == 0 || c.layer_is_recurrent(il) != ((il + 1) % every != 0))
        return Error::unsupported("{}: layer_types is not every-n-th-layer full attention, which GGUF's {} layout "
                                  "cannot say", dir, a);
    TRY(u32("full_attention_interval", every));
    if (a == "qwen35" || a == "qwen35moe") {  // llama.cpp requires the multi-axis rope sections
      const std::vector<int32_t> sections = detail::text_rope_sections(c.rope.n_rot);
      TRY(w.add_i32_array(a + ".rope.dimension_sections", sections));
    }
    TRY(u32("ssm.conv_kernel", c.ssm_conv_kernel));
    TRY(u32("ssm.state_size", c.ssm_head_k_dim));
    TRY(u32("ssm.group_count", c.ssm_n_k_heads));
    TRY(u32("ssm.time_step_rank", c.ssm_n_v_heads));
    TRY(u32("ssm.inner_size", c.ssm_n_v_heads * c.ssm_head_v_dim));
  }
  return {};
}

// The folder's tokenizer (tokenizer.json) as llama.cpp's tokenizer.ggml.* keys, padded
// with unused "[PADn]" entries up to the embedding's rows as llama.cpp's converter does,
// and its chat template; without a tokenizer.json only the config's BOS / EOS ids.
Status add_tokenizer(formats::GgufWriter& w, const ModelConfig& c, const std::string& dir) {
  std::error_code ec;
  const fs::path json = fs::path(dir) / "tokenizer.json";
  if (!fs::is_regular_file(json, ec)) {
    if (c.bos_id >= 0) TRY(w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(c.bos_id)));
    if (c.eos_id >= 0) TRY(w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_id)));
    return {};
  }
  ASSIGN_OR_RETURN(VocabSpec v, vocab_from_hf_tokenizer_json(json.string()));
  if (v.ids.bos < 0 && c.bos_id >= 0 && c.bos_id < static_cast<int64_t>(v.tokens.size())) v.ids.bos = static_cast<int32_t>(c.bos_id);
  if (v.ids.eos < 0 && c.eos_id >= 0 && c.eos_id < static_cast<int64_t>(v.tokens.size())) v.ids.eos = static_cast<int32_t>(c.eos_id);
  if (static_cast<int64_t>(v.tokens.size()) > c.n_vocab)
    return Error::invalid_file("{}: tokenizer.json has {} tokens, more than the model's {} embedding rows", dir,
                               v.tokens.size(), c.n_vocab);
  if (v.token_types.empty()) v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  for (int64_t i = static_cast<int64_t>(v.tokens.size()); i < c.n_vocab; ++i) {
    v.tokens.push_back(fmt::format("[PAD{}]", i));
    v.token_types.push_back(TokenType::kUnused);
    if (!v.scores.empty()) v.scores.push_back(0.0f);
  }
  TRY(write_vocab_to_gguf(v, w));
  ASSIGN_OR_RETURN(const std::string chat_template, read_chat_template(dir));
  if (!chat_template.empty()) TRY(w.add_string("tokenizer.chat_template", chat_template));
  return {};
}

// llama.cpp's rope_freqs for Llama 3 scaling: each pair's base frequency over its
// scaled one.
std::vector<float> llama3_rope_freqs(const ir::RopeAttrs& r) {
  ir::RopeAttrs base = r;
  base.scaling = ir::RopeScaling::None;
  base.freq_factors.clear();
  const std::vector<double> plain = ir::rope_inv_freq(base), scaled = ir::rope_inv_freq(r);
  std::vector<float> out(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) out[i] = static_cast<float>(plain[i] / scaled[i]);
  return out;
}

}  // namespace

Status convert_hf_to_gguf(const std::string& hf_dir, const std::string& out, const ConvertOptions& o) {
  bool known = false;
  for (const auto& m : quant_mixes()) known |= m == o.mix;
  if (!known) return Error::invalid_argument("unknown type '{}' ({})", o.mix, quant_mix_names());
  ASSIGN_OR_RETURN(ModelConfig c, config_from_hf((fs::path(hf_dir) / "config.json").string()));
  ASSIGN_OR_RETURN(const std::string a, gguf_arch(c, hf_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWeightSource> src, SafetensorsWeightSource::open(hf_dir, c));
  formats::GgufWriter w;
  TRY(add_metadata(w, c, a, o.mix, hf_dir));
  TRY(add_tokenizer(w, c, hf_dir));
  if (c.rope.scaling == ir::RopeScaling::Llama3)
    TRY(w.add_tensor_f32("rope_freqs.weight", GgmlType::F32, {c.rope.n_rot / 2}, llama3_rope_freqs(c.rope)));
  if (!c.rope_long_factors.empty()) {
    auto as_f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    TRY(w.add_tensor_f32("rope_factors_long.weight", GgmlType::F32, {c.rope.n_rot / 2}, as_f32(c.rope_long_factors)));
    TRY(w.add_tensor_f32("rope_factors_short.weight", GgmlType::F32, {c.rope.n_rot / 2}, as_f32(c.rope.freq_factors)));
  }

  // Every tensor the model reads, in llama.cpp's order: embeddings, layers, head.
  std::set<std::pair<int64_t, std::string>> names;  // (position, name); stacked experts appear once
  for (const auto& [stored, gguf] : src->stored_tensors()) {
    const int64_t il = gguf_tensor_layer(gguf);
    if (!gguf.empty()) names.insert({il < 0 && gguf != "token_embd.weight" ? INT64_MAX : il, gguf});
  }
  const bool permute_qk = a == "llama";
  if (a == "qwen3next") {
    // llama.cpp's qwen3next layout: in_proj_qkvz regrouped as attn_qkv and attn_gate (as
    // qwen35 has them), in_proj_ba kept grouped by key head as ssm_ba (served raw).
    std::set<std::pair<int64_t, std::string>> grouped;
    for (const auto& [position, name] : names) {
      if (name.ends_with(".ssm_beta.weight")) grouped.insert({position, fmt::format("blk.{}.ssm_ba.weight", position)});
      else if (!name.ends_with(".ssm_alpha.weight")) grouped.insert({position, name});
    }
    names = std::move(grouped);
  }
  size_t done = 0;
  for (const auto& [position, name] : names) {
    ASSIGN_OR_RETURN(WeightView view, src->take(name));
    // The source serves F32, F16 or BF16: its bytes hold 4 or 2 per value.
    std::vector<float> values(view.bytes.size() / (view.dtype == ir::DType::F32 ? 4 : 2));
    convert_to_f32(view.dtype, view.bytes.data(), values.data(), static_cast<int64_t>(values.size()));
    std::vector<int64_t> dims(view.shape.rbegin(), view.shape.rend());  // GGUF: innermost first
    const int64_t cols = view.shape.back();
    const int64_t rows = static_cast<int64_t>(values.size()) / std::max<int64_t>(cols, 1);
    const bool is_q = name.find(".attn_q.") != std::string::npos, is_k = name.find(".attn_k.") != std::string::npos;
    if (permute_qk && (is_q || is_k)) {
      const int64_t heads = is_q ? c.n_head : c.n_head_kv;
      values = interleave_heads(values, heads, c.head_dim, view.shape.size() == 1 ? 1 : cols);
    }
    GgmlType type = GgmlType::F32;
    // Routers and the delta-net's short conv kernels stay f32 (as llama.cpp keeps them).
    if (view.shape.size() >= 2 && name.find("ffn_gate_inp") == std::string::npos &&
        name.find("ssm_conv1d") == std::string::npos) {
      ASSIGN_OR_RETURN(MixChoice choice,
                       mix_weight_choice(o.mix, name, rows, cols, gguf_tensor_layer(name), c.n_layer, c.tied_embeddings));
      if (choice.fell_back() && o.on_fallback) o.on_fallback(describe_fallback(name, rows, cols, choice));
      type = choice.type;
    }
    auto weighted = add_quantized_tensor(w, name, type, dims, values, o.imatrix.get());
    if (!weighted) return weighted.error().with_context(fmt::format("{}: tensor '{}'", hf_dir, name));
    if (o.imatrix && !*weighted && formats::takes_importance(type) && o.on_no_importance) o.on_no_importance(name);
    if (o.progress) o.progress(0.95 * static_cast<double>(++done) / static_cast<double>(names.size()));
  }
  const std::string tmp = out + ".tmp";
  TRY(w.write_file(tmp));
  std::error_code ec;
  fs::rename(tmp, out, ec);
  if (ec) return Error::io("cannot move '{}' to '{}': {}", tmp, out, ec.message());
  if (o.progress) o.progress(1.0);
  return {};
}

}  // namespace rlx::models
