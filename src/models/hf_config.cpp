// ModelConfig from a Hugging Face config.json. HF checkpoints keep q/k weights in
// their original order, so RoPE uses the half-split (neox) layout for every family.
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/rope_config.h"
#include "rlx/base/json_limits.h"
#include "rlx/formats/mapped_file.h"
#include "rlx/models/media_encoder.h"
#include "rlx/models/model_config.h"

namespace rlx::models {
namespace {

using nlohmann::json;

// Typed access to the top-level members of config.json. An absent or null member takes
// the fallback; a member of the wrong JSON type is an error naming the key (a string
// "8" where a number belongs must not silently become the default).
struct Reader {
  const json& j;
  const std::string& path;
  const json* find(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  Error wrong_type(const char* key, const json& v, const char* want) const {
    return Error::invalid_file("{}: '{}' must be {}, got a {}", path, key, want, v.type_name());
  }
  Expected<int64_t> as_int(const char* key, const json& v) const {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return Error::invalid_file("{}: '{}' is out of range", path, key);
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {  // 4096.0 is an integer; 1.5, NaN and 1e300 are not
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) return static_cast<int64_t>(d);
      return Error::invalid_file("{}: '{}' must be an integer, got {}", path, key, d);
    }
    return wrong_type(key, v, "an integer");
  }
  Expected<int64_t> req_int(const char* key) const {
    const json* v = find(key);
    if (!v) return Error::invalid_file("{}: '{}' is missing", path, key);
    return as_int(key, *v);
  }
  Expected<int64_t> opt_int(const char* key, int64_t fallback) const {
    const json* v = find(key);
    return v ? as_int(key, *v) : Expected<int64_t>(fallback);
  }
  Expected<double> opt_float(const char* key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) return wrong_type(key, *v, "a number");
    return v->get<double>();
  }
  Expected<bool> opt_bool(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) return wrong_type(key, *v, "true or false");
    return v->get<bool>();
  }
  /// A token id: an integer, or a list of them (Llama 3 lists several eos ids; the
  /// first is taken).
  Expected<int64_t> opt_token_id(const char* key) const {
    const json* v = find(key);
    if (!v) return -1;
    if (!v->is_array()) return as_int(key, *v);
    if (v->empty()) return -1;
    return as_int(key, v->front());
  }
};

// Mixtral: num_local_experts experts of width intermediate_size in every layer, the
// chosen weights always renormalized. Qwen3-MoE: num_experts (num_local_experts in
// newer files) of width moe_intermediate_size, renormalized when norm_topk_prob; the
// layers in mlp_only_layers, and all but every decoder_sparse_step-th, stay dense; with
// num_experts 0 (Qwen3-MoE, Qwen3-Next) every layer is dense. Qwen3.5-MoE and
// Qwen3-Next add a sigmoid-gated shared expert to every MoE layer; Qwen3.5-MoE always
// renormalizes, Qwen3-Next when norm_topk_prob (its default: true).
Status read_experts(const Reader& r, const std::string& type, ModelConfig* c) {
  const char* count_key = type != "mixtral" && r.find("num_experts") ? "num_experts" : "num_local_experts";
  ASSIGN_OR_RETURN(c->n_expert, r.req_int(count_key));
  if (c->n_expert == 0 && (type == "qwen3_moe" || type == "qwen3_next")) return {};  // the dense MLP everywhere
  ASSIGN_OR_RETURN(c->n_expert_used, r.req_int("num_experts_per_tok"));
  if (type == "mixtral") {
    c->n_ff_expert = c->n_ff;
    c->expert_weights_norm = true;
    return {};
  }
  ASSIGN_OR_RETURN(c->n_ff_expert, r.req_int("moe_intermediate_size"));
  ASSIGN_OR_RETURN(c->expert_weights_norm, r.opt_bool("norm_topk_prob", type == "qwen3_next"));
  if (type == "qwen3_5_moe_text" || type == "qwen3_next") {
    if (type == "qwen3_5_moe_text") c->expert_weights_norm = true;
    ASSIGN_OR_RETURN(c->n_ff_shared, r.req_int("shared_expert_intermediate_size"));
    c->shared_expert_gate = c->n_ff_shared > 0;
  }
  ASSIGN_OR_RETURN(const int64_t step, r.opt_int("decoder_sparse_step", 1));
  if (step < 1 || step > 4096)
    return Error::invalid_file("{}: 'decoder_sparse_step' {} must be in [1, 4096]", r.path, step);
  if (c->n_layer < 1 || c->n_layer > 4096) return {};  // validate() names the layer count
  c->dense_layers.assign(static_cast<size_t>(c->n_layer), false);
  for (int64_t il = 0; il < c->n_layer; ++il) c->dense_layers[static_cast<size_t>(il)] = (il + 1) % step != 0;
  if (const json* layers = r.find("mlp_only_layers")) {
    if (!layers->is_array()) return r.wrong_type("mlp_only_layers", *layers, "a list of layer indices");
    for (const json& v : *layers) {
      ASSIGN_OR_RETURN(const int64_t il, r.as_int("mlp_only_layers", v));
      if (il < 0 || il >= c->n_layer)
        return Error::invalid_file("{}: 'mlp_only_layers' entry {} is not a layer index (0..{})", r.path, il,
                                   c->n_layer - 1);
      c->dense_layers[static_cast<size_t>(il)] = true;
    }
  }
  return {};
}

