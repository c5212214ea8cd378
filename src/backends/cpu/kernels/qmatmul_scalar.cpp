// Portable DequantMatMul GEMV loops: one weight row against one quantized activation
// row at a time, exact integer dot per (sub-)block and f32 scaling in llama.cpp's
// order (ggml_vec_dot_*_generic). Also the QKernels table lookup.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cpu/kernels/qmatmul_kernels.h"
#include "rlx/base/half.h"
#include "rlx/formats/quant.h"
#include "rlx/formats/quant_blocks.h"

namespace rlx::cpu::detail {
namespace {

using namespace rlx::formats;

inline float h2f(uint16_t h) { return f16_bits_to_f32(h); }

// Element i (0..31) of a 4-bit block: low nibbles hold 0..15, high nibbles 16..31.
inline int nibble(const uint8_t* qs, int i) { return i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4); }

inline uint32_t load_qh(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 | static_cast<uint32_t>(qh[2]) << 16 |
         static_cast<uint32_t>(qh[3]) << 24;
}

float dot_q4_0(const void* wv, const void* av, int64_t nb) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  const auto* a = static_cast<const BlockQ8_0*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += (nibble(w[b].qs, i) - 8) * a[b].qs[i];
    sum += static_cast<float>(s) * (h2f(w[b].d) * h2f(a[b].d));
  }
  return sum;
}

float dot_q4_1(const void* wv, const void* av, int64_t nb) {
  const auto* w = static_cast<const BlockQ4_1*>(wv);
  const auto* a = static_cast<const BlockQ8_1*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += nibble(w[b].qs, i) * a[b].qs[i];
    sum += static_cast<float>(s) * (h2f(w[b].d) * h2f(a[b].d)) + h2f(w[b].m) * h2f(a[b].s);
  }
  return sum;
}

inline int q5_value(const uint8_t* qs, uint32_t qh, int i) { return nibble(qs, i) | static_cast<int>((qh >> i) & 1) << 4; }

float dot_q5_0(const void* wv, const void* av, int64_t nb) {
  const auto* w = static_cast<const BlockQ5_0*>(wv);
  const auto* a = static_cast<const BlockQ8_0*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint32_t qh = load_qh(w[b].qh);
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += (q5_value(w[b].qs, qh, i) - 16) * a[b].qs[i];
    sum += static_cast<float>(s) * (h2f(w[b].d) * h2f(a[b].d));
  }
  return sum;
}

float dot_q5_1(const void* wv, const void* av, int64_t nb) {
  const auto* w = static_cast<const BlockQ5_1*>(wv);
  const auto* a = static_cast<const BlockQ8_1*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint32_t qh = load_qh(w[b].qh);
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += q5_value(w[b].qs, qh, i) * a[b].qs[i];
    sum += static_cast<float>(s) * (h2f(w[b].d) * h2f(a[b].d)) + h2f(w[b].m) * h2f(a[b].s);
  }
  return sum;
}

float dot_q8_0(const void* wv, const void* av, int64_t nb) {
  const auto* w = static_cast<const BlockQ8_0*>(wv);
  const auto* a = static_cast<const BlockQ8_0*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += w[b].qs[i] * a[b].qs[i];
    sum += static_cast<float>(s) * (h2f(w[b].d) * h2f(a[b].d));
  }
  return sum;
}

// K-quants: element e of a super-block lies in sub-block e / 16 (Q2_K, Q3_K, Q6_K) or
// e / 32 (Q4_K, Q5_K); bsums of the Q8_K row cover 16 elements each.

float dot_q2_k(const void* wv, const void* av, int64_t nb) {
  const auto* w = static_cast<const BlockQ2_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 16; ++j) msum += (w[b].scales[j] >> 4) * a[b].bsums[j];
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, g = (e % 128) / 32, l = e % 32;
      const int q = (w[b].qs[32 * half + l] >> (2 * g)) & 3;
      isum += (w[b].scales[e / 16] & 0x0F) * q * a[b].qs[e];
    }
    const float d = a[b].d * h2f(w[b].d), dmin = a[b].d * h2f(w[b].dmin);
    sum += d * static_cast<float>(isum) - dmin * static_cast<float>(msum);
  }
  return sum;
}

int q3_scale(const uint8_t* s, int j) {
  const int low = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | high << 4) - 32;
}

float dot_q3_k(const void* wv, const void* av, int64_t nb) {
  const auto* w = static_cast<const BlockQ3_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, g = (e % 128) / 32, l = e % 32;
      const int low = (w[b].qs[32 * half + l] >> (2 * g)) & 3;
      const int q = low - ((w[b].hmask[l] >> (4 * half + g)) & 1 ? 0 : 4);
      isum += q3_scale(w[b].scales, e / 16) * q * a[b].qs[e];
    }
    sum += a[b].d * h2f(w[b].d) * static_cast<float>(isum);
  }
  return sum;
}

void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | (q[j - 4] >> 6) << 4;
    *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
  }
}

template <bool kFive, typename Block>
float dot_q45_k(const Block* w, const BlockQ8_K* a, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      scale_min_k4(j, w[b].scales, &sc, &m);
      msum += m * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = w[b].qs[32 * (j / 2) + l];
        int q = j % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
        if constexpr (kFive) q |= ((w[b].qh[l] >> j) & 1) << 4;
        s += q * a[b].qs[32 * j + l];
      }
      isum += sc * s;
    }
    const float d = a[b].d * h2f(w[b].d), dmin = a[b].d * h2f(w[b].dmin);
    sum += d * static_cast<float>(isum) - dmin * static_cast<float>(msum);
  }
  return sum;
}

