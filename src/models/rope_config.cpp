// Rope settings from GGUF metadata and tensors and from Hugging Face config objects
// (see rope_config.h). The scalings map onto ir::RopeAttrs: llama3 and yarn by their
// parameters, per-pair factors (GGUF rope_freqs, LongRoPE) as freq_factors, and the
// magnitude scales of YaRN and LongRoPE as attn_factor.
#include "models/rope_config.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "rlx/base/half.h"
#include "rlx/formats/gguf.h"

namespace rlx::models::detail {
namespace {

using nlohmann::json;

// The `<arch>.rope.` keys RLX reads (llama.cpp's names).
const std::set<std::string, std::less<>>& known_gguf_rope_keys() {
  static const std::set<std::string, std::less<>> keys = {
      "dimension_count",     "freq_base",
      "scale_linear",        "scaling.type",
      "scaling.factor",      "scaling.attn_factor",
      "scaling.original_context_length", "scaling.finetuned",
      "scaling.yarn_ext_factor", "scaling.yarn_attn_factor",
      "scaling.yarn_beta_fast",  "scaling.yarn_beta_slow",
  };
  return keys;
}

// A numeric key: absent is nullopt, present but not a number is an error naming it.
Expected<std::optional<double>> gguf_number(const formats::GgufFile& f, const std::string& key) {
  if (!f.contains(key)) return std::optional<double>{};
  double v = 0;
  if (auto fv = f.get_float(key)) {
    v = *fv;
  } else if (auto iv = f.get_int(key)) {
    v = static_cast<double>(*iv);
  } else {
    return Error::invalid_file("{}: '{}' is not a number", f.name(), key);
  }
  if (!std::isfinite(v)) return Error::invalid_file("{}: '{}' is not finite ({})", f.name(), key, v);
  return std::optional<double>{v};
}

// A context length read from a file: whole enough to become int64 positions (a 2^31 cap;
// nothing trains longer). `where` names the file and key.
Status check_positions(double v, const std::string& where) {
  if (v < 0 || v > 2147483648.0) return Error::invalid_file("{} {} is outside [0, 2^31] positions", where, v);
  return {};
}

// A per-pair factor tensor: f32 (or f16), one value per rotated pair, each positive.
Expected<std::vector<double>> gguf_factors(const formats::GgufFile& f, std::string_view name, int64_t n_rot) {
  ASSIGN_OR_RETURN(const formats::GgufTensor* t, f.tensor(name));
  const int64_t want = n_rot / 2;
  if (t->dims.size() != 1 || t->dims[0] != want)
    return Error::invalid_file("{}: tensor '{}' must hold {} factors (one per rotary pair of {} dims)", f.name(), name,
                               want, n_rot);
  const bool f32 = t->type == formats::GgmlType::F32, f16 = t->type == formats::GgmlType::F16;
  if (!f32 && !f16)
    return Error::invalid_file("{}: tensor '{}' is {}, rope factors must be F32 or F16", f.name(), name,
                               formats::ggml_type_name(t->type));
  std::vector<double> out(static_cast<size_t>(want));
  for (size_t i = 0; i < out.size(); ++i) {
    if (f32) {
      float v;
      std::memcpy(&v, t->data + 4 * i, 4);
      out[i] = v;
    } else {
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      out[i] = f16_bits_to_f32(h);
    }
    if (!std::isfinite(out[i]) || out[i] <= 0)
      return Error::invalid_file("{}: tensor '{}' factor {} is {} (factors must be positive)", f.name(), name, i,
                                 out[i]);
  }
  return out;
}

// A JSON number array of n positive factors.
Expected<std::vector<double>> json_factors(const json& j, const char* key, int64_t n, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array())
    return Error::invalid_file("{}: rope '{}' is missing or not an array", path, key);
  if (static_cast<int64_t>(it->size()) != n)
    return Error::invalid_file("{}: rope '{}' has {} factors, the rotary dims need {}", path, key, it->size(), n);
  std::vector<double> out;
  for (const json& v : *it) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
      return Error::invalid_file("{}: rope '{}' holds a value that is not a positive number", path, key);
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace

double yarn_mscale(double factor) { return factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0; }

std::vector<int32_t> text_rope_sections(int64_t n_rot) {
  const auto pairs = static_cast<int32_t>(n_rot / 2);
  return {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0};
}

double longrope_mscale(double factor, int64_t original_context) {
  if (factor <= 1 || original_context <= 1) return 1.0;
  return std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original_context)));
}

