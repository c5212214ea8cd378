// ModelConfig: consistency checks and reading from GGUF metadata.
#include "rlx/models/model_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "models/rope_config.h"
#include "rlx/formats/gguf.h"

namespace rlx::models {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
    case Arch::Gemma: return "gemma";
    case Arch::Gemma2: return "gemma2";
    case Arch::Gemma3: return "gemma3";
    case Arch::Phi3: return "phi3";
    case Arch::Qwen3Moe: return "qwen3moe";
    case Arch::Bert: return "bert";
    case Arch::NomicBert: return "nomic-bert";
    case Arch::ModernBert: return "modern-bert";
    case Arch::Qwen35: return "qwen35";
    case Arch::MiniCPM3: return "minicpm3";
  }
  return "?";
}

bool is_encoder(Arch a) { return a == Arch::Bert || a == Arch::NomicBert || a == Arch::ModernBert; }

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::None: return "none";
    case Pooling::Cls: return "cls";
    case Pooling::Mean: return "mean";
    case Pooling::Last: return "last";
  }
  return "?";
}

Expected<Pooling> parse_pooling(std::string_view word) {
  for (Pooling p : {Pooling::None, Pooling::Cls, Pooling::Mean, Pooling::Last})
    if (word == pooling_name(p)) return p;
  return Error::invalid_argument("pooling '{}' is not one of none, cls, mean, last", word);
}

ir::RopeAttrs ModelConfig::rope_for_context(int64_t ctx) const {
  ir::RopeAttrs r = rope;
  if (!rope_long_factors.empty() && ctx > rope.original_context) r.freq_factors = rope_long_factors;
  return r;
}

bool ModelConfig::layer_is_sliding(int64_t il) const {
  if (sliding_window <= 0) return false;
  if (!sliding_layers.empty()) return il >= 0 && il < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[il];
  switch (sliding) {
    case SlidingPattern::None: return false;
    case SlidingPattern::All: return true;
    case SlidingPattern::EvenLayers: return il % 2 == 0;
    case SlidingPattern::Gemma3: return (il + 1) % 6 != 0;
  }
  return false;
}

bool ModelConfig::layer_is_moe(int64_t il) const {
  if (n_expert <= 0) return false;
  return dense_layers.empty() || il < 0 || il >= static_cast<int64_t>(dense_layers.size()) || !dense_layers[il];
}

bool ModelConfig::layer_is_recurrent(int64_t il) const {
  return il >= 0 && il < static_cast<int64_t>(recurrent_layers.size()) && recurrent_layers[static_cast<size_t>(il)];
}

bool ModelConfig::has_recurrent_layers() const {
  return std::find(recurrent_layers.begin(), recurrent_layers.end(), true) != recurrent_layers.end();
}

int64_t ModelConfig::kv_width() const {
  return latent_attention() ? n_head * std::max(head_dim, v_head_dim) : n_head_kv * head_dim;
}