float dot_q4_k(const void* wv, const void* av, int64_t nb) {
  return dot_q45_k<false>(static_cast<const BlockQ4_K*>(wv), static_cast<const BlockQ8_K*>(av), nb);
}
float dot_q5_k(const void* wv, const void* av, int64_t nb) {
  return dot_q45_k<true>(static_cast<const BlockQ5_K*>(wv), static_cast<const BlockQ8_K*>(av), nb);
}

float dot_q6_k(const void* wv, const void* av, int64_t nb) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, g = (e % 128) / 32, l = e % 32;
      const uint8_t lo = w[b].ql[64 * half + 32 * (g % 2) + l];
      const int low4 = g < 2 ? (lo & 0x0F) : (lo >> 4);
      const int high2 = (w[b].qh[32 * half + l] >> (2 * g)) & 3;
      isum += w[b].scales[e / 16] * ((low4 | high2 << 4) - 32) * a[b].qs[e];
    }
    sum += a[b].d * h2f(w[b].d) * static_cast<float>(isum);
  }
  return sum;
}

using DotFn = float (*)(const void*, const void*, int64_t);

template <DotFn kDot>
void gemv_rows(int m, int64_t n_blocks, const uint8_t* w, size_t w_row_bytes, const uint8_t* act,
               size_t act_row_bytes, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  for (int64_t j = n0; j < n1; ++j)
    for (int r = 0; r < m; ++r)
      out[r * ldo + (j - n0)] = kDot(w + j * w_row_bytes, act + r * act_row_bytes, n_blocks);
}

// nearbyint for |v| < 2^22 in the default rounding mode (round half to even): adding
// 1.5 * 2^23 leaves no fraction bits. Kept in this file, which is built without FMA:
// GCC contracts x * id + c into one FMA where it can, which rounds differently; the
// vector files reach this code through kQScalarKernels.
inline float round_half_even(float v) { return (v + 12582912.0f) - 12582912.0f; }

// Q8_0 / Q8_1 activation blocks as llama.cpp's x86 quantize_row_q8_0 / q8_1 make them:
// d = amax/127 (stored f16), q = round-half-even(x * 127/amax); Q8_1 adds s = f16(d * Σq)
// with the unrounded f32 d. Bit-identical to formats::quantize_activation_q8_0. The
// scalar table's code, and the vector versions' fallback for blocks with a NaN or an inf.
template <typename Block, bool kWithSum>
void quantize_activation_q8(const float* x, Block* y, int64_t k) {
  for (int64_t b = 0; b < k / formats::kQK; ++b, x += formats::kQK) {
    float amax = 0.0f;
    for (int i = 0; i < formats::kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < formats::kQK; ++i) {
      const int q = static_cast<int>(round_half_even(x[i] * id));
      y[b].qs[i] = static_cast<int8_t>(q);
      sum += q;
    }
    y[b].d = f32_to_f16_bits(d);
    if constexpr (kWithSum) y[b].s = f32_to_f16_bits(d * static_cast<float>(sum));
  }
}

void quantize_q8_k_rows(const float* x, void* dst, int64_t k) {
  formats::quantize_activation_q8_k(x, static_cast<formats::BlockQ8_K*>(dst), k);
}
void quantize_q8_0_rows(const float* x, void* dst, int64_t k) {
  quantize_activation_q8<formats::BlockQ8_0, false>(x, static_cast<formats::BlockQ8_0*>(dst), k);
}
void quantize_q8_1_rows(const float* x, void* dst, int64_t k) {
  quantize_activation_q8<formats::BlockQ8_1, true>(x, static_cast<formats::BlockQ8_1*>(dst), k);
}

}  // namespace

const QKernels kQScalarKernels = {
    IsaLevel::kScalar,
    {&gemv_rows<&dot_q4_0>, &gemv_rows<&dot_q4_1>, &gemv_rows<&dot_q5_0>, &gemv_rows<&dot_q5_1>,
     &gemv_rows<&dot_q8_0>, &gemv_rows<&dot_q2_k>, &gemv_rows<&dot_q3_k>, &gemv_rows<&dot_q4_k>,
     &gemv_rows<&dot_q5_k>, &gemv_rows<&dot_q6_k>, &gemv_iq4_nl_rows, &gemv_iq4_xs_rows, &gemv_tq1_0_rows,
     &gemv_tq2_0_rows, &gemv_iq2_xxs_rows, &gemv_iq2_xs_rows, &gemv_iq2_s_rows, &gemv_iq3_xxs_rows,
     &gemv_iq3_s_rows, &gemv_iq1_s_rows, &gemv_iq1_m_rows},
    4,
    {},
    kKQuantBits,
    &quantize_q8_0_rows,
    &quantize_q8_1_rows,
    &quantize_q8_k_rows,
};

const QKernels& qkernels(IsaLevel requested) {
  switch (resolve_isa(requested)) {
    case IsaLevel::kAmx:
    case IsaLevel::kAvx512:
      return cpu_features().avx512vnni ? kQAvx512Kernels : kQAvx2Kernels;
    case IsaLevel::kAvx2: return kQAvx2Kernels;
    case IsaLevel::kScalar: break;
  }
  return kQScalarKernels;
}

}  // namespace rlx::cpu::detail
