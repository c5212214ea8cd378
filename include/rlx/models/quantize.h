// Model quantization: the standard per-tensor type mixes (Q8_0, Q6_K, Q5_K_M, Q4_K_M,
// F16) and `quantize_gguf`, which rewrites a GGUF file with its matrices quantized
// and every metadata entry copied (general.file_type updated).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/formats/ggml_type.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/models/imatrix.h"

namespace rlx::models {

/// Names accepted as a mix: f32, f16, q8_0, the K-quant and legacy mixes (q6_k, q5_k_m,
/// q5_k_s, q5_1, q5_0, q4_k_m, q4_k_s, q4_1, q4_0, q3_k_l, q3_k_m, q3_k_s, q2_k), and the
/// one-type mixes iq4_xs, iq4_nl, iq3_s, iq3_xxs, iq2_s, iq2_xs, iq2_xxs, iq1_m, iq1_s,
/// tq2_0, tq1_0 (every matrix but the output, kept in Q6_K).
std::vector<std::string> quant_mixes();
/// The mixes as one comma-separated list, for messages.
std::string quant_mix_names();

/// The type a mix gives a weight `name` ([rows, cols]) of layer `layer` (-1 for
/// global tensors) in a model of `n_layer` layers: 1-D tensors stay F32; the K-quant
/// mixes keep the output / tied embedding in Q6_K and give attn_v and ffn_down Q6_K on
/// the first and last eighth of the layers and every third layer between (as the
/// usual quantizer does); rows whose length does not fit the block size fall back as
/// llama-quantize's do (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, Q2_K / Q3_K and the
/// i-quants of 256-value blocks to IQ4_NL, TQ1_0 / TQ2_0 to Q4_0, when a row holds whole
/// blocks of 32) or to F16.
Expected<formats::GgmlType> mix_weight_type(const std::string& mix, const std::string& name, int64_t rows,
                                            int64_t cols, int64_t layer, int64_t n_layer, bool tied_embeddings);

/// A weight's type under a mix: `wanted` is the type the mix gives the tensor, `type`
/// the one it gets (another when the rows do not fit wanted's block size).
struct MixChoice {
  formats::GgmlType type = formats::GgmlType::F32;
  formats::GgmlType wanted = formats::GgmlType::F32;
  bool fell_back() const { return type != wanted; }
};

/// As mix_weight_type, with the wanted type as well.
Expected<MixChoice> mix_weight_choice(const std::string& mix, const std::string& name, int64_t rows, int64_t cols,
                                      int64_t layer, int64_t n_layer, bool tied_embeddings);

/// One line naming a fallback: "tensor 'blk.0.attn_q.weight' [64, 64]: wanted Q4_K, chose
/// Q5_0 (rows of 64 values are no multiple of Q4_K's 256-value block)".
std::string describe_fallback(const std::string& name, int64_t rows, int64_t cols, const MixChoice& choice);

/// The layer of GGUF tensor "blk.N.xxx" (N), or -1 for a global tensor.
int64_t gguf_tensor_layer(const std::string& name);

/// llama.cpp's general.file_type number of a mix (f32 0, f16 1, q8_0 7, q4_k_m 15,
/// q5_k_m 17, q6_k 18, iq4_nl 25, iq4_xs 30, tq1_0 36, tq2_0 37).
uint32_t mix_file_type(const std::string& mix);

struct QuantizeOptions {
  std::string mix = "q4_k_m";
  std::function<void(double)> progress;  ///< fraction done (may be empty)
  /// Called with describe_fallback's line for each tensor whose type fell back (may be empty).
  std::function<void(const std::string&)> on_fallback;
  /// An importance matrix (read_imatrix / compute_imatrix): the matrices it has an entry
  /// for are quantized with their columns weighted by it (formats::quantize_row_weighted).
  std::shared_ptr<const Imatrix> imatrix;
  /// With an imatrix: called for each matrix of a type that takes an importance but that
  /// the imatrix has no entry of the right width for (quantized without one).
  std::function<void(const std::string&)> on_no_importance;
};

/// Adds `values` (f32, GGUF dims innermost first: [cols, rows] or [cols, rows, experts])
/// to `w` as `type`, with the imatrix's importance for `name` when `imatrix` is not null,
/// the type takes one and the imatrix has it (a fused q|k|v matrix takes q's entry,
/// which has the same input). Returns whether an importance was used.
Expected<bool> add_quantized_tensor(formats::GgufWriter& w, const std::string& name, formats::GgmlType type,
                                    const std::vector<int64_t>& dims, std::span<const float> values,
                                    const Imatrix* imatrix);

/// Reads `in`, writes `out` (atomically) with every tensor converted per the mix.
Status quantize_gguf(const std::string& in, const std::string& out, const QuantizeOptions& options);

}  // namespace rlx::models