// Gated delta-net layers (Qwen3.5, Qwen3-Next): their sizes, and which layers they are —
// layer_types when given (read by the caller), else every full_attention_interval-th
// layer is full attention and the others linear.
Status read_linear_attention(const Reader& r, ModelConfig* c) {
  ASSIGN_OR_RETURN(c->ssm_conv_kernel, r.opt_int("linear_conv_kernel_dim", 4));
  ASSIGN_OR_RETURN(c->ssm_n_k_heads, r.req_int("linear_num_key_heads"));
  ASSIGN_OR_RETURN(c->ssm_n_v_heads, r.req_int("linear_num_value_heads"));
  ASSIGN_OR_RETURN(c->ssm_head_k_dim, r.req_int("linear_key_head_dim"));
  ASSIGN_OR_RETURN(c->ssm_head_v_dim, r.req_int("linear_value_head_dim"));
  if (c->recurrent_layers.empty() && c->n_layer >= 1 && c->n_layer <= 4096) {
    ASSIGN_OR_RETURN(const int64_t every, r.opt_int("full_attention_interval", 4));
    if (every < 1 || every > 4096)
      return Error::invalid_file("{}: 'full_attention_interval' {} must be in [1, 4096]", r.path, every);
    for (int64_t il = 0; il < c->n_layer; ++il) c->recurrent_layers.push_back((il + 1) % every != 0);
  }
  if (!c->has_recurrent_layers()) c->recurrent_layers.clear();
  return {};
}

