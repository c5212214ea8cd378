// AVX-512 VNNI build of the DequantMatMul GEMV loops (qmatmul_simd.inc): u8 x s8 dots
// through vpdpbusd (256-bit, AVX512VL), plus 512-bit loops of its own for Q8_0 (two blocks
// per zmm), for Q4_0 / Q4_1 / Q5_0 / Q5_1 (four blocks per step) and, for one activation
// row (decode), for Q4_K / Q6_K / Q8_0 (QKernels::gemv_one_row). Function-level target
// pragma, so the binary runs on any x86-64; only called when cpu_features() reports
// AVX-512 and VNNI.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backends/cpu/kernels/kernel_context.h"
#include "backends/cpu/kernels/qmatmul_kernels.h"
#include "rlx/base/half.h"
#include "rlx/base/status.h"
#include "rlx/formats/quant.h"
#include "rlx/formats/iq_grids.h"
#include "rlx/formats/quant_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
namespace rlx::cpu::detail {
namespace {
inline __m256i dot_us(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}
constexpr int kMaxRows = 8;
#include "backends/cpu/kernels/qmatmul_simd.inc"

// ---------------------------------------------------------------- 512-bit loop, Q8_0 weights
// One zmm holds two Q8_0 blocks with their dwords interleaved
// (lane 2i: dword i of block b, lane 2i + 1: dword i of block b + 1), so that one
// 64-bit broadcast of the two blocks' f32 scales lines up with the lanes. Activations are
// stored as q + 128 (unsigned) in that interleaved order, once per call and row group,
// and vpdpbusd starts from -128 * Σw (per lane, computed once per weight pair), which
// gives the exact signed sum without the sign trick: per row and 64 elements one dot,
// one convert, one multiply and one FMA.

inline __m512i pair_of(__m256i block0, __m256i block1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(block0), block1, 1);
}
// [block 0 dwords 0..7 | block 1 dwords 0..7] -> interleaved.
inline __m512i interleave_pair(__m512i v) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15), v);
}
struct WideQ8_0 {
  using Block = BlockQ8_0;
  static __m512i pair(const Block& a, const Block& b) { return interleave_pair(pair_of(load32(a.qs), load32(b.qs))); }
  static __m256i single(const Block& a) { return load32(a.qs); }
};

// One activation row in the wide layout: q holds nb * 32 bytes (pairs interleaved, an
// odd last block plain), d the nb block scales as f32.
struct WideAct {
  const uint8_t* q;
  const float* d;
};

// Activation rows per weight decode: one zmm accumulator each, with room for the weight
// pair, its bias and scale vectors and the per-row temporaries in 32 registers.
constexpr int kWideRows = 12;

inline size_t wide_q_bytes(int64_t nb) { return (static_cast<size_t>(nb) * 32 + 63) / 64 * 64; }
inline size_t wide_row_bytes(int64_t nb) { return wide_q_bytes(nb) + (static_cast<size_t>(nb) * 4 + 63) / 64 * 64; }

void widen_activation_row(const BlockQ8_0* a, int64_t nb, uint8_t* q, float* d) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  int64_t b = 0;
  for (; b + 1 < nb; b += 2)
    _mm512_store_si512(q + b * 32, _mm512_xor_si512(interleave_pair(pair_of(load32(a[b].qs), load32(a[b + 1].qs))), flip));
  if (b < nb)
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + b * 32),
                       _mm256_xor_si256(load32(a[b].qs), _mm512_castsi512_si256(flip)));
  for (b = 0; b < nb; ++b) d[b] = h2f(a[b].d);
}

template <class W, int M>
void gemv_wide_rows(int64_t nb, const uint8_t* w, size_t w_row_bytes, const WideAct* x, int64_t n0, int64_t n1,
                    float* out, int64_t ldo) {
  using Block = typename W::Block;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int far = gemv_far_prefetch();
  for (int64_t j = n0; j < n1; ++j) {
    const Block* wb = reinterpret_cast<const Block*>(w + j * w_row_bytes);
    __m512 acc[M];
    for (int r = 0; r < M; ++r) acc[r] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
      _mm_prefetch(reinterpret_cast<const char*>(wb + b) + 384, _MM_HINT_T0);
      if (far > 0) {  // (two blocks: 68 bytes, at most two lines)
        _mm_prefetch(reinterpret_cast<const char*>(wb + b) + far, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(wb + b) + far + 64, _MM_HINT_T1);
      }
      const __m512i v = W::pair(wb[b], wb[b + 1]);
      const __m512i neg_bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, v));
      const float dw[2] = {h2f(wb[b].d), h2f(wb[b + 1].d)};
      double dw_pair;
      std::memcpy(&dw_pair, dw, sizeof dw_pair);
      const __m512 dwv = _mm512_castpd_ps(_mm512_set1_pd(dw_pair));
      for (int r = 0; r < M; ++r) {
        const __m512i s = _mm512_dpbusd_epi32(neg_bias, _mm512_load_si512(x[r].q + b * 32), v);
        double dx_pair;
        std::memcpy(&dx_pair, x[r].d + b, sizeof dx_pair);
        const __m512 scale = _mm512_mul_ps(dwv, _mm512_castpd_ps(_mm512_set1_pd(dx_pair)));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[r]);
      }
    }
    float tail[M] = {};
    if (b < nb) {  // odd block count: the last block alone, 256 bits
      const __m256i v = W::single(wb[b]);
      const __m256i neg_bias = _mm256_sub_epi32(
          _mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(flip), v));
      const float dw = h2f(wb[b].d);
      for (int r = 0; r < M; ++r) {
        const __m256i s = _mm256_dpbusd_epi32(neg_bias, load32(x[r].q + b * 32), v);
        tail[r] = hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * x[r].d[b])));
      }
    }
    for (int r = 0; r < M; ++r) out[r * ldo + (j - n0)] = _mm512_reduce_add_ps(acc[r]) + tail[r];
  }
}