Status read_gguf_rope(const formats::GgufFile& f, const std::string& arch, ModelConfig* c) {
  const std::string pre = arch + ".rope.";
  for (const formats::GgufKeyValue& kv : f.metadata()) {
    if (kv.key.compare(0, pre.size(), pre) != 0) continue;
    const std::string_view rest = std::string_view(kv.key).substr(pre.size());
    // Keys of one family, read with its arch: the sliding layers' base, qwen35's
    // multi-axis sections.
    if (rest == "freq_base_swa" && (arch == "gemma3" || arch == "modern-bert")) continue;
    if (rest == "dimension_sections" && (arch == "qwen35" || arch == "qwen35moe")) continue;
    if (!known_gguf_rope_keys().count(rest))
      return Error::unsupported("{}: rope key '{}' is not supported (RLX would run the model with other rotary "
                                "frequencies than it was trained with)",
                                f.name(), kv.key);
  }
  ir::RopeAttrs& r = c->rope;
  auto key = [&](const char* k) { return pre + k; };
  ASSIGN_OR_RETURN(auto factor, gguf_number(f, key("scaling.factor")));
  ASSIGN_OR_RETURN(auto scale_linear, gguf_number(f, key("scale_linear")));
  ASSIGN_OR_RETURN(auto attn_factor, gguf_number(f, key("scaling.attn_factor")));
  ASSIGN_OR_RETURN(auto orig_ctx, gguf_number(f, key("scaling.original_context_length")));
  ASSIGN_OR_RETURN(auto ext_factor, gguf_number(f, key("scaling.yarn_ext_factor")));
  ASSIGN_OR_RETURN(auto yarn_attn, gguf_number(f, key("scaling.yarn_attn_factor")));
  ASSIGN_OR_RETURN(auto beta_fast, gguf_number(f, key("scaling.yarn_beta_fast")));
  ASSIGN_OR_RETURN(auto beta_slow, gguf_number(f, key("scaling.yarn_beta_slow")));
  std::string type = "none";
  if (f.contains(key("scaling.type"))) {
    auto t = f.get_string(key("scaling.type"));
    if (!t) return Error::invalid_file("{}: '{}' is not a string", f.name(), key("scaling.type"));
    type = std::string(*t);
  } else if (scale_linear && *scale_linear != 0 && *scale_linear != 1) {
    type = "linear";  // the older key: a linear factor without a type
    factor = scale_linear;
  }
  if (orig_ctx)
    TRY(check_positions(*orig_ctx, fmt::format("{}: '{}'", f.name(), key("scaling.original_context_length"))));
  r.original_context = orig_ctx ? static_cast<int64_t>(*orig_ctx) : c->n_ctx_train;
  if (attn_factor) r.attn_factor = *attn_factor;
  if (type == "none") {
    r.scaling = ir::RopeScaling::None;
  } else if (type == "linear") {
    r.scaling = ir::RopeScaling::Linear;
    r.factor = factor.value_or(1.0);
  } else if (type == "yarn") {
    if (!factor) return Error::invalid_file("{}: rope scaling 'yarn' needs '{}'", f.name(), key("scaling.factor"));
    r.scaling = ir::RopeScaling::Yarn;
    r.factor = *factor;
    r.beta_fast = beta_fast.value_or(32.0);
    r.beta_slow = beta_slow.value_or(1.0);
    r.ext_factor = ext_factor.value_or(1.0);
    // llama.cpp's YaRN: the magnitude grows by 0.1 ln(factor) + 1 wherever the ramp
    // extrapolates, on top of the file's attention factor.
    r.attn_factor = yarn_attn.value_or(attn_factor.value_or(1.0)) * (r.ext_factor != 0 ? yarn_mscale(*factor) : 1.0);
  } else if (type == "longrope") {
    r.scaling = ir::RopeScaling::None;  // the factors below carry it
    if (!f.find_tensor("rope_factors_short.weight") || !f.find_tensor("rope_factors_long.weight"))
      return Error::invalid_file("{}: rope scaling 'longrope' needs the tensors rope_factors_short.weight and "
                                 "rope_factors_long.weight",
                                 f.name());
  } else {
    return Error::unsupported("{}: '{}' is '{}' (RLX runs none, linear, yarn and longrope)", f.name(),
                              key("scaling.type"), type);
  }
  // Per-pair factors: rope_freqs (Llama 3.1+), or LongRoPE's short / long pair (Phi-3).
  if (f.find_tensor("rope_freqs.weight")) {
    ASSIGN_OR_RETURN(r.freq_factors, gguf_factors(f, "rope_freqs.weight", r.n_rot));
  }
  const bool has_short = f.find_tensor("rope_factors_short.weight") != nullptr;
  const bool has_long = f.find_tensor("rope_factors_long.weight") != nullptr;
  if (has_short != has_long)
    return Error::invalid_file("{}: has only one of rope_factors_short.weight and rope_factors_long.weight", f.name());
  if (has_short) {
    if (!r.freq_factors.empty())
      return Error::invalid_file("{}: has both rope_freqs.weight and LongRoPE factors", f.name());
    ASSIGN_OR_RETURN(r.freq_factors, gguf_factors(f, "rope_factors_short.weight", r.n_rot));
    ASSIGN_OR_RETURN(c->rope_long_factors, gguf_factors(f, "rope_factors_long.weight", r.n_rot));
  }
  if (Status s = ir::check_rope_attrs(r); !s.ok()) return s.error().with_context(f.name());
  return {};
}

