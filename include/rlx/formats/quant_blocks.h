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

// ---- i-quants and ternary types. The grids and value tables they index are in
// iq_grids.h; "signs" bytes flag negative values (bit j = value j of a group of 8).

/// x[i] = d * kIq4nlValues[q[i]]; q[i] nibbles as in Q4_0.
struct BlockIQ4_NL {
  uint16_t d;            // f16
  uint8_t qs[kQK / 2];
};
/// 8 sub-blocks of 32: x = d * (ls_j - 32) * kIq4nlValues[q]; ls_j has its low 4 bits in
/// nibble j % 2 of scales_l[j / 2] and its high 2 bits in bits 2j, 2j+1 of scales_h; each
/// sub-block's nibbles (16 bytes) as in IQ4_NL.
struct BlockIQ4_XS {
  uint16_t d;            // f16
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
/// x = d * (t - 1), t in {0, 1, 2}: five base-3 digits per qs byte (elements 0..159:
/// digit n of qs[m] is element 32n + m; 160..239: digit n of qs[32 + m] is element
/// 160 + 16n + m), four per qh byte (digit n of qh[j] is element 240 + 4n + j). A byte
/// holds ceil(v * 256 / 243) of the 5-digit value v, first digit most significant.
struct BlockTQ1_0 {
  uint8_t qs[(kQK_K - 4 * kQK_K / 64) / 5];
  uint8_t qh[kQK_K / 64];
  uint16_t d;            // f16
};
/// x = d * (t - 1), t = 2 bits: element 128h + 32l + m is bits 2l of qs[32h + m].
struct BlockTQ2_0 {
  uint8_t qs[kQK_K / 4];
  uint16_t d;            // f16
};
/// 8 groups of 32, each 4 uint16 words: bytes 0..3 index kIq2xxsGrid for its four runs
/// of 8; the last word's bits 28..31 are the scale s (x = d * (0.5 + s) / 4 * grid *
/// sign) and its bits 7l..7l+6 the sign index of run l (iq_sign_byte).
struct BlockIQ2_XXS {
  uint16_t d;            // f16
  uint16_t qs[kQK_K / 8];
};
/// Runs of 8: qs[i] bits 0..8 index kIq2xsGrid, bits 9..15 the sign index; group g of 32
/// has two scales, the nibbles of scales[g] (runs 0-1, then 2-3): d * (0.5 + s) / 4.
struct BlockIQ2_XS {
  uint16_t d;            // f16
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};
/// Runs of 8: index = qs[r] | bits 2l..2l+1 of qh[g] << 8 into kIq2sGrid (run r = 4g + l),
/// its sign byte is qs[32 + r] stored whole; scales as IQ2_XS.
struct BlockIQ2_S {
  uint16_t d;            // f16
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
/// qs[0..63] index kIq3xxsGrid (4 values each); then per group of 32 a uint32: bits
/// 28..31 the scale s (x = d * (0.5 + s) / 2 * grid * sign), bits 7l..7l+6 the sign
/// index of run l.
struct BlockIQ3_XXS {
  uint16_t d;            // f16
  uint8_t qs[3 * kQK_K / 8];
};
/// Index = qs[i] | bit i % 8 of qh[i / 8] << 8 into kIq3sGrid (4 values each); signs
/// stored whole per run of 8; scales: nibble g % 2 of scales[g / 2], x = d * (1 + 2s).
struct BlockIQ3_S {
  uint16_t d;            // f16
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
/// Group g of 32: qh[g] bits 0..11 are the high 3 bits of the four kIq1sGrid indices
/// (low 8 in qs[4g + l]), bits 12..14 the scale s (x = d * (2s + 1) * (grid + delta)),
/// bit 15 the sign of delta = ±kIq1Delta.
struct BlockIQ1_S {
  uint16_t d;            // f16
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};
/// As IQ1_S with a scale per 16 values and a delta sign per 8: qh byte per 16 values
/// (index bits 8..10 in bits 0..2 / 4..6, delta signs in bits 3 / 7); scales: 3 bits per
/// 16 values, the f16 super-block scale spread over the top nibbles of the 4 words.
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];
};

/// The signed scale ls_j - 32 of sub-block j (0..7) of an IQ4_XS block.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  return (((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32;
}
/// Base-3 digit n (0 = most significant, n < 5) of a TQ1_0 byte, 0..2.
inline int tq1_trit(uint8_t byte, int n) {
  constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  return (static_cast<uint16_t>(static_cast<uint8_t>(byte * kPow3[n])) * 3) >> 8;  // the product wraps modulo 256
}

static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockTQ1_0) == 54 &&
              sizeof(BlockTQ2_0) == 66);
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82 &&
              sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50 &&
              sizeof(BlockIQ1_M) == 56);

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
