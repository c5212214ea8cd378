// Encoders for the codebook i-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
// IQ1_M (layouts in quant_blocks.h, grids in iq_grids.h). Not ggml's search (which walks
// precomputed lattice neighbourhoods), but an exact one: for every run of values the
// codebook entry of least weighted squared error at the run's scale is found among all
// entries, through per-half cost tables (each half of an entry's coordinates is one of
// levels^(dims/2) combinations, so an entry costs two table reads, and the first halves
// that cannot beat the entries of the cheapest one are skipped). Per scale group a
// few candidate scales are tried, each refined by least squares; the super-block scale
// and the groups' small integer scales are then rounded and every run is fitted again at
// its stored scale. Weights: importance * sqrt(sigma^2 + x^2) with an importance (an
// imatrix row), x^2 + sigma^2 / 64 without one.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "formats/quant_search.h"
#include "rlx/base/half.h"
#include "rlx/formats/iq_grids.h"
#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A codebook: entries of `dims` coordinates, each coordinate one of the level values,
// its level index `bits` wide in the entry's code. Each entry's two halves are indexed
// as base-n_levels numbers (lo: coordinates 0 .. dims/2 - 1, hi: the rest).
struct Codebook {
  int dims = 8, n_levels = 3, combos = 81;
  std::vector<float> levels;
  std::vector<uint16_t> lo, hi;

  template <size_t N, size_t L>
  Codebook(const uint16_t (&codes)[N], const int (&level_values)[L], int dims_, int bits)
      : dims(dims_), n_levels(static_cast<int>(L)), levels(level_values, level_values + L), lo(N), hi(N) {
    combos = 1;
    for (int j = 0; j < dims / 2; ++j) combos *= n_levels;
    for (size_t i = 0; i < N; ++i) {
      int a = 0, b = 0, scale = 1;
      for (int j = 0; j < dims / 2; ++j, scale *= n_levels) {
        a += ((codes[i] >> (bits * j)) & ((1 << bits) - 1)) * scale;
        b += ((codes[i] >> (bits * (j + dims / 2))) & ((1 << bits) - 1)) * scale;
      }
      lo[i] = static_cast<uint16_t>(a);
      hi[i] = static_cast<uint16_t>(b);
    }
    // Entries grouped by first half, in entry order within a group (one array: the scan
    // of a group reads consecutive memory).
    lo_start.assign(static_cast<size_t>(combos) + 1, 0);
    for (size_t i = 0; i < N; ++i) ++lo_start[lo[i] + 1u];
    for (size_t c = 0; c < static_cast<size_t>(combos); ++c) lo_start[c + 1] += lo_start[c];
    by_lo.resize(N);
    std::vector<uint32_t> fill(lo_start.begin(), lo_start.end() - 1);
    for (size_t i = 0; i < N; ++i) by_lo[fill[lo[i]]++] = {hi[i], static_cast<uint16_t>(i)};
  }
  /// Entries by their first half: those of first half c are by_lo[lo_start[c] ..
  /// lo_start[c + 1]), each as (second half, entry index).
  std::vector<std::pair<uint16_t, uint16_t>> by_lo;
  std::vector<uint32_t> lo_start;
  int size() const { return static_cast<int>(lo.size()); }
  // Level index of coordinate j of entry i.
  int level_of(int i, int j) const {
    int c = j < dims / 2 ? lo[static_cast<size_t>(i)] : hi[static_cast<size_t>(i)];
    for (int k = 0; k < j % (dims / 2); ++k) c /= n_levels;
    return c % n_levels;
  }
};

