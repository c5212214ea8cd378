// CUDA decode GEMV chunks of the codebook i-quants (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS,
// IQ2_XXS, IQ1_S, IQ1_M) and the ternary types (TQ1_0, TQ2_0), for the kernel of
// gemv_kernel.cuh (launch_gemv_codebook). A chunk is one 32-value group of a 256-value
// block: a lane loads the group's bytes (2-byte loads: these blocks are only 2-aligned)
// and, when it dots them, turns them into 32 int8 values in eight words plus one scale
// per half of 16, so that the same words meet f32 x (dot) or 8-bit x by dp4a (dot8).
// Codebook entries (compact codes of rlx/formats/iq_grid_codes.h) expand four values at
// a time by a byte permute over the type's levels; sign bits become byte masks. IQ1's
// values (level +- 1/8) are exact as 8 * level +- 1 over a scale of dl / 8.
// Measured on an H200 (CudaBench.PackedGemv): these types stream 500-890 GB/s of weights
// (TQ1_0, whose digits take more work, 349), about the same 32-value groups a second as
// IQ4_XS (1,410 GB/s of 17-byte groups), so
// the kernel is bound by its per-group work, not by the codebook lookups: copies of the
// codebooks in shared memory measured no faster and were dropped.
#include "backends/cuda/gemv_kernel.cuh"
#include "backends/cuda/iquant_decode.cuh"

namespace rlx::cuda_backend {
namespace {

__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return __ldcs(reinterpret_cast<const unsigned short*>(p)); }
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return ld16(p) | (ld16(p + 2) << 16); }
__device__ __forceinline__ float f16_bits(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xFFFFu)));
}

// Byte-permute selectors of four 2-bit / 3-bit codes (value j at bits 2j / 3j).
__device__ __forceinline__ uint32_t spread2(uint32_t b) {
  return (b & 3u) | ((b & 0xCu) << 2) | ((b & 0x30u) << 4) | ((b & 0xC0u) << 6);
}
__device__ __forceinline__ uint32_t spread3(uint32_t b) {
  return (b & 7u) | ((b & 0x38u) << 1) | ((b & 0x1C0u) << 2) | ((b & 0xE00u) << 3);
}
// Four levels (bytes 1..127) negated where the four sign bits say: -v = ~v + 1, with no
// carry between bytes because every v >= 1.
__device__ __forceinline__ uint32_t apply_signs(uint32_t v, uint32_t four_bits) {
  const uint32_t m = ((four_bits * 0x00204081u) & 0x01010101u) * 0xFFu;
  return (v ^ m) + (m & 0x01010101u);
}
constexpr uint32_t kIq2Levels = 0x002B1908u;                                  // 8, 25, 43
constexpr uint32_t kIq3xxsLevelsLo = 0x1C140C04u, kIq3xxsLevelsHi = 0x3E342C24u;  // 4, 12, ..., 52, 62
constexpr uint32_t kIq3sLevelsLo = 0x07050301u, kIq3sLevelsHi = 0x0F0D0B09u;      // 1, 3, ..., 15
constexpr uint32_t kIq1PlusLevels = 0x000901F9u;   // 8 (level) + 1 for levels -1, 0, 1: -7, 1, 9
constexpr uint32_t kIq1MinusLevels = 0x0007FFF7u;  // 8 (level) - 1: -9, -1, 7

// Eight signed IQ2 values (one 16-bit grid code, an 8-bit sign mask) into two words.
__device__ __forceinline__ void iq2_eight(uint32_t code, uint32_t signs, uint32_t* w) {
  w[0] = apply_signs(__byte_perm(kIq2Levels, 0, spread2(code & 0xFFu)), signs & 15u);
  w[1] = apply_signs(__byte_perm(kIq2Levels, 0, spread2(code >> 8)), (signs >> 4) & 15u);
}
// Eight IQ1 values (a 16-bit code, the group's delta sign).
__device__ __forceinline__ void iq1_eight(uint32_t code, bool minus, uint32_t* w) {
  const uint32_t t = minus ? kIq1MinusLevels : kIq1PlusLevels;
  w[0] = __byte_perm(t, 0, spread2(code & 0xFFu));
  w[1] = __byte_perm(t, 0, spread2(code >> 8));
}
template <class Table>
__device__ __forceinline__ uint32_t code_at(const Table& table, uint32_t i) {
  return __ldg(&table[i]);
}

