// Device decoders of the i-quant and ternary GGUF blocks (IQ4_NL, IQ4_XS, IQ3_S,
// IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_S, IQ1_M, TQ1_0, TQ2_0): one 32-element unit at
// a time, as decode_unit (cuda_common.cuh) does for the other packed types. Layouts as
// include/rlx/formats/quant_blocks.h; the codebooks are per-translation-unit device
// copies of the compact codes (include/rlx/formats/iq_grid_codes.h), expanded on use.
#pragma once

#include <cstdint>

#include "rlx/formats/iq_grid_codes.h"

namespace rlx::cuda_backend::iq {

__device__ const uint16_t kIq2xxsCodes[256] = {RLX_IQ2XXS_CODES};
__device__ const uint16_t kIq2xsCodes[512] = {RLX_IQ2XS_CODES};
__device__ const uint16_t kIq2sCodes[1024] = {RLX_IQ2S_CODES};
__device__ const uint16_t kIq3xxsCodes[256] = {RLX_IQ3XXS_CODES};
__device__ const uint16_t kIq3sCodes[512] = {RLX_IQ3S_CODES};
__device__ const uint16_t kIq1sCodes[2048] = {RLX_IQ1S_CODES};

__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) { return p[0] | (uint32_t{p[1]} << 8); }
__device__ __forceinline__ uint32_t u32_at(const uint8_t* p) { return u16_at(p) | (u16_at(p + 2) << 16); }
__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(u16_at(p))));
}
// Value n of the IQ4_NL table {-127, -104, ..., 89, 113}, from two packed words.
__device__ __forceinline__ float iq4nl_value(int n) {
  const uint64_t lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
  return static_cast<float>(static_cast<int8_t>(((n < 8 ? lo : hi) >> (8 * (n & 7))) & 0xFF));
}
// The 8-bit sign mask of a 7-bit IQ2 / IQ3 sign index (bit 7 keeps the count even).
__device__ __forceinline__ uint32_t sign_byte(uint32_t seven) {
  seven &= 127u;
  return seven | ((__popc(seven) & 1u) << 7);
}
__device__ __forceinline__ float signed_value(float v, uint32_t signs, int j) { return (signs >> j) & 1u ? -v : v; }
// Grid levels of a code's value j.
__device__ __forceinline__ float iq2_level(uint32_t code, int j) {
  const uint32_t c = (code >> (2 * j)) & 3u;
  return c == 0 ? 8.0f : c == 1 ? 25.0f : 43.0f;
}
__device__ __forceinline__ float iq3xxs_level(uint32_t code, int j) {
  const uint32_t c = (code >> (3 * j)) & 7u;
  return c == 7 ? 62.0f : static_cast<float>(4 + 8 * c);
}
__device__ __forceinline__ float iq3s_level(uint32_t code, int j) {
  return static_cast<float>(1 + 2 * ((code >> (3 * j)) & 7u));
}
__device__ __forceinline__ float iq1_level(uint32_t code, int j) {
  return static_cast<float>(static_cast<int>((code >> (2 * j)) & 3u) - 1);
}
// Base-3 digit n (first = most significant) of a TQ1_0 byte.
__device__ __forceinline__ int trit(uint32_t byte, int n) {
  const uint32_t pow3 = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
  return static_cast<int>((((byte * pow3) & 0xFFu) * 3u) >> 8);
}

/// Bytes of one block of an i-quant / ternary DT (0 for other types).
__host__ __device__ constexpr int block_bytes(DT t) {
  switch (t) {
    case DT::IQ4_NL:
      return 18;
    case DT::IQ4_XS:
      return 136;
    case DT::IQ3_S:
      return 110;
    case DT::IQ3_XXS:
      return 98;
    case DT::IQ2_S:
      return 82;
    case DT::IQ2_XS:
      return 74;
    case DT::IQ2_XXS:
      return 66;
    case DT::IQ1_S:
      return 50;
    case DT::IQ1_M:
      return 56;
    case DT::TQ1_0:
      return 54;
    case DT::TQ2_0:
      return 66;
    default:
      return 0;
  }
}

