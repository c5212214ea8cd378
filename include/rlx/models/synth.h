// Synthetic models: GGUF files with seeded random weights at the shapes of real
// models, plus a vocabulary so text tokenizes (SentencePiece-style, or Llama 3's
// byte-level BPE layout for the llama-3.2-1b preset). Used by tests, benchmarks and as
// the built-in default model of `rlx run`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::models {

struct SynthOptions {
  /// llama | qwen3 | gemma2 | qwen3moe | bert; empty: the preset's family (llama for tiny). A
  /// preset of a real model (llama-3.2-1b, qwen3-0.6b, gemma-2-2b, bert-base) takes only its own family.
  std::string arch;
  std::string preset = "tiny";  ///< tiny | llama-3.2-1b | qwen3-0.6b | gemma-2-2b | qwen3-30b-a3b-4l (MoE) | bert-base, bert-tiny (encoders)
  std::string type = "f32";     ///< f32 | f16 | q8_0 | q4_k_m
  uint64_t seed = 0;
  /// Written as `tokenizer.chat_template` when not empty (instead of the Llama 3
  /// template of the llama-3.2-1b preset).
  std::string chat_template;
  /// Progress callback (fraction done), called from the writing thread; may be empty.
  std::function<void(double)> progress;
};

/// Names of the presets and types `write_synthetic_gguf` accepts.
std::vector<std::string> synth_presets();
std::vector<std::string> synth_types();

/// What `write_synthetic_gguf` writes for `options`, without generating weights: the
/// metadata keys in file order, every tensor (name, GGML type name, GGUF dims innermost
/// first) and the vocabulary's pieces by id.
struct SynthLayout {
  struct Tensor {
    std::string name;
    std::string type;
    std::vector<int64_t> dims;
    std::vector<float> values;  ///< fixed contents (rope factors); empty for seeded weights
  };
  std::vector<std::string> keys;
  std::vector<Tensor> tensors;
  std::vector<std::string> tokens;
};
Expected<SynthLayout> synth_layout(const SynthOptions& options);

/// Writes the model to `path` (atomically: a temp file renamed into place).
/// Errors name the bad option or the I/O failure.
Status write_synthetic_gguf(const SynthOptions& options, const std::string& path);

}  // namespace rlx::models
