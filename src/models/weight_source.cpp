// GGUF-backed WeightSource and the Hugging Face <-> GGUF tensor name mapping; the
// Hugging Face source serves HF tensors under GGUF names (experts stacked, Qwen3-Next's
// grouped projections regrouped, zero-centred norms as 1 + w).
#include "rlx/models/weight_source.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>

#include <fmt/ranges.h>

#include "rlx/base/half.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/mapped_file.h"
#include "rlx/formats/safetensors.h"
#include "rlx/models/model_config.h"

namespace rlx::models {

namespace {

// Records in `w` the identity and start of the mapped file that holds its bytes.
void note_file(WeightView& w, const formats::MappedFile& file) {
  const auto base = reinterpret_cast<uintptr_t>(file.bytes().data()), at = reinterpret_cast<uintptr_t>(w.bytes.data());
  if (base == 0 || at < base || at >= base + file.size()) return;
  w.file_identity = file.identity();
  w.file_start = file.bytes().data();
  w.file_size = file.size();
}

}  // namespace
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
    case GgmlType::IQ4_NL: return ir::DType::IQ4_NL;
    case GgmlType::IQ4_XS: return ir::DType::IQ4_XS;
    case GgmlType::IQ3_S: return ir::DType::IQ3_S;
    case GgmlType::IQ3_XXS: return ir::DType::IQ3_XXS;
    case GgmlType::IQ2_S: return ir::DType::IQ2_S;
    case GgmlType::IQ2_XS: return ir::DType::IQ2_XS;
    case GgmlType::IQ2_XXS: return ir::DType::IQ2_XXS;
    case GgmlType::IQ1_S: return ir::DType::IQ1_S;
    case GgmlType::IQ1_M: return ir::DType::IQ1_M;
    case GgmlType::TQ1_0: return ir::DType::TQ1_0;
    case GgmlType::TQ2_0: return ir::DType::TQ2_0;
    default: break;
  }
  return Error::unsupported("tensor '{}': type {} is not supported", tensor, formats::ggml_type_name(t));
}

// The dtype a float safetensors tensor is served as (F32, F16, BF16); others are refused.
Expected<ir::DType> float_dtype(const formats::SafetensorsTensor& t, const std::string& path, std::string_view hf) {
  switch (t.dtype) {
    case formats::SafetensorsDType::kF32: return ir::DType::F32;
    case formats::SafetensorsDType::kF16: return ir::DType::F16;
    case formats::SafetensorsDType::kBF16: return ir::DType::BF16;
    default: break;
  }
  return Error::unsupported("{}: tensor '{}' has dtype {} (F32, F16, BF16 supported)", path, hf,
                            formats::safetensors_dtype_name(t.dtype));
}

}  // namespace

GgufWeightSource::GgufWeightSource(std::shared_ptr<const formats::GgufFile> file) : file_(std::move(file)) {}

bool GgufWeightSource::has(std::string_view name) const { return file_->find_tensor(name) != nullptr; }

std::string GgufWeightSource::describe() const { return file_->name(); }

std::vector<std::pair<std::string, std::string>> GgufWeightSource::stored_tensors() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const formats::GgufTensor& t : file_->tensors()) out.emplace_back(t.name, t.name);
  return out;
}

std::vector<std::string> unused_tensors(const WeightSource& source, const std::vector<std::string>& used,
                                        const std::vector<std::string>& ignorable) {
  const std::set<std::string, std::less<>> read(used.begin(), used.end()), skip(ignorable.begin(), ignorable.end());
  auto is_rotary_cache = [](std::string_view n) {  // rotary_emb.inv_freq of older HF checkpoints: recomputed
    constexpr std::string_view kSuffix = "rotary_emb.inv_freq";
    return n.size() >= kSuffix.size() && n.substr(n.size() - kSuffix.size()) == kSuffix;
  };
  std::vector<std::string> out;
  for (const auto& [stored, gguf] : source.stored_tensors()) {
    if (read.count(gguf) || skip.count(gguf) || is_rotary_cache(stored)) continue;
    out.push_back(gguf.empty() || gguf == stored ? stored : fmt::format("{} (as {})", stored, gguf));
  }
  return out;
}

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
  if (w.file_mapped) note_file(w, *file_->mapping());
  return aligned_view(std::move(w));
}