// The encoders. Older nomic-bert files (nomic-embed-text v1 / v1.5) use GPT-2 style
// keys (n_embd, n_layer, n_head, n_inner, rotary_emb_base, layer_norm_epsilon); the
// caller reads the shared sizes with those as fallbacks. ModernBERT's local layers see
// keys within local_attention / 2 on each side; files before layer_types say every
// global_attn_every_n_layers-th layer is global, with global_rope_theta /
// local_rope_theta as the two rotary bases.
Status read_encoder(const Reader& r, const std::string& type, ModelConfig* c) {
  c->tied_embeddings = true;
  c->n_head_kv = c->n_head;
  auto act = [&](const char* key, const char* fallback) -> Expected<std::string> {
    const json* v = r.find(key);
    if (!v) return std::string(fallback);
    if (!v->is_string()) return r.wrong_type(key, *v, "a string");
    return v->get<std::string>();
  };
  auto gelu_kind = [&](const std::string& a, const char* key) -> Status {
    if (a == "gelu") c->gelu_tanh = false;
    else if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") c->gelu_tanh = true;
    else return Error::unsupported("{}: {} '{}' is not supported for {} (gelu, gelu_new, gelu_pytorch_tanh)", r.path, key, a, type);
    return {};
  };
  if (type == "bert") {
    ASSIGN_OR_RETURN(c->norm_eps, r.opt_float("layer_norm_eps", 1e-12));
    ASSIGN_OR_RETURN(c->n_token_types, r.opt_int("type_vocab_size", 2));
    ASSIGN_OR_RETURN(c->n_positions, r.opt_int("max_position_embeddings", 512));
    ASSIGN_OR_RETURN(const std::string a, act("hidden_act", "gelu"));
    TRY(gelu_kind(a, "hidden_act"));
    ASSIGN_OR_RETURN(const std::string pe, act("position_embedding_type", "absolute"));
    if (pe != "absolute")
      return Error::unsupported("{}: position_embedding_type '{}' is not supported (absolute)", r.path, pe);
    c->ffn = FfnKind::Gelu;
    c->linear_bias = true;
    c->pooling = Pooling::Cls;
    return {};
  }
  if (type == "nomic_bert") {
    ASSIGN_OR_RETURN(const double eps_old, r.opt_float("layer_norm_epsilon", 1e-12));
    ASSIGN_OR_RETURN(c->norm_eps, r.opt_float("layer_norm_eps", eps_old));
    ASSIGN_OR_RETURN(c->n_token_types, r.opt_int("type_vocab_size", 2));
    ASSIGN_OR_RETURN(const double base, r.opt_float("rotary_emb_base", c->rope.theta));
    c->rope.theta = base;
    ASSIGN_OR_RETURN(const double fraction, r.opt_float("rotary_emb_fraction", 1.0));
    if (!(fraction > 0 && fraction <= 1)) return Error::invalid_file("{}: 'rotary_emb_fraction' must be in (0, 1]", r.path);
    c->rope.n_rot = static_cast<int64_t>(std::lround(static_cast<double>(c->head_dim) * fraction)) / 2 * 2;
    ASSIGN_OR_RETURN(const bool interleaved, r.opt_bool("rotary_emb_interleaved", false));
    if (interleaved) c->rope.layout = ir::RopeLayout::Normal;
    ASSIGN_OR_RETURN(const std::string a_old, act("activation_function", "swiglu"));
    ASSIGN_OR_RETURN(const std::string a, act("hidden_act", a_old == "swiglu" ? "silu" : a_old.c_str()));
    if (a != "silu") return Error::unsupported("{}: nomic_bert activation '{}' is not supported (silu / swiglu)", r.path, a);
    for (const char* key : {"qkv_proj_bias", "mlp_fc1_bias", "mlp_fc2_bias"}) {
      ASSIGN_OR_RETURN(const bool bias, r.opt_bool(key, false));
      if (bias) return Error::unsupported("{}: '{}' (projection biases) is not supported for nomic_bert", r.path, key);
    }
    c->ffn = FfnKind::SwiGLU;
    c->pooling = Pooling::Mean;  // nomic-embed's sentence-transformers pooling
    return {};
  }
  // modernbert
  ASSIGN_OR_RETURN(c->norm_eps, r.opt_float("norm_eps", 1e-5));
  ASSIGN_OR_RETURN(c->norm_bias, r.opt_bool("norm_bias", false));
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    ASSIGN_OR_RETURN(const bool bias, r.opt_bool(key, false));
    if (bias) return Error::unsupported("{}: '{}' (projection biases) is not supported for modernbert", r.path, key);
  }
  ASSIGN_OR_RETURN(const std::string a, act("hidden_activation", "gelu"));
  TRY(gelu_kind(a, "hidden_activation"));
  ASSIGN_OR_RETURN(const int64_t local, r.opt_int("local_attention", 128));
  if (local < 0 || local > (int64_t{1} << 30)) return Error::invalid_file("{}: 'local_attention' {} is out of range", r.path, local);
  c->sliding_window = local / 2;
  if (c->sliding_layers.empty() && c->n_layer > 0 && c->n_layer <= 4096) {
    ASSIGN_OR_RETURN(const int64_t every, r.opt_int("global_attn_every_n_layers", 3));
    if (every < 1) return Error::invalid_file("{}: 'global_attn_every_n_layers' must be positive, got {}", r.path, every);
    for (int64_t il = 0; il < c->n_layer; ++il) c->sliding_layers.push_back(il % every != 0);
  }
  if (r.find("global_rope_theta")) {
    ASSIGN_OR_RETURN(c->rope.theta, r.opt_float("global_rope_theta", 160000.0));
  }
  ASSIGN_OR_RETURN(const double local_theta, r.opt_float("local_rope_theta", c->rope_theta_local > 0 ? c->rope_theta_local : 10000.0));
  c->rope_theta_local = local_theta;
  c->ffn = FfnKind::GeGLU;
  c->pre_norm = true;
  c->pooling = Pooling::Cls;
  return {};
}

