// choose_token: rank, filter and draw one token (see token_choice.h).
#include "rlx/base/token_choice.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace rlx {

int32_t choose_token(std::span<const float> logits, const TokenFilter& f, double u, TokenChoiceScratch& scratch) {
  const auto n = static_cast<int64_t>(logits.size());
  if (n == 0) return 0;
  std::vector<int32_t>& order = scratch.order;
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = (f.top_k > 0 && f.top_k < n) ? f.top_k : n;
  auto better = [&](int32_t a, int32_t b) {
    const uint32_t ka = logit_rank_key(logits[a]), kb = logit_rank_key(logits[b]);
    return ka > kb || (ka == kb && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
  order.resize(static_cast<size_t>(k));

  const float max_l = logits[order[0]];
  if (!std::isfinite(max_l)) return order[0];
  std::vector<double>& probs = scratch.probs;
  probs.resize(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const float l = logits[order[i]];
    probs[i] = std::isnan(l) ? 0.0 : std::exp(static_cast<double>(l - max_l) / f.temperature);
    total += probs[i];
  }
  for (double& p : probs) p /= total;

  size_t keep = probs.size();
  if (f.min_p > 0.0) {  // probs are non-increasing: the kept tokens are a prefix
    const double cut = f.min_p * probs[0];
    keep = 1;
    while (keep < probs.size() && probs[keep] >= cut) ++keep;
  }
  if (f.top_p < 1.0) {
    double cum = 0;
    size_t i = 0;
    while (i < keep) {
      cum += probs[i++];
      if (cum >= f.top_p) break;
    }
    keep = std::max<size_t>(1, std::min(keep, i));
  }
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += probs[i];
  const double r = u * kept_total;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += probs[i];
    if (r < cum) return order[i];
  }
  return order[keep - 1];
}

SampleRow read_sample_params(const float* params, int64_t max_top_k) {
  SampleRow r;
  const double below_one = std::nextafter(1.0, 0.0);
  const double u = params[0];
  r.draw = u >= 0.0 ? std::min(u, below_one) : 0.0;
  const double t = params[1], k = params[2], p = params[3], m = params[4];
  r.filter.temperature = t > 0.0 ? t : 1.0;
  r.filter.top_k = !(t > 0.0) ? 1 : (k >= 1.0 && k <= static_cast<double>(max_top_k)) ? static_cast<int64_t>(k) : max_top_k;
  r.filter.top_p = p > 0.0 ? std::min(p, 1.0) : std::numeric_limits<double>::min();
  r.filter.min_p = m >= 0.0 ? std::min(m, below_one) : 0.0;
  return r;
}

}  // namespace rlx