namespace {

// Row views of fused matrices (see split_fused_projections).
class RowSliceSource : public WeightSource {
 public:
  struct Slice {
    std::string source;  // the stored (fused) tensor
    int64_t row0 = 0, rows = 0;
  };
  RowSliceSource(std::unique_ptr<WeightSource> inner, std::map<std::string, Slice, std::less<>> slices)
      : inner_(std::move(inner)), slices_(std::move(slices)) {}
  bool has(std::string_view name) const override {
    auto it = slices_.find(name);
    return it != slices_.end() ? inner_->has(it->second.source) : inner_->has(name);
  }
  Expected<WeightView> take(std::string_view name) const override {
    auto it = slices_.find(name);
    if (it == slices_.end()) return inner_->take(name);
    const Slice& s = it->second;
    ASSIGN_OR_RETURN(WeightView w, inner_->take(s.source));
    if (w.shape.size() != 2 || w.shape[0] < s.row0 + s.rows || w.shape[0] <= 0)
      return Error::invalid_file("{}: tensor '{}' has shape [{}], too few rows for '{}' (rows {}..{})", describe(),
                                 s.source, fmt::join(w.shape, ", "), name, s.row0, s.row0 + s.rows);
    // Rows are whole blocks for every stored type, so a row range is a byte range.
    const size_t row_bytes = w.bytes.size() / static_cast<size_t>(w.shape[0]);
    w.name = std::string(name);
    w.bytes = w.bytes.subspan(static_cast<size_t>(s.row0) * row_bytes, static_cast<size_t>(s.rows) * row_bytes);
    w.shape[0] = s.rows;
    return w;
  }
  std::string describe() const override { return inner_->describe(); }
  // A fused tensor counts as read when its first slice is.
  std::vector<std::pair<std::string, std::string>> stored_tensors() const override {
    std::map<std::string, std::string, std::less<>> first_slice;
    for (const auto& [name, s] : slices_)
      if (s.row0 == 0) first_slice[s.source] = name;
    auto out = inner_->stored_tensors();
    for (auto& [stored, gguf] : out)
      if (auto it = first_slice.find(gguf); it != first_slice.end()) gguf = it->second;
    return out;
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  std::map<std::string, Slice, std::less<>> slices_;
};

}  // namespace

std::unique_ptr<WeightSource> split_fused_projections(std::unique_ptr<WeightSource> inner, const ModelConfig& c) {
  std::map<std::string, RowSliceSource::Slice, std::less<>> slices;
  const int64_t q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string qkv = fmt::format("blk.{}.attn_qkv.weight", il), up = fmt::format("blk.{}.ffn_up.weight", il);
    slices[fmt::format("blk.{}.attn_q.weight", il)] = {qkv, 0, q};
    slices[fmt::format("blk.{}.attn_k.weight", il)] = {qkv, q, kv};
    slices[fmt::format("blk.{}.attn_v.weight", il)] = {qkv, q + kv, kv};
    // A file with its own gate matrix (NomicBERT: fused qkv, separate FFN) keeps ffn_up whole.
    const std::string gate = fmt::format("blk.{}.ffn_gate.weight", il);
    if (inner->has(gate)) continue;
    slices[gate] = {up, 0, c.n_ff};
    slices[up] = {up, c.n_ff, c.n_ff};
  }
  return std::make_unique<RowSliceSource>(std::move(inner), std::move(slices));
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
      {"self_attn.qkv_proj.weight", "attn_qkv.weight"},  // Phi-3: q | k | v rows
      // multi-head latent attention (MiniCPM3)
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
      {"mlp.gate_up_proj.weight", "ffn_up.weight"},       // Phi-3: gate | up rows
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},               // Qwen3-MoE router
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},  // Mixtral router
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      // Qwen3.5 gated delta-net layers (llama.cpp's qwen35 names)
      {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
      {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
      {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
      {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
      {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
      {"linear_attn.dt_bias", "ssm_dt.bias"},
      {"linear_attn.A_log", "ssm_a"},
      {"linear_attn.norm.weight", "ssm_norm.weight"},
      {"linear_attn.out_proj.weight", "ssm_out.weight"},
      // a shared expert beside the routed ones (Qwen3.5-MoE)
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
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

std::string hf_to_gguf_encoder_name(std::string_view hf, Arch arch) {
  // Task-model checkpoints nest the encoder (BertForMaskedLM: "bert.", ModernBertFor*: "model.").
  for (std::string_view nest : {"bert.", "model."})
    if (hf.substr(0, nest.size()) == nest) {
      hf.remove_prefix(nest.size());
      break;
    }
  using Table = std::initializer_list<std::pair<std::string_view, std::string_view>>;
  static const Table kBertGlobal = {
      {"embeddings.word_embeddings.weight", "token_embd.weight"},
      {"embeddings.position_embeddings.weight", "position_embd.weight"},
      {"embeddings.token_type_embeddings.weight", "token_types.weight"},
      {"embeddings.LayerNorm.weight", "token_embd_norm.weight"},
      {"embeddings.LayerNorm.bias", "token_embd_norm.bias"},
      {"embeddings.LayerNorm.gamma", "token_embd_norm.weight"},
      {"embeddings.LayerNorm.beta", "token_embd_norm.bias"},
      {"pooler.dense.weight", "pooler.weight"},
      {"pooler.dense.bias", "pooler.bias"},
  };
  static const Table kBertLayer = {
      {"attention.self.query.", "attn_q."},
      {"attention.self.key.", "attn_k."},
      {"attention.self.value.", "attn_v."},
      {"attention.output.dense.", "attn_output."},
      {"attention.output.LayerNorm.", "attn_output_norm."},
      {"intermediate.dense.", "ffn_up."},
      {"output.dense.", "ffn_down."},
      {"output.LayerNorm.", "layer_output_norm."},
  };
  static const Table kNomicGlobal = {
      {"embeddings.word_embeddings.weight", "token_embd.weight"},
      {"embeddings.token_type_embeddings.weight", "token_types.weight"},
      {"emb_ln.weight", "token_embd_norm.weight"},
      {"emb_ln.bias", "token_embd_norm.bias"},
  };
  static const Table kNomicLayer = {
      {"attn.Wqkv.", "attn_qkv."},      {"attn.out_proj.", "attn_output."}, {"mlp.fc11.", "ffn_up."},
      {"mlp.fc12.", "ffn_gate."},       {"mlp.fc2.", "ffn_down."},          {"norm1.", "attn_output_norm."},
      {"norm2.", "layer_output_norm."},
  };
  static const Table kModernGlobal = {
      {"embeddings.tok_embeddings.weight", "token_embd.weight"},
      {"embeddings.norm.weight", "token_embd_norm.weight"},
      {"embeddings.norm.bias", "token_embd_norm.bias"},
      {"final_norm.weight", "output_norm.weight"},
      {"final_norm.bias", "output_norm.bias"},
  };
  static const Table kModernLayer = {
      {"attn_norm.", "attn_norm."}, {"attn.Wqkv.", "attn_qkv."}, {"attn.Wo.", "attn_output."},
      {"mlp_norm.", "ffn_norm."},   {"mlp.Wi.", "ffn_up."},      {"mlp.Wo.", "ffn_down."},
  };
  const Table& global = arch == Arch::Bert ? kBertGlobal : arch == Arch::NomicBert ? kNomicGlobal : kModernGlobal;
  const Table& layer = arch == Arch::Bert ? kBertLayer : arch == Arch::NomicBert ? kNomicLayer : kModernLayer;
  const std::string_view prefix = arch == Arch::Bert        ? "encoder.layer."
                                  : arch == Arch::NomicBert ? "encoder.layers."
                                                            : "layers.";
  for (const auto& [from, to] : global)
    if (hf == from) return std::string(to);
  if (hf.substr(0, prefix.size()) != prefix) return {};
  hf.remove_prefix(prefix.size());
  int il = 0;
  auto [p, ec] = std::from_chars(hf.data(), hf.data() + hf.size(), il);
  if (ec != std::errc() || p == hf.data() || p == hf.data() + hf.size() || *p != '.') return {};
  std::string_view rest(p + 1, static_cast<size_t>(hf.data() + hf.size() - (p + 1)));
  for (const auto& [from, to] : layer) {
    if (rest.substr(0, from.size()) != from) continue;
    std::string_view leaf = rest.substr(from.size());
    if (leaf == "gamma") leaf = "weight";  // old BERT LayerNorm names
    if (leaf == "beta") leaf = "bias";
    if (leaf != "weight" && leaf != "bias") return {};
    return fmt::format("blk.{}.{}{}", il, to, leaf);
  }
  return {};
}

std::optional<HfExpertName> hf_expert_name(std::string_view hf) {
  constexpr std::string_view prefix = "model.layers.";
  if (hf.substr(0, prefix.size()) != prefix) return std::nullopt;
  hf.remove_prefix(prefix.size());
  auto number = [&](int64_t* out) {
    auto [p, ec] = std::from_chars(hf.data(), hf.data() + hf.size(), *out);
    if (ec != std::errc() || p == hf.data() || p == hf.data() + hf.size() || *p != '.' || *out < 0) return false;
    hf.remove_prefix(static_cast<size_t>(p + 1 - hf.data()));
    return true;
  };
  int64_t layer = 0, expert = 0;
  if (!number(&layer)) return std::nullopt;
  bool mixtral = false;
  if (hf.substr(0, 12) == "mlp.experts.") {
    hf.remove_prefix(12);
  } else if (hf.substr(0, 25) == "block_sparse_moe.experts.") {
    hf.remove_prefix(25);
    mixtral = true;
  } else {
    return std::nullopt;
  }
  if (!number(&expert)) return std::nullopt;
  static const std::pair<std::string_view, std::string_view> kQwen[] = {
      {"gate_proj.weight", "ffn_gate_exps"}, {"up_proj.weight", "ffn_up_exps"}, {"down_proj.weight", "ffn_down_exps"}};
  static const std::pair<std::string_view, std::string_view> kMixtral[] = {
      {"w1.weight", "ffn_gate_exps"}, {"w3.weight", "ffn_up_exps"}, {"w2.weight", "ffn_down_exps"}};
  for (const auto& [from, to] : mixtral ? kMixtral : kQwen)
    if (hf == from) return HfExpertName{fmt::format("blk.{}.{}.weight", layer, to), expert};
  return std::nullopt;
}

Expected<std::unique_ptr<SafetensorsWeightSource>> SafetensorsWeightSource::open(const std::string& path,
                                                                                  const ModelConfig& config) {
  ASSIGN_OR_RETURN(formats::SafetensorsModel model, formats::SafetensorsModel::open(path));
  std::unique_ptr<SafetensorsWeightSource> s(new SafetensorsWeightSource());
  s->path_ = path;
  s->model_ = std::make_shared<const formats::SafetensorsModel>(std::move(model));
  s->norm_plus_one_ = config.arch == Arch::Gemma || config.arch == Arch::Gemma2 || config.arch == Arch::Gemma3 ||
                      config.arch == Arch::Qwen35;
  s->delta_net_ = config.has_recurrent_layers();
  const bool encoder = is_encoder(config.arch);
  for (std::string_view hf : s->model_->tensor_names()) {
    // Gemma 2/3 and the Qwen3.5 family name the norm after attention post_attention_norm.
    const bool post_attention_norm = config.post_norms || config.arch == Arch::Qwen35;
    const std::string g = encoder ? hf_to_gguf_encoder_name(hf, config.arch) : hf_to_gguf_name(hf, post_attention_norm);
    if (!g.empty()) s->gguf_to_hf_[g] = std::string(hf);
    if (auto e = hf_expert_name(hf)) {
      if (e->expert >= std::max<int64_t>(config.n_expert, 1))
        return Error::invalid_file("{}: tensor '{}' is expert {} but the config has {} experts", path, hf, e->expert,
                                   config.n_expert);
      std::vector<std::string>& experts = s->stacked_[e->stacked];
      experts.resize(static_cast<size_t>(config.n_expert));
      experts[static_cast<size_t>(e->expert)] = std::string(hf);
    }
  }
  if (config.ssm_grouped_projections) TRY(s->add_grouped_projections(config));
  return s;
}

Expected<std::map<std::string, RowGather, std::less<>>> grouped_delta_net_gathers(const ModelConfig& c, int64_t il,
                                                                                  const std::string& qkvz,
                                                                                  const std::string& ba) {
  const int64_t hk = c.ssm_n_k_heads, hv = c.ssm_n_v_heads, dk = c.ssm_head_k_dim, dv = c.ssm_head_v_dim;
  if (hk <= 0 || hv <= 0 || dk <= 0 || dv <= 0 || hv % hk != 0)
    return Error::invalid_argument("linear_num_value_heads {} must be a positive multiple of linear_num_key_heads {} "
                                   "(and the head dims {}/{} positive)", hv, hk, dk, dv);
  const int64_t r = hv / hk, group = 2 * dk + 2 * r * dv;
  const std::string qkvz_layout = fmt::format(
      "linear_num_key_heads {} x (2 x linear_key_head_dim {} + 2 x {} value heads per key head x "
      "linear_value_head_dim {})", hk, dk, r, dv);
  const std::string ba_layout = fmt::format("2 x linear_num_value_heads {}", hv);
  // The runs of one part: `rows` rows at offset `at` within each group of `stride` rows.
  // The value heads of group g are heads g r .. g r + r - 1 (transformers' repeat_interleave
  // of q and k), so each part gathered over the groups in order is Qwen3.5's tensor.
  auto part = [&](int64_t at, int64_t rows, int64_t stride) {
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (int64_t g = 0; g < hk; ++g) runs.emplace_back(g * stride + at, rows);
    return runs;
  };
  const std::string blk = fmt::format("blk.{}.", il);
  std::map<std::string, RowGather, std::less<>> out;
  RowGather qkv{qkvz, hk * group, qkvz_layout, part(0, dk, group)};
  for (const auto& run : part(dk, dk, group)) qkv.runs.push_back(run);
  for (const auto& run : part(2 * dk, r * dv, group)) qkv.runs.push_back(run);
  out[blk + "attn_qkv.weight"] = std::move(qkv);
  out[blk + "attn_gate.weight"] = {qkvz, hk * group, qkvz_layout, part(2 * dk + r * dv, r * dv, group)};
  out[blk + "ssm_beta.weight"] = {ba, 2 * hv, ba_layout, part(0, r, 2 * r)};
  out[blk + "ssm_alpha.weight"] = {ba, 2 * hv, ba_layout, part(r, r, 2 * r)};
  return out;
}

// Qwen3-Next's grouped projections, served regrouped (grouped_delta_net_gathers). The raw
// stored in_proj_ba stays reachable under llama.cpp's qwen3next name blk.N.ssm_ba, which
// `rlx convert` writes (with attn_qkv and attn_gate regrouped, as llama.cpp's converter).
Status SafetensorsWeightSource::add_grouped_projections(const ModelConfig& c) {
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (!c.layer_is_recurrent(il)) continue;
    const std::string hf = fmt::format("model.layers.{}.linear_attn.", il), blk = fmt::format("blk.{}.", il);
    const std::string qkvz = hf + "in_proj_qkvz.weight", ba = hf + "in_proj_ba.weight";
    auto gathers = grouped_delta_net_gathers(c, il, qkvz, ba);
    if (!gathers) return gathers.error().with_context(path_);
    for (auto& [name, g] : *gathers) gathered_[name] = std::move(g);
    gguf_to_hf_[blk + "ssm_ba.weight"] = ba;
  }
  return {};
}

namespace {

// The runs of rows `g.runs` of a matrix of `g.source_rows` rows stored in `bytes`, one
// copy in served order (rows are whole blocks for every stored type, so a row is a byte
// range).
std::shared_ptr<const std::vector<uint8_t>> copy_runs(const uint8_t* bytes, size_t n_bytes, const RowGather& g) {
  const size_t row_bytes = n_bytes / static_cast<size_t>(g.source_rows);
  auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(g.rows()) * row_bytes);
  uint8_t* out = copy->data();
  for (const auto& [first, n] : g.runs) {
    std::memcpy(out, bytes + static_cast<size_t>(first) * row_bytes, static_cast<size_t>(n) * row_bytes);
    out += static_cast<size_t>(n) * row_bytes;
  }
  return copy;
}

// Serves row gathers of the inner source's matrices (regroup_delta_net_projections).
class RowGatherSource : public WeightSource {
 public:
  RowGatherSource(std::unique_ptr<WeightSource> inner, std::map<std::string, RowGather, std::less<>> gathers)
      : inner_(std::move(inner)), gathers_(std::move(gathers)) {}
  bool has(std::string_view name) const override {
    auto it = gathers_.find(name);
    return it != gathers_.end() ? inner_->has(it->second.source) : inner_->has(name);
  }
  Expected<WeightView> take(std::string_view name) const override {
    auto it = gathers_.find(name);
    if (it == gathers_.end()) return inner_->take(name);
    const RowGather& g = it->second;
    ASSIGN_OR_RETURN(WeightView w, inner_->take(g.source));
    if (w.shape.size() != 2 || w.shape[0] != g.source_rows)
      return Error::invalid_file("{}: tensor '{}' has shape [{}], but the config needs a matrix of {} rows ({})",
                                 describe(), g.source, fmt::join(w.shape, ", "), g.source_rows, g.layout);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& copy = copies_[std::string(name)];
    if (!copy) copy = copy_runs(w.bytes.data(), w.bytes.size(), g);
    w.name = std::string(name);
    w.shape[0] = g.rows();
    w.bytes = std::span<const uint8_t>(copy->data(), copy->size());
    w.owner = copy;
    w.file_mapped = false;
    w.file_identity.clear();
    w.file_start = nullptr;
    w.file_size = 0;
    return w;
  }
  std::string describe() const override { return inner_->describe(); }
  // A stored matrix appears once for each tensor served from it.
  std::vector<std::pair<std::string, std::string>> stored_tensors() const override {
    std::multimap<std::string, std::string, std::less<>> served_from;
    for (const auto& [name, g] : gathers_) served_from.emplace(g.source, name);
    std::vector<std::pair<std::string, std::string>> out;
    for (auto& [stored, gguf] : inner_->stored_tensors()) {
      auto [first, last] = served_from.equal_range(gguf);
      if (first == last) out.emplace_back(stored, gguf);
      for (auto i = first; i != last; ++i) out.emplace_back(stored, i->second);
    }
    return out;
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  std::map<std::string, RowGather, std::less<>> gathers_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>, std::less<>> copies_;
};

}  // namespace

std::unique_ptr<WeightSource> regroup_delta_net_projections(std::unique_ptr<WeightSource> inner,
                                                            const ModelConfig& c) {
  std::map<std::string, RowGather, std::less<>> gathers;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (!c.layer_is_recurrent(il)) continue;
    const std::string blk = fmt::format("blk.{}.", il);
    const std::string ba = inner->has(blk + "ssm_ba.weight") ? blk + "ssm_ba.weight" : blk + "ssm_beta_alpha.weight";
    auto layer = grouped_delta_net_gathers(c, il, blk + "ssm_in.weight", ba);
    if (!layer) continue;  // the config's validation names the head counts
    for (auto& [name, g] : *layer) {
      if (inner->has(name)) continue;  // the file stores this tensor itself
      gathers[name] = std::move(g);
    }
  }
  return std::make_unique<RowGatherSource>(std::move(inner), std::move(gathers));
}

Expected<WeightView> SafetensorsWeightSource::take_gathered(std::string_view name, const RowGather& g) const {
  const formats::SafetensorsTensor* t = model_->find(g.source);
  if (t == nullptr) return Error::invalid_file("{}: tensor '{}' is missing ({} is made from it)", path_, g.source, name);
  ASSIGN_OR_RETURN(const ir::DType dtype, float_dtype(*t, path_, g.source));
  if (t->shape.size() != 2 || t->shape[0] != g.source_rows)
    return Error::invalid_file("{}: tensor '{}' has shape [{}], but the config needs a matrix of {} rows ({})", path_,
                               g.source, fmt::join(t->shape, ", "), g.source_rows, g.layout);
  WeightView w;
  w.name = std::string(name);
  w.dtype = dtype;
  w.shape = {g.rows(), t->shape[1]};
  std::lock_guard<std::mutex> lock(gathered_mutex_);
  auto& copy = gathered_copies_[std::string(name)];
  if (!copy) copy = copy_runs(t->data, t->n_bytes, g);
  w.bytes = std::span<const uint8_t>(copy->data(), copy->size());
  w.owner = copy;
  return w;
}

std::vector<std::pair<std::string, std::string>> SafetensorsWeightSource::stored_tensors() const {
  std::map<std::string, std::string, std::less<>> hf_to_gguf;
  for (const auto& [g, hf] : gguf_to_hf_) hf_to_gguf[hf] = g;
  for (const auto& [g, experts] : stacked_)
    for (const std::string& hf : experts) hf_to_gguf[hf] = g;
  std::multimap<std::string, std::string, std::less<>> gathered_from;  // stored -> each tensor served from it
  for (const auto& [g, gather] : gathered_) gathered_from.emplace(gather.source, g);
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string_view hf : model_->tensor_names()) {
    if (auto [first, last] = gathered_from.equal_range(hf); first != last) {
      for (auto it = first; it != last; ++it) out.emplace_back(std::string(hf), it->second);
      continue;
    }
    auto it = hf_to_gguf.find(hf);
    out.emplace_back(std::string(hf), it == hf_to_gguf.end() ? std::string() : it->second);
  }
  return out;
}

bool SafetensorsWeightSource::has(std::string_view name) const {
  if (auto g = gathered_.find(name); g != gathered_.end()) return model_->find(g->second.source) != nullptr;
  return gguf_to_hf_.find(name) != gguf_to_hf_.end() || stacked_.find(name) != stacked_.end();
}

Expected<WeightView> SafetensorsWeightSource::take_stacked(std::string_view name,
                                                           const std::vector<std::string>& experts) const {
  std::vector<const formats::SafetensorsTensor*> parts;
  for (size_t e = 0; e < experts.size(); ++e) {
    if (experts[e].empty()) return Error::invalid_file("{}: expert {} of '{}' is missing", path_, e, name);
    ASSIGN_OR_RETURN(const formats::SafetensorsTensor* t, model_->tensor(experts[e]));
    if (!parts.empty() && (t->dtype != parts[0]->dtype || t->shape != parts[0]->shape))
      return Error::invalid_file("{}: expert tensors '{}' and '{}' differ in dtype or shape", path_, experts[0],
                                 experts[e]);
    parts.push_back(t);
  }
  const formats::SafetensorsTensor& first = *parts[0];
  if (first.shape.size() != 2) return Error::invalid_file("{}: expert tensor '{}' is not a matrix", path_, experts[0]);
  WeightView w;
  w.name = std::string(name);
  w.shape = {static_cast<int64_t>(parts.size()), first.shape[0], first.shape[1]};
  ASSIGN_OR_RETURN(w.dtype, float_dtype(first, path_, experts[0]));
  bool adjacent = true;
  for (size_t e = 1; e < parts.size(); ++e) adjacent = adjacent && parts[e]->data == parts[e - 1]->data + first.n_bytes;
  if (adjacent) {
    w.bytes = std::span<const uint8_t>(first.data, first.n_bytes * parts.size());
    w.owner = model_;
    w.file_mapped = std::all_of(model_->shards().begin(), model_->shards().end(),
                                [](const formats::SafetensorsFile& f) { return f.mapping() != nullptr; });
    return aligned_view(std::move(w));
  }
  auto copy = std::make_shared<std::vector<uint8_t>>(first.n_bytes * parts.size());
  for (size_t e = 0; e < parts.size(); ++e)
    std::memcpy(copy->data() + e * first.n_bytes, parts[e]->data, first.n_bytes);
  w.bytes = std::span<const uint8_t>(copy->data(), copy->size());
  w.owner = copy;
  return w;
}

Expected<WeightView> SafetensorsWeightSource::take(std::string_view name) const {
  if (auto st = stacked_.find(name); st != stacked_.end()) return take_stacked(name, st->second);
  if (auto g = gathered_.find(name); g != gathered_.end()) return take_gathered(name, g->second);
  auto it = gguf_to_hf_.find(name);
  if (it == gguf_to_hf_.end()) return Error::not_found("{}: no tensor maps to '{}'", path_, name);
  ASSIGN_OR_RETURN(const formats::SafetensorsTensor* t, model_->tensor(it->second));
  WeightView w;
  w.name = std::string(name);
  w.shape = t->shape;
  ASSIGN_OR_RETURN(w.dtype, float_dtype(*t, path_, it->second));
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  // Delta-net layers: the conv kernel [C, 1, K] is served as [C, K] (the same bytes);
  // A_log as ssm_a = -exp(A_log), the decay rate the GGUF convention stores.
  if (delta_net_ && ends_with("ssm_conv1d.weight") && w.shape.size() == 3 && w.shape[1] == 1)
    w.shape = {w.shape[0], w.shape[2]};
  // The shared expert's gate row [1, dim] is served as the vector [dim] (the same bytes).
  if (ends_with("ffn_gate_inp_shexp.weight") && w.shape.size() == 2 && w.shape[0] == 1) w.shape = {w.shape[1]};
  // One stored value of the tensor as f32 (F32, F16 or BF16, checked above).
  auto value_at = [&](size_t i) {
    float x = 0;
    if (w.dtype == ir::DType::F32) {
      std::memcpy(&x, t->data + 4 * i, 4);
      return x;
    }
    uint16_t h;
    std::memcpy(&h, t->data + 2 * i, 2);
    return w.dtype == ir::DType::F16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
  };
  if (delta_net_ && ends_with(".ssm_a")) {  // A_log in any stored float type (BF16 checkpoints too)
    auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(t->n_elements()));
    for (size_t i = 0; i < values->size(); ++i) (*values)[i] = -std::exp(value_at(i));
    w.dtype = ir::DType::F32;
    w.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values->data()), values->size() * 4);
    w.owner = values;
    return w;
  }
  // Zero-centred RMSNorm weights (x * (1 + w)); the delta-net's gated norm is a plain one.
  const bool is_norm = ends_with("norm.weight") && !ends_with("ssm_norm.weight");
  if (norm_plus_one_ && is_norm) {
    auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(t->n_elements()));
    for (size_t i = 0; i < values->size(); ++i) (*values)[i] = 1.0f + value_at(i);
    w.dtype = ir::DType::F32;
    w.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values->data()), values->size() * 4);
    w.owner = values;
    return w;
  }
  w.bytes = t->bytes();
  w.owner = model_;
  w.file_mapped = std::all_of(model_->shards().begin(), model_->shards().end(),
                              [](const formats::SafetensorsFile& f) { return f.mapping() != nullptr; });
  for (const formats::SafetensorsFile& f : model_->shards()) {
    if (w.file_mapped && w.file_start == nullptr) note_file(w, *f.mapping());
  }
  return aligned_view(std::move(w));
}

}  // namespace rlx::models
