// Sampler: penalties, then argmax (temperature 0) or one draw from the seeded RNG
// through choose_token (temperature, top-k / min-p / top-p, inverse CDF).
#include "rlx/models/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace rlx::models {

Status SamplingOptions::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return Error::invalid_argument("sampling: temperature must be >= 0, got {}", temperature);
  if (top_k < 0) return Error::invalid_argument("sampling: top_k must be >= 0, got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Error::invalid_argument("sampling: top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p < 1.0f)) return Error::invalid_argument("sampling: min_p must be in [0, 1), got {}", min_p);
  if (!(repetition_penalty > 0.0f))
    return Error::invalid_argument("sampling: repetition_penalty must be > 0, got {}", repetition_penalty);
  if (penalty_last_n < 0) return Error::invalid_argument("sampling: penalty_last_n must be >= 0");
  return {};
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(SamplingOptions options) : options_(options), rng_(options.seed) {}

// 24 random bits: every draw is exact in f32, the dtype of the sample op's draw input,
// so that the host and the executable pick from the same value.
double Sampler::next_draw() { return static_cast<double>(rng_() >> 40) * 0x1p-24; }

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const auto n = static_cast<int32_t>(logits.size());
  scratch_.assign(logits.begin(), logits.end());
  const SamplingOptions& o = options_;

  if (o.has_penalties() && !history.empty()) {
    const size_t window = o.penalty_last_n == 0 ? history.size()
                                                : std::min(history.size(), static_cast<size_t>(o.penalty_last_n));
    std::unordered_map<int32_t, int32_t> counts;
    for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
    for (const auto& [tok, count] : counts) {
      if (tok < 0 || tok >= n) continue;
      float& l = scratch_[tok];
      if (o.repetition_penalty != 1.0f) l = l > 0 ? l / o.repetition_penalty : l * o.repetition_penalty;
      l -= static_cast<float>(count) * o.frequency_penalty + o.presence_penalty;
    }
  }

  if (o.temperature <= 0.0f) return argmax(scratch_);
  return choose_token(scratch_, o.filter(), next_draw(), choice_);
}

Error non_finite_logits_error(int64_t position) {
  return Error::invalid_file(
      "the model's logits at position {} are not finite (NaN or Inf): its weights or config make the output "
      "non-finite, so no token can be chosen (RLX_CHECK_FINITE=1 on the CPU names the first op that produces it)",
      position);
}

Status check_logits_finite(std::span<const float> logits, int64_t position) {
  // The same test as the device's argmax (topk finite_check): every value finite.
  if (std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); })) return {};
  return non_finite_logits_error(position);
}

}  // namespace rlx::models