const Codebook& iq2xxs_book() {
  static const Codebook b(iq_codes::kIq2xxsCodes, iq_detail::kIq2Levels, 8, 2);
  return b;
}
const Codebook& iq2xs_book() {
  static const Codebook b(iq_codes::kIq2xsCodes, iq_detail::kIq2Levels, 8, 2);
  return b;
}
const Codebook& iq2s_book() {
  static const Codebook b(iq_codes::kIq2sCodes, iq_detail::kIq2Levels, 8, 2);
  return b;
}
const Codebook& iq3xxs_book() {
  static const Codebook b(iq_codes::kIq3xxsCodes, iq_detail::kIq3xxsLevels, 4, 3);
  return b;
}
const Codebook& iq3s_book() {
  static const Codebook b(iq_codes::kIq3sCodes, iq_detail::kIq3sLevels, 4, 3);
  return b;
}
const Codebook& iq1_book() {
  static const Codebook b(iq_codes::kIq1sCodes, iq_detail::kIq1Levels, 8, 2);
  return b;
}

// The entry of least sum_j w_j (t_j - g * (L_j + shift))^2 for one run of b.dims values;
// its error in *err.
int best_entry(const Codebook& b, const float* t, const float* w, float g, float shift, float* err) {
  float cost[8][8];
  for (int j = 0; j < b.dims; ++j)
    for (int l = 0; l < b.n_levels; ++l) {
      const float d = t[j] - g * (b.levels[static_cast<size_t>(l)] + shift);
      cost[j][l] = w[j] * d * d;
    }
  // half[part][c]: the cost of the half whose coordinate j has level digit j of c (base
  // n_levels, least significant first), summed over j in order. Built a coordinate at a
  // time (the combos of j + 1 coordinates from those of j), with no division: the table
  // took 80 % of the encoders' time when each combo's digits were divided out.
  float half[2][81];
  const int h = b.dims / 2, n = b.n_levels;
  for (int part = 0; part < 2; ++part) {
    float* t = half[part];
    t[0] = 0.0f;
    int size = 1;  // combos of the first j coordinates
    for (int j = 0; j < h; ++j, size *= n) {
      const float* cj = cost[part * h + j];
      for (int k = n - 1; k >= 1; --k)
        for (int c = 0; c < size; ++c) t[k * size + c] = t[c] + cj[k];
      for (int c = 0; c < size; ++c) t[c] += cj[0];
    }
  }
  // The entries of the cheapest first half give a bound; then only first halves whose cost
  // plus the cheapest second half can still beat it are scanned.
  float cheapest_hi = kInf;
  int first_best = 0;
  for (int c = 0; c < b.combos; ++c) {
    cheapest_hi = std::min(cheapest_hi, half[1][c]);
    if (half[0][c] < half[0][first_best]) first_best = c;
  }
  int best = 0;
  float best_err = kInf;
  auto scan = [&](int c) {
    const float first = half[0][c];
    for (uint32_t at = b.lo_start[static_cast<size_t>(c)]; at < b.lo_start[static_cast<size_t>(c) + 1]; ++at) {
      const auto [h, i] = b.by_lo[at];
      const float e = first + half[1][h];
      if (e < best_err) {
        best_err = e;
        best = i;
      }
    }
  };
  scan(first_best);
  for (int c = 0; c < b.combos; ++c)
    if (c != first_best && half[0][c] + cheapest_hi < best_err) scan(c);
  *err = best_err;
  return best;
}

// A scale group: n values (whole runs) with targets t and weights w. Each run r gets an
// entry idx[r] and, when `delta` > 0, a shift of +delta or -delta (neg[r]) from the
// choice of the two that fits better.
struct GroupFit {
  float err = kInf;
  float g = 0;
};

float fit_runs(const Codebook& b, const float* t, const float* w, int n, float g, float delta, int* idx, bool* neg) {
  float total = 0;
  for (int r = 0; r < n / b.dims; ++r) {
    float e_pos = 0;
    idx[r] = best_entry(b, t + r * b.dims, w + r * b.dims, g, delta, &e_pos);
    if (neg != nullptr) neg[r] = false;
    if (delta > 0) {
      float e_neg = 0;
      const int i_neg = best_entry(b, t + r * b.dims, w + r * b.dims, g, -delta, &e_neg);
      if (e_neg < e_pos) {
        idx[r] = i_neg;
        neg[r] = true;
        e_pos = e_neg;
      }
    }
    total += e_pos;
  }
  return total;
}

