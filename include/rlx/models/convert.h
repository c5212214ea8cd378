// Hugging Face checkpoint -> GGUF: the weights of a decoder folder (config.json +
// safetensors) written under llama.cpp's architecture keys and tensor names, at a
// quantization mix of quantize.h, so that llama.cpp and RLX read the same file.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "rlx/base/status.h"
#include "rlx/models/imatrix.h"

namespace rlx::models {

struct ConvertOptions {
  std::string mix = "f16";               ///< a name of quant_mixes(): f32, f16, q8_0, q6_k, q5_k_m, q4_k_m
  std::function<void(double)> progress;  ///< fraction done (may be empty)
  /// Called with describe_fallback's line (quantize.h) for each matrix whose type fell back.
  std::function<void(const std::string&)> on_fallback;
  /// As QuantizeOptions::imatrix and on_no_importance.
  std::shared_ptr<const Imatrix> imatrix;
  std::function<void(const std::string&)> on_no_importance;
};

/// Converts the Hugging Face folder `hf_dir` (llama, mistral, mixtral, qwen2, qwen3,
/// qwen3_moe, gemma, gemma2, gemma3_text, phi3, qwen3_5_text, qwen3_5_moe_text, qwen3_next,
/// minicpm3)
/// to the GGUF file `out` (written atomically) in llama.cpp's layout for that family.
/// Llama-architecture q/k rows are permuted to the interleaved rotary layout llama.cpp's
/// llama graph expects; Llama 3 rope scaling becomes rope_freqs.weight, linear and YaRN
/// scaling the rope.scaling.* keys, LongRoPE the rope_factors_long / short tensors with
/// the attention factor; Gemma's norms are stored as 1 + w, its softcaps, local rope base
/// and query scale as keys; Qwen3-Next keeps b|a grouped by key head (ssm_ba). The
/// folder's tokenizer.json becomes the tokenizer.ggml.* vocabulary, with its chat template.
/// Errors name the folder and what cannot be expressed in GGUF (another family, a sliding
/// pattern the family's GGUF layout does not have, dense layers inside a mixture of
/// experts, experts not renormalized).
Status convert_hf_to_gguf(const std::string& hf_dir, const std::string& out, const ConvertOptions& options);

}  // namespace rlx::models