Status ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* field) -> Status {
    if (v <= 0) return Error::invalid_argument("model config: {} must be positive, got {}", field, v);
    return {};
  };
  TRY(positive(n_vocab, "n_vocab"));
  TRY(positive(n_embd, "n_embd"));
  TRY(positive(n_layer, "n_layer"));
  TRY(positive(n_head, "n_head"));
  TRY(positive(n_head_kv, "n_head_kv"));
  TRY(positive(head_dim, "head_dim"));
  TRY(positive(n_ff, "n_ff"));
  if (n_head % n_head_kv != 0)
    return Error::invalid_argument("model config: n_head {} is not a multiple of n_head_kv {}", n_head, n_head_kv);
  if (rope.n_rot <= 0 || rope.n_rot > head_dim || rope.n_rot % 2 != 0)
    return Error::invalid_argument("model config: rope n_rot {} must be even and within head_dim {}", rope.n_rot,
                                   head_dim);
  if (n_expert != 0 || n_expert_used != 0) {
    if (n_expert < 1 || n_expert > 4096)
      return Error::invalid_argument("model config: expert count {} must be in [1, 4096]", n_expert);
    if (n_expert_used < 1 || n_expert_used > n_expert)
      return Error::invalid_argument("model config: experts used per token {} must be in [1, expert count {}]",
                                     n_expert_used, n_expert);
    TRY(positive(n_ff_expert, "n_ff_expert (expert feed-forward length)"));
    if (!dense_layers.empty() && static_cast<int64_t>(dense_layers.size()) != n_layer)
      return Error::invalid_argument("model config: {} dense-layer flags for {} layers", dense_layers.size(), n_layer);
  }
  if (has_recurrent_layers()) {
    if (static_cast<int64_t>(recurrent_layers.size()) != n_layer)
      return Error::invalid_argument("model config: {} layer types for {} layers", recurrent_layers.size(), n_layer);
    TRY(positive(ssm_conv_kernel, "linear conv kernel"));
    TRY(positive(ssm_n_k_heads, "linear key heads"));
    TRY(positive(ssm_n_v_heads, "linear value heads"));
    TRY(positive(ssm_head_k_dim, "linear key head dim"));
    TRY(positive(ssm_head_v_dim, "linear value head dim"));
    if (ssm_n_v_heads % ssm_n_k_heads != 0)
      return Error::invalid_argument("model config: {} linear value heads are not a multiple of {} key heads",
                                     ssm_n_v_heads, ssm_n_k_heads);
    if (ssm_conv_kernel > 64 || ssm_n_v_heads > 4096 || ssm_head_k_dim > 4096 || ssm_head_v_dim > 4096)
      return Error::invalid_argument("model config: implausible delta-net sizes (conv {}, value heads {}, dims {}/{})",
                                     ssm_conv_kernel, ssm_n_v_heads, ssm_head_k_dim, ssm_head_v_dim);
  }
  if (arch == Arch::MiniCPM3 && latent_kv_rank <= 0)
    return Error::invalid_argument("model config: minicpm3 needs a positive kv lora rank, got {}", latent_kv_rank);
  if (latent_q_rank != 0 || latent_kv_rank != 0) {
    TRY(positive(latent_kv_rank, "latent kv rank"));
    TRY(positive(v_head_dim, "v_head_dim"));
    if (latent_q_rank < 0 || latent_q_rank > (1 << 16) || latent_kv_rank > (1 << 16) || v_head_dim > (1 << 14))
      return Error::invalid_argument("model config: implausible latent attention sizes (q rank {}, kv rank {}, v {})",
                                     latent_q_rank, latent_kv_rank, v_head_dim);
    if (n_head_kv != n_head)
      return Error::invalid_argument("model config: latent attention expands every head's key and value; n_head_kv {} "
                                     "must equal n_head {}", n_head_kv, n_head);
    if (!(std::isfinite(latent_norm_eps) && latent_norm_eps >= 0 && latent_norm_eps < 1))
      return Error::invalid_argument("model config: latent norm eps must be in [0, 1), got {}", latent_norm_eps);
  }
  auto scale_ok = [](double v, const char* field) -> Status {
    if (!(std::isfinite(v) && v > 0 && v < 1e6))
      return Error::invalid_argument("model config: {} must be positive and finite, got {}", field, v);
    return {};
  };
  TRY(scale_ok(embedding_scale, "embedding_scale"));
  TRY(scale_ok(residual_scale, "residual_scale"));
  TRY(scale_ok(logit_scale, "logit_scale"));
  if (n_layer > 4096 || n_embd > (1 << 20) || n_vocab > (1 << 24))
    return Error::invalid_argument("model config: implausible sizes (layers {}, embd {}, vocab {})", n_layer, n_embd,
                                   n_vocab);
  if (n_head > (1 << 14) || head_dim > (1 << 14) || n_ff > (1 << 24))
    return Error::invalid_argument("model config: implausible sizes (heads {}, head_dim {}, ffn {})", n_head, head_dim,
                                   n_ff);
  if (n_head_kv > n_head)
    return Error::invalid_argument("model config: n_head_kv {} exceeds n_head {}", n_head_kv, n_head);
  // Every floating-point parameter: NaN fails each comparison, so each check is written
  // as "in range", never as "out of range".
  if (!(std::isfinite(norm_eps) && norm_eps >= 0 && norm_eps < 1))
    return Error::invalid_argument("model config: norm eps must be in [0, 1), got {}", norm_eps);
  if (Status s = ir::check_rope_attrs(rope); !s.ok()) return s.error().with_context("model config");
  for (size_t i = 0; i < rope_long_factors.size(); ++i)
    if (!(std::isfinite(rope_long_factors[i]) && rope_long_factors[i] > 0))
      return Error::invalid_argument("model config: rope long factor {} must be positive and finite, got {}", i,
                                     rope_long_factors[i]);
  if (!rope_long_factors.empty() && static_cast<int64_t>(rope_long_factors.size()) != rope.n_rot / 2)
    return Error::invalid_argument("model config: {} rope long factors, n_rot {} needs {}", rope_long_factors.size(),
                                   rope.n_rot, rope.n_rot / 2);
  auto zero_or_positive = [](double v, const char* field) -> Status {
    if (!(std::isfinite(v) && v >= 0))
      return Error::invalid_argument("model config: {} must be finite and >= 0 (0 = off), got {}", field, v);
    return {};
  };
  TRY(zero_or_positive(rope_theta_local, "rope_theta_local"));
  TRY(zero_or_positive(attn_softcap, "attn_softcap"));
  TRY(zero_or_positive(final_softcap, "final_softcap"));
  TRY(zero_or_positive(attn_scale, "attn_scale"));
  if (sliding_window < 0)
    return Error::invalid_argument("model config: sliding_window must be >= 0 (0 = off), got {}", sliding_window);
  if (n_ctx_train < 0)
    return Error::invalid_argument("model config: n_ctx_train must be >= 0, got {}", n_ctx_train);
  if (!sliding_layers.empty() && static_cast<int64_t>(sliding_layers.size()) != n_layer)
    return Error::invalid_argument("model config: {} sliding-layer flags for {} layers", sliding_layers.size(),
                                   n_layer);
  return {};
}