// The dot products every chunk type here shares: Chunk::values(r, c, w, lo, hi) gives
// the 32 int8 values and the scales of their halves.
template <class Chunk>
struct CodebookDots : Groups32 {
  template <class Regs>
  static __device__ __forceinline__ float dot(const Regs& r, int64_t c, const float* xs) {
    uint32_t w[8];
    float lo, hi;
    Chunk::values(r, c, w, lo, hi);
    const float* x = xs + xpad(c * 32, kPad);
    float s[2] = {0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float4 xv = *reinterpret_cast<const float4*>(x + 4 * k);
      float& a = s[k >> 2];
      a = fmaf(sbyte(w[k], 0), xv.x, a);
      a = fmaf(sbyte(w[k], 1), xv.y, a);
      a = fmaf(sbyte(w[k], 2), xv.z, a);
      a = fmaf(sbyte(w[k], 3), xv.w, a);
    }
    return lo * s[0] + hi * s[1];
  }
  template <class Regs>
  static __device__ __forceinline__ float dot8(const Regs& r, int64_t c, const X8& x) {
    uint32_t w[8];
    float lo, hi;
    Chunk::values(r, c, w, lo, hi);
    const uint4 xl = x.q[c], xh = x.q[x.nc + c];
    int il = 0, ih = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      il = dp4a(w[k], word_of(xl, k), il);
      ih = dp4a(w[4 + k], word_of(xh, k), ih);
    }
    const float2 ml = x.meta[c], mh = x.meta[x.nc + c];
    return lo * ml.x * static_cast<float>(il) + hi * mh.x * static_cast<float>(ih);
  }
};

// IQ2_XXS (66-byte blocks: f16 d, then per group 4 grid indices and a 32-bit word of
// four 7-bit sign indices and a 4-bit scale).
struct IQ2XXSChunk : CodebookDots<IQ2XXSChunk> {
  static constexpr int kUnroll = 4;
  struct Regs {
    uint32_t idx, meta, d;
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 66;
    const uint8_t* g = b + 2 + 8 * (c & 7);
    r.d = __ldg(reinterpret_cast<const unsigned short*>(b));
    r.idx = ld32(g);
    r.meta = ld32(g + 4);
  }
  static __device__ __forceinline__ void values(const Regs& r, int64_t, uint32_t (&w)[8], float& lo, float& hi) {
#pragma unroll
    for (int l = 0; l < 4; ++l)
      iq2_eight(code_at(iq::kIq2xxsCodes, (r.idx >> (8 * l)) & 0xFFu), iq::sign_byte(r.meta >> (7 * l)), w + 2 * l);
    lo = hi = f16_bits(r.d) * (0.5f + static_cast<float>(r.meta >> 28)) * 0.25f;
  }
};

// IQ2_XS (74 bytes: d, 32 16-bit words of a 9-bit index and a 7-bit sign index, a byte
// of two 4-bit scales per group at 66).
struct IQ2XSChunk : CodebookDots<IQ2XSChunk> {
  static constexpr int kUnroll = 4;
  struct Regs {
    uint32_t q01, q23, sc, d;
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 74;
    const int g = static_cast<int>(c & 7);
    r.d = __ldg(reinterpret_cast<const unsigned short*>(b));
    r.q01 = ld32(b + 2 + 8 * g);
    r.q23 = ld32(b + 6 + 8 * g);
    r.sc = ld16(b + 66 + (g & ~1)) >> (8 * (g & 1));
  }
  static __device__ __forceinline__ void values(const Regs& r, int64_t, uint32_t (&w)[8], float& lo, float& hi) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t q = ((l < 2 ? r.q01 : r.q23) >> (16 * (l & 1))) & 0xFFFFu;
      iq2_eight(code_at(iq::kIq2xsCodes, q & 511u), iq::sign_byte(q >> 9), w + 2 * l);
    }
    const float d = f16_bits(r.d);
    lo = d * (0.5f + static_cast<float>(r.sc & 15u)) * 0.25f;
    hi = d * (0.5f + static_cast<float>((r.sc >> 4) & 15u)) * 0.25f;
  }
};