// The least-squares scale for fixed entries (and shifts).
float refit_scale(const Codebook& b, const float* t, const float* w, int n, float delta, const int* idx,
                  const bool* neg) {
  double num = 0, den = 0;
  for (int r = 0; r < n / b.dims; ++r)
    for (int j = 0; j < b.dims; ++j) {
      const float shift = delta > 0 ? (neg[r] ? -delta : delta) : 0.0f;
      const double v = b.levels[static_cast<size_t>(b.level_of(idx[r], j))] + shift;
      num += static_cast<double>(w[r * b.dims + j]) * t[r * b.dims + j] * v;
      den += static_cast<double>(w[r * b.dims + j]) * v * v;
    }
  return den > 0 ? static_cast<float>(num / den) : 0.0f;
}

// The group's scale: candidates putting max|t| on the largest magnitude a value can take
// (at 0.9, 1 and 1.1 times) and on the next two (a group need not reach the largest),
// each also refined by least squares for the entries it picked.
float search_group_scale(const Codebook& b, const float* t, const float* w, int n, float delta) {
  float tmax = 0;
  for (int i = 0; i < n; ++i) tmax = std::max(tmax, std::fabs(t[i]));
  std::array<float, 16> mags{};  // the distinct |level +- delta|, largest first
  int n_mags = 0;
  for (float l : b.levels) {
    mags[static_cast<size_t>(n_mags++)] = std::fabs(l + delta);
    if (delta > 0) mags[static_cast<size_t>(n_mags++)] = std::fabs(l - delta);
  }
  std::sort(mags.begin(), mags.begin() + n_mags, std::greater<>());
  n_mags = static_cast<int>(std::unique(mags.begin(), mags.begin() + n_mags) - mags.begin());
  if (tmax <= 0 || mags[0] <= 0) return 0.0f;
  float candidates[5] = {0.9f * tmax / mags[0], tmax / mags[0], 1.1f * tmax / mags[0]};
  int n_candidates = 3;
  for (int k = 1; k < std::min(n_mags, 3) && mags[static_cast<size_t>(k)] > 0; ++k)
    candidates[n_candidates++] = tmax / mags[static_cast<size_t>(k)];
  int idx[8];
  bool neg[8];
  GroupFit best;
  for (int c = 0; c < n_candidates; ++c) {
    float g = candidates[c];
    float e = fit_runs(b, t, w, n, g, delta, idx, neg);
    if (e < best.err) best = {e, g};
    g = refit_scale(b, t, w, n, delta, idx, neg);
    if (g > 0) {
      e = fit_runs(b, t, w, n, g, delta, idx, neg);
      if (e < best.err) best = {e, g};
    }
  }
  return best.g;
}

// Fitting weights of a super-block of 256 values.
void superblock_weights(const float* x, const float* qw, float* w) {
  float sum_x2 = 0;
  for (int i = 0; i < kQK_K; ++i) sum_x2 += x[i] * x[i];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int i = 0; i < kQK_K; ++i)
    w[i] = qw != nullptr ? qw[i] * std::sqrt(sigma2 + x[i] * x[i]) : x[i] * x[i] + sigma2 / 64;
}