// MiniCPM3's multi-head latent attention, with the defaults of transformers'
// MiniCPM3Config (MiniCPM3-4B's) for absent keys: each query / key head is
// qk_nope_head_dim + qk_rope_head_dim wide with the rope part last, keys and values
// expanded from a kv_lora_rank latent, queries through a q_lora_rank one (null: projected
// directly), value heads v_head_dim wide (absent or null: hidden_size / heads). MiniCPM's
// scales: embeddings times scale_emb, residual branches times scale_depth / sqrt(layers)
// (null: 1), the final hidden state divided by hidden_size / dim_model_base (null: 1).
// The latent norms are transformers' RMSNorm at its default epsilon, 1e-6.
Status read_latent_attention(const Reader& r, ModelConfig* c) {
  auto is_null = [&](const char* key) {
    auto it = r.j.find(key);
    return it != r.j.end() && it->is_null();
  };
  if (is_null("kv_lora_rank")) return Error::invalid_file("{}: 'kv_lora_rank' must be an integer, got null", r.path);
  ASSIGN_OR_RETURN(const int64_t nope, r.opt_int("qk_nope_head_dim", 64));
  ASSIGN_OR_RETURN(const int64_t rope, r.opt_int("qk_rope_head_dim", 32));
  ASSIGN_OR_RETURN(c->latent_kv_rank, r.opt_int("kv_lora_rank", 256));
  if (is_null("q_lora_rank")) {
    c->latent_q_rank = 0;
  } else {
    ASSIGN_OR_RETURN(c->latent_q_rank, r.opt_int("q_lora_rank", 768));
  }
  ASSIGN_OR_RETURN(c->v_head_dim, r.opt_int("v_head_dim", c->n_head > 0 ? c->n_embd / c->n_head : 0));
  if (nope < 0 || rope <= 0 || rope % 2 != 0 || nope > (1 << 14) || rope > (1 << 14))
    return Error::invalid_file("{}: qk_nope_head_dim {} / qk_rope_head_dim {} are out of range (the rope part even "
                               "and positive)", r.path, nope, rope);
  if (c->latent_kv_rank <= 0 || c->latent_q_rank < 0)
    return Error::invalid_file("{}: 'kv_lora_rank' {} must be positive and 'q_lora_rank' {} positive or null", r.path,
                               c->latent_kv_rank, c->latent_q_rank);
  c->head_dim = nope + rope;
  c->rope.head_dim = c->head_dim;
  c->rope.n_rot = rope;
  if (c->n_head_kv != c->n_head)
    return Error::invalid_file("{}: num_key_value_heads {} must equal num_attention_heads {} (latent attention expands "
                               "every head's key and value)", r.path, c->n_head_kv, c->n_head);
  ASSIGN_OR_RETURN(const bool bias, r.opt_bool("attention_bias", false));
  if (bias)
    return Error::unsupported("{}: 'attention_bias' (biases on q_a_proj, kv_a_proj_with_mqa and o_proj) is not "
                              "supported for minicpm3", r.path);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {  // YaRN's softmax-scale term
    const json* rs = r.find(key);
    if (rs && rs->is_object() && rs->contains("mscale_all_dim") && (*rs)["mscale_all_dim"].is_number() &&
        (*rs)["mscale_all_dim"].get<double>() != 0)
      return Error::unsupported("{}: '{}.mscale_all_dim' (YaRN's scaling of the attention softmax) is not supported "
                                "for minicpm3", r.path, key);
  }
  ASSIGN_OR_RETURN(c->norm_eps, r.opt_float("rms_norm_eps", 1e-5));
  ASSIGN_OR_RETURN(c->tied_embeddings, r.opt_bool("tie_word_embeddings", true));
  c->latent_norm_eps = 1e-6;
  ASSIGN_OR_RETURN(c->embedding_scale, r.opt_float("scale_emb", 12.0));
  if (c->n_layer <= 0 || c->n_layer > 4096) return {};  // validate() names the layer count
  double depth = std::sqrt(static_cast<double>(c->n_layer));
  if (!is_null("scale_depth")) {
    ASSIGN_OR_RETURN(depth, r.opt_float("scale_depth", 1.4));
  }
  double base = static_cast<double>(c->n_embd);
  if (!is_null("dim_model_base")) {
    ASSIGN_OR_RETURN(base, r.opt_float("dim_model_base", 256.0));
  }
  if (!(base > 0 && std::isfinite(base)))
    return Error::invalid_file("{}: 'dim_model_base' must be positive, got {}", r.path, base);
  c->residual_scale = depth / std::sqrt(static_cast<double>(c->n_layer));
  c->logit_scale = static_cast<double>(c->n_embd) / base;
  return {};
}

}  // namespace

