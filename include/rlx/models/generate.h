// Text generation: prompt -> tokens -> prefill -> sampled decode steps, streamed
// through a callback, stopping at an end-of-generation token, a stop string or
// the token limit. Reports prefill and decode speed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "rlx/models/language_model.h"
#include "rlx/models/sampler.h"
#include "rlx/models/tokenizer.h"

namespace rlx::models {

struct GenerateOptions {
  int32_t max_tokens = 64;
  SamplingOptions sampling;
  std::vector<std::string> stop;  ///< stop strings (not emitted)
  bool stop_at_eos = true;
  /// Called after every sampled token, before the next model run; an error it returns
  /// ends the generation with that error (a caller's interrupt, e.g. Ctrl-C in the
  /// Python binding, or a cancelled stream). May be empty.
  std::function<Status()> interrupt_check;
};

/// Why a generation ended.
enum class StopReason {
  kLength,       ///< max_tokens were generated
  kEndOfText,    ///< the model produced an end-of-generation token (stop_at_eos)
  kStopString,   ///< a stop string appeared in the text
  kContextFull,  ///< the KV cache (context length) is full
};
/// "length", "end of text", "stop string", "context full".
const char* stop_reason_name(StopReason r);

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  ///< generated
  std::string text;             ///< generated text
  StopReason stop = StopReason::kLength;
  double prefill_ms = 0, decode_ms = 0;
  double compile_ms = 0;  ///< compiling (or loading) the executables first, outside prefill_ms
  double prefill_tokens_per_s() const { return prefill_ms > 0 ? prompt_tokens.size() * 1000.0 / prefill_ms : 0; }
  double decode_tokens_per_s() const {
    return decode_ms > 0 && tokens.size() > 1 ? (tokens.size() - 1) * 1000.0 / decode_ms : 0;
  }
};

/// Generates a continuation of `prompt_tokens`; `on_text` receives complete UTF-8
/// pieces as they are decoded (may be empty). The model's cache is reset first.
Expected<GenerateResult> generate(LanguageModel& model, const Tokenizer& tokenizer,
                                  const std::vector<int32_t>& prompt_tokens, const GenerateOptions& options,
                                  const std::function<void(const std::string&)>& on_text);

/// Batched generation: model.batch() prompts prefilled in one run, then one run per step
/// for all unfinished sequences. Each sequence samples with its own Sampler made from
/// `options`, so it produces exactly what generate() produces for it alone.
Expected<std::vector<GenerateResult>> generate_batch(LanguageModel& model, const Tokenizer& tokenizer,
                                                     const std::vector<std::vector<int32_t>>& prompts,
                                                     const GenerateOptions& options);

}  // namespace rlx::models
