// AVX-512 VNNI build of the DequantMatMul GEMV loops (qmatmul_simd.inc): u8 x s8 dots
// through vpdpbusd (256-bit, AVX512VL), plus 512-bit loops of its own for the types
// dotted with Q8_0 activations (Q4_0, Q5_0, Q8_0). Function-level target pragma, so the binary
// runs on any x86-64; only called when cpu_features() reports AVX-512 and VNNI.
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernel_context.h"
#include "backends/cpu/kernels/qmatmul_kernels.h"
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

// ---------------------------------------------------------------- 512-bit loops, Q8_0 activations
// For Q4_0, Q5_0 and Q8_0 weights one zmm holds two blocks with their dwords interleaved
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
// Nibble pairs: [b0 low nibbles, b1 low, b0 high, b1 high] (16 bytes each) -> interleaved.
inline __m512i interleave_nibble_pair(__m512i v) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), v);
}
// Both blocks' packed nibbles, unpacked (0..15) in the order interleave_nibble_pair expects.
inline __m512i nibble_pair(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i q = _mm256_set_m128i(load16(qs1), load16(qs0));
  return _mm512_and_si512(pair_of(q, _mm256_srli_epi16(q, 4)), _mm512_set1_epi8(0x0F));
}

struct WideQ4_0 {
  using Block = BlockQ4_0;
  static __m512i pair(const Block& a, const Block& b) {
    return interleave_nibble_pair(_mm512_sub_epi8(nibble_pair(a.qs, b.qs), _mm512_set1_epi8(8)));
  }
  static __m256i single(const Block& a) { return Q4_0::values(a); }
};
struct WideQ5_0 {
  using Block = BlockQ5_0;
  static __m512i pair(const Block& a, const Block& b) {
    uint32_t h0, h1;
    std::memcpy(&h0, a.qh, 4);
    std::memcpy(&h1, b.qh, 4);
    // Bit i of qh is element i's fifth bit; elements 0..15 sit in the low-nibble quarters.
    const uint64_t mask = (uint64_t{h0} & 0xFFFF) | (uint64_t{h1} & 0xFFFF) << 16 | (uint64_t{h0} >> 16) << 32 |
                          (uint64_t{h1} >> 16) << 48;
    const __m512i high = _mm512_maskz_mov_epi8(static_cast<__mmask64>(mask), _mm512_set1_epi8(0x10));
    return interleave_nibble_pair(
        _mm512_sub_epi8(_mm512_or_si512(nibble_pair(a.qs, b.qs), high), _mm512_set1_epi8(16)));
  }
  static __m256i single(const Block& a) { return Q5_0::values(a); }
};
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
  for (int64_t j = n0; j < n1; ++j) {
    const Block* wb = reinterpret_cast<const Block*>(w + j * w_row_bytes);
    __m512 acc[M];
    for (int r = 0; r < M; ++r) acc[r] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
      _mm_prefetch(reinterpret_cast<const char*>(wb + b) + 384, _MM_HINT_T0);
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
  switch (m) {
    case 1: return gemv_wide_rows<W, 1>(nb, w, wrb, x, n0, n1, out, ldo);
    case 2: return gemv_wide_rows<W, 2>(nb, w, wrb, x, n0, n1, out, ldo);
    case 3: return gemv_wide_rows<W, 3>(nb, w, wrb, x, n0, n1, out, ldo);
    case 4: return gemv_wide_rows<W, 4>(nb, w, wrb, x, n0, n1, out, ldo);
    case 5: return gemv_wide_rows<W, 5>(nb, w, wrb, x, n0, n1, out, ldo);
    case 6: return gemv_wide_rows<W, 6>(nb, w, wrb, x, n0, n1, out, ldo);
    case 7: return gemv_wide_rows<W, 7>(nb, w, wrb, x, n0, n1, out, ldo);
    case 8: return gemv_wide_rows<W, 8>(nb, w, wrb, x, n0, n1, out, ldo);
    case 9: return gemv_wide_rows<W, 9>(nb, w, wrb, x, n0, n1, out, ldo);
    case 10: return gemv_wide_rows<W, 10>(nb, w, wrb, x, n0, n1, out, ldo);
    case 11: return gemv_wide_rows<W, 11>(nb, w, wrb, x, n0, n1, out, ldo);
    case 12: return gemv_wide_rows<W, 12>(nb, w, wrb, x, n0, n1, out, ldo);
    default: return gemv_wide_rows<W, kWideRows>(nb, w, wrb, x, n0, n1, out, ldo);
  }
}

constexpr QKernels make_avx512_table() {
  QKernels t = make_qtable(IsaLevel::kAvx512);
  t.gemv[static_cast<int>(QKind::kQ4_0)] = &gemv_wide<WideQ4_0>;
  t.gemv[static_cast<int>(QKind::kQ5_0)] = &gemv_wide<WideQ5_0>;
  t.gemv[static_cast<int>(QKind::kQ8_0)] = &gemv_wide<WideQ8_0>;
  t.int_prefill |= kind_bit(QKind::kQ4_0) | kind_bit(QKind::kQ5_0) | kind_bit(QKind::kQ8_0);
  for (QKind k : {QKind::kQ4_0, QKind::kQ5_0, QKind::kQ8_0}) t.max_rows_of[static_cast<int>(k)] = kWideRows;
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
