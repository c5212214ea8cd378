// Codecs for the 32-element block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, following
// ggml's reference quantizers (round/truncate rules included), and the Q8_0
// activation quantizer of llama.cpp's x86 vec_dot path.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "rlx/base/half.h"
#include "formats/quant_search.h"
#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

constexpr int kHalf = kQK / 2;

float fp16(uint16_t bits) { return f16_bits_to_f32(bits); }
uint16_t to_fp16(float f) { return f32_to_f16_bits(f); }

// Largest |v| in the block and the signed value that has it (first one wins on ties).
void signed_absmax(const float* x, int n, float* amax, float* max) {
  *amax = 0.0f;
  *max = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float v = x[j];
    if (*amax < std::fabs(v)) {
      *amax = std::fabs(v);
      *max = v;
    }
  }
}

void min_max(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

// ggml truncates `v` (already offset to be non-negative) toward zero, then caps it.
int truncate_capped(float v, int cap) { return std::min(cap, static_cast<int>(v)); }

}  // namespace

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16(x[i].d);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kHalf] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16(x[i].d);
    const float m = fp16(x[i].m);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + kHalf] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof qh);
    for (int j = 0; j < kHalf; ++j) {
      const int high0 = static_cast<int>((qh >> j) << 4) & 0x10;
      const int high1 = static_cast<int>(qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | high0) - 16) * d;
      y[j + kHalf] = static_cast<float>(((x[i].qs[j] >> 4) | high1) - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16(x[i].d);
    const float m = fp16(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof qh);
    for (int j = 0; j < kHalf; ++j) {
      const int high0 = static_cast<int>((qh >> j) << 4) & 0x10;
      const int high1 = static_cast<int>(qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) | high0) * d + m;
      y[j + kHalf] = static_cast<float>((x[i].qs[j] >> 4) | high1) * d + m;
    }
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = fp16(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// The importance-weighted forms (quant_search.h): each block's scale (and minimum) fitted
// to minimise the error weighted by qw * sqrt(sigma2 + x^2).
namespace {

void block_importance(const float* x, const float* qw, float* w) {
  float sum_x2 = 0;
  for (int j = 0; j < kQK; ++j) sum_x2 += x[j] * x[j];
  const float sigma2 = sum_x2 / kQK;
  for (int j = 0; j < kQK; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

// Symmetric blocks (Q4_0 nmax 8, Q5_0 nmax 16): levels L in [0, 2 nmax), value (L - nmax) d.
float symmetric_block(const float* x, const float* qw, int nmax, int8_t* L) {
  float w[kQK];
  block_importance(x, qw, w);
  return detail::make_qx_quants(kQK, nmax, x, L, 1, w);
}

// Blocks with a minimum (Q4_1 nmax 15, Q5_1 nmax 31): value L d + m.
void offset_block(const float* x, const float* qw, int nmax, uint8_t* L, float* d, float* m) {
  float w[kQK];
  uint8_t aux[kQK];
  block_importance(x, qw, w);
  float the_min = 0;
  *d = detail::make_qkx2_quants(kQK, nmax, x, w, L, &the_min, aux, -0.9f, 0.05f, 36, false);
  *m = -the_min;
}

void pack_q5_levels(const uint8_t* L, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((L[j] & 0x0F) | ((L[j + kHalf] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((L[j] & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((L[j + kHalf] & 0x10) >> 4) << (j + kHalf);
  }
  std::memcpy(qh_bytes, &qh, sizeof qh);
}

}  // namespace

void detail::quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n, const float* qw) {
  if (qw == nullptr) return formats::quantize_row_q4_0(x, y, n);
  int8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, qw += kQK) {
    y[i].d = to_fp16(symmetric_block(x, qw, 8, L));
    for (int j = 0; j < kHalf; ++j) y[i].qs[j] = static_cast<uint8_t>(L[j] | (L[j + kHalf] << 4));
  }
}

void detail::quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n, const float* qw) {
  if (qw == nullptr) return formats::quantize_row_q5_0(x, y, n);
  int8_t L[kQK];
  uint8_t U[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, qw += kQK) {
    y[i].d = to_fp16(symmetric_block(x, qw, 16, L));
    for (int j = 0; j < kQK; ++j) U[j] = static_cast<uint8_t>(L[j]);
    pack_q5_levels(U, y[i].qs, y[i].qh);
  }
}

void detail::quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, const float* qw) {
  if (qw == nullptr) return formats::quantize_row_q4_1(x, y, n);
  uint8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, qw += kQK) {
    float d = 0, m = 0;
    offset_block(x, qw, 15, L, &d, &m);
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(m);
    for (int j = 0; j < kHalf; ++j) y[i].qs[j] = static_cast<uint8_t>(L[j] | (L[j + kHalf] << 4));
  }
}

void detail::quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n, const float* qw) {
  if (qw == nullptr) return formats::quantize_row_q5_1(x, y, n);
  uint8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, qw += kQK) {
    float d = 0, m = 0;
    offset_block(x, qw, 31, L, &d, &m);
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(m);
    pack_q5_levels(L, y[i].qs, y[i].qh);
  }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax, max;
    signed_absmax(x, kQK, &amax, &max);
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = truncate_capped(x[j] * id + 8.5f, 15);
      const int q1 = truncate_capped(x[j + kHalf] * id + 8.5f, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(min);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = truncate_capped((x[j] - min) * id + 0.5f, 15);
      const int q1 = truncate_capped((x[j + kHalf] - min) * id + 0.5f, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax, max;
    signed_absmax(x, kQK, &amax, &max);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = truncate_capped(x[j] * id + 16.5f, 31);
      const int q1 = truncate_capped(x[j + kHalf] * id + 16.5f, 31);
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + kHalf);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    y[i].m = to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = truncate_capped((x[j] - min) * id + 0.5f, 31);
      const int q1 = truncate_capped((x[j + kHalf] - min) * id + 0.5f, 31);
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + kHalf);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax, max;
    signed_absmax(x, kQK, &amax, &max);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_activation_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax, max;
    signed_absmax(x, kQK, &amax, &max);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}

}  // namespace rlx::formats