// Calls f(std::integral_constant<int, m>{}) for 1 <= m <= kWideRows (kWideRows above).
template <class F>
void with_rows(int m, F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (void)((m == I + 1 ? (f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
  }(std::make_integer_sequence<int, kWideRows>{});
}

// QGemvFn: widens the m activation rows into per-thread scratch (a small fraction of
// the work: the weight rows of the call are the large operand), then runs the loops.
template <class W>
void gemv_wide(int m, int64_t nb, const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t n0, int64_t n1,
               float* out, int64_t ldo) {
  const size_t row_bytes = wide_row_bytes(nb);
  auto* buf = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(m) * row_bytes));
  WideAct x[kWideRows];
  for (int r = 0; r < m; ++r) {
    uint8_t* q = buf + static_cast<size_t>(r) * row_bytes;
    auto* d = reinterpret_cast<float*>(q + wide_q_bytes(nb));
    widen_activation_row(reinterpret_cast<const BlockQ8_0*>(act + r * arb), nb, q, d);
    x[r] = WideAct{q, d};
  }
  with_rows(m, [&](auto rows) { gemv_wide_rows<W, rows()>(nb, w, wrb, x, n0, n1, out, ldo); });
}

// ---------------------------------------------------------------- 4- and 5-bit blocks, four per step
// Q4_0, Q4_1, Q5_0 and Q5_1 weights are read four blocks at a time by two 64-byte loads
// (the first and the last 64 bytes of the four blocks, so nothing past the row is read).
// One word permute gathers the four blocks' 16 bytes of nibbles: `lo` (byte & 15) holds
// elements 0..15 of block i in bytes 16i..16i+15, `hi` (byte >> 4) elements 16..31, so
// dword lane l belongs to block l / 4 in both; a second word permute puts each block's
// f16 scale (and min) in its four lanes. The activations are stored once per call in that
// order, so the weights stay unsigned (0..15 or 0..31): the offset of the "_0" types
// (8 or 16) is subtracted as offset * (the lane's 8 activation values), stored as the
// integer sum's start for m > 1 and dotted per step for m = 1 (compact rows, below). Per
// row and 128 elements: two dots, one convert, one multiply, one FMA (one more FMA for the
// mins of the "_1" types). Decoding the weights costs two permutes, three logic ops and
// one f16 convert per 128 elements (the 5-bit types add two masked adds); the m = 1 loop
// ran 30 GB/s on one core from L2 (NOTES session 4), above what one core reads from DRAM.

template <class B, class S, size_t kQsOff, int kDOff, int kMOff, int kQhOff, int kOffsetValue>
struct Quad {
  using Block = B;
  using Simple = S;  // the qmatmul_simd.inc type with the same block, for the last nb % 4 blocks
  static constexpr int kS = static_cast<int>(sizeof(B));
  static constexpr int kSpan = 4 * kS;          // bytes of four blocks, 72..96
  static constexpr int kSecond = kSpan - 64;   // offset of the second load
  static constexpr bool kMin = kMOff >= 0, kFive = kQhOff >= 0;
  // IQ4_NL: the nibbles index the non-linear values, stored + 128 (unsigned) and offset back.
  static constexpr bool kTable = std::is_same_v<B, formats::BlockIQ4_NL>;
  static constexpr int kQh = kQhOff, kOffset = kOffsetValue;
  static_assert(kSpan > 64 && kSpan <= 128 && kS % 2 == 0 && kQsOff % 2 == 0);
  // Word index into (first load, second load) of the word at byte offset o of the span.
  static constexpr uint16_t word(int o) { return static_cast<uint16_t>(o + 2 <= 64 ? o / 2 : 32 + (o - kSecond) / 2); }
  struct Index {
    alignas(64) uint16_t qs[32];  // word 8i + t: bytes 2t, 2t + 1 of block i's qs
    alignas(64) uint16_t dm[32];  // words 0..15: d of block l / 4; 16..31: m (or d again)
  };
  static constexpr Index index() {
    Index ix{};
    for (int t = 0; t < 32; ++t) ix.qs[t] = word((t / 8) * kS + static_cast<int>(kQsOff) + 2 * (t % 8));
    for (int l = 0; l < 16; ++l) {
      ix.dm[l] = word((l / 4) * kS + kDOff);
      ix.dm[16 + l] = word((l / 4) * kS + (kMin ? kMOff : kDOff));
    }
    return ix;
  }
  static constexpr Index kIndex = index();
};
using QuadQ4_0 = Quad<BlockQ4_0, Q4_0, offsetof(BlockQ4_0, qs), 0, -1, -1, 8>;
using QuadQ4_1 = Quad<BlockQ4_1, Q4_1, offsetof(BlockQ4_1, qs), 0, 2, -1, 0>;
using QuadQ5_0 = Quad<BlockQ5_0, Q5_0, offsetof(BlockQ5_0, qs), 0, -1, offsetof(BlockQ5_0, qh), 16>;
using QuadQ5_1 = Quad<BlockQ5_1, Q5_1, offsetof(BlockQ5_1, qs), 0, 2, offsetof(BlockQ5_1, qh), 0>;
using QuadIQ4_NL = Quad<formats::BlockIQ4_NL, IQ4_NL, offsetof(formats::BlockIQ4_NL, qs), 0, -1, -1, 128>;

