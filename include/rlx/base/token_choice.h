// Token choice from one row of logits: the ranking, the filters (top-k, min-p, top-p)
// and the inverse-CDF draw that the host sampler (models/sampler) and the CPU kernel of
// the `sample` op share, so that a token sampled by an executable and one sampled on
// the host from copied logits follow one definition.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

namespace rlx {

/// The filters of a sampled token choice. temperature > 0; top_k 0 = off (every token
/// is a candidate); top_p 1 = off; min_p 0 = off.
struct TokenFilter {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
};

/// Rank key of a logit: a larger logit has a larger key (+0 above -0); NaN has the
/// smallest key. Candidates rank by key, descending, then by token id, ascending.
inline uint32_t logit_rank_key(float v) {
  const auto u = std::bit_cast<uint32_t>(v);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) return 0;  // NaN
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// Reusable buffers of choose_token (no allocation per call once grown).
struct TokenChoiceScratch {
  std::vector<int32_t> order;
  std::vector<double> probs;
};

/// The token that the draw u in [0, 1) picks from `logits` under `filter`:
///  1. candidates = the top_k best ranked tokens (all when top_k is 0 or >= n);
///  2. p_i = exp((l_i - l_max) / temperature), normalized over the candidates (double;
///     a NaN logit has p = 0);
///  3. min-p keeps the ranked prefix with p_i >= min_p * p_max, top-p the shortest
///     ranked prefix whose cumulative p reaches top_p (at least one token either way);
///  4. r = u * (sum of the kept p); the first kept token in rank order whose
///     cumulative p exceeds r.
/// When the best logit is not finite the best-ranked token is returned.
int32_t choose_token(std::span<const float> logits, const TokenFilter& filter, double u, TokenChoiceScratch& scratch);

/// One row of a `sample` op's parameters (draw, temperature, top_k, top_p, min_p) as the
/// filter and draw choose_token takes, clamped: the draw to [0, 1); a temperature <= 0
/// or NaN to greedy (top_k 1); top_k to [1, max_top_k] (below 1 or NaN: max_top_k);
/// top_p to (0, 1] (<= 0 or NaN: the best token only); min_p to [0, 1).
struct SampleRow {
  TokenFilter filter;
  double draw = 0.0;
};
SampleRow read_sample_params(const float* params, int64_t max_top_k);

}  // namespace rlx
