// WeightSource: where a model builder gets its parameters. GGUF tensors are
// views into the file mapping (packed quantized blocks stay packed); names use
// the GGUF convention (blk.N.attn_q.weight), with Hugging Face names mapped.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/dtype.h"

namespace rlx::formats {
class GgufFile;
class SafetensorsModel;
}

namespace rlx::models {

/// One parameter's bytes, as stored (row-major, outermost dim first).
struct WeightView {
  std::string name;
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> owner;  ///< keeps the storage (e.g. the mmap) alive
  /// `bytes` are pages of a read-only file mapping: a backend that keeps a packed copy
  /// may drop them from memory (they refault from the file; ByteView::file_pages).
  bool file_mapped = false;
  /// For file-mapped bytes: the mapped file's MappedFile::identity() and first byte, so
  /// that the bytes' name across processes is identity@(bytes - file_start) (views
  /// derived from this one, e.g. row slices, keep both and stay named correctly).
  std::string file_identity{};
  const uint8_t* file_start = nullptr;
  size_t file_size = 0;
};

/// `w` itself when its bytes start where its values may be read from (4 bytes; 2 for
/// f16 / bf16; any for 1-byte types), else `w` over an aligned copy of them (owned by the
/// result, no longer file-mapped). Files do not guarantee it (a safetensors header of odd
/// length, a GGUF general.alignment below 4): the sources serve their views through this.
/// (Inline: the config fuzz targets link the media loader without the weight sources.)
inline WeightView aligned_view(WeightView w) {
  const ir::DTypeInfo& info = ir::dtype_info(w.dtype);
  const size_t need =
      info.kind == ir::DTypeKind::kPacked ? 4 : std::min<size_t>(4, static_cast<size_t>(info.bytes_per_block));
  if (w.bytes.empty() || reinterpret_cast<uintptr_t>(w.bytes.data()) % need == 0) return w;
  auto copy = std::make_shared<std::vector<uint64_t>>((w.bytes.size() + 7) / 8);
  std::memcpy(copy->data(), w.bytes.data(), w.bytes.size());
  w.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(copy->data()), w.bytes.size());
  w.owner = copy;
  w.file_mapped = false;
  w.file_identity.clear();
  w.file_start = nullptr;
  w.file_size = 0;
  return w;
}

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(std::string_view name) const = 0;
  /// The named tensor, never copied; kNotFound names the source and tensor.
  virtual Expected<WeightView> take(std::string_view name) const = 0;
  /// Human name of the source (file path) for messages.
  virtual std::string describe() const = 0;
  /// Every tensor the source stores: its stored name and the GGUF name it serves under
  /// (empty when no model tensor maps to it). A stored tensor that serves several GGUF
  /// tensors (Qwen3-Next's in_proj_qkvz) appears once for each.
  virtual std::vector<std::pair<std::string, std::string>> stored_tensors() const = 0;
};

/// The stored tensors of `source` that a model neither reads (`used`, GGUF names) nor
/// knows to be safe to ignore (`ignorable`, GGUF names of tensors consumed elsewhere, such
/// as rope factors read into the config; and the rotary caches some checkpoints keep).
/// Each is described as "name" (or "hf_name (as gguf_name)").
std::vector<std::string> unused_tensors(const WeightSource& source, const std::vector<std::string>& used,
                                        const std::vector<std::string>& ignorable);

/// Tensors of an opened GGUF file. Holds the file (and so its mapping).
class GgufWeightSource : public WeightSource {
 public:
  explicit GgufWeightSource(std::shared_ptr<const formats::GgufFile> file);
  bool has(std::string_view name) const override;
  Expected<WeightView> take(std::string_view name) const override;
  std::string describe() const override;
  std::vector<std::pair<std::string, std::string>> stored_tensors() const override;
  const formats::GgufFile& file() const { return *file_; }

 private:
  std::shared_ptr<const formats::GgufFile> file_;
};

struct ModelConfig;

/// Tensors of a Hugging Face checkpoint (one safetensors file, a sharded index or a
/// folder), served under GGUF names. F32/F16/BF16 tensors are views into the
/// mapping, except Gemma's RMSNorm weights, which HF stores as w with the norm
/// computing x * (1 + w): those are returned as f32 copies holding 1 + w. A mixture
/// of experts' per-expert matrices (mlp.experts.E.gate_proj, block_sparse_moe.experts.E.w1
/// ...) are served stacked as blk.N.ffn_{gate,up,down}_exps [experts, rows, cols]: a view
/// when the file stores them back to back in expert order, else one copy. Qwen3-Next's
/// grouped delta-net projections (ModelConfig::ssm_grouped_projections) are served
/// regrouped as Qwen3.5's: in_proj_qkvz as blk.N.attn_qkv ([all q | all k | all v]) and
/// blk.N.attn_gate (z), in_proj_ba as blk.N.ssm_beta and blk.N.ssm_alpha — one copy each
/// (in the stored dtype), made on the first take and kept; a stored matrix whose row count
/// does not fit the config's head counts is an error naming it.
/// A served tensor made of row runs of one stored matrix (Qwen3-Next's grouped projections).
struct RowGather {
  std::string source;       ///< the stored matrix
  int64_t source_rows = 0;  ///< the rows it must have
  std::string layout;       ///< how that count follows from the config (for messages)
  std::vector<std::pair<int64_t, int64_t>> runs;  ///< (first stored row, rows), in served order
  /// The rows served: the runs' total.
  int64_t rows() const {
    int64_t n = 0;
    for (const auto& run : runs) n += run.second;
    return n;
  }
};