// Sign byte of a run of 8 and the targets |x| (full signs), or with the IQ2/IQ3 parity
// rule: an even count of negatives, the element cheapest to get wrong keeping its sign
// positive (its target then -|x|, which the nonnegative grid fits at its smallest).
uint8_t run_signs(const float* x, const float* w, bool parity, float* t) {
  uint8_t signs = 0;
  for (int j = 0; j < 8; ++j) {
    t[j] = std::fabs(x[j]);
    if (x[j] < 0) signs = static_cast<uint8_t>(signs | (1u << j));
  }
  if (parity && (std::popcount(static_cast<unsigned>(signs)) & 1)) {
    int cheapest = 0;
    for (int j = 1; j < 8; ++j)
      if (w[j] * x[j] * x[j] < w[cheapest] * x[cheapest] * x[cheapest]) cheapest = j;
    signs = static_cast<uint8_t>(signs ^ (1u << cheapest));
    t[cheapest] = -t[cheapest];
  }
  return signs;
}

// The f16 super-block scale d and each group's integer scale s in [0, smax] for group
// scales g_k ~ d * (a + b s): d from the largest group, s rounded at the stored d.
uint16_t round_scales(const float* g, int groups, float a, float b, int smax, int* s) {
  float gmax = 0;
  for (int k = 0; k < groups; ++k) gmax = std::max(gmax, g[k]);
  const uint16_t d16 = f32_to_f16_bits(gmax / (a + b * static_cast<float>(smax)));
  const float d = f16_bits_to_f32(d16);
  for (int k = 0; k < groups; ++k) s[k] = d > 0 ? std::clamp(detail::nearest_int((g[k] / d - a) / b), 0, smax) : 0;
  return d16;
}

// The common shape of the IQ2 / IQ3 types: runs of 8 signed values, groups of `group`
// values sharing a scale d * (a + b s). Writes, per run, the entries (two for the 4-wide
// IQ3 grids) and the sign byte; per group the scale; returns d (f16 bits).
struct SignedLayout {
  const Codebook* book;
  int group;  // values per scale
  bool parity;
  float a, b;
  int smax;
};

uint16_t encode_signed(const SignedLayout& L, const float* x, const float* qw, int (*entries)[2], uint8_t* signs,
                       int* scales) {
  float w[kQK_K], t[kQK_K];
  superblock_weights(x, qw, w);
  for (int r = 0; r < kQK_K / 8; ++r) signs[r] = run_signs(x + 8 * r, w + 8 * r, L.parity, t + 8 * r);
  const int groups = kQK_K / L.group;
  float g[16] = {};
  for (int k = 0; k < groups; ++k) g[k] = search_group_scale(*L.book, t + k * L.group, w + k * L.group, L.group, 0.0f);
  const uint16_t d16 = round_scales(g, groups, L.a, L.b, L.smax, scales);
  const float d = f16_bits_to_f32(d16);
  const int per_run = 8 / L.book->dims;
  for (int k = 0; k < groups; ++k) {
    const float gs = d * (L.a + L.b * static_cast<float>(scales[k]));
    int idx[16];
    fit_runs(*L.book, t + k * L.group, w + k * L.group, L.group, gs, 0.0f, idx, nullptr);
    for (int r = 0; r < L.group / 8; ++r)
      for (int e = 0; e < per_run; ++e) entries[k * (L.group / 8) + r][e] = idx[r * per_run + e];
  }
  return d16;
}

