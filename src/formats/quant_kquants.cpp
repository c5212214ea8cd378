// Codecs for the 256-element K-quant super-blocks (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K).
// The quantizers follow ggml's reference algorithms step by step (scale searches,
// rounding via nearest_int, float operation order), so their output is bit-exact.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "rlx/base/half.h"
#include "rlx/formats/quant.h"
#include "rlx/formats/quant_blocks.h"
#include "formats/quant_search.h"

namespace rlx::formats {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

float fp16(uint16_t bits) { return f16_bits_to_f32(bits); }
uint16_t to_fp16(float f) { return f32_to_f16_bits(f); }

}  // namespace

namespace detail {

// Round to nearest, ties to even, through the float mantissa (valid for |v| < 2^22),
// exactly as ggml's nearest_int does it.
int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// Symmetric quantization of n values to [-nmax, nmax-1] (stored +nmax in L) with a
// weighted least-squares refinement of the scale over 18 candidate scales.
// rmse_type 1 weights by x^2, or by qw when given; returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type, const float* qw) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  auto weight = [&](int i) {
    if (qw != nullptr) return qw[i];
    switch (rmse_type) {
      case 1: return x[i] * x[i];
      case 2: return 1.0f;
      case 3: return std::fabs(x[i]);
      default: return std::sqrt(std::fabs(x[i]));
    }
  };
  float iscale = static_cast<float>(-nmax) / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = nearest_int(iscale * x[i]);
      L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(i);
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric quantization for Q3_K sub-blocks: start from -nmax/max, then coordinate
// descent on individual values (at most 5 sweeps) maximising sumlx^2/suml2.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * static_cast<float>(L[i]) * static_cast<float>(L[i]);
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

// Asymmetric quantization x ~ scale*L - the_min with L in [0, nmax]: tries nstep+1
// candidate scales around nmax/(max-min) and keeps the weighted least-squares fit with
// the smallest error (absolute error if use_mad, squared otherwise).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = fnmax / (max - min);
  float scale = 1 / iscale;
  float best_mad = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_mad += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + fnmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        mad += weights[i] * diff;
      }
      if (mad < best_mad) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_mad = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

}  // namespace detail

namespace {

using detail::make_q3_quants;
using detail::make_qkx2_quants;
using detail::make_qx_quants;
using detail::nearest_int;

// The weights of a sub-block's fit under an importance vector `qw` (its values' share of
// the product's error): qw * sqrt(sigma2 + x^2), as ggml's quantizers weigh an imatrix.
void importance_weights(const float* x, const float* qw, int n, float sigma2, float* w) {
  for (int l = 0; l < n; ++l) w[l] = qw[l] * std::sqrt(sigma2 + x[l] * x[l]);
}

float sum_squares(const float* x, int n) {
  float s = 0;
  for (int l = 0; l < n; ++l) s += x[l] * x[l];
  return s;
}

// Packs 8 six-bit scales and mins into Q4_K/Q5_K's 12 bytes (inverse of get_scale_min_k4).
void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      q[j - 4] = static_cast<uint8_t>(q[j - 4] | ((ls[j] >> 4) << 6));
      q[j] = static_cast<uint8_t>(q[j] | ((lm[j] >> 4) << 6));
    }
  }
}

// The 6-bit signed scale (-32..31) of Q3_K sub-block j (0..15).
int q3_k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Shared by Q4_K and Q5_K: per-sub-block (32 values) scale/min search, 6-bit scale
// quantization, then the final integer levels L (0..nmax) for the whole super-block.
void quantize_k4_scales(const float* x, int nmax, float rmin, int nstep, uint8_t* L, uint8_t* packed_scales,
                        uint16_t* d_out, uint16_t* dmin_out, const float* qw) {
  uint8_t Laux[32];
  float weights[32];
  float mins[8];
  float scales[8];
  float max_scale = 0;
  float max_min = 0;
  const float sigma2 = 2 * sum_squares(x, kQK_K) / kQK_K;
  for (int j = 0; j < 8; ++j) {
    if (qw != nullptr) {  // the importance-weighted fit, with a finer scale search
      importance_weights(x + 32 * j, qw + 32 * j, 32, sigma2, weights);
      scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
      continue;
    }
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8];
  uint8_t lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  pack_scale_min_k4(ls, lm, packed_scales);
  *d_out = to_fp16(max_scale / 63.0f);
  *dmin_out = to_fp16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, packed_scales, &sc, &m);
    const float d = fp16(*d_out) * sc;
    if (d == 0.0f) continue;
    const float dm = fp16(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16(x[i].d);
    const float min = fp16(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = min * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = fp16(x[i].d);
    const uint8_t* q = x[i].qs;
    uint8_t m = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(q3_k_scale(x[i].scales, is++));
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int low = (q[l] >> shift) & 3;
            const int value = low - ((x[i].hmask[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(value);
          }
        }
      }
    }
  }
}

