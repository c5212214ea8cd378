// Block codecs of the i-quants (IQ4_NL, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS,
// IQ1_S, IQ1_M) and the ternary types (TQ1_0, TQ2_0): decoders for all of them, and
// encoders for the types whose reference quantizer needs no importance matrix (IQ4_NL,
// IQ4_XS with ggml's scale search and x² weights; TQ1_0, TQ2_0). Layouts are described
// with the block structs (quant_blocks.h); grids in iq_grids.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "rlx/base/half.h"
#include "rlx/formats/iq_grids.h"
#include "formats/quant_search.h"
#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

inline float h2f(uint16_t h) { return f16_bits_to_f32(h); }
inline int sign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1 : 1; }
inline uint8_t byte_of(uint64_t v, int j) { return static_cast<uint8_t>(v >> (8 * j)); }

// Writes 8 values d * grid[j] * sign_j of one run.
inline void emit_run8(float d, uint64_t grid, uint8_t signs, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = d * static_cast<float>(byte_of(grid, j)) * static_cast<float>(sign_of(signs, j));
}

// ggml's nearest_int: round half to even through the float mantissa.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007FFFFF) - 0x00400000;
}

// Index of the entry of the sorted `values` nearest to x (ties to the upper one).
int best_index(const int8_t* values, int n, float x) {
  if (x <= values[0]) return 0;
  if (x >= values[n - 1]) return n - 1;
  int lo = 0, hi = n - 1;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < values[mid])
      hi = mid;
    else
      lo = mid;
  }
  return x - values[hi - 1] < values[hi] - x ? hi - 1 : hi;
}

// ggml's non-linear 4-bit search for one super-block of `n_sub` sub-blocks of 32: per
// sub-block the scale that maximises the weighted fit (weights x², 2 * 7 + 1 trial
// scales), then for n_sub > 1 the 6-bit sub-block scales relative to one f16 scale.
// Writes d, the nibbles and, for n_sub > 1, the packed sub-block scales.
void quantize_iq4_superblock(const float* x, int n_sub, uint16_t* d_out, uint8_t* qs, uint16_t* scales_h,
                             uint8_t* scales_l, const float* qw) {
  constexpr int kTries = 7;
  const int8_t* values = kIq4nlValues;
  const int n = 32 * n_sub;
  uint8_t levels[256];
  float scales[8];
  float weight[32];
  std::memset(qs, 0, static_cast<size_t>(n / 2));
  *d_out = f32_to_f16_bits(0.0f);
  float max_scale = 0.0f, amax_scale = 0.0f;
  for (int ib = 0; ib < n_sub; ++ib) {
    const float* xb = x + 32 * ib;
    uint8_t* lb = levels + 32 * ib;
    if (qw != nullptr) {  // an importance vector: qw * sqrt(sigma2 + x^2), sigma2 over the super-block
      float sigma2 = 0.0f;
      for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
      sigma2 *= 2.0f / static_cast<float>(n);
      for (int j = 0; j < 32; ++j) weight[j] = qw[32 * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    } else {
      for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    }
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < 1e-15f) {
      scales[ib] = 0.0f;
      std::memset(lb, 0, 32);
      continue;
    }
    float d = -max / values[0];
    float id = 1.0f / d;
    float sumqx = 0.0f, sumq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const int l = best_index(values, 16, id * xb[j]);
      lb[j] = static_cast<uint8_t>(l);
      const float q = values[l], w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -kTries; itry <= kTries; ++itry) {
      id = (static_cast<float>(itry) + values[0]) / max;
      sumqx = sumq2 = 0.0f;
      for (int j = 0; j < 32; ++j) {
        const int l = best_index(values, 16, id * xb[j]);
        const float q = values[l], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (n_sub > 1) {
    *scales_h = 0;
    std::memset(scales_l, 0, static_cast<size_t>(n_sub / 2));
    const float d = -max_scale / 32.0f;
    *d_out = f32_to_f16_bits(d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int ib = 0; ib < n_sub; ++ib) {
      int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
      for (int j = 0; j < 32; ++j)
        levels[32 * ib + j] = static_cast<uint8_t>(best_index(values, 16, idl * x[32 * ib + j]));
      l += 32;
      scales_l[ib / 2] |= static_cast<uint8_t>((l & 0xF) << (4 * (ib % 2)));
      *scales_h |= static_cast<uint16_t>((l >> 4) << (2 * ib));
    }
  } else {
    *d_out = f32_to_f16_bits(scales[0]);
    const float id = scales[0] != 0.0f ? 1.0f / scales[0] : 0.0f;
    for (int j = 0; j < 32; ++j) levels[j] = static_cast<uint8_t>(best_index(values, 16, id * x[j]));
  }
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j)
      qs[16 * i + j] = static_cast<uint8_t>(levels[32 * i + j] | (levels[32 * i + 16 + j] << 4));
}

}  // namespace