Expected<ModelConfig> config_from_hf(const std::string& path) {
  ASSIGN_OR_RETURN(formats::MappedFile file, formats::MappedFile::open(path));
  const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()), file.size());
  TRY(check_json_depth(text, path));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Error::parse("{}: not a JSON object", path);
  Reader r{j, path};
  auto type_it = j.find("model_type");
  if (type_it == j.end() || !type_it->is_string()) return Error::invalid_file("{}: 'model_type' is missing", path);
  const std::string type = type_it->get<std::string>();

  ModelConfig c;
  c.name = type;
  if (type == "llama" || type == "mistral" || type == "mixtral") c.arch = Arch::Llama;
  else if (type == "qwen2") c.arch = Arch::Qwen2;
  else if (type == "qwen3") c.arch = Arch::Qwen3;
  else if (type == "qwen3_moe") c.arch = Arch::Qwen3Moe;
  else if (type == "gemma") c.arch = Arch::Gemma;
  else if (type == "gemma2") c.arch = Arch::Gemma2;
  else if (type == "gemma3_text" || type == "gemma3") c.arch = Arch::Gemma3;
  else if (type == "phi3") c.arch = Arch::Phi3;
  else if (type == "bert") c.arch = Arch::Bert;
  else if (type == "nomic_bert") c.arch = Arch::NomicBert;
  else if (type == "modernbert") c.arch = Arch::ModernBert;
  else if (type == "qwen3_5_text" || type == "qwen3_5_moe_text" || type == "qwen3_next") c.arch = Arch::Qwen35;
  else if (type == "minicpm3") c.arch = Arch::MiniCPM3;
  else if (is_media_model_type(type))
    return Error::unsupported("{}: model_type '{}' is a vision / audio encoder: rlx forward runs it (this command takes "
                              "language models and text encoders)", path, type);
  else if (type == "sam")
    return Error::unsupported("{}: model_type 'sam' is a segmentation model: rlx segment and rlx forward run it (this "
                              "command takes language models and text encoders)", path);
  else
    return Error::unsupported("{}: model_type '{}' is not supported (llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, "
                              "gemma, gemma2, gemma3_text, phi3, qwen3_5_text, qwen3_5_moe_text, qwen3_next, minicpm3; "
                              "encoders bert, nomic_bert, modernbert)", path, type);

  // Older nomic_bert files name the sizes as GPT-2 does.
  const bool gpt2_keys = c.arch == Arch::NomicBert && r.find("n_embd");
  ASSIGN_OR_RETURN(c.n_vocab, r.req_int("vocab_size"));
  ASSIGN_OR_RETURN(c.n_embd, r.req_int(gpt2_keys ? "n_embd" : "hidden_size"));
  ASSIGN_OR_RETURN(c.n_layer, r.req_int(gpt2_keys ? "n_layer" : "num_hidden_layers"));
  ASSIGN_OR_RETURN(c.n_head, r.req_int(gpt2_keys ? "n_head" : "num_attention_heads"));
  if (gpt2_keys && !r.find("n_inner")) {
    c.n_ff = 4 * c.n_embd;
  } else {
    ASSIGN_OR_RETURN(c.n_ff, r.req_int(gpt2_keys ? "n_inner" : "intermediate_size"));
  }
  ASSIGN_OR_RETURN(c.n_head_kv, r.opt_int("num_key_value_heads", c.n_head));
  // Qwen3-Next's head_dim defaults to 256 (its config class), not to hidden_size / heads.
  const int64_t head_dim_default = type == "qwen3_next" ? 256 : c.n_head > 0 ? c.n_embd / c.n_head : 0;
  ASSIGN_OR_RETURN(c.head_dim, r.opt_int("head_dim", head_dim_default));
  ASSIGN_OR_RETURN(c.n_ctx_train, r.opt_int("max_position_embeddings", 2048));
  ASSIGN_OR_RETURN(c.norm_eps, r.opt_float("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.tied_embeddings, r.opt_bool("tie_word_embeddings", false));
  c.rope.layout = ir::RopeLayout::Neox;
  c.rope.head_dim = c.head_dim;
  c.rope.n_rot = c.head_dim;
  // Qwen3-Next rotates a quarter of each head unless the file says otherwise.
  if (type == "qwen3_next") c.rope.n_rot = c.head_dim / 4 / 2 * 2;
  // MiniCPM3's heads: query / key [nope | rope] (its head_dim key is the rope part).
  if (c.arch == Arch::MiniCPM3) TRY(read_latent_attention(r, &c));
  ASSIGN_OR_RETURN(c.rope.theta, r.opt_float("rope_theta", 10000.0));
  if (const json* v = r.find("partial_rotary_factor")) {  // top level (Phi, StableLM); rope_parameters may say it too
    json partial = json::object();
    partial["partial_rotary_factor"] = *v;
    TRY(detail::read_hf_rope(partial, j, path, &c.rope, &c.rope_long_factors));
  }
  if (const json* v = r.find("rope_scaling")) TRY(detail::read_hf_rope(*v, j, path, &c.rope, &c.rope_long_factors));
  if (const json* v = r.find("rope_parameters")) {
    if (v->is_object() && v->contains("full_attention")) {  // per layer type (gemma3)
      TRY(detail::read_hf_rope((*v)["full_attention"], j, path, &c.rope, &c.rope_long_factors));
      ir::RopeAttrs local = c.rope;
      std::vector<double> local_long;
      if (v->contains("sliding_attention"))
        TRY(detail::read_hf_rope((*v)["sliding_attention"], j, path, &local, &local_long));
      c.rope_theta_local = local.theta;
    } else {
      TRY(detail::read_hf_rope(*v, j, path, &c.rope, &c.rope_long_factors));
    }
  }
  ASSIGN_OR_RETURN(c.rope_theta_local, r.opt_float("rope_local_base_freq", c.rope_theta_local));
  ASSIGN_OR_RETURN(c.sliding_window, r.opt_int("sliding_window", 0));
  if (const json* v = r.find("layer_types")) {
    if (!v->is_array()) return r.wrong_type("layer_types", *v, "an array");
    for (size_t i = 0; i < v->size(); ++i) {
      const json& t = (*v)[i];
      const std::string kind = t.is_string() ? t.get<std::string>() : std::string();
      const bool sliding = kind == "sliding_attention", linear = kind == "linear_attention";
      if (!sliding && !linear && kind != "full_attention")
        return Error::invalid_file(
            "{}: layer_types[{}] must be \"sliding_attention\", \"full_attention\" or \"linear_attention\"", path, i);
      c.sliding_layers.push_back(sliding);
      c.recurrent_layers.push_back(linear);
    }
    if (static_cast<int64_t>(c.sliding_layers.size()) != c.n_layer)
      return Error::invalid_file("{}: layer_types has {} entries for {} layers", path, c.sliding_layers.size(),
                                 c.n_layer);
  }
  if (c.sliding_window > 0 && c.sliding_layers.empty() && (type == "mistral" || type == "mixtral" || type == "phi3"))
    c.sliding = SlidingPattern::All;
  ASSIGN_OR_RETURN(const bool use_sliding_window, r.opt_bool("use_sliding_window", false));
  if (type == "qwen2" && !use_sliding_window) c.sliding_window = 0;
  ASSIGN_OR_RETURN(const bool attention_bias, r.opt_bool("attention_bias", false));

  switch (c.arch) {
    case Arch::Bert:
    case Arch::NomicBert:
    case Arch::ModernBert:
      TRY(read_encoder(r, type, &c));
      break;
    case Arch::Llama:
      c.qkv_bias = attention_bias;
      break;
    case Arch::Qwen2:
      c.qkv_bias = true;
      break;
    case Arch::Phi3:
      c.fused_projections = true;
      break;
    case Arch::Qwen3:
    case Arch::Qwen3Moe:
      c.qk_norm = true;
      c.qkv_bias = attention_bias;
      break;
    case Arch::Qwen35:
      c.qk_norm = true;
      c.qkv_bias = attention_bias;
      c.attn_output_gate = true;
      c.ssm_grouped_projections = type == "qwen3_next";
      TRY(read_linear_attention(r, &c));
      break;
    case Arch::MiniCPM3:
      break;  // read_latent_attention
    case Arch::Gemma:
    case Arch::Gemma2:
    case Arch::Gemma3:
      c.ffn = FfnKind::GeGLU;
      c.embed_scale = true;
      c.tied_embeddings = true;
      c.post_norms = c.arch != Arch::Gemma;
      c.qk_norm = c.arch == Arch::Gemma3;
      ASSIGN_OR_RETURN(c.attn_softcap, r.opt_float("attn_logit_softcapping", 0.0));
      ASSIGN_OR_RETURN(c.final_softcap, r.opt_float("final_logit_softcapping", 0.0));
      if (r.find("query_pre_attn_scalar")) {
        ASSIGN_OR_RETURN(const double scalar, r.opt_float("query_pre_attn_scalar", 0.0));
        if (!(scalar > 0 && std::isfinite(scalar)))
          return Error::invalid_file("{}: 'query_pre_attn_scalar' must be positive, got {}", path, scalar);
        c.attn_scale = 1.0 / std::sqrt(scalar);
      }
      if (c.arch == Arch::Gemma2 && c.sliding_layers.empty()) c.sliding = SlidingPattern::EvenLayers;
      if (c.arch == Arch::Gemma3 && c.sliding_layers.empty()) c.sliding = SlidingPattern::Gemma3;
      break;
  }
  if (type == "mixtral" || type == "qwen3_moe" || type == "qwen3_5_moe_text" || type == "qwen3_next")
    TRY(read_experts(r, type, &c));
  ASSIGN_OR_RETURN(c.bos_id, r.opt_token_id("bos_token_id"));
  ASSIGN_OR_RETURN(c.eos_id, r.opt_token_id("eos_token_id"));
  if (Status s = c.validate(); !s.ok()) return s.error().with_context(path);
  return c;
}

}  // namespace rlx::models