// IQ2_S (82 bytes: d, 32 low index bytes, 32 sign bytes, 8 bytes of the indices' high
// bits, 8 scale bytes).
struct IQ2SChunk : CodebookDots<IQ2SChunk> {
  static constexpr int kUnroll = 4;
  struct Regs {
    uint32_t idx, signs, hs, d;  // hs: the group's high-bits byte, then its scale byte
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 82;
    const int g = static_cast<int>(c & 7), sh = 8 * (g & 1);
    r.d = __ldg(reinterpret_cast<const unsigned short*>(b));
    r.idx = ld32(b + 2 + 4 * g);
    r.signs = ld32(b + 34 + 4 * g);
    r.hs = ((ld16(b + 66 + (g & ~1)) >> sh) & 0xFFu) | (((ld16(b + 74 + (g & ~1)) >> sh) & 0xFFu) << 8);
  }
  static __device__ __forceinline__ void values(const Regs& r, int64_t, uint32_t (&w)[8], float& lo, float& hi) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t i = ((r.idx >> (8 * l)) & 0xFFu) | (((r.hs >> (2 * l)) & 3u) << 8);
      iq2_eight(code_at(iq::kIq2sCodes, i), (r.signs >> (8 * l)) & 0xFFu, w + 2 * l);
    }
    const float d = f16_bits(r.d);
    lo = d * (0.5f + static_cast<float>((r.hs >> 8) & 15u)) * 0.25f;
    hi = d * (0.5f + static_cast<float>((r.hs >> 12) & 15u)) * 0.25f;
  }
};

// IQ3_XXS (98 bytes: d, 64 index bytes (two 4-value codes per 8 values), then per group
// a 32-bit word of four 7-bit sign indices and a 4-bit scale).
struct IQ3XXSChunk : CodebookDots<IQ3XXSChunk> {
  static constexpr int kUnroll = 4;
  struct Regs {
    uint32_t i0, i1, meta, d;
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 98;
    const int g = static_cast<int>(c & 7);
    r.d = __ldg(reinterpret_cast<const unsigned short*>(b));
    r.i0 = ld32(b + 2 + 8 * g);
    r.i1 = ld32(b + 6 + 8 * g);
    r.meta = ld32(b + 66 + 4 * g);
  }
  static __device__ __forceinline__ void values(const Regs& r, int64_t, uint32_t (&w)[8], float& lo, float& hi) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t two = ((l < 2 ? r.i0 : r.i1) >> (16 * (l & 1))) & 0xFFFFu;
      const uint32_t signs = iq::sign_byte(r.meta >> (7 * l));
      const uint32_t c0 = code_at(iq::kIq3xxsCodes, two & 0xFFu), c1 = code_at(iq::kIq3xxsCodes, two >> 8);
      w[2 * l] = apply_signs(__byte_perm(kIq3xxsLevelsLo, kIq3xxsLevelsHi, spread3(c0)), signs & 15u);
      w[2 * l + 1] = apply_signs(__byte_perm(kIq3xxsLevelsLo, kIq3xxsLevelsHi, spread3(c1)), signs >> 4);
    }
    lo = hi = f16_bits(r.d) * (0.5f + static_cast<float>(r.meta >> 28)) * 0.5f;
  }
};

// IQ3_S (110 bytes: d, 64 low index bytes, 8 bytes of the indices' ninth bits, 32 sign
// bytes, 4 bytes of two 4-bit scales).
struct IQ3SChunk : CodebookDots<IQ3SChunk> {
  static constexpr int kUnroll = 4;
  struct Regs {
    uint32_t i0, i1, signs, hs, d;  // hs: the ninth bits, then the scale nibble
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 110;
    const int g = static_cast<int>(c & 7);
    r.d = __ldg(reinterpret_cast<const unsigned short*>(b));
    r.i0 = ld32(b + 2 + 8 * g);
    r.i1 = ld32(b + 6 + 8 * g);
    r.signs = ld32(b + 74 + 4 * g);
    const uint32_t qh = (ld16(b + 66 + (g & ~1)) >> (8 * (g & 1))) & 0xFFu;
    const uint32_t sc = (ld16(b + 106 + 2 * (g >> 2)) >> (8 * ((g >> 1) & 1) + 4 * (g & 1))) & 15u;
    r.hs = qh | (sc << 8);
  }
  static __device__ __forceinline__ void values(const Regs& r, int64_t, uint32_t (&w)[8], float& lo, float& hi) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t two = ((l < 2 ? r.i0 : r.i1) >> (16 * (l & 1))) & 0xFFFFu;
      const uint32_t signs = (r.signs >> (8 * l)) & 0xFFu;
      const uint32_t c0 = code_at(iq::kIq3sCodes, (two & 0xFFu) | (((r.hs >> (2 * l)) & 1u) << 8));
      const uint32_t c1 = code_at(iq::kIq3sCodes, (two >> 8) | (((r.hs >> (2 * l + 1)) & 1u) << 8));
      w[2 * l] = apply_signs(__byte_perm(kIq3sLevelsLo, kIq3sLevelsHi, spread3(c0)), signs & 15u);
      w[2 * l + 1] = apply_signs(__byte_perm(kIq3sLevelsLo, kIq3sLevelsHi, spread3(c1)), signs >> 4);
    }
    lo = hi = f16_bits(r.d) * static_cast<float>(1 + 2 * static_cast<int>(r.hs >> 8));
  }
};