void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float d = h2f(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * kIq4nlValues[x[b].qs[j] & 0xF];
      y[j + 16] = d * kIq4nlValues[x[b].qs[j] >> 4];
    }
  }
}

void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(x[b], ib));
      const uint8_t* qs = x[b].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIq4nlValues[qs[j] & 0xF];
        y[j + 16] = dl * kIq4nlValues[qs[j] >> 4];
      }
    }
  }
}

void dequantize_row_tq1_0(const BlockTQ1_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    for (int digit = 0; digit < 5; ++digit)
      for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(tq1_trit(x[b].qs[m], digit) - 1) * d;
    for (int digit = 0; digit < 5; ++digit)
      for (int m = 0; m < 16; ++m) *y++ = static_cast<float>(tq1_trit(x[b].qs[32 + m], digit) - 1) * d;
    for (int digit = 0; digit < 4; ++digit)
      for (int j = 0; j < 4; ++j) *y++ = static_cast<float>(tq1_trit(x[b].qh[j], digit) - 1) * d;
  }
}

void dequantize_row_tq2_0(const BlockTQ2_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    for (int half = 0; half < 2; ++half)
      for (int l = 0; l < 4; ++l)
        for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(((x[b].qs[32 * half + m] >> (2 * l)) & 3) - 1) * d;
  }
}

void dequantize_row_iq2_xxs(const BlockIQ2_XXS* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    for (int g = 0; g < 8; ++g) {
      uint8_t idx[4];
      uint32_t meta;
      std::memcpy(idx, x[b].qs + 4 * g, 4);
      std::memcpy(&meta, x[b].qs + 4 * g + 2, 4);
      const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) emit_run8(db, kIq2xxsGrid[idx[l]], iq_sign_byte(meta >> (7 * l)), y);
    }
  }
}

void dequantize_row_iq2_xs(const BlockIQ2_XS* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    for (int g = 0; g < 8; ++g) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[b].scales[g] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[b].scales[g] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint16_t q = x[b].qs[4 * g + l];
        emit_run8(db[l / 2], kIq2xsGrid[q & 511], iq_sign_byte(q >> 9), y);
      }
    }
  }
}

void dequantize_row_iq2_s(const BlockIQ2_S* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    const uint8_t* signs = x[b].qs + kQK_K / 8;
    for (int g = 0; g < 8; ++g) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[b].scales[g] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[b].scales[g] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const int index = x[b].qs[4 * g + l] | (((x[b].qh[g] >> (2 * l)) & 3) << 8);
        emit_run8(db[l / 2], kIq2sGrid[index], signs[4 * g + l], y);
      }
    }
  }
}

void dequantize_row_iq3_xxs(const BlockIQ3_XXS* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    const uint8_t* qs = x[b].qs;
    const uint8_t* meta_bytes = x[b].qs + kQK_K / 4;
    for (int g = 0; g < 8; ++g) {
      uint32_t meta;
      std::memcpy(&meta, meta_bytes + 4 * g, 4);
      const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t signs = iq_sign_byte(meta >> (7 * l));
        const uint64_t grid = uint64_t{kIq3xxsGrid[qs[8 * g + 2 * l]]} | uint64_t{kIq3xxsGrid[qs[8 * g + 2 * l + 1]]}
                                                                             << 32;
        emit_run8(db, grid, signs, y);
      }
    }
  }
}

void dequantize_row_iq3_s(const BlockIQ3_S* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    for (int g = 0; g < 8; ++g) {
      const float db = d * static_cast<float>(1 + 2 * ((x[b].scales[g / 2] >> (4 * (g % 2))) & 0xF));
      const uint8_t* qs = x[b].qs + 8 * g;
      const uint8_t qh = x[b].qh[g];
      for (int l = 0; l < 4; ++l, y += 8) {
        const int i0 = qs[2 * l] | (((qh >> (2 * l)) & 1) << 8);
        const int i1 = qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8);
        const uint64_t grid = uint64_t{kIq3sGrid[i0]} | uint64_t{kIq3sGrid[i1]} << 32;
        emit_run8(db, grid, x[b].signs[4 * g + l], y);
      }
    }
  }
}

