// ModelConfig from a Hugging Face config.json. HF checkpoints keep q/k weights in
// their original order, so RoPE uses the half-split (neox) layout for every family.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/rope_config.h"
#include "rlx/models/model_config.h"

namespace rlx::models {
namespace {

using nlohmann::json;

struct Reader {
  const json& j;
  const std::string& path;
  Expected<int64_t> req_int(const char* key) const {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer())
      return Error::invalid_file("{}: '{}' is missing or not an integer", path, key);
    return it->get<int64_t>();
  }
  int64_t opt_int(const char* key, int64_t fallback) const {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
  }
  double opt_float(const char* key, double fallback) const {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : fallback;
  }
  bool opt_bool(const char* key, bool fallback) const {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
  }
};

// Mixtral: num_local_experts experts of width intermediate_size in every layer, the
// chosen weights always renormalized. Qwen3-MoE: num_experts (num_local_experts in
// newer files) of width moe_intermediate_size, renormalized when norm_topk_prob; the
// layers in mlp_only_layers, and all but every decoder_sparse_step-th, stay dense.
Status read_experts(const json& j, const Reader& r, const std::string& type, ModelConfig* c) {
  const char* count_key = type == "qwen3_moe" && j.contains("num_experts") ? "num_experts" : "num_local_experts";
  ASSIGN_OR_RETURN(c->n_expert, r.req_int(count_key));
  ASSIGN_OR_RETURN(c->n_expert_used, r.req_int("num_experts_per_tok"));
  if (type == "mixtral") {
    c->n_ff_expert = c->n_ff;
    c->expert_weights_norm = true;
    return {};
  }
  ASSIGN_OR_RETURN(c->n_ff_expert, r.req_int("moe_intermediate_size"));
  c->expert_weights_norm = r.opt_bool("norm_topk_prob", false);
  const int64_t step = r.opt_int("decoder_sparse_step", 1);
  if (step < 1) return Error::invalid_file("{}: decoder_sparse_step {} must be >= 1", r.path, step);
  c->dense_layers.assign(static_cast<size_t>(std::max<int64_t>(c->n_layer, 0)), false);
  for (int64_t il = 0; il < c->n_layer; ++il) c->dense_layers[static_cast<size_t>(il)] = (il + 1) % step != 0;
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return Error::invalid_file("{}: 'mlp_only_layers' is not an array", r.path);
    for (const json& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c->n_layer)
        return Error::invalid_file("{}: 'mlp_only_layers' entry {} is not a layer index", r.path, v.dump());
      c->dense_layers[static_cast<size_t>(v.get<int64_t>())] = true;
    }
  }
  return {};
}

}  // namespace

Expected<ModelConfig> config_from_hf(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error::not_found("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
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
  else
    return Error::unsupported("{}: model_type '{}' is not supported (llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, "
                              "gemma, gemma2, gemma3_text, phi3)", path, type);

  ASSIGN_OR_RETURN(c.n_vocab, r.req_int("vocab_size"));
  ASSIGN_OR_RETURN(c.n_embd, r.req_int("hidden_size"));
  ASSIGN_OR_RETURN(c.n_layer, r.req_int("num_hidden_layers"));
  ASSIGN_OR_RETURN(c.n_head, r.req_int("num_attention_heads"));
  ASSIGN_OR_RETURN(c.n_ff, r.req_int("intermediate_size"));
  c.n_head_kv = r.opt_int("num_key_value_heads", c.n_head);
  c.head_dim = r.opt_int("head_dim", c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.n_ctx_train = r.opt_int("max_position_embeddings", 2048);
  c.norm_eps = r.opt_float("rms_norm_eps", 1e-6);
  c.tied_embeddings = r.opt_bool("tie_word_embeddings", false);
  c.rope.layout = ir::RopeLayout::Neox;
  c.rope.head_dim = c.head_dim;
  c.rope.n_rot = c.head_dim;
  c.rope.theta = r.opt_float("rope_theta", 10000.0);
  if (j.contains("partial_rotary_factor")) {  // top level (Phi, StableLM); rope_parameters may say it too
    json partial = json::object();
    partial["partial_rotary_factor"] = j["partial_rotary_factor"];
    TRY(detail::read_hf_rope(partial, j, path, &c.rope, &c.rope_long_factors));
  }
  if (auto it = j.find("rope_scaling"); it != j.end())
    TRY(detail::read_hf_rope(*it, j, path, &c.rope, &c.rope_long_factors));
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) {
    if (it->contains("full_attention")) {  // per layer type (gemma3)
      TRY(detail::read_hf_rope((*it)["full_attention"], j, path, &c.rope, &c.rope_long_factors));
      ir::RopeAttrs local = c.rope;
      std::vector<double> local_long;
      if (it->contains("sliding_attention"))
        TRY(detail::read_hf_rope((*it)["sliding_attention"], j, path, &local, &local_long));
      c.rope_theta_local = local.theta;
    } else {
      TRY(detail::read_hf_rope(*it, j, path, &c.rope, &c.rope_long_factors));
    }
  }
  if (auto it = j.find("rope_local_base_freq"); it != j.end() && it->is_number()) c.rope_theta_local = it->get<double>();
  c.sliding_window = r.opt_int("sliding_window", 0);
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array()) {
    for (const auto& t : *it) c.sliding_layers.push_back(t.is_string() && t.get<std::string>() == "sliding_attention");
    if (static_cast<int64_t>(c.sliding_layers.size()) != c.n_layer)
      return Error::invalid_file("{}: layer_types has {} entries for {} layers", path, c.sliding_layers.size(),
                                 c.n_layer);
  }
  if (c.sliding_window > 0 && c.sliding_layers.empty() && (type == "mistral" || type == "mixtral" || type == "phi3"))
    c.sliding = SlidingPattern::All;
  if (type == "qwen2" && !r.opt_bool("use_sliding_window", false)) c.sliding_window = 0;

  switch (c.arch) {
    case Arch::Llama:
      c.qkv_bias = r.opt_bool("attention_bias", false);
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
      c.qkv_bias = r.opt_bool("attention_bias", false);
      break;
    case Arch::Gemma:
    case Arch::Gemma2:
    case Arch::Gemma3:
      c.ffn = FfnKind::GeGLU;
      c.embed_scale = true;
      c.tied_embeddings = true;
      c.post_norms = c.arch != Arch::Gemma;
      c.qk_norm = c.arch == Arch::Gemma3;
      c.attn_softcap = r.opt_float("attn_logit_softcapping", 0.0);
      c.final_softcap = r.opt_float("final_logit_softcapping", 0.0);
      if (j.contains("query_pre_attn_scalar") && j["query_pre_attn_scalar"].is_number())
        c.attn_scale = 1.0 / std::sqrt(j["query_pre_attn_scalar"].get<double>());
      if (c.arch == Arch::Gemma2 && c.sliding_layers.empty()) c.sliding = SlidingPattern::EvenLayers;
      if (c.arch == Arch::Gemma3 && c.sliding_layers.empty()) c.sliding = SlidingPattern::Gemma3;
      break;
  }
  if (type == "mixtral" || type == "qwen3_moe") TRY(read_experts(j, r, type, &c));
  c.bos_id = r.opt_int("bos_token_id", -1);
  c.eos_id = r.opt_int("eos_token_id", -1);
  if (Status s = c.validate(); !s.ok()) return s.error().with_context(path);
  return c;
}

}  // namespace rlx::models