void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16(x[i].d);
    const float min = fp16(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      get_scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16(x[i].d);
    const float min = fp16(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      uint8_t sc, m;
      get_scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

void quantize_row_q2_k(const float* x, BlockQ2_K* y, int64_t n) { detail::quantize_row_q2_k(x, y, n, nullptr); }

void detail::quantize_row_q2_k(const float* x, BlockQ2_K* y, int64_t n, const float* qw) {
  uint8_t L[kQK_K];
  uint8_t Laux[16];
  float weights[16];
  float mins[kQK_K / 16];
  float scales[kQK_K / 16];
  const float q4scale = 15.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    float max_scale = 0;
    float max_min = 0;
    const float sigma2 = sum_squares(x, kQK_K) / kQK_K;
    for (int j = 0; j < kQK_K / 16; ++j) {
      if (qw != nullptr) {  // squared error under the importance weights
        importance_weights(x + 16 * j, qw + 16 * j, 16, sigma2, weights);
        scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
      } else {
        for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
        scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      }
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = to_fp16(max_scale / q4scale);
    } else {
      std::memset(y[i].scales, 0, sizeof y[i].scales);
      y[i].d = to_fp16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQK_K / 16; ++j) {
        const int l = nearest_int(iscale * mins[j]);
        y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | (l << 4));
      }
      y[i].dmin = to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = to_fp16(0.0f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = fp16(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] =
            static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
  }
}

void quantize_row_q3_k(const float* x, BlockQ3_K* y, int64_t n) { detail::quantize_row_q3_k(x, y, n, nullptr); }

void detail::quantize_row_q3_k(const float* x, BlockQ3_K* y, int64_t n, const float* qw) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  float weights[16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    float max_scale = 0;
    float amax = 0;
    const float sigma2 = 2 * sum_squares(x, kQK_K) / kQK_K;
    for (int j = 0; j < kQK_K / 16; ++j) {
      if (qw != nullptr) {
        importance_weights(x + 16 * j, qw + 16 * j, 16, sigma2, weights);
        scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, 1, weights);
      } else {
        scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      }
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = std::max(-32, std::min(31, l)) + 32;
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        }
        l >>= 4;
        y[i].scales[j % 4 + 8] = static_cast<uint8_t>(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y[i].d = to_fp16(1 / iscale);
    } else {
      y[i].d = to_fp16(0.0f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16(y[i].d) * static_cast<float>(q3_k_scale(y[i].scales, j));
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    std::memset(y[i].hmask, 0, sizeof y[i].hmask);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[m] = static_cast<uint8_t>(y[i].hmask[m] | hm);
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
      if (++m == kQK_K / 8) {
        m = 0;
        hm = static_cast<uint8_t>(hm << 1);
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] =
            static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
  }
}

void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n) { detail::quantize_row_q4_k(x, y, n, nullptr); }

void detail::quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n, const float* qw) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    quantize_k4_scales(x, 15, -1.0f, 20, L, y[i].scales, &y[i].d, &y[i].dmin, qw);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n) { detail::quantize_row_q5_k(x, y, n, nullptr); }

void detail::quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n, const float* qw) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    quantize_k4_scales(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin, qw);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, sizeof y[i].qh);
    uint8_t m1 = 1, m2 = 2;
    for (int base = 0; base < kQK_K; base += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[base + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] = static_cast<uint8_t>(qh[j] | m1);
        }
        int l2 = L[base + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] = static_cast<uint8_t>(qh[j] | m2);
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) { detail::quantize_row_q6_k(x, y, n, nullptr); }

void detail::quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n, const float* qw) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  float weights[16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K, qw = qw ? qw + kQK_K : nullptr) {
    float max_scale = 0;
    float max_abs_scale = 0;
    const float sigma2 = sum_squares(x, kQK_K) / kQK_K;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      if (qw != nullptr) importance_weights(x + 16 * ib, qw + 16 * ib, 16, sigma2, weights);
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, qw != nullptr ? weights : nullptr);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof y[i]);
      y[i].d = to_fp16(0.0f);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[i].d = to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib)
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF;
        const int q2 = L[j + l + 32] & 0xF;
        const int q3 = L[j + l + 64] & 0xF;
        const int q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max = 0;
    float amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, sizeof y[i].qs);
      std::memset(y[i].bsums, 0, sizeof y[i].bsums);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace rlx::formats