std::string ModelConfig::summary() const {
  if (is_encoder(arch))
    return fmt::format("{} '{}' (encoder): vocab {}, dim {}, layers {}, heads {} (head_dim {}), ffn {}, positions {}, "
                       "pooling {}",
                       arch_name(arch), name, n_vocab, n_embd, n_layer, n_head, head_dim, n_ff,
                       n_positions > 0 ? fmt::format("learned ({})", n_positions) : fmt::format("rotary θ={}", rope.theta),
                       pooling_name(pooling));
  return fmt::format("{} '{}': vocab {}, dim {}, layers {}, heads {}/{} (head_dim {}), ffn {}, rope {} θ={}",
                     arch_name(arch), name, n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff,
                     ir::enum_name(rope.layout), rope.theta) +
         (n_expert > 0 ? fmt::format(", experts {} (top {}, ffn {})", n_expert, n_expert_used, n_ff_expert) : "") +
         (has_recurrent_layers()
              ? fmt::format(", delta-net layers {} of {} (k heads {}, v heads {}, dims {}/{}, conv {})",
                            std::count(recurrent_layers.begin(), recurrent_layers.end(), true), n_layer, ssm_n_k_heads,
                            ssm_n_v_heads, ssm_head_k_dim, ssm_head_v_dim, ssm_conv_kernel)
              : "") +
         (latent_attention() ? fmt::format(", latent attention (q rank {}, kv rank {}, rope {}, v {})", latent_q_rank,
                                           latent_kv_rank, rope.n_rot, v_head_dim)
                             : "");
}

namespace {

// qwen35's rope.dimension_sections (llama.cpp's interleaved multi-axis rope, made for
// images): pair i turns with position component i % 3 while i < 3 sections[i % 3], with
// the fourth component otherwise. A text token has the same position in the first three
// and 0 in the fourth, so RLX's plain rope is the same rotation when the three sections
// cover every one of the n_rot / 2 pairs; other layouts are refused.
Status check_text_rope_sections(const formats::GgufFile& f, const std::string& arch, int64_t n_rot) {
  const std::string key = arch + ".rope.dimension_sections";
  if (!f.contains(key)) return {};
  auto array = f.get_array(key);
  if (!array) return array.error().with_context(f.name());
  const formats::GgufArray& a = **array;
  using T = formats::GgufValueType;
  if (a.elem_type != T::kI32 && a.elem_type != T::kU32 && a.elem_type != T::kI64 && a.elem_type != T::kU64)
    return Error::invalid_file("{}: '{}' must be an array of integers", f.name(), key);
  std::vector<int64_t> sections;
  for (uint64_t i = 0; i < a.count && i < 4; ++i) {
    const int64_t v = a.scalar_at<int64_t>(i);
    if (v < 0 || v > (int64_t{1} << 20)) return Error::invalid_file("{}: '{}' entry {} is {}", f.name(), key, i, v);
    sections.push_back(v);
  }
  if (sections.size() < 3) return Error::invalid_file("{}: '{}' has {} entries, not 4", f.name(), key, a.count);
  for (int64_t i = 0; i < n_rot / 2; ++i)
    if (i >= 3 * sections[static_cast<size_t>(i % 3)])
      return Error::unsupported("{}: '{}' [{}] leaves rotary pair {} of {} to the fourth position component, which "
                                "RLX does not run (text tokens turn every pair with their position)",
                                f.name(), key, fmt::join(sections, ", "), i, n_rot / 2);
  return {};
}

}  // namespace