// The IQ4_NL values + 128 as unsigned bytes, in every 128-bit lane.
inline __m512i iq4nl_biased_table() {
  alignas(16) uint8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(formats::kIq4nlValues[i] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// Activation rows per weight decode: a row takes 256 bytes per four blocks, so 6 rows of
// K = 2048 (24 KiB) stay in L1 beside the weight stream. rlx_kernels_qmatmul_bench
// BM_QPrefill 512 x 2048 x 8192 Q4_0: 4 rows 65.9 ms, 6 rows 56.5, 8 rows 60.0, 12 rows 91.7.
constexpr int kQuadRows = 6;

// One activation row for four blocks, as the m > 1 loop reads it: lo / hi values in the
// weights' order, the scale of each lane's block, and either the integer start (-offset *
// Σ of the lane's values, "_0" types) or the Q8_1 sums s (lane 4i: block i's s, other
// lanes 0, "_1" types).
struct alignas(64) QuadAct {
  int8_t lo[64], hi[64];
  float d[16];
  union {
    int32_t start[16];
    float s[16];
  };
};
static_assert(sizeof(QuadAct) == 256);
// The m = 1 form is compact: n_quads x 128 bytes of lo / hi, then n_quads x (4 block
// scales, 4 sums s) as f32, 160 bytes per four blocks instead of 256. The decode loop
// reads the whole row once per weight row, and a smaller row leaves more of L1 and of the
// core's outstanding misses to the weight stream: 1 x 8192 x 2048 Q4_0 streamed 30.7 GB/s
// against 28.0 with the m > 1 form (medians of 5 interleaved runs, 2 threads; NOTES
// session 4), at the cost of two more dots per step for the "_0" offset.
struct QuadLoHi {
  int8_t lo[64], hi[64];
};
inline size_t quad_compact_bytes(int64_t n_quads) { return static_cast<size_t>(n_quads) * (sizeof(QuadLoHi) + 32); }

// [p0[0..15] | p1[0..15] | p2[0..15] | p3[0..15]]
inline __m512i four16(const void* p0, const void* p1, const void* p2, const void* p3) {
  const __m256i low = _mm256_set_m128i(load16(p1), load16(p0)), high = _mm256_set_m128i(load16(p3), load16(p2));
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}
inline __m128 four_f16(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  return _mm_cvtph_ps(_mm_setr_epi16(static_cast<short>(a), static_cast<short>(b), static_cast<short>(c),
                                     static_cast<short>(d), 0, 0, 0, 0));
}
// Lane l <- element l / 4 of the four.
inline __m512 spread4(__m128 v) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                               _mm512_castps128_ps512(v));
}
// Lane 4i <- element i of the four, other lanes 0.
inline __m512 first_lanes4(__m128 v) {
  return _mm512_maskz_permutexvar_ps(0x1111, _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                     _mm512_castps128_ps512(v));
}

// Writes n_quads QuadAct (kCompact: the m = 1 form) at out from the row's Q8_0 / Q8_1 blocks.
template <class Q, bool kCompact>
void quad_activation_row(const uint8_t* act, int64_t n_quads, uint8_t* out) {
  using A = typename Q::Simple::Act;
  const auto* a = reinterpret_cast<const A*>(act);
  const __m512i ones = _mm512_set1_epi8(1);
  auto* full = reinterpret_cast<QuadAct*>(out);
  auto* lohi = reinterpret_cast<QuadLoHi*>(out);
  auto* scales = reinterpret_cast<float*>(out + static_cast<size_t>(n_quads) * sizeof(QuadLoHi));
  for (int64_t q = 0; q < n_quads; ++q, a += 4) {
    const __m512i lo = four16(a[0].qs, a[1].qs, a[2].qs, a[3].qs);
    const __m512i hi = four16(a[0].qs + 16, a[1].qs + 16, a[2].qs + 16, a[3].qs + 16);
    const __m128 d4 = four_f16(a[0].d, a[1].d, a[2].d, a[3].d);
    [[maybe_unused]] __m128 s4 = _mm_setzero_ps();
    if constexpr (Q::kMin) s4 = four_f16(a[0].s, a[1].s, a[2].s, a[3].s);
    if constexpr (kCompact) {
      _mm512_store_si512(lohi[q].lo, lo);
      _mm512_store_si512(lohi[q].hi, hi);
      _mm_storeu_ps(scales + 8 * q, d4);
      _mm_storeu_ps(scales + 8 * q + 4, s4);
    } else {
      _mm512_store_si512(full[q].lo, lo);
      _mm512_store_si512(full[q].hi, hi);
      _mm512_store_ps(full[q].d, spread4(d4));
      if constexpr (Q::kMin) {
        _mm512_store_ps(full[q].s, first_lanes4(s4));
      } else {
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo), ones, hi);
        _mm512_store_si512(full[q].start, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-Q::kOffset)));
      }
    }
  }
}

// Four blocks of one weight row, decoded: values 0..15 / 0..31 in lane order, the f16
// scales (and mins) as f32 per lane.
struct QuadWeights {
  __m512i lo, hi;
  __m512 dw, mw;
};