// IQ1_S (50 bytes: d, 32 low index bytes, per group a 16-bit word of four 3-bit index
// highs, a 3-bit scale and the delta's sign).
struct IQ1SChunk : CodebookDots<IQ1SChunk> {
  static constexpr int kUnroll = 4;
  struct Regs {
    uint32_t idx, qh, d;
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 50;
    const int g = static_cast<int>(c & 7);
    r.d = __ldg(reinterpret_cast<const unsigned short*>(b));
    r.idx = ld32(b + 2 + 4 * g);
    r.qh = ld16(b + 34 + 2 * g);
  }
  static __device__ __forceinline__ void values(const Regs& r, int64_t, uint32_t (&w)[8], float& lo, float& hi) {
    const bool minus = (r.qh & 0x8000u) != 0;
#pragma unroll
    for (int l = 0; l < 4; ++l)
      iq1_eight(code_at(iq::kIq1sCodes, ((r.idx >> (8 * l)) & 0xFFu) | (((r.qh >> (3 * l)) & 7u) << 8)), minus, w + 2 * l);
    lo = hi = f16_bits(r.d) * static_cast<float>(2 * ((r.qh >> 12) & 7u) + 1) * 0.125f;
  }
};

// IQ1_M (56 bytes: 32 low index bytes, 16 bytes of 4-bit index highs with the delta's
// sign, four 16-bit words of 3-bit scales whose top nibbles make the f16 d).
struct IQ1MChunk : CodebookDots<IQ1MChunk> {
  static constexpr int kUnroll = 4;
  struct Regs {
    uint32_t idx, qh, s01, s23;  // s01 / s23: the scale words 0-1 / 2-3
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 56;
    const int g = static_cast<int>(c & 7);
    r.idx = ld32(b + 4 * g);
    r.qh = ld16(b + 32 + 2 * g);
    r.s01 = __ldg(reinterpret_cast<const unsigned short*>(b + 48)) |
            (uint32_t{__ldg(reinterpret_cast<const unsigned short*>(b + 50))} << 16);
    r.s23 = __ldg(reinterpret_cast<const unsigned short*>(b + 52)) |
            (uint32_t{__ldg(reinterpret_cast<const unsigned short*>(b + 54))} << 16);
  }
  static __device__ __forceinline__ void values(const Regs& r, int64_t c, uint32_t (&w)[8], float& lo, float& hi) {
    const int g = static_cast<int>(c & 7);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t h = (r.qh >> (4 * l)) & 15u;  // byte 32 + 2g + l / 2, nibble l % 2
      iq1_eight(code_at(iq::kIq1sCodes, ((r.idx >> (8 * l)) & 0xFFu) | ((h & 7u) << 8)), (h & 8u) != 0, w + 2 * l);
    }
    const uint32_t s0 = r.s01 & 0xFFFFu, s1 = r.s01 >> 16, s2 = r.s23 & 0xFFFFu, s3 = r.s23 >> 16;
    const float d = f16_bits((s0 >> 12) | ((s1 >> 8) & 0x00F0u) | ((s2 >> 4) & 0x0F00u) | (s3 & 0xF000u));
    const uint32_t sw = g < 4 ? (g < 2 ? s0 : s1) : (g < 6 ? s2 : s3);  // scale word g / 2
    const int at = 6 * (g & 1);
    lo = d * static_cast<float>(2 * ((sw >> at) & 7u) + 1) * 0.125f;
    hi = d * static_cast<float>(2 * ((sw >> (at + 3)) & 7u) + 1) * 0.125f;
  }
};

// TQ2_0 (66 bytes: 64 bytes of 2-bit values, value - 1 in {-1, 0, 1}, then f16 d): group
// g takes bits 2 (g % 4) of bytes 32 (g / 4) .. + 31.
struct TQ2Chunk : CodebookDots<TQ2Chunk> {
  static constexpr int kUnroll = 2;
  struct Regs {
    uint32_t q[8], d;
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 66;
    const uint8_t* qs = b + 32 * ((c & 7) >> 2);
#pragma unroll
    for (int k = 0; k < 8; ++k) r.q[k] = ld32(qs + 4 * k);
    r.d = __ldg(reinterpret_cast<const unsigned short*>(b + 64));
  }
  static __device__ __forceinline__ void values(const Regs& r, int64_t c, uint32_t (&w)[8], float& lo, float& hi) {
    const int shift = 2 * static_cast<int>(c & 3);
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = __vsub4((r.q[k] >> shift) & 0x03030303u, 0x01010101u);
    lo = hi = f16_bits(r.d);
  }
};