void dequantize_row_iq1_s(const BlockIQ1_S* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = h2f(x[b].d);
    for (int g = 0; g < 8; ++g) {
      const uint16_t qh = x[b].qh[g];
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) ? -kIq1Delta : kIq1Delta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint64_t grid = kIq1sGrid[x[b].qs[4 * g + l] | (((qh >> (3 * l)) & 7) << 8)];
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(static_cast<int8_t>(byte_of(grid, j))) + delta);
      }
    }
  }
}

void dequantize_row_iq1_m(const BlockIQ1_M* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint16_t sc[4];
    std::memcpy(sc, x[b].scales, sizeof sc);
    const auto d_bits =
        static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    const float d = h2f(d_bits);
    for (int g = 0; g < 8; ++g) {
      const uint8_t* qs = x[b].qs + 4 * g;
      const uint8_t* qh = x[b].qh + 2 * g;
      const float dl[2] = {d * static_cast<float>(2 * ((sc[g / 2] >> (6 * (g % 2))) & 7) + 1),
                           d * static_cast<float>(2 * ((sc[g / 2] >> (6 * (g % 2) + 3)) & 7) + 1)};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t h = qh[l / 2] >> (4 * (l % 2));
        const uint64_t grid = kIq1sGrid[qs[l] | ((h & 7) << 8)];
        const float delta = (h & 0x08) ? -kIq1Delta : kIq1Delta;
        for (int j = 0; j < 8; ++j)
          y[j] = dl[l / 2] * (static_cast<float>(static_cast<int8_t>(byte_of(grid, j))) + delta);
      }
    }
  }
}

void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) { detail::quantize_row_iq4_nl(x, y, n, nullptr); }

void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) { detail::quantize_row_iq4_xs(x, y, n, nullptr); }

void detail::quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQK; ++b)
    quantize_iq4_superblock(x + kQK * b, 1, &y[b].d, y[b].qs, nullptr, nullptr, qw ? qw + kQK * b : nullptr);
}

void detail::quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQK_K; ++b)
    quantize_iq4_superblock(x + kQK_K * b, 8, &y[b].d, y[b].qs, &y[b].scales_h, y[b].scales_l,
                            qw ? qw + kQK_K * b : nullptr);
}

void quantize_row_tq1_0(const float* x, BlockTQ1_0* y, int64_t n) {
  // Packs `count` trits (t = round(x / amax) + 1, first most significant) into one byte.
  auto pack = [](const float* v, int stride, int count, float id) {
    int q = 0;
    for (int t = 0; t < count; ++t) q = 3 * q + static_cast<int>(std::lround(v[t * stride] * id)) + 1;
    for (int t = count; t < 5; ++t) q *= 3;
    return static_cast<uint8_t>((q * 256 + 242) / 243);
  };
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float amax = 0.0f;
    for (int j = 0; j < kQK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float id = amax != 0.0f ? 1.0f / amax : 0.0f;
    for (int m = 0; m < 32; ++m) y[b].qs[m] = pack(x + m, 32, 5, id);
    for (int m = 0; m < 16; ++m) y[b].qs[32 + m] = pack(x + 160 + m, 16, 5, id);
    for (int j = 0; j < 4; ++j) y[b].qh[j] = pack(x + 240 + j, 4, 4, id);
    y[b].d = f32_to_f16_bits(amax);
  }
}

void quantize_row_tq2_0(const float* x, BlockTQ2_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float amax = 0.0f;
    for (int j = 0; j < kQK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float id = amax != 0.0f ? 1.0f / amax : 0.0f;
    for (int half = 0; half < 2; ++half) {
      for (int m = 0; m < 32; ++m) {
        int q = 0;
        for (int l = 0; l < 4; ++l)
          q |= ((static_cast<int>(std::lround(x[128 * half + 32 * l + m] * id)) + 1) & 3) << (2 * l);
        y[b].qs[32 * half + m] = static_cast<uint8_t>(q);
      }
    }
    y[b].d = f32_to_f16_bits(amax);
  }
}

}  // namespace rlx::formats