template <class Q>
inline QuadWeights decode_quad(const uint8_t* p, __m512i ix_qs, __m512i ix_dm) {
  _mm_prefetch(reinterpret_cast<const char*>(p) + 32 * Q::kSpan, _MM_HINT_T0);  // 2.3-3 KiB ahead
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i first = _mm512_loadu_si512(p), second = _mm512_loadu_si512(p + Q::kSecond);
  const __m512i qs = _mm512_permutex2var_epi16(first, ix_qs, second);
  const __m512i dm = _mm512_permutex2var_epi16(first, ix_dm, second);
  QuadWeights v;
  v.lo = _mm512_and_si512(qs, low4);
  v.hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), low4);
  if constexpr (Q::kFive) {
    uint64_t mask_lo = 0, mask_hi = 0;
    for (int i = 0; i < 4; ++i) {
      uint32_t h;
      std::memcpy(&h, p + i * Q::kS + Q::kQh, 4);
      mask_lo |= uint64_t{h & 0xFFFF} << (16 * i);
      mask_hi |= uint64_t{h >> 16} << (16 * i);
    }
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    v.lo = _mm512_mask_add_epi8(v.lo, mask_lo, v.lo, bit4);
    v.hi = _mm512_mask_add_epi8(v.hi, mask_hi, v.hi, bit4);
  }
  if constexpr (Q::kTable) {
    const __m512i table = iq4nl_biased_table();
    v.lo = _mm512_shuffle_epi8(table, v.lo);
    v.hi = _mm512_shuffle_epi8(table, v.hi);
  }
  v.dw = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
  v.mw = Q::kMin ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1)) : _mm512_setzero_ps();
  return v;
}

template <class Q, int M>
void gemv_quad_rows(int64_t n_quads, const uint8_t* w, size_t w_row_bytes, const QuadAct* const* x, int64_t n0,
                    int64_t n1, float* out, int64_t ldo) {
  const __m512i ix_qs = _mm512_load_si512(Q::kIndex.qs), ix_dm = _mm512_load_si512(Q::kIndex.dm);
  for (int64_t j = n0; j < n1; ++j) {
    const uint8_t* row = w + j * w_row_bytes;
    __m512 acc[M], acc_min[M];
    for (int r = 0; r < M; ++r) acc[r] = acc_min[r] = _mm512_setzero_ps();
    for (int64_t q = 0; q < n_quads; ++q) {
      const QuadWeights v = decode_quad<Q>(row + q * Q::kSpan, ix_qs, ix_dm);
      for (int r = 0; r < M; ++r) {
        const QuadAct& a = x[r][q];
        __m512i s = Q::kMin ? _mm512_setzero_si512() : _mm512_load_si512(a.start);
        s = _mm512_dpbusd_epi32(s, v.lo, _mm512_load_si512(a.lo));
        s = _mm512_dpbusd_epi32(s, v.hi, _mm512_load_si512(a.hi));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(v.dw, _mm512_load_ps(a.d)), acc[r]);
        if constexpr (Q::kMin) acc_min[r] = _mm512_fmadd_ps(v.mw, _mm512_load_ps(a.s), acc_min[r]);
      }
    }
    for (int r = 0; r < M; ++r) {
      float& o = out[r * ldo + (j - n0)];
      o += _mm512_reduce_add_ps(Q::kMin ? _mm512_add_ps(acc[r], acc_min[r]) : acc[r]);
    }
  }
}

// m = 1 on the compact activations: the "_0" offset costs two more dots (offset x values),
// the lane scales one permute.
template <class Q>
void gemv_quad_one(int64_t n_quads, const uint8_t* w, size_t w_row_bytes, const uint8_t* x, int64_t n0, int64_t n1,
                   float* out) {
  const __m512i ix_qs = _mm512_load_si512(Q::kIndex.qs), ix_dm = _mm512_load_si512(Q::kIndex.dm);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(Q::kOffset));
  const auto* lohi = reinterpret_cast<const QuadLoHi*>(x);
  const auto* scales = reinterpret_cast<const float*>(x + static_cast<size_t>(n_quads) * sizeof(QuadLoHi));
  for (int64_t j = n0; j < n1; ++j) {
    const uint8_t* row = w + j * w_row_bytes;
    __m512 acc = _mm512_setzero_ps(), acc_min = _mm512_setzero_ps();
    for (int64_t q = 0; q < n_quads; ++q) {
      const QuadWeights v = decode_quad<Q>(row + q * Q::kSpan, ix_qs, ix_dm);
      const __m512i xl = _mm512_load_si512(lohi[q].lo), xh = _mm512_load_si512(lohi[q].hi);
      __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), v.lo, xl), v.hi, xh);
      if constexpr (!Q::kMin)
        s = _mm512_sub_epi32(s, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, xl), offset, xh));
      const __m512 dx = spread4(_mm_loadu_ps(scales + 8 * q));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(v.dw, dx), acc);
      if constexpr (Q::kMin) acc_min = _mm512_fmadd_ps(v.mw, first_lanes4(_mm_loadu_ps(scales + 8 * q + 4)), acc_min);
    }
    out[j - n0] += _mm512_reduce_add_ps(_mm512_add_ps(acc, acc_min));
  }
}

