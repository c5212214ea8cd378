// Synthetic models: GGUF files with seeded random weights at the shapes of real
// models, plus a small SentencePiece-style vocabulary so text tokenizes. Used by
// tests, benchmarks and as the built-in default model of `rlx run`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::models {

struct SynthOptions {
  std::string arch = "llama";   ///< llama | qwen3 | gemma2
  std::string preset = "tiny";  ///< tiny | llama-3.2-1b | qwen3-0.6b | gemma-2-2b
  std::string type = "f32";     ///< f32 | f16 | q8_0 | q4_k_m
  uint64_t seed = 0;
  /// Progress callback (fraction done), called from the writing thread; may be empty.
  std::function<void(double)> progress;
};

/// Names of the presets and types `write_synthetic_gguf` accepts.
std::vector<std::string> synth_presets();
std::vector<std::string> synth_types();

/// Writes the model to `path` (atomically: a temp file renamed into place).
/// Errors name the bad option or the I/O failure.
Status write_synthetic_gguf(const SynthOptions& options, const std::string& path);

}  // namespace rlx::models
