// GGUF-backed WeightSource and the Hugging Face <-> GGUF tensor name mapping.
#include "rlx/models/weight_source.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "rlx/base/half.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/safetensors.h"
#include "rlx/models/model_config.h"

namespace rlx::models {
namespace {

Expected<ir::DType> dtype_of(formats::GgmlType t, std::string_view tensor) {
  using formats::GgmlType;
  switch (t) {
    case GgmlType::F32: return ir::DType::F32;
    case GgmlType::F16: return ir::DType::F16;
    case GgmlType::BF16: return ir::DType::BF16;
    case GgmlType::F64: return ir::DType::F64;
    case GgmlType::I8: return ir::DType::I8;
    case GgmlType::I32: return ir::DType::I32;
    case GgmlType::I64: return ir::DType::I64;
    case GgmlType::Q4_0: return ir::DType::Q4_0;
    case GgmlType::Q4_1: return ir::DType::Q4_1;
    case GgmlType::Q5_0: return ir::DType::Q5_0;
    case GgmlType::Q5_1: return ir::DType::Q5_1;
    case GgmlType::Q8_0: return ir::DType::Q8_0;
    case GgmlType::Q2_K: return ir::DType::Q2_K;
    case GgmlType::Q3_K: return ir::DType::Q3_K;
    case GgmlType::Q4_K: return ir::DType::Q4_K;
    case GgmlType::Q5_K: return ir::DType::Q5_K;
    case GgmlType::Q6_K: return ir::DType::Q6_K;
    case GgmlType::Q8_K: return ir::DType::Q8_K;
    default: break;
  }
  return Error::unsupported("tensor '{}': type {} is not supported", tensor, formats::ggml_type_name(t));
}

}  // namespace

GgufWeightSource::GgufWeightSource(std::shared_ptr<const formats::GgufFile> file) : file_(std::move(file)) {}

bool GgufWeightSource::has(std::string_view name) const { return file_->find_tensor(name) != nullptr; }

std::string GgufWeightSource::describe() const { return file_->name(); }

Expected<WeightView> GgufWeightSource::take(std::string_view name) const {
  ASSIGN_OR_RETURN(const formats::GgufTensor* t, file_->tensor(name));
  auto dt = dtype_of(t->type, name);
  if (!dt) return dt.error().with_context(file_->name());
  WeightView w;
  w.name = std::string(name);
  w.dtype = *dt;
  w.shape = t->shape();
  w.bytes = t->bytes();
  w.owner = file_;
  w.file_mapped = file_->mapping() != nullptr;  // null: parsed from bytes in memory
  return w;
}

std::string hf_to_gguf_name(std::string_view hf, bool post_norms) {
  static const std::pair<std::string_view, std::string_view> kGlobal[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  for (const auto& [from, to] : kGlobal)
    if (hf == from) return std::string(to);
  static const std::pair<std::string_view, std::string_view> kLayer[] = {
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
  };
  constexpr std::string_view prefix = "model.layers.";
  if (hf.substr(0, prefix.size()) != prefix) return {};
  hf.remove_prefix(prefix.size());
  int layer = 0;
  auto [p, ec] = std::from_chars(hf.data(), hf.data() + hf.size(), layer);
  if (ec != std::errc() || p == hf.data() || p == hf.data() + hf.size() || *p != '.') return {};
  std::string_view rest(p + 1, static_cast<size_t>(hf.data() + hf.size() - (p + 1)));
  if (post_norms && rest == "post_attention_layernorm.weight") return fmt::format("blk.{}.post_attention_norm.weight", layer);
  for (const auto& [from, to] : kLayer)
    if (rest == from) return fmt::format("blk.{}.{}", layer, to);
  return {};
}

Expected<std::unique_ptr<SafetensorsWeightSource>> SafetensorsWeightSource::open(const std::string& path,
                                                                                  const ModelConfig& config) {
  ASSIGN_OR_RETURN(formats::SafetensorsModel model, formats::SafetensorsModel::open(path));
  std::unique_ptr<SafetensorsWeightSource> s(new SafetensorsWeightSource());
  s->path_ = path;
  s->model_ = std::make_shared<const formats::SafetensorsModel>(std::move(model));
  s->norm_plus_one_ = config.arch == Arch::Gemma || config.arch == Arch::Gemma2 || config.arch == Arch::Gemma3;
  for (std::string_view hf : s->model_->tensor_names()) {
    const std::string g = hf_to_gguf_name(hf, config.post_norms);
    if (!g.empty()) s->gguf_to_hf_[g] = std::string(hf);
  }
  return s;
}

bool SafetensorsWeightSource::has(std::string_view name) const { return gguf_to_hf_.find(name) != gguf_to_hf_.end(); }

Expected<WeightView> SafetensorsWeightSource::take(std::string_view name) const {
  auto it = gguf_to_hf_.find(name);
  if (it == gguf_to_hf_.end()) return Error::not_found("{}: no tensor maps to '{}'", path_, name);
  ASSIGN_OR_RETURN(const formats::SafetensorsTensor* t, model_->tensor(it->second));
  WeightView w;
  w.name = std::string(name);
  w.shape = t->shape;
  switch (t->dtype) {
    case formats::SafetensorsDType::kF32: w.dtype = ir::DType::F32; break;
    case formats::SafetensorsDType::kF16: w.dtype = ir::DType::F16; break;
    case formats::SafetensorsDType::kBF16: w.dtype = ir::DType::BF16; break;
    default:
      return Error::unsupported("{}: tensor '{}' has dtype {} (F32, F16, BF16 supported)", path_, it->second,
                                formats::safetensors_dtype_name(t->dtype));
  }
  const bool is_norm = name.size() > 11 && name.substr(name.size() - 11) == "norm.weight";
  if (norm_plus_one_ && is_norm) {
    auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(t->n_elements()));
    for (size_t i = 0; i < values->size(); ++i) {
      float x = 0;
      if (w.dtype == ir::DType::F32) std::memcpy(&x, t->data + 4 * i, 4);
      else {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        x = w.dtype == ir::DType::F16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
      }
      (*values)[i] = 1.0f + x;
    }
    w.dtype = ir::DType::F32;
    w.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values->data()), values->size() * 4);
    w.owner = values;
    return w;
  }
  w.bytes = t->bytes();
  w.owner = model_;
  w.file_mapped = std::all_of(model_->shards().begin(), model_->shards().end(),
                              [](const formats::SafetensorsFile& f) { return f.mapping() != nullptr; });
  return w;
}

}  // namespace rlx::models
