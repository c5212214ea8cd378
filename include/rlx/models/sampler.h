// Token sampling from a row of logits: greedy, temperature, top-k, top-p, min-p,
// repetition / frequency / presence penalties, with a seeded RNG so that the same
// seed and logits always give the same tokens.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/base/token_choice.h"

namespace rlx::models {

struct SamplingOptions {
  float temperature = 0.0f;        ///< <= 0: greedy (argmax, ties -> lowest id)
  int32_t top_k = 0;               ///< 0 = off
  float top_p = 1.0f;              ///< 1 = off
  float min_p = 0.0f;              ///< 0 = off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f; ///< 1 = off; divides positive / multiplies negative logits of seen tokens
  float frequency_penalty = 0.0f;  ///< subtracts count * penalty
  float presence_penalty = 0.0f;   ///< subtracts penalty once per seen token
  int32_t penalty_last_n = 64;     ///< how many recent tokens the penalties look at (0 = all)
  uint64_t seed = 0;

  /// Errors name the bad field (negative temperature, top_p outside (0, 1], ...).
  Status validate() const;
  /// True when a penalty changes the logits of tokens seen before.
  bool has_penalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
  /// The temperature / top-k / top-p / min-p part (for choose_token or the `sample` op).
  TokenFilter filter() const { return TokenFilter{temperature, top_k, top_p, min_p}; }
};

class Sampler {
 public:
  explicit Sampler(SamplingOptions options);
  /// Picks the next token from `logits` given the tokens generated so far
  /// (`history`, used by the penalties). Uses and advances the RNG.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  const SamplingOptions& options() const { return options_; }
  /// One uniform draw in [0, 1) from the RNG (a multiple of 2^-24, exact in f32), as
  /// sample() takes one for a temperature > 0 (a token chosen by an executable's
  /// `sample` op takes it as its input).
  double next_draw();

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  TokenChoiceScratch choice_;
};

/// Index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> logits);

/// An error when `logits` hold a NaN or an infinity: the model's weights or config turn
/// its output non-finite, and no token picked from them means anything. Names the token
/// position the logits are for; generation stops on it instead of printing garbage.
Status check_logits_finite(std::span<const float> logits, int64_t position);

/// The error check_logits_finite gives, for callers that know only that the logits were
/// not finite (an executable that reports their sum).
Error non_finite_logits_error(int64_t position);

}  // namespace rlx::models