/// Qwen3-Next's grouped delta-net projections of layer `il` as Qwen3.5's tensors, keyed by
/// served name: blk.N.attn_qkv ([all q | all k | all v]) and blk.N.attn_gate (z) from the
/// stored matrix `qkvz`, whose rows are per key-head group g [q_g (Dk) | k_g (Dk) |
/// v_g (r Dv) | z_g (r Dv)] with r = Hv / Hk; blk.N.ssm_beta and blk.N.ssm_alpha from
/// `ba`, whose rows are per group [b_g (r) | a_g (r)]. An error when the head counts do
/// not divide.
Expected<std::map<std::string, RowGather, std::less<>>> grouped_delta_net_gathers(const ModelConfig& config,
                                                                                  int64_t il, const std::string& qkvz,
                                                                                  const std::string& ba);

/// For a GGUF file in llama.cpp's qwen3next layout: serves each delta-net layer's Qwen3.5
/// tensors as row gathers of blk.N.ssm_ba (or blk.N.ssm_beta_alpha) and, in older files that
/// have no blk.N.attn_qkv of their own, of blk.N.ssm_in — one copy each, in the
/// stored type (rows are whole blocks), made on the first take and kept.
std::unique_ptr<WeightSource> regroup_delta_net_projections(std::unique_ptr<WeightSource> inner,
                                                            const ModelConfig& config);

class SafetensorsWeightSource : public WeightSource {
 public:
  static Expected<std::unique_ptr<SafetensorsWeightSource>> open(const std::string& path, const ModelConfig& config);
  bool has(std::string_view name) const override;
  Expected<WeightView> take(std::string_view name) const override;
  std::string describe() const override { return path_; }
  std::vector<std::pair<std::string, std::string>> stored_tensors() const override;

 private:
  SafetensorsWeightSource() = default;
  Expected<WeightView> take_stacked(std::string_view name, const std::vector<std::string>& experts) const;
  Expected<WeightView> take_gathered(std::string_view name, const RowGather& gather) const;
  /// Registers the gathers of every delta-net layer (ModelConfig::ssm_grouped_projections).
  Status add_grouped_projections(const ModelConfig& config);

  std::string path_;
  std::shared_ptr<const formats::SafetensorsModel> model_;
  std::map<std::string, std::string, std::less<>> gguf_to_hf_;
  /// Stacked expert tensors: GGUF name -> the HF name of each expert, by expert index.
  std::map<std::string, std::vector<std::string>, std::less<>> stacked_;
  bool norm_plus_one_ = false;
  bool delta_net_ = false;  ///< serve ssm_conv1d as [C, K] and A_log as ssm_a = -exp(A_log)
  /// Served GGUF name -> its rows in a stored matrix (served before gguf_to_hf_).
  std::map<std::string, RowGather, std::less<>> gathered_;
  /// The gathered copies made so far, by served name (take is const and may run on
  /// several threads).
  mutable std::mutex gathered_mutex_;
  mutable std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>, std::less<>> gathered_copies_;
};

/// For a model with fused projections (ModelConfig::fused_projections, Phi-3): serves
/// blk.N.attn_q / attn_k / attn_v as row ranges of blk.N.attn_qkv and blk.N.ffn_gate /
/// ffn_up as the two halves of the stored blk.N.ffn_up — views, nothing is copied.
std::unique_ptr<WeightSource> split_fused_projections(std::unique_ptr<WeightSource> inner, const ModelConfig& config);

/// Hugging Face tensor name -> GGUF name ("model.layers.3.self_attn.q_proj.weight"
/// -> "blk.3.attn_q.weight"); empty when the name has no GGUF counterpart.
/// `post_norms` (Gemma 2/3, the Qwen3.5 family): HF's post_attention_layernorm is GGUF's
/// post_attention_norm (Gemma's norm after attention, Qwen3.5's norm before the FFN) and
/// pre_feedforward_layernorm is ffn_norm.
std::string hf_to_gguf_name(std::string_view hf_name, bool post_norms = false);

enum class Arch : uint8_t;
/// An encoder's Hugging Face tensor name -> GGUF name (llama.cpp's bert / nomic-bert /
/// modern-bert names: "encoder.layer.3.attention.self.query.weight" ->
/// "blk.3.attn_q.weight"; BERT's pooler dense layer -> pooler.weight / pooler.bias);
/// empty when the name has no counterpart.
std::string hf_to_gguf_encoder_name(std::string_view hf_name, Arch arch);

/// A per-expert Hugging Face matrix and the stacked GGUF tensor it belongs to:
/// "model.layers.3.mlp.experts.5.up_proj.weight" (Qwen3-MoE) or
/// "model.layers.3.block_sparse_moe.experts.5.w3.weight" (Mixtral) -> {"blk.3.ffn_up_exps.weight", 5}.
struct HfExpertName {
  std::string stacked;
  int64_t expert = -1;
};
std::optional<HfExpertName> hf_expert_name(std::string_view hf_name);

}  // namespace rlx::models
