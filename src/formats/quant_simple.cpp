// Codecs for the 32-element block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, following
// ggml's reference quantizers (round/truncate rules included), and the Q8_0
// activation quantizer of llama.cpp's x86 vec_dot path.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "rlx/base/half.h"
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