// QGemvFn: the last nb % 4 blocks first (qmatmul_simd.inc's per-block loop writes out),
// then the four-block steps add to it.
template <class Q>
void gemv_quad(int m, int64_t nb, const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t n0, int64_t n1,
               float* out, int64_t ldo) {
  const int64_t n_quads = nb / 4, tail = nb % 4;
  const size_t tail_w = static_cast<size_t>(n_quads) * Q::kSpan;
  const size_t tail_a = static_cast<size_t>(n_quads) * 4 * sizeof(typename Q::Simple::Act);
  for (int r0 = 0; r0 < m; r0 += kMaxRows) {
    const int rows = std::min(kMaxRows, m - r0);
    float* o = out + r0 * ldo;
    if (tail == 0) {
      for (int r = 0; r < rows; ++r) std::fill(o + r * ldo, o + r * ldo + (n1 - n0), 0.0f);
    } else {
      gemv_simple_m<typename Q::Simple>(rows, tail, w + tail_w, wrb, act + r0 * arb + tail_a, arb, n0, n1, o, ldo);
    }
  }
  if (n_quads == 0) return;
  if (m == 1) {
    auto* row = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kTemp, quad_compact_bytes(n_quads)));
    quad_activation_row<Q, true>(act, n_quads, row);
    return gemv_quad_one<Q>(n_quads, w, wrb, row, n0, n1, out);
  }
  const size_t row_bytes = static_cast<size_t>(n_quads) * sizeof(QuadAct);
  auto* buf = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(m) * row_bytes));
  const QuadAct* x[kQuadRows];
  for (int r = 0; r < m; ++r) {
    uint8_t* row = buf + static_cast<size_t>(r) * row_bytes;
    quad_activation_row<Q, false>(act + r * arb, n_quads, row);
    x[r] = reinterpret_cast<const QuadAct*>(row);
  }
  with_rows(m, [&](auto rows) { gemv_quad_rows<Q, rows()>(n_quads, w, wrb, x, n0, n1, out, ldo); });
}

// ---------------------------------------------------------------- one-row 512-bit loops (decode)
// m = 1 for the kinds a quantized decode spends its time in (Q4_K_M: Q4_K and Q6_K;
// Q8_0), taken when gemv_one_row_zmm() says so. 64 elements per vpdpbusd; the K-quants'
// per-group scales reach the int32 lanes by one vpdpwssd against a word permute of the
// block's scales (the low word of each lane holds its whole sum of four products,
// |Σ| <= 4 * 63 * 127 < 2^15, and the permute zeroes the high word), so a super-block
// costs Q4_K 2 weight loads, 6 logic ops, 4 + 4 dots and 4 permutes where the 256-bit
// loop above spends ~3x the vector operations. The activation row is laid out once per
// call in the order the weights unpack to.

// One Q8_K block as the one-row loops read it.
struct alignas(64) KAct {
  int8_t q[256];   // Q4_K: 32-element chunks in the order 0 2 1 3 4 6 5 7; Q6_K: as is
  int16_t bs[16];  // Q4_K: bsums summed per chunk (the first 8); Q6_K: the 16 bsums
  float d;
};
static_assert(sizeof(KAct) == 320);

template <bool kQ4K>
void k_activation_row(const BlockQ8_K* a, int64_t nb, KAct* out) {
  constexpr int kChunkOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t b = 0; b < nb; ++b) {
    KAct& o = out[b];
    if constexpr (kQ4K) {
      for (int i = 0; i < 8; ++i) std::memcpy(o.q + 32 * i, a[b].qs + 32 * kChunkOrder[i], 32);
      for (int c = 0; c < 8; ++c) o.bs[c] = static_cast<int16_t>(a[b].bsums[2 * c] + a[b].bsums[2 * c + 1]);
    } else {
      std::memcpy(o.q, a[b].qs, sizeof o.q);
      std::memcpy(o.bs, a[b].bsums, sizeof o.bs);
    }
    o.d = a[b].d;
  }
}

// Word 2i of lane i: index `first` for lanes 0-7 and `second` for lanes 8-15.
inline __m512i lane_pick(int first, int second) {
  return _mm512_inserti64x4(_mm512_set1_epi32(first), _mm256_set1_epi32(second), 1);
}
// Lanes 4g..4g+3 take index base + g (16-element groups).
inline __m512i group_pick(int base) {
  return _mm512_setr_epi32(base, base, base, base, base + 1, base + 1, base + 1, base + 1, base + 2, base + 2,
                           base + 2, base + 2, base + 3, base + 3, base + 3, base + 3);
}
constexpr __mmask32 kLowWords = 0x55555555;
// Lane i = its int32 in `p` times the int16 scale that `pick` selects from `scales`.
inline __m512i scaled_dot(__m512i acc, __m512i p, __m512i pick, __m512i scales) {
  return _mm512_dpwssd_epi32(acc, p, _mm512_maskz_permutexvar_epi16(kLowWords, pick, scales));
}
inline float hsum128(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}
inline void prefetch_far(const void* p, int far, int bytes) {
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + far + o, _MM_HINT_T1);
}