// IQ1: runs of 8 values dl * (L + delta), L in {-1, 0, 1}, delta = +-kIq1Delta per run
// (IQ1_M) or per group (IQ1_S), groups of `group` values sharing dl = d * (2s + 1).
uint16_t encode_iq1(const float* x, const float* qw, int group, bool delta_per_run, int* idx, bool* neg, int* scales) {
  const Codebook& b = iq1_book();
  float w[kQK_K];
  superblock_weights(x, qw, w);
  const int groups = kQK_K / group;
  float g[16] = {};
  for (int k = 0; k < groups; ++k) g[k] = search_group_scale(b, x + k * group, w + k * group, group, kIq1Delta);
  const uint16_t d16 = round_scales(g, groups, 1.0f, 2.0f, 7, scales);
  const float d = f16_bits_to_f32(d16);
  for (int k = 0; k < groups; ++k) {
    const float dl = d * static_cast<float>(2 * scales[k] + 1);
    const float* xk = x + k * group;
    const float* wk = w + k * group;
    int* ik = idx + k * (group / 8);
    bool* nk = neg + k * (group / 8);
    if (delta_per_run) {
      fit_runs(b, xk, wk, group, dl, kIq1Delta, ik, nk);
      continue;
    }
    // One shift for the whole group: the better of the two.
    int tmp[4];
    float e_pos = 0, e_neg = 0;
    for (int r = 0; r < group / 8; ++r) {
      float e = 0;
      ik[r] = best_entry(b, xk + 8 * r, wk + 8 * r, dl, kIq1Delta, &e);
      e_pos += e;
      tmp[r] = best_entry(b, xk + 8 * r, wk + 8 * r, dl, -kIq1Delta, &e);
      e_neg += e;
    }
    const bool use_neg = e_neg < e_pos;
    for (int r = 0; r < group / 8; ++r) {
      if (use_neg) ik[r] = tmp[r];
      nk[r] = use_neg;
    }
  }
  return d16;
}

}  // namespace

void detail::quantize_row_iq2_xxs(const float* x, BlockIQ2_XXS* y, int64_t n, const float* qw) {
  const SignedLayout L{&iq2xxs_book(), 32, true, 0.125f, 0.25f, 15};
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    int entries[32][2], scales[8];
    uint8_t signs[32];
    y[i].d = encode_signed(L, x, qw, entries, signs, scales);
    for (int g = 0; g < 8; ++g) {
      uint8_t idx[4];
      uint32_t meta = static_cast<uint32_t>(scales[g]) << 28;
      for (int l = 0; l < 4; ++l) {
        idx[l] = static_cast<uint8_t>(entries[4 * g + l][0]);
        meta |= static_cast<uint32_t>(signs[4 * g + l] & 127) << (7 * l);
      }
      std::memcpy(y[i].qs + 4 * g, idx, 4);
      std::memcpy(y[i].qs + 4 * g + 2, &meta, 4);
    }
  }
}

void detail::quantize_row_iq2_xs(const float* x, BlockIQ2_XS* y, int64_t n, const float* qw) {
  const SignedLayout L{&iq2xs_book(), 16, true, 0.125f, 0.25f, 15};
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    int entries[32][2], scales[16];
    uint8_t signs[32];
    y[i].d = encode_signed(L, x, qw, entries, signs, scales);
    for (int r = 0; r < 32; ++r) y[i].qs[r] = static_cast<uint16_t>(entries[r][0] | ((signs[r] & 127) << 9));
    for (int g = 0; g < 8; ++g) y[i].scales[g] = static_cast<uint8_t>(scales[2 * g] | (scales[2 * g + 1] << 4));
  }
}

void detail::quantize_row_iq2_s(const float* x, BlockIQ2_S* y, int64_t n, const float* qw) {
  const SignedLayout L{&iq2s_book(), 16, false, 0.125f, 0.25f, 15};
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    int entries[32][2], scales[16];
    uint8_t signs[32];
    y[i].d = encode_signed(L, x, qw, entries, signs, scales);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int r = 0; r < 32; ++r) {
      y[i].qs[r] = static_cast<uint8_t>(entries[r][0] & 255);
      y[i].qs[32 + r] = signs[r];
      y[i].qh[r / 4] = static_cast<uint8_t>(y[i].qh[r / 4] | ((entries[r][0] >> 8) << (2 * (r % 4))));
    }
    for (int g = 0; g < 8; ++g) y[i].scales[g] = static_cast<uint8_t>(scales[2 * g] | (scales[2 * g + 1] << 4));
  }
}