Expected<ModelConfig> config_from_gguf(const formats::GgufFile& f) {
  ASSIGN_OR_RETURN(std::string_view arch_text, f.get_string("general.architecture"));
  const std::string arch(arch_text);
  ModelConfig c;
  if (arch == "llama") c.arch = Arch::Llama;
  else if (arch == "qwen2") c.arch = Arch::Qwen2;
  else if (arch == "qwen3") c.arch = Arch::Qwen3;
  else if (arch == "gemma") c.arch = Arch::Gemma;
  else if (arch == "gemma2") c.arch = Arch::Gemma2;
  else if (arch == "gemma3") c.arch = Arch::Gemma3;
  else if (arch == "phi3") c.arch = Arch::Phi3;
  else if (arch == "qwen3moe") c.arch = Arch::Qwen3Moe;
  else if (arch == "qwen35" || arch == "qwen35moe" || arch == "qwen3next") c.arch = Arch::Qwen35;  // keys under each name
  else if (arch == "bert") c.arch = Arch::Bert;
  else if (arch == "nomic-bert") c.arch = Arch::NomicBert;
  else if (arch == "modern-bert") c.arch = Arch::ModernBert;
  else if (arch == "minicpm3") c.arch = Arch::MiniCPM3;
  else
    return Error::unsupported("{}: architecture '{}' is not supported (llama, qwen2, qwen3, qwen3moe, gemma, gemma2, "
                              "gemma3, phi3, qwen35, qwen35moe, qwen3next, minicpm3; encoders bert, nomic-bert, "
                              "modern-bert)", f.name(), arch);
  if (auto n = f.get_string("general.name")) c.name = std::string(*n);

  auto req_int = [&](const std::string& key) -> Expected<int64_t> {
    auto v = f.get_int(arch + "." + key);
    if (!v) return v.error().with_context(f.name());
    return *v;
  };
  auto opt_int = [&](const std::string& key, int64_t fallback) -> int64_t {
    auto v = f.get_int(arch + "." + key);
    return v ? *v : fallback;
  };
  auto opt_float = [&](const std::string& key, double fallback) -> double {
    auto v = f.get_float(arch + "." + key);
    return v ? *v : fallback;
  };

  ASSIGN_OR_RETURN(c.n_embd, req_int("embedding_length"));
  ASSIGN_OR_RETURN(c.n_layer, req_int("block_count"));
  ASSIGN_OR_RETURN(c.n_head, req_int("attention.head_count"));
  // Experts (Mixtral as `llama`, qwen3moe): the dense width may be absent then.
  c.n_expert = opt_int("expert_count", 0);
  c.n_expert_used = opt_int("expert_used_count", 0);
  if (c.n_expert > 0) {
    c.n_ff_expert = opt_int("expert_feed_forward_length", opt_int("feed_forward_length", 0));
    c.n_ff = opt_int("feed_forward_length", c.n_ff_expert);
    c.expert_weights_norm = true;  // llama.cpp renormalizes the chosen weights for llama and qwen3moe
  } else {
    ASSIGN_OR_RETURN(c.n_ff, req_int("feed_forward_length"));
  }
  c.n_head_kv = opt_int("attention.head_count_kv", c.n_head);
  c.n_ctx_train = opt_int("context_length", 2048);
  c.head_dim = opt_int("attention.key_length", c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.norm_eps = opt_float("attention.layer_norm_rms_epsilon", 1e-5);
  c.rope.head_dim = c.head_dim;
  c.rope.n_rot = opt_int("rope.dimension_count", c.head_dim);
  c.rope.theta = opt_float("rope.freq_base", 10000.0);
  c.attn_scale = opt_float("attention.scale", 0.0);  // 0: 1/sqrt(head_dim)

  // Vocabulary size: metadata, else the token list, else the embedding rows.
  c.n_vocab = opt_int("vocab_size", 0);
  if (c.n_vocab == 0) {
    if (auto toks = f.get_array("tokenizer.ggml.tokens")) c.n_vocab = static_cast<int64_t>((*toks)->count);
  }
  const formats::GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (embd && embd->dims.size() == 2) {
    if (c.n_vocab == 0) c.n_vocab = embd->dims[1];
    if (embd->dims[1] != c.n_vocab)
      return Error::invalid_file("{}: token_embd.weight has {} rows but the vocabulary has {} tokens", f.name(),
                                 embd->dims[1], c.n_vocab);
  }
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;

  TRY(detail::read_gguf_rope(f, arch, &c));

  switch (c.arch) {
    case Arch::Llama:
      c.rope.layout = ir::RopeLayout::Normal;
      c.sliding_window = opt_int("attention.sliding_window", 0);
      if (c.sliding_window > 0) c.sliding = SlidingPattern::All;
      break;
    case Arch::Qwen2:
      c.rope.layout = ir::RopeLayout::Neox;
      c.qkv_bias = true;
      break;
    case Arch::Phi3:
      c.rope.layout = ir::RopeLayout::Neox;
      c.fused_projections = true;
      c.sliding_window = opt_int("attention.sliding_window", 0);
      if (c.sliding_window > 0) c.sliding = SlidingPattern::All;
      break;
    case Arch::Qwen3:
    case Arch::Qwen3Moe:
      c.rope.layout = ir::RopeLayout::Neox;
      c.qk_norm = true;
      break;
    case Arch::Gemma:
      c.rope.layout = ir::RopeLayout::Neox;
      c.ffn = FfnKind::GeGLU;
      c.embed_scale = true;
      c.tied_embeddings = true;
      break;
    case Arch::Gemma2:
      c.rope.layout = ir::RopeLayout::Neox;
      c.ffn = FfnKind::GeGLU;
      c.embed_scale = true;
      c.post_norms = true;
      c.attn_softcap = opt_float("attn_logit_softcapping", 0.0);
      c.final_softcap = opt_float("final_logit_softcapping", 0.0);
      c.sliding_window = opt_int("attention.sliding_window", 0);
      c.sliding = SlidingPattern::EvenLayers;
      c.prescale_q = true;
      break;
    case Arch::Gemma3:
      c.rope.layout = ir::RopeLayout::Neox;
      c.ffn = FfnKind::GeGLU;
      c.embed_scale = true;
      c.post_norms = true;
      c.qk_norm = true;
      c.final_softcap = opt_float("final_logit_softcapping", 0.0);
      c.sliding_window = opt_int("attention.sliding_window", 0);
      c.sliding = SlidingPattern::Gemma3;
      c.rope_theta_local = opt_float("rope.freq_base_swa", 10000.0);
      break;
    case Arch::Qwen35: {
      // llama.cpp's qwen35 keys: the delta-net sizes under ssm.*, every
      // full_attention_interval-th layer full attention (with q-k norms and the output
      // gate folded into attn_q), the others gated delta-nets. Norm weights are stored
      // as the 1 + w the model multiplies by.
      c.rope.layout = ir::RopeLayout::Neox;
      c.qk_norm = true;
      c.attn_output_gate = true;
      c.ssm_grouped_projections = arch == "qwen3next";  // ssm_ba (and older files' ssm_in), grouped by key head
      TRY(check_text_rope_sections(f, arch, c.rope.n_rot));
      ASSIGN_OR_RETURN(c.ssm_conv_kernel, req_int("ssm.conv_kernel"));
      ASSIGN_OR_RETURN(c.ssm_head_k_dim, req_int("ssm.state_size"));
      ASSIGN_OR_RETURN(c.ssm_n_k_heads, req_int("ssm.group_count"));
      ASSIGN_OR_RETURN(c.ssm_n_v_heads, req_int("ssm.time_step_rank"));
      ASSIGN_OR_RETURN(const int64_t inner, req_int("ssm.inner_size"));
      if (c.ssm_n_v_heads <= 0 || inner % c.ssm_n_v_heads != 0)
        return Error::invalid_file("{}: {}.ssm.inner_size {} is not a multiple of {} value heads", f.name(), arch, inner,
                                   c.ssm_n_v_heads);
      c.ssm_head_v_dim = inner / c.ssm_n_v_heads;
      const int64_t every = opt_int("full_attention_interval", 4);
      if (every < 1 || every > 4096 || c.n_layer < 1 || c.n_layer > 4096)
        return Error::invalid_file("{}: {}.full_attention_interval {} (layers {}) is out of range", f.name(), arch,
                                   every, c.n_layer);
      for (int64_t il = 0; il < c.n_layer; ++il) c.recurrent_layers.push_back((il + 1) % every != 0);
      c.n_ff_shared = opt_int("expert_shared_feed_forward_length", 0);
      c.shared_expert_gate = c.n_ff_shared > 0 && f.find_tensor("blk.0.ffn_gate_inp_shexp.weight") != nullptr;
      if (!c.has_recurrent_layers()) c.recurrent_layers.clear();
      break;
    }
    case Arch::MiniCPM3: {
      // llama.cpp's minicpm3 keys: the latent ranks, key_length = nope + rope and the rope
      // part as rope.dimension_count; value heads n_embd / n_head wide unless value_length
      // says. llama.cpp fixes MiniCPM3-4B's scales in its graph (embeddings x 12, residual
      // branches x 1.4 / sqrt(layers), hidden state x 256 / n_embd before the head); the
      // scale keys, which `rlx convert` writes, say others.
      c.rope.layout = ir::RopeLayout::Neox;
      c.latent_q_rank = opt_int("attention.q_lora_rank", 0);
      ASSIGN_OR_RETURN(c.latent_kv_rank, req_int("attention.kv_lora_rank"));
      c.v_head_dim = opt_int("attention.value_length", c.n_head > 0 ? c.n_embd / c.n_head : 0);
      c.latent_norm_eps = c.norm_eps;
      if (auto eps = f.get_float(kGgufLatentNormEpsKey)) c.latent_norm_eps = *eps;
      c.n_head_kv = c.n_head;
      c.embedding_scale = opt_float("embedding_scale", 12.0);
      c.residual_scale =
          opt_float("residual_scale", c.n_layer > 0 ? 1.4 / std::sqrt(static_cast<double>(c.n_layer)) : 1.0);
      c.logit_scale = opt_float("logit_scale", static_cast<double>(c.n_embd) / 256.0);
      break;
    }
    case Arch::Bert:
    case Arch::NomicBert:
    case Arch::ModernBert: {
      // llama.cpp's encoder keys: LayerNorm epsilon, pooling_type (0 none, 1 mean,
      // 2 cls, 3 last), token types from the tokenizer section.
      c.norm_eps = opt_float("attention.layer_norm_epsilon", 1e-12);
      c.rope.layout = ir::RopeLayout::Neox;
      c.n_token_types = 0;
      if (auto n = f.get_int("tokenizer.ggml.token_type_count")) c.n_token_types = *n;
      if (const formats::GgufTensor* t = f.find_tensor("token_types.weight"); t && t->dims.size() == 2)
        c.n_token_types = t->dims[1];
      if (const formats::GgufTensor* t = f.find_tensor("position_embd.weight"); t && t->dims.size() == 2)
        c.n_positions = t->dims[1];
      switch (opt_int("pooling_type", 2)) {
        case 0: c.pooling = Pooling::None; break;
        case 1: c.pooling = Pooling::Mean; break;
        case 3: c.pooling = Pooling::Last; break;
        default: c.pooling = Pooling::Cls; break;
      }
      c.tied_embeddings = true;
      if (c.arch == Arch::Bert) {
        c.ffn = FfnKind::Gelu;
        c.linear_bias = true;
      } else if (c.arch == Arch::NomicBert) {
        c.ffn = FfnKind::SwiGLU;
      } else {
        c.ffn = FfnKind::GeGLU;
        c.pre_norm = true;
        c.norm_bias = f.find_tensor("token_embd_norm.bias") != nullptr;
        c.sliding_window = opt_int("attention.sliding_window", 0) / 2;
        const int64_t every = std::max<int64_t>(opt_int("attention.global_attn_every_n_layers", 3), 1);
        if (c.n_layer > 0 && c.n_layer <= 4096)
          for (int64_t il = 0; il < c.n_layer; ++il) c.sliding_layers.push_back(il % every != 0);
        c.rope_theta_local = opt_float("rope.freq_base_swa", 10000.0);
      }
      break;
    }
  }
  // llama.cpp computes a decoder's GELU through an f16 table; RLX does the same for the
  // files llama.cpp runs, except those `rlx convert` wrote from a checkpoint whose
  // GELU is exact (key kGgufExactGeluKey).
  auto exact_gelu = f.get_bool(kGgufExactGeluKey);
  c.gelu_f16_rounding = c.ffn == FfnKind::GeGLU && !is_encoder(c.arch) && !(exact_gelu && *exact_gelu);
  if (auto bos = f.get_int("tokenizer.ggml.bos_token_id")) c.bos_id = *bos;
  if (auto eos = f.get_int("tokenizer.ggml.eos_token_id")) c.eos_id = *eos;
  if (Status s = c.validate(); !s.ok()) return s.error().with_context(f.name());
  return c;
}

}  // namespace rlx::models