Status read_hf_rope(const json& p, const json& config, const std::string& path, ir::RopeAttrs* rope,
                    std::vector<double>* long_factors) {
  if (p.is_null()) return {};
  if (!p.is_object()) return Error::invalid_file("{}: rope parameters must be an object, got a {}", path, p.type_name());
  static const std::set<std::string, std::less<>> kKnown = {
      "rope_type", "type", "rope_theta", "partial_rotary_factor", "factor", "original_max_position_embeddings",
      "low_freq_factor", "high_freq_factor", "attention_factor", "beta_fast", "beta_slow", "mscale",
      "mscale_all_dim", "truncate", "short_factor", "long_factor"};
  for (const auto& [k, v] : p.items())
    if (!kKnown.count(k))
      return Error::unsupported("{}: rope parameter '{}' is not supported (RLX would run the model with other rotary "
                                "frequencies than it was trained with)",
                                path, k);
  auto number = [&](const json& j, const char* k) -> Expected<std::optional<double>> {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) return std::optional<double>{};
    if (!it->is_number() || !std::isfinite(it->get<double>()))
      return Error::invalid_file("{}: rope '{}' is not a finite number", path, k);
    return std::optional<double>{it->get<double>()};
  };
  ASSIGN_OR_RETURN(auto theta, number(p, "rope_theta"));
  if (theta) rope->theta = *theta;
  ASSIGN_OR_RETURN(auto partial, number(p, "partial_rotary_factor"));
  if (partial) {
    if (*partial <= 0 || *partial > 1)
      return Error::invalid_file("{}: rope 'partial_rotary_factor' {} is outside (0, 1]", path, *partial);
    rope->n_rot = static_cast<int64_t>(static_cast<double>(rope->head_dim) * *partial);
    rope->n_rot -= rope->n_rot % 2;
  }
  std::string type = "default";
  for (const char* k : {"type", "rope_type"}) {  // rope_type wins when both are given
    auto t = p.find(k);
    if (t == p.end() || t->is_null()) continue;
    if (!t->is_string()) return Error::invalid_file("{}: rope '{}' must be a string, got a {}", path, k, t->type_name());
    type = t->get<std::string>();
  }
  ASSIGN_OR_RETURN(auto factor, number(p, "factor"));
  auto positions = [&](const json& j, const char* k) -> Expected<std::optional<double>> {
    ASSIGN_OR_RETURN(auto v, number(j, k));
    if (v) TRY(check_positions(*v, fmt::format("{}: '{}'", path, k)));
    return v;
  };
  ASSIGN_OR_RETURN(auto orig, positions(p, "original_max_position_embeddings"));
  ASSIGN_OR_RETURN(auto orig_top, positions(config, "original_max_position_embeddings"));
  ASSIGN_OR_RETURN(auto max_pos, positions(config, "max_position_embeddings"));
  ASSIGN_OR_RETURN(auto attention_factor, number(p, "attention_factor"));
  if (type == "default") {
    // theta (and partial_rotary_factor) only
  } else if (type == "linear") {
    rope->scaling = ir::RopeScaling::Linear;
    rope->factor = factor.value_or(1.0);
  } else if (type == "llama3") {
    rope->scaling = ir::RopeScaling::Llama3;
    rope->factor = factor.value_or(8.0);
    ASSIGN_OR_RETURN(auto lo, number(p, "low_freq_factor"));
    ASSIGN_OR_RETURN(auto hi, number(p, "high_freq_factor"));
    rope->low_freq_factor = lo.value_or(1.0);
    rope->high_freq_factor = hi.value_or(4.0);
    rope->original_context = static_cast<int64_t>(orig.value_or(8192));
  } else if (type == "yarn") {
    if (!factor) return Error::invalid_file("{}: rope type 'yarn' needs 'factor'", path);
    if (auto t = p.find("truncate"); t != p.end() && !t->is_null() && !t->is_boolean())
      return Error::invalid_file("{}: rope 'truncate' must be true or false, got a {}", path, t->type_name());
    if (auto t = p.find("truncate"); t != p.end() && t->is_boolean() && !t->get<bool>())
      return Error::unsupported("{}: rope 'truncate': false (an unrounded YaRN range) is not supported", path);
    ASSIGN_OR_RETURN(auto mscale, number(p, "mscale"));
    ASSIGN_OR_RETURN(auto mscale_all_dim, number(p, "mscale_all_dim"));
    ASSIGN_OR_RETURN(auto beta_fast, number(p, "beta_fast"));
    ASSIGN_OR_RETURN(auto beta_slow, number(p, "beta_slow"));
    rope->scaling = ir::RopeScaling::Yarn;
    rope->factor = *factor;
    rope->original_context = static_cast<int64_t>(orig.value_or(max_pos.value_or(0)));
    rope->beta_fast = beta_fast.value_or(32.0);
    rope->beta_slow = beta_slow.value_or(1.0);
    if (attention_factor) {
      rope->attn_factor = *attention_factor;
    } else if (mscale && mscale_all_dim && *mscale != 0 && *mscale_all_dim != 0) {
      auto get = [&](double m) { return *factor <= 1 ? 1.0 : 0.1 * m * std::log(*factor) + 1.0; };
      rope->attn_factor = get(*mscale) / get(*mscale_all_dim);
    } else {
      rope->attn_factor = yarn_mscale(*factor);
    }
  } else if (type == "longrope") {
    const double original = orig.value_or(orig_top.value_or(0));
    if (original <= 0)
      return Error::invalid_file("{}: rope type 'longrope' needs 'original_max_position_embeddings'", path);
    rope->scaling = ir::RopeScaling::None;  // the factors carry it
    rope->original_context = static_cast<int64_t>(original);
    ASSIGN_OR_RETURN(rope->freq_factors, json_factors(p, "short_factor", rope->n_rot / 2, path));
    ASSIGN_OR_RETURN(*long_factors, json_factors(p, "long_factor", rope->n_rot / 2, path));
    const double scale = factor.value_or(max_pos.value_or(original) / original);
    rope->attn_factor = attention_factor.value_or(longrope_mscale(scale, rope->original_context));
  } else {
    return Error::unsupported("{}: rope type '{}' is not supported (default, linear, llama3, yarn, longrope)", path,
                              type);
  }
  if (Status s = ir::check_rope_attrs(*rope); !s.ok()) return s.error().with_context(path);
  return {};
}

}  // namespace rlx::models::detail