/// Elements [32u, 32u + 32) of a row of T blocks into y.
template <DT T>
__device__ __forceinline__ void decode_unit(const uint8_t* row, int64_t u, float* y) {
  if constexpr (T == DT::IQ4_NL) {
    const uint8_t* b = row + u * 18;
    const float d = half_at(b);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      y[i] = d * iq4nl_value(b[2 + i] & 15);
      y[i + 16] = d * iq4nl_value(b[2 + i] >> 4);
    }
    return;
  } else {
    constexpr int kBytes = block_bytes(T);
    const uint8_t* b = row + (u >> 3) * kBytes;
    const int g = static_cast<int>(u & 7);  // group of 32 in the super-block
    if constexpr (T == DT::IQ4_XS) {
      const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 15) | (((u16_at(b + 2) >> (2 * g)) & 3) << 4);
      const float dl = half_at(b) * static_cast<float>(ls - 32);
      const uint8_t* qs = b + 8 + 16 * g;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        y[i] = dl * iq4nl_value(qs[i] & 15);
        y[i + 16] = dl * iq4nl_value(qs[i] >> 4);
      }
    } else if constexpr (T == DT::TQ2_0) {
      const float d = half_at(b + 64);
      const uint8_t* qs = b + 32 * (g / 4);
      const int shift = 2 * (g % 4);
#pragma unroll
      for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<int>((qs[i] >> shift) & 3) - 1) * d;
    } else if constexpr (T == DT::TQ1_0) {
      const float d = half_at(b + 52);
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int e = 32 * g + i;
        int t;
        if (e < 160)
          t = trit(b[e % 32], e / 32);
        else if (e < 240)
          t = trit(b[32 + (e - 160) % 16], (e - 160) / 16);
        else
          t = trit(b[48 + (e - 240) % 4], (e - 240) / 4);
        y[i] = static_cast<float>(t - 1) * d;
      }
    } else if constexpr (T == DT::IQ2_XXS) {
      const uint8_t* grp = b + 2 + 8 * g;
      const uint32_t meta = u32_at(grp + 4);
      const float db = half_at(b) * (0.5f + static_cast<float>(meta >> 28)) * 0.25f;
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint32_t code = kIq2xxsCodes[grp[l]], signs = sign_byte(meta >> (7 * l));
#pragma unroll
        for (int j = 0; j < 8; ++j) y[8 * l + j] = signed_value(db * iq2_level(code, j), signs, j);
      }
    } else if constexpr (T == DT::IQ2_XS || T == DT::IQ2_S) {
      const float d = half_at(b);
      const uint8_t sc = b[T == DT::IQ2_XS ? 66 + g : 74 + g];
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const float db = d * (0.5f + static_cast<float>((sc >> (4 * (l / 2))) & 15)) * 0.25f;
        const int r = 4 * g + l;
        uint32_t code, signs;
        if constexpr (T == DT::IQ2_XS) {
          const uint32_t q = u16_at(b + 2 + 2 * r);
          code = kIq2xsCodes[q & 511];
          signs = sign_byte(q >> 9);
        } else {
          code = kIq2sCodes[b[2 + r] | (((b[66 + g] >> (2 * l)) & 3) << 8)];
          signs = b[34 + r];
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) y[8 * l + j] = signed_value(db * iq2_level(code, j), signs, j);
      }
    } else if constexpr (T == DT::IQ3_XXS) {
      const uint32_t meta = u32_at(b + 66 + 4 * g);
      const float db = half_at(b) * (0.5f + static_cast<float>(meta >> 28)) * 0.5f;
      const uint8_t* qs = b + 2 + 8 * g;
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint32_t c0 = kIq3xxsCodes[qs[2 * l]], c1 = kIq3xxsCodes[qs[2 * l + 1]];
        const uint32_t signs = sign_byte(meta >> (7 * l));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          y[8 * l + j] = signed_value(db * iq3xxs_level(c0, j), signs, j);
          y[8 * l + 4 + j] = signed_value(db * iq3xxs_level(c1, j), signs, j + 4);
        }
      }
    } else if constexpr (T == DT::IQ3_S) {
      const float db = half_at(b) * static_cast<float>(1 + 2 * ((b[106 + g / 2] >> (4 * (g % 2))) & 15));
      const uint8_t* qs = b + 2 + 8 * g;
      const uint32_t qh = b[66 + g];
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint32_t c0 = kIq3sCodes[qs[2 * l] | (((qh >> (2 * l)) & 1) << 8)];
        const uint32_t c1 = kIq3sCodes[qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8)];
        const uint32_t signs = b[74 + 4 * g + l];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          y[8 * l + j] = signed_value(db * iq3s_level(c0, j), signs, j);
          y[8 * l + 4 + j] = signed_value(db * iq3s_level(c1, j), signs, j + 4);
        }
      }
    } else if constexpr (T == DT::IQ1_S) {
      const uint32_t qh = u16_at(b + 34 + 2 * g);
      const float dl = half_at(b) * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000u) ? -0.125f : 0.125f;
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint32_t code = kIq1sCodes[b[2 + 4 * g + l] | (((qh >> (3 * l)) & 7) << 8)];
#pragma unroll
        for (int j = 0; j < 8; ++j) y[8 * l + j] = dl * (iq1_level(code, j) + delta);
      }
    } else if constexpr (T == DT::IQ1_M) {
      const uint32_t s0 = u16_at(b + 48), s1 = u16_at(b + 50), s2 = u16_at(b + 52), s3 = u16_at(b + 54);
      const uint32_t dbits = (s0 >> 12) | ((s1 >> 8) & 0x00F0u) | ((s2 >> 4) & 0x0F00u) | (s3 & 0xF000u);
      const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(dbits)));
      const uint32_t sw = u16_at(b + 48 + 2 * (g / 2));
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint32_t h = b[32 + 2 * g + l / 2] >> (4 * (l % 2));
        const uint32_t code = kIq1sCodes[b[4 * g + l] | ((h & 7) << 8)];
        const float dl = d * static_cast<float>(2 * ((sw >> (6 * (g % 2) + 3 * (l / 2))) & 7) + 1);
        const float delta = (h & 8) ? -0.125f : 0.125f;
#pragma unroll
        for (int j = 0; j < 8; ++j) y[8 * l + j] = dl * (iq1_level(code, j) + delta);
      }
    }
  }
}

}  // namespace rlx::cuda_backend::iq
