// Sampler: penalties, then temperature, then top-k / top-p / min-p filtering on a
// sorted candidate list, then one draw from the seeded RNG.
#include "rlx/models/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
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

  // Candidates sorted by logit (descending, ties by id), cut by top-k.
  order_.resize(static_cast<size_t>(n));
  std::iota(order_.begin(), order_.end(), 0);
  const int32_t k = (o.top_k > 0 && o.top_k < n) ? o.top_k : n;
  auto by_logit = [&](int32_t a, int32_t b) {
    return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b);
  };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
  order_.resize(static_cast<size_t>(k));

  // Softmax at temperature over the candidates.
  const float max_l = scratch_[order_[0]];
  std::vector<double> probs(order_.size());
  double total = 0;
  for (size_t i = 0; i < order_.size(); ++i) {
    probs[i] = std::exp(static_cast<double>(scratch_[order_[i]] - max_l) / o.temperature);
    total += probs[i];
  }
  for (double& p : probs) p /= total;

  // min-p: keep tokens with p >= min_p * p_max (p_max = probs[0]).
  size_t keep = probs.size();
  if (o.min_p > 0.0f) {
    const double cut = o.min_p * probs[0];
    keep = 1;
    while (keep < probs.size() && probs[keep] >= cut) ++keep;
  }
  // top-p: smallest prefix with cumulative probability >= top_p.
  if (o.top_p < 1.0f) {
    double cum = 0;
    size_t i = 0;
    for (; i < keep; ++i) {
      cum += probs[i];
      if (cum >= o.top_p) {
        ++i;
        break;
      }
    }
    keep = std::max<size_t>(1, std::min(keep, i));
  }
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += probs[i];
  std::uniform_real_distribution<double> uniform(0.0, kept_total);
  const double r = uniform(rng_);
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += probs[i];
    if (r < cum) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace rlx::models
