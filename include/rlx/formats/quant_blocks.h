// Packed block layouts of the GGML quantized types, byte-for-byte as stored in GGUF
// files (little-endian; f16 scales kept as raw bits). Kernels (DequantMatMul, vec_dot)
// read these structs directly from a tensor's bytes.
#pragma once

#include <cstdint>

namespace rlx::formats {

inline constexpr int kQK = 32;    ///< elements per block of the simple types (Q4_0 ... Q8_1)
inline constexpr int kQK_K = 256; ///< elements per super-block of the K-quants

/// x[i] = d * (q[i] - 8); q[i] = qs[i] & 15 for i < 16, qs[i-16] >> 4 otherwise.
struct BlockQ4_0 {
  uint16_t d;            // f16
  uint8_t qs[kQK / 2];
};
/// x[i] = d * q[i] + m; nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;            // f16
  uint16_t m;            // f16
  uint8_t qs[kQK / 2];
};
/// x[i] = d * (q[i] - 16); low 4 bits as in Q4_0, bit 4 of element i is bit i of qh.
struct BlockQ5_0 {
  uint16_t d;            // f16
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
/// x[i] = d * q[i] + m; bits as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;            // f16
  uint16_t m;            // f16
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
/// x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;            // f16
  int8_t qs[kQK];
};
/// x[i] = d * qs[i]; s = d * sum(qs) (used by vec_dot with Q4_1/Q5_1).
struct BlockQ8_1 {
  uint16_t d;            // f16
  uint16_t s;            // f16
  int8_t qs[kQK];
};
/// 16 sub-blocks of 16: x = d*(scales[j]&15)*q - dmin*(scales[j]>>4), q 2 bits.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;            // f16
  uint16_t dmin;         // f16
};
/// 16 sub-blocks of 16: x = d*(s6[j]-32)*(q3-4); q3 = 2 low bits in qs + high bit in hmask
/// (set bit means no -4); 6-bit scales packed in 12 bytes.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;            // f16
};
/// 8 sub-blocks of 32: x = d*sc[j]*q - dmin*m[j]; 6-bit sc/m packed in 12 bytes, q 4 bits.
struct BlockQ4_K {
  uint16_t d;            // f16
  uint16_t dmin;         // f16
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
/// As Q4_K with a fifth bit per element in qh.
struct BlockQ5_K {
  uint16_t d;            // f16
  uint16_t dmin;         // f16
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
/// 16 sub-blocks of 16: x = d*scales[j]*(q6-32); q6 = 4 bits in ql + 2 bits in qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;            // f16
};
/// Activation blocks for K-quant dot products: x = d*qs; bsums[j] = sum of qs[16j..16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

/// Unpacks the 6-bit scale (*d) and min (*m) of sub-block j (0..7) from the 12 packed
/// scale bytes of a Q4_K / Q5_K block.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace rlx::formats