// TQ1_0 (54 bytes: 32 + 16 bytes of five / five base-3 digits, 4 bytes of four, f16 d):
// value - 1 in {-1, 0, 1}. Groups 0-4 are digit g of bytes 0..31; groups 5-7 take the
// 16 bytes at 32 (digits 0-1, 2-3, 4) and, for the last 16 values, the 4 bytes at 48.
struct TQ1Chunk : CodebookDots<TQ1Chunk> {
  static constexpr int kUnroll = 2;
  struct Regs {
    uint32_t q[8], qh, d;
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 54;
    const int g = static_cast<int>(c & 7);
    if (g < 5) {
#pragma unroll
      for (int k = 0; k < 8; ++k) r.q[k] = ld32(b + 4 * k);
      r.qh = 0;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) r.q[k] = ld32(b + 32 + 4 * k);
#pragma unroll
      for (int k = 4; k < 8; ++k) r.q[k] = 0;
      r.qh = ld32(b + 48);
    }
    r.d = __ldg(reinterpret_cast<const unsigned short*>(b + 52));
  }
  // Digit n (first = most significant) of each byte of v, minus 1, as four int8 bytes:
  // ((byte * 3^n) mod 256) * 3 / 256, two bytes at a time in 16-bit lanes (at most
  // 255 * 81 and 255 * 3 there, so nothing crosses a lane).
  static __device__ __forceinline__ uint32_t digits4(uint32_t v, int n) {
    const uint32_t pow3 = static_cast<uint32_t>((0x511B090301ull >> (8 * n)) & 0xFFu);  // 1, 3, 9, 27, 81
    const uint32_t even = (((((v & 0x00FF00FFu) * pow3) & 0x00FF00FFu) * 3u) >> 8) & 0x00FF00FFu;
    const uint32_t odd = ((((((v >> 8) & 0x00FF00FFu) * pow3) & 0x00FF00FFu) * 3u) >> 8) & 0x00FF00FFu;
    return __vsub4(even | (odd << 8), 0x01010101u);
  }
  // Word k (values 4k..4k+3) takes one digit of one word's four bytes: digit g of
  // bytes 4k.. (groups 0-4); digit 2 (g - 5) + k / 4 of the bytes at 32 + 4 (k % 4)
  // (groups 5, 6); in group 7, digit 4 of those bytes (k < 4), then digit k - 4 of the
  // last four bytes.
  static __device__ __forceinline__ void values(const Regs& r, int64_t c, uint32_t (&w)[8], float& lo, float& hi) {
    const int g = static_cast<int>(c & 7);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t src = g < 5 ? r.q[k] : (g < 7 || k < 4) ? r.q[k & 3] : r.qh;
      const int n = g < 5 ? g : g < 7 ? 2 * (g - 5) + (k >> 2) : (k < 4 ? 4 : k - 4);
      w[k] = digits4(src, n);
    }
    lo = hi = f16_bits(r.d);
  }
};

}  // namespace

bool gemv_codebook_type(DT w_dt) {
  switch (w_dt) {
    case DT::IQ3_S: case DT::IQ3_XXS: case DT::IQ2_S: case DT::IQ2_XS: case DT::IQ2_XXS:
    case DT::IQ1_S: case DT::IQ1_M: case DT::TQ1_0: case DT::TQ2_0:
      return true;
    default:
      return false;
  }
}

void launch_gemv_codebook(const GemvParams& p, cudaStream_t s) {
  switch (p.w_dt) {
    case DT::IQ3_S: launch_typed<IQ3SChunk, float, 2>(p, s); break;
    case DT::IQ3_XXS: launch_typed<IQ3XXSChunk, float, 2>(p, s); break;
    case DT::IQ2_S: launch_typed<IQ2SChunk, float, 2>(p, s); break;
    case DT::IQ2_XS: launch_typed<IQ2XSChunk, float, 2>(p, s); break;
    case DT::IQ2_XXS: launch_typed<IQ2XXSChunk, float, 2>(p, s); break;
    case DT::IQ1_S: launch_typed<IQ1SChunk, float, 2>(p, s); break;
    case DT::IQ1_M: launch_typed<IQ1MChunk, float, 2>(p, s); break;
    case DT::TQ1_0: launch_typed<TQ1Chunk, float, 2>(p, s); break;
    case DT::TQ2_0: launch_typed<TQ2Chunk, float, 2>(p, s); break;
    default: break;
  }
}

}  // namespace rlx::cuda_backend