void detail::quantize_row_iq3_xxs(const float* x, BlockIQ3_XXS* y, int64_t n, const float* qw) {
  const SignedLayout L{&iq3xxs_book(), 32, true, 0.25f, 0.5f, 15};
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    int entries[32][2], scales[8];
    uint8_t signs[32];
    y[i].d = encode_signed(L, x, qw, entries, signs, scales);
    for (int r = 0; r < 32; ++r) {
      y[i].qs[2 * r] = static_cast<uint8_t>(entries[r][0]);
      y[i].qs[2 * r + 1] = static_cast<uint8_t>(entries[r][1]);
    }
    for (int g = 0; g < 8; ++g) {
      uint32_t meta = static_cast<uint32_t>(scales[g]) << 28;
      for (int l = 0; l < 4; ++l) meta |= static_cast<uint32_t>(signs[4 * g + l] & 127) << (7 * l);
      std::memcpy(y[i].qs + kQK_K / 4 + 4 * g, &meta, 4);
    }
  }
}

void detail::quantize_row_iq3_s(const float* x, BlockIQ3_S* y, int64_t n, const float* qw) {
  const SignedLayout L{&iq3s_book(), 32, false, 1.0f, 2.0f, 15};
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    int entries[32][2], scales[8];
    uint8_t signs[32];
    y[i].d = encode_signed(L, x, qw, entries, signs, scales);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    for (int r = 0; r < 32; ++r) {
      y[i].signs[r] = signs[r];
      for (int e = 0; e < 2; ++e) {
        const int q = 2 * r + e;  // index number within the block: group q / 8, bit q % 8 of qh
        y[i].qs[q] = static_cast<uint8_t>(entries[r][e] & 255);
        y[i].qh[q / 8] = static_cast<uint8_t>(y[i].qh[q / 8] | ((entries[r][e] >> 8) << (q % 8)));
      }
    }
    for (int g = 0; g < 8; ++g)
      y[i].scales[g / 2] = static_cast<uint8_t>(y[i].scales[g / 2] | (scales[g] << (4 * (g % 2))));
  }
}

void detail::quantize_row_iq1_s(const float* x, BlockIQ1_S* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    int idx[32], scales[8];
    bool neg[32];
    y[i].d = encode_iq1(x, qw, 32, false, idx, neg, scales);
    for (int g = 0; g < 8; ++g) {
      uint16_t qh = static_cast<uint16_t>((scales[g] << 12) | (neg[4 * g] ? 0x8000 : 0));
      for (int l = 0; l < 4; ++l) {
        y[i].qs[4 * g + l] = static_cast<uint8_t>(idx[4 * g + l] & 255);
        qh = static_cast<uint16_t>(qh | ((idx[4 * g + l] >> 8) << (3 * l)));
      }
      y[i].qh[g] = qh;
    }
  }
}

void detail::quantize_row_iq1_m(const float* x, BlockIQ1_M* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    int idx[32], scales[16];
    bool neg[32];
    const uint16_t d16 = encode_iq1(x, qw, 16, true, idx, neg, scales);
    uint16_t sc[4] = {};
    for (int g = 0; g < 8; ++g) {
      for (int l = 0; l < 4; ++l) y[i].qs[4 * g + l] = static_cast<uint8_t>(idx[4 * g + l] & 255);
      for (int half = 0; half < 2; ++half) {
        const int r0 = 4 * g + 2 * half;  // runs r0, r0 + 1 share qh byte 2g + half
        y[i].qh[2 * g + half] = static_cast<uint8_t>(((idx[r0] >> 8) | (neg[r0] ? 8 : 0)) |
                                                     (((idx[r0 + 1] >> 8) | (neg[r0 + 1] ? 8 : 0)) << 4));
      }
      sc[g / 2] = static_cast<uint16_t>(sc[g / 2] | ((scales[2 * g] | (scales[2 * g + 1] << 3)) << (6 * (g % 2))));
    }
    for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>(sc[k] | (((d16 >> (4 * k)) & 0xF) << 12));
    std::memcpy(y[i].scales, sc, sizeof sc);
  }
}

}  // namespace rlx::formats
