// AVX-512 VNNI build of the DequantMatMul GEMV loops (qmatmul_simd.inc): u8 x s8 dots
// through vpdpbusd (256-bit, AVX512VL), plus 512-bit loops of its own for Q8_0 (two blocks
// per zmm) and for Q4_0 / Q4_1 / Q5_0 / Q5_1 (four blocks per step). Function-level target
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
#include "rlx/formats/quant.h"
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

constexpr QKernels make_avx512_table() {
  QKernels t = make_qtable(IsaLevel::kAvx512);
  t.gemv[static_cast<int>(QKind::kQ4_0)] = &gemv_quad<QuadQ4_0>;
  t.gemv[static_cast<int>(QKind::kQ4_1)] = &gemv_quad<QuadQ4_1>;
  t.gemv[static_cast<int>(QKind::kQ5_0)] = &gemv_quad<QuadQ5_0>;
  t.gemv[static_cast<int>(QKind::kQ5_1)] = &gemv_quad<QuadQ5_1>;
  t.gemv[static_cast<int>(QKind::kQ8_0)] = &gemv_wide<WideQ8_0>;
  // BM_QPrefill 512 x 2048 x 8192, integer loops vs f32 panels: Q4_0 55-60 vs 97-107 ms,
  // Q4_1 60-63 vs 106-112, Q5_0 61-80 vs 100-115, Q5_1 64-78 vs 102-104, Q8_0 70-73 vs 94-105.
  t.int_prefill |= kind_bit(QKind::kQ4_0) | kind_bit(QKind::kQ4_1) | kind_bit(QKind::kQ5_0) |
                   kind_bit(QKind::kQ5_1) | kind_bit(QKind::kQ8_0);
  t.max_rows_of[static_cast<int>(QKind::kQ8_0)] = kWideRows;
  for (QKind k : {QKind::kQ4_0, QKind::kQ4_1, QKind::kQ5_0, QKind::kQ5_1}) t.max_rows_of[static_cast<int>(k)] = kQuadRows;
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