void gemv_q4_k_one_row(int64_t nb, const uint8_t* w, size_t w_row_bytes, const KAct* x, int64_t n0, int64_t n1,
                       float* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  const __m512i pick0 = lane_pick(0, 2), pick1 = lane_pick(1, 3), pick2 = lane_pick(4, 6), pick3 = lane_pick(5, 7);
  const int far = gemv_far_prefetch();
  constexpr uint32_t lo6 = 0x3F3F3F3F, lo4 = 0x0F0F0F0F, hi2 = 0x03030303;
  for (int64_t j = n0; j < n1; ++j) {
    const auto* blocks = reinterpret_cast<const BlockQ4_K*>(w + j * w_row_bytes);
    __m512 acc = _mm512_setzero_ps();
    __m128 acc_min = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ4_K& blk = blocks[b];
      _mm_prefetch(reinterpret_cast<const char*>(&blk) + 2 * sizeof(BlockQ4_K), _MM_HINT_T0);
      if (far > 0) prefetch_far(&blk, far, sizeof(BlockQ4_K));
      uint32_t s[3];
      std::memcpy(s, blk.scales, 12);
      const __m128i sc = _mm_setr_epi32(static_cast<int>(s[0] & lo6),
                                        static_cast<int>((s[2] & lo4) | (((s[0] >> 6) & hi2) << 4)),
                                        static_cast<int>(s[1] & lo6),
                                        static_cast<int>(((s[2] >> 4) & lo4) | (((s[1] >> 6) & hi2) << 4)));
      const __m256i sc16 = _mm256_cvtepu8_epi16(sc);  // words 0..7 scales, 8..15 mins
      const __m512i scales = _mm512_castsi256_si512(sc16);
      const KAct& a = x[b];
      const __m512i q0 = _mm512_loadu_si512(blk.qs), q1 = _mm512_loadu_si512(blk.qs + 64);
      const __m512i p0 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(q0, low4), _mm512_load_si512(a.q));
      const __m512i p1 =
          _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4), _mm512_load_si512(a.q + 64));
      const __m512i p2 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(q1, low4), _mm512_load_si512(a.q + 128));
      const __m512i p3 =
          _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4), _mm512_load_si512(a.q + 192));
      const __m512i s01 = scaled_dot(scaled_dot(zero, p0, pick0, scales), p1, pick1, scales);
      const __m512i s23 = scaled_dot(scaled_dot(zero, p2, pick2, scales), p3, pick3, scales);
      const __m128i mins = _mm_madd_epi16(_mm256_extracti128_si256(sc16, 1), _mm_load_si128(reinterpret_cast<const __m128i*>(a.bs)));
      uint32_t d_dmin;  // d and dmin, adjacent f16
      std::memcpy(&d_dmin, &blk.d, 4);
      const __m128 dx = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin))), _mm_set1_ps(a.d));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s01, s23)), _mm512_broadcastss_ps(dx), acc);
      acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(mins), _mm_shuffle_ps(dx, dx, 0x55), acc_min);
    }
    out[j - n0] = _mm512_reduce_add_ps(acc) - hsum128(acc_min);
  }
}

// Q6_K: per half of the block, 64 bytes of ql give elements 0..63 (low nibbles) and
// 64..127 (high), their two high bits come from the half's 32 qh bytes broadcast to both
// 256-bit lanes and shifted per lane; values are u - 32, the offset taken as 32 * Σ
// scale * bsum once per block.
void gemv_q6_k_one_row(int64_t nb, const uint8_t* w, size_t w_row_bytes, const KAct* x, int64_t n0, int64_t n1,
                       float* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30), zero = _mm512_setzero_si512();
  // Elements 0..31 take qh bits 0-1 (<< 4), 32..63 bits 2-3 (<< 2); 64..95 bits 4-5, 96..127 bits 6-7 (>> 2).
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i pick[4] = {group_pick(0), group_pick(4), group_pick(8), group_pick(12)};
  const int far = gemv_far_prefetch();
  for (int64_t j = n0; j < n1; ++j) {
    const auto* blocks = reinterpret_cast<const BlockQ6_K*>(w + j * w_row_bytes);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ6_K& blk = blocks[b];
      _mm_prefetch(reinterpret_cast<const char*>(&blk) + 2 * sizeof(BlockQ6_K), _MM_HINT_T0);
      if (far > 0) prefetch_far(&blk, far, sizeof(BlockQ6_K));
      const __m256i sc16 = _mm256_cvtepi8_epi16(load16(blk.scales));
      const __m512i scales = _mm512_castsi256_si512(sc16);
      const KAct& a = x[b];
      __m512i isum[2];
      for (int h = 0; h < 2; ++h) {
        const __m512i l = _mm512_loadu_si512(blk.ql + 64 * h);
        const __m512i hb = _mm512_broadcast_i64x4(load32(blk.qh + 32 * h));
        // (A & B) | C
        const __m512i u_lo = _mm512_ternarylogic_epi32(l, low4, _mm512_and_si512(_mm512_sllv_epi16(hb, shift_lo), bits45), 0xEA);
        const __m512i u_hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), low4,
                                                       _mm512_and_si512(_mm512_srlv_epi16(hb, shift_hi), bits45), 0xEA);
        const __m512i p_lo = _mm512_dpbusd_epi32(zero, u_lo, _mm512_load_si512(a.q + 128 * h));
        const __m512i p_hi = _mm512_dpbusd_epi32(zero, u_hi, _mm512_load_si512(a.q + 128 * h + 64));
        isum[h] = scaled_dot(scaled_dot(zero, p_lo, pick[2 * h], scales), p_hi, pick[2 * h + 1], scales);
      }
      const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(a.bs)), sc16), 5);
      const __m512i total = _mm512_sub_epi32(_mm512_add_epi32(isum[0], isum[1]), _mm512_zextsi256_si512(offset));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(a.d * h2f(blk.d)), acc);
    }
    out[j - n0] = _mm512_reduce_add_ps(acc);
  }
}

// IQ4_XS, m = 1: the 128 nibble bytes in two 64-byte loads (sub-blocks 0-3, 4-7; each
// 128-bit lane one sub-block, low nibbles its first 16 values, high its last 16), the
// values looked up + 128 (unsigned) for vpdpbusd, the activations laid out in that order
// once per call; per lane the sum times its sub-block's scale (ls - 32), and the +128 taken
// back as 128 * Σ_g ls_g * Σx_g once per block.
struct alignas(64) Iq4xsAct {
  int8_t q[256];   // chunk c (64 bytes): lane i holds x[128 (c / 2) + 32 i + 16 (c % 2) ..] (16 values)
  int16_t gs[8];   // Σ x per sub-block of 32
  float d;
};

void iq4_xs_activation_row(const BlockQ8_K* a, int64_t nb, Iq4xsAct* out) {
  for (int64_t b = 0; b < nb; ++b) {
    Iq4xsAct& o = out[b];
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 4; ++i) std::memcpy(o.q + 64 * c + 16 * i, a[b].qs + 128 * (c / 2) + 32 * i + 16 * (c % 2), 16);
    for (int g = 0; g < 8; ++g) o.gs[g] = static_cast<int16_t>(a[b].bsums[2 * g] + a[b].bsums[2 * g + 1]);
    o.d = a[b].d;
  }
}

void gemv_iq4_xs_one_row(int m, int64_t nb, const uint8_t* w, size_t wrb, const uint8_t* act, size_t, int64_t n0,
                         int64_t n1, float* out, int64_t) {
  RLX_ASSERT(m == 1);
  auto* x = static_cast<Iq4xsAct*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(nb) * sizeof(Iq4xsAct)));
  iq4_xs_activation_row(reinterpret_cast<const BlockQ8_K*>(act), nb, x);
  const __m512i table = iq4nl_biased_table(), low4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const int far = gemv_far_prefetch();
  for (int64_t j = n0; j < n1; ++j) {
    const auto* blocks = reinterpret_cast<const formats::BlockIQ4_XS*>(w + j * wrb);
    __m512 acc = _mm512_setzero_ps();
    float acc_offset = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const formats::BlockIQ4_XS& blk = blocks[b];
      _mm_prefetch(reinterpret_cast<const char*>(&blk) + 2 * sizeof(blk), _MM_HINT_T0);
      if (far > 0) prefetch_far(&blk, far, sizeof(blk));
      const __m256i ls8 = iq4xs_scales32(blk);
      const Iq4xsAct& a = x[b];
      const __m512i q0 = _mm512_loadu_si512(blk.qs), q1 = _mm512_loadu_si512(blk.qs + 64);
      const __m512i u0 = _mm512_shuffle_epi8(table, _mm512_and_si512(q0, low4));
      const __m512i u1 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4));
      const __m512i u2 = _mm512_shuffle_epi8(table, _mm512_and_si512(q1, low4));
      const __m512i u3 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4));
      const __m512i s01 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, u0, _mm512_load_si512(a.q)), u1,
                                              _mm512_load_si512(a.q + 64));
      const __m512i s23 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, u2, _mm512_load_si512(a.q + 128)), u3,
                                              _mm512_load_si512(a.q + 192));
      const __m512i sc_lo = _mm512_permutexvar_epi32(spread, _mm512_castsi256_si512(ls8));
      const __m512i sc_hi =
          _mm512_permutexvar_epi32(_mm512_add_epi32(spread, _mm512_set1_epi32(4)), _mm512_castsi256_si512(ls8));
      const __m512i total = _mm512_add_epi32(_mm512_mullo_epi32(s01, sc_lo), _mm512_mullo_epi32(s23, sc_hi));
      const __m256i gs = _mm256_cvtepi16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(a.gs)));
      const __m256i off = _mm256_mullo_epi32(gs, ls8);
      __m128i o4 = _mm_add_epi32(_mm256_castsi256_si128(off), _mm256_extracti128_si256(off, 1));
      o4 = _mm_add_epi32(o4, _mm_shuffle_epi32(o4, 0x4E));
      o4 = _mm_add_epi32(o4, _mm_shuffle_epi32(o4, 0xB1));
      const float dxd = a.d * h2f(blk.d);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(dxd), acc);
      acc_offset += dxd * static_cast<float>(128 * _mm_cvtsi128_si32(o4));
    }
    out[j - n0] = _mm512_reduce_add_ps(acc) - acc_offset;
  }
}

// QGemvFn for m = 1 (Q4_K, Q6_K): the activation row into per-thread scratch, then the loop.
template <bool kQ4K>
void gemv_k_one_row(int m, int64_t nb, const uint8_t* w, size_t wrb, const uint8_t* act, size_t, int64_t n0,
                    int64_t n1, float* out, int64_t) {
  RLX_ASSERT(m == 1);
  auto* x = static_cast<KAct*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(nb) * sizeof(KAct)));
  k_activation_row<kQ4K>(reinterpret_cast<const BlockQ8_K*>(act), nb, x);
  if constexpr (kQ4K) {
    gemv_q4_k_one_row(nb, w, wrb, x, n0, n1, out);
  } else {
    gemv_q6_k_one_row(nb, w, wrb, x, n0, n1, out);
  }
}

// Q8_0, m = 1: the weights made unsigned by flipping their sign bit (w + 128), the
// activations' share of that, -128 * Σ of each lane's four values, stored per block as
// the dot's starting value; per four blocks one f16 convert of the four weight scales,
// per pair one permute that spreads them over the pair's lanes.
struct Q8Row {
  const int8_t* q;    // nb * 32 values
  const int32_t* xc;  // nb * 8 lane starts
  const float* d;     // nb scales
};

// q, xc and d each start on a 64-byte boundary.
inline size_t q8_part_bytes(int64_t nb) { return (static_cast<size_t>(nb) * 32 + 63) / 64 * 64; }
inline size_t q8_row_bytes(int64_t nb) { return 2 * q8_part_bytes(nb) + (static_cast<size_t>(nb) * 4 + 63) / 64 * 64; }

Q8Row q8_activation_row(const BlockQ8_0* a, int64_t nb, uint8_t* buf) {
  auto* q = reinterpret_cast<int8_t*>(buf);
  auto* xc = reinterpret_cast<int32_t*>(buf + q8_part_bytes(nb));
  auto* d = reinterpret_cast<float*>(buf + 2 * q8_part_bytes(nb));
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i v = load32(a[b].qs);
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * b), v);
    const __m256i sum4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, v);
    _mm256_store_si256(reinterpret_cast<__m256i*>(xc + 8 * b), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum4, 7)));
    d[b] = h2f(a[b].d);
  }
  return Q8Row{q, xc, d};
}

void gemv_q8_0_one_row_loop(int64_t nb, const uint8_t* w, size_t w_row_bytes, const Q8Row& x, int64_t n0, int64_t n1,
                            float* out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i pick01 = lane_pick(0, 1), pick23 = lane_pick(2, 3);
  const int far = gemv_far_prefetch();
  for (int64_t j = n0; j < n1; ++j) {
    const auto* wb = reinterpret_cast<const BlockQ8_0*>(w + j * w_row_bytes);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
      _mm_prefetch(reinterpret_cast<const char*>(wb + b) + 384, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(wb + b) + 448, _MM_HINT_T0);
      if (far > 0) prefetch_far(wb + b, far, 4 * sizeof(BlockQ8_0));
      const uint64_t d4 = uint64_t{wb[b].d} | uint64_t{wb[b + 1].d} << 16 | uint64_t{wb[b + 2].d} << 32 |
                          uint64_t{wb[b + 3].d} << 48;
      const __m512 scale4 = _mm512_castps128_ps512(
          _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(d4))), _mm_loadu_ps(x.d + b)));
      const __m512i v01 = pair_of(load32(wb[b].qs), load32(wb[b + 1].qs));
      const __m512i v23 = pair_of(load32(wb[b + 2].qs), load32(wb[b + 3].qs));
      const __m512i s01 = _mm512_dpbusd_epi32(_mm512_load_si512(x.xc + 8 * b), _mm512_xor_si512(v01, flip),
                                              _mm512_load_si512(x.q + 32 * b));
      const __m512i s23 = _mm512_dpbusd_epi32(_mm512_load_si512(x.xc + 8 * b + 16), _mm512_xor_si512(v23, flip),
                                              _mm512_load_si512(x.q + 32 * b + 64));
      acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s01), _mm512_permutexvar_ps(pick01, scale4), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s23), _mm512_permutexvar_ps(pick23, scale4), acc1);
    }
    float tail = 0.0f;
    for (; b < nb; ++b) {
      const __m256i s = _mm256_dpbusd_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(x.xc + 8 * b)),
                                            _mm256_xor_si256(load32(wb[b].qs), _mm512_castsi512_si256(flip)),
                                            _mm256_load_si256(reinterpret_cast<const __m256i*>(x.q + 32 * b)));
      tail += hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(h2f(wb[b].d) * x.d[b])));
    }
    out[j - n0] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + tail;
  }
}

void gemv_q8_0_one_row(int m, int64_t nb, const uint8_t* w, size_t wrb, const uint8_t* act, size_t, int64_t n0,
                       int64_t n1, float* out, int64_t) {
  RLX_ASSERT(m == 1);
  auto* buf = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kTemp, q8_row_bytes(nb)));
  const Q8Row x = q8_activation_row(reinterpret_cast<const BlockQ8_0*>(act), nb, buf);
  gemv_q8_0_one_row_loop(nb, w, wrb, x, n0, n1, out);
}

constexpr QKernels make_avx512_table() {
  QKernels t = make_qtable(IsaLevel::kAvx512);
  t.gemv[static_cast<int>(QKind::kQ4_0)] = &gemv_quad<QuadQ4_0>;
  t.gemv[static_cast<int>(QKind::kQ4_1)] = &gemv_quad<QuadQ4_1>;
  t.gemv[static_cast<int>(QKind::kQ5_0)] = &gemv_quad<QuadQ5_0>;
  t.gemv[static_cast<int>(QKind::kQ5_1)] = &gemv_quad<QuadQ5_1>;
  t.gemv[static_cast<int>(QKind::kIQ4_NL)] = &gemv_quad<QuadIQ4_NL>;
  t.gemv[static_cast<int>(QKind::kQ8_0)] = &gemv_wide<WideQ8_0>;
  // BM_QPrefill 512 x 2048 x 8192, integer loops vs f32 panels: Q4_0 55-60 vs 97-107 ms,
  // Q4_1 60-63 vs 106-112, Q5_0 61-80 vs 100-115, Q5_1 64-78 vs 102-104, Q8_0 70-73 vs 94-105.
  t.int_prefill |= kind_bit(QKind::kQ4_0) | kind_bit(QKind::kQ4_1) | kind_bit(QKind::kQ5_0) |
                   kind_bit(QKind::kQ5_1) | kind_bit(QKind::kQ8_0);
  t.max_rows_of[static_cast<int>(QKind::kQ8_0)] = kWideRows;
  t.gemv_one_row[static_cast<int>(QKind::kQ4_K)] = &gemv_k_one_row<true>;
  t.gemv_one_row[static_cast<int>(QKind::kQ6_K)] = &gemv_k_one_row<false>;
  t.gemv_one_row[static_cast<int>(QKind::kQ8_0)] = &gemv_q8_0_one_row;
  for (QKind k : {QKind::kQ4_0, QKind::kQ4_1, QKind::kQ5_0, QKind::kQ5_1, QKind::kIQ4_NL})
    t.max_rows_of[static_cast<int>(k)] = kQuadRows;
  t.gemv_one_row[static_cast<int>(QKind::kIQ4_XS)] = &gemv_iq4_xs_one_row;
  t.one_row_everywhere = kind_bit(QKind::kIQ4_XS);
  return t;
}
}  // namespace
const QKernels kQAvx512Kernels = make_avx512_table();
}  // namespace rlx::cpu::detail
#pragma GCC diagnostic pop
#pragma GCC pop_options

#else
namespace rlx::cpu::detail {
const QKernels kQAvx512Kernels = kQScalarKernels;
}
#endif
