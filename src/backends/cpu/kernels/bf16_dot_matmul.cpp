// bf16_dot_gemm_prepacked: prefill matmuls on AVX-512 BF16 dot products (see the header
// for the numerics). A pass of up to kBf16DotRowsPerPass rows:
// 1. x -> bf16 pairs in row tiles: tile t holds, for every pair p of K, the 14 words
//    (bf16(x[r][2p]) | bf16(x[r][2p+1]) << 16) of its rows, so a register tile reads one
//    contiguous stream and broadcasts each word straight from memory.
// 2. Tasks are 32-column panels. A task converts a K chunk of its panel into
//    [pair][32 columns] bf16 pairs (two 512-bit rows a pair, the operand vdpbf16ps takes),
//    then runs every row tile over the chunk: 28 accumulators (14 rows x 2 x 16 columns),
//    per pair 2 weight loads and 28 vdpbf16ps. Sums between chunks live in f32 scratch;
//    the last chunk ends in the epilogue act(acc + bias) + beta * C.
#include "backends/cpu/kernels/bf16_dot_matmul.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/env.h"
#include "rlx/base/status.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rlx::cpu {
namespace {

constexpr int kMr = kBf16DotTileRows;
constexpr int64_t kChunkPairs = 512;  // K pairs of one converted weight chunk: 64 KiB, in L2

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::atomic<int64_t> g_on_bf16_dot{0}, g_on_f32{0};

}  // namespace

void count_half_matmul(bool on_bf16_dot) { (on_bf16_dot ? g_on_bf16_dot : g_on_f32).fetch_add(1, std::memory_order_relaxed); }

std::string describe_bf16_dot() {
  if (!bf16_dot_usable(IsaLevel::kAvx512)) return "not used (no AVX512_BF16 on this CPU)";
  const char* policy = bf16_dot_policy() == Bf16DotPolicy::kOff   ? "off"
                       : bf16_dot_policy() == Bf16DotPolicy::kAll ? "all (f16 weights rounded to bf16)"
                                                                  : "auto (bf16 weights)";
  const int64_t on = g_on_bf16_dot.load(), off = g_on_f32.load();
  return fmt::format("RLX_CPU_BF16_DOT={}: {} of {} matmuls of {}+ rows over f16/bf16 weights ran on vdpbf16ps", policy,
                     on, on + off, kBf16DotMinRows);
}

Bf16DotPolicy bf16_dot_policy() {
  static const Bf16DotPolicy policy = [] {
    const std::string& v = env_config().cpu_bf16_dot;
    if (v == "off") return Bf16DotPolicy::kOff;
    if (v == "all") return Bf16DotPolicy::kAll;
    return Bf16DotPolicy::kBf16;
  }();
  return policy;
}

bool bf16_dot_usable(IsaLevel isa) {
  // AMX hosts run these matmuls on the tiles (amx_matmul.h) unless RLX_CPU_ISA caps them.
  return resolve_isa(isa) == IsaLevel::kAvx512 && cpu_features().avx512bf16;
}

bool bf16_dot_takes_unpacked(IsaLevel isa, Bf16DotPolicy policy, int64_t m, WeightType b_type) {
  if (policy == Bf16DotPolicy::kOff || m < kBf16DotMinRows || !bf16_dot_usable(isa)) return false;
  return b_type == WeightType::kBF16 || (b_type == WeightType::kF16 && policy == Bf16DotPolicy::kAll);
}

bool bf16_dot_takes(IsaLevel isa, Bf16DotPolicy policy, int64_t m, const PackedB& b) {
  return b.nr() == 32 && b.isa() >= IsaLevel::kAvx512 && bf16_dot_takes_unpacked(isa, policy, m, b.type());
}

}  // namespace rlx::cpu

#if defined(__x86_64__)

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"  // gcc 12's _mm512_undefined_* in the masked intrinsics
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")

namespace rlx::cpu {
namespace {

// Rows [0, rows) of x (lda apart, k columns) -> row tiles [tiles][pairs][kMr] of bf16
// pairs; rows past `rows` (up to the last tile) and the odd pair's second half are zero.
void convert_rows(const KernelContext& ctx, const float* x, int64_t lda, int64_t rows, int64_t k, int64_t pairs,
                  uint32_t* tiles) {
  const int64_t n_tiles = ceil_div(rows, kMr);
  parallel_for(ctx, n_tiles, [&](int64_t t) {
    uint32_t* tile = tiles + t * pairs * kMr;
    auto* row_pairs = static_cast<uint32_t*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(pairs) * 4));
    for (int r = 0; r < kMr; ++r) {
      const int64_t row = t * kMr + r;
      if (row >= rows) {
        for (int64_t p = 0; p < pairs; ++p) tile[p * kMr + r] = 0;
        continue;
      }
      const float* src = x + row * lda;
      int64_t i = 0;
      for (; i + 32 <= k; i += 32) {
        const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        _mm512_storeu_si512(row_pairs + i / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
      if (i < k) {
        const int64_t left = k - i;  // 1..31
        const __mmask16 mlo = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
        const __mmask16 mhi = static_cast<__mmask16>(left > 16 ? (1u << (left - 16)) - 1 : 0);
        const __m512 lo = _mm512_maskz_loadu_ps(mlo, src + i), hi = _mm512_maskz_loadu_ps(mhi, src + i + 16);
        const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        const auto m_words = static_cast<__mmask16>((1u << ceil_div(left, 2)) - 1);
        _mm512_mask_storeu_epi32(row_pairs + i / 2, m_words, words);
      }
      for (int64_t p = 0; p < pairs; ++p) tile[p * kMr + r] = row_pairs[p];
    }
  });
}

// Pair-interleave indices: out[2c] = row k's column c, out[2c + 1] = row k + 1's column c,
// for columns 0-15 (kLo) or 16-31 (kHi) of two 32-column rows of bf16.
const __m512i& pair_index(bool high) {
  static const __m512i lo = [] {
    alignas(64) uint16_t v[32];
    for (int j = 0; j < 32; ++j) v[j] = static_cast<uint16_t>((j % 2) * 32 + j / 2);
    return _mm512_load_si512(v);
  }();
  static const __m512i hi = [] {
    alignas(64) uint16_t v[32];
    for (int j = 0; j < 32; ++j) v[j] = static_cast<uint16_t>((j % 2) * 32 + 16 + j / 2);
    return _mm512_load_si512(v);
  }();
  return high ? hi : lo;
}

// One 32-column row of a panel as 32 bf16 (f16 rounded to nearest even).
inline __m512i panel_row_bf16(const uint16_t* row, WeightType type) {
  const __m512i raw = _mm512_load_si512(row);
  if (type == WeightType::kBF16) return raw;
  const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
  const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(raw, 1));
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Pairs [p0, p0 + np) of a panel ([K][32] f16 / bf16) -> out [np][64] bf16: columns 0-15
// then 16-31, each column's pair (w[2p], w[2p+1]) adjacent. Row K (odd K) is zero.
void convert_panel(const uint16_t* panel, WeightType type, int64_t k, int64_t p0, int64_t np, uint16_t* out) {
  const __m512i idx_lo = pair_index(false), idx_hi = pair_index(true);
  for (int64_t i = 0; i < np; ++i) {
    const int64_t k0 = 2 * (p0 + i);
    const __m512i r0 = panel_row_bf16(panel + k0 * 32, type);
    const __m512i r1 = k0 + 1 < k ? panel_row_bf16(panel + (k0 + 1) * 32, type) : _mm512_setzero_si512();
    _mm512_store_si512(out + i * 64, _mm512_permutex2var_epi16(r0, idx_lo, r1));
    _mm512_store_si512(out + i * 64 + 32, _mm512_permutex2var_epi16(r0, idx_hi, r1));
  }
}

// acc[kMr][32] (+)= tile rows x weight pairs over np pairs.
void dot_tile(const uint32_t* tile, const uint16_t* w, int64_t np, float* acc, bool first) {
  __m512 c[kMr][2];
  if (first) {
#pragma GCC unroll 14
    for (int r = 0; r < kMr; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  } else {
#pragma GCC unroll 14
    for (int r = 0; r < kMr; ++r) {
      c[r][0] = _mm512_load_ps(acc + r * 32);
      c[r][1] = _mm512_load_ps(acc + r * 32 + 16);
    }
  }
  for (int64_t p = 0; p < np; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(w + p * 64);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(w + p * 64 + 32);
    const uint32_t* a = tile + p * kMr;
#pragma GCC unroll 14
    for (int r = 0; r < kMr; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
      c[r][0] = _mm512_dpbf16_ps(c[r][0], x, b0);
      c[r][1] = _mm512_dpbf16_ps(c[r][1], x, b1);
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < kMr; ++r) {
    _mm512_store_ps(acc + r * 32, c[r][0]);
    _mm512_store_ps(acc + r * 32 + 16, c[r][1]);
  }
}

}  // namespace

void bf16_dot_gemm_prepacked(const KernelContext& ctx, const GemmParams& p, const float* a, const PackedB& b,
                             float* c) {
  RLX_ASSERT(bf16_dot_usable(ctx.isa) && b.nr() == 32 && p.k == b.k() && p.n == b.n() &&
             (b.type() == WeightType::kF16 || b.type() == WeightType::kBF16));
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return;
  const int64_t pairs = ceil_div(p.k, 2);
  const int64_t n_panels = ceil_div(p.n, 32);
  const size_t panel_elems = static_cast<size_t>(p.k) * 32;
  const auto& epilogue_row = detail::isa_kernels(IsaLevel::kAvx512).epilogue_row;
  const int64_t pass_rows = std::min(p.m, kBf16DotRowsPerPass);
  auto* tiles = static_cast<uint32_t*>(thread_scratch(
      ScratchSlot::kShared, static_cast<size_t>(ceil_div(pass_rows, kMr) * kMr * pairs) * sizeof(uint32_t)));
  for (int64_t r0 = 0; r0 < p.m; r0 += kBf16DotRowsPerPass) {
    const int64_t rows = std::min(kBf16DotRowsPerPass, p.m - r0);
    const int64_t n_tiles = ceil_div(rows, kMr);
    convert_rows(ctx, a + r0 * p.lda, p.lda, rows, p.k, pairs, tiles);
    parallel_for(ctx, n_panels, [&](int64_t panel) {
      const int64_t n0 = panel * 32, ncols = std::min<int64_t>(32, p.n - n0);
      const auto* src = reinterpret_cast<const uint16_t*>(b.data()) + static_cast<size_t>(panel) * panel_elems;
      const int64_t chunk = std::min(kChunkPairs, pairs);
      auto* w = static_cast<uint16_t*>(thread_scratch(ScratchSlot::kPackB, static_cast<size_t>(chunk) * 64 * 2));
      auto* acc = static_cast<float*>(
          thread_scratch(ScratchSlot::kPackA, static_cast<size_t>(n_tiles * kMr * 32) * sizeof(float)));
      for (int64_t p0 = 0; p0 < pairs; p0 += chunk) {
        const int64_t np = std::min(chunk, pairs - p0);
        convert_panel(src, b.type(), p.k, p0, np, w);
        for (int64_t t = 0; t < n_tiles; ++t)
          dot_tile(tiles + (t * pairs + p0) * kMr, w, np, acc + t * kMr * 32, p0 == 0);
      }
      for (int64_t r = 0; r < rows; ++r)
        epilogue_row(acc + r * 32, p.bias ? p.bias + n0 : nullptr, p.act, p.beta, c + (r0 + r) * p.ldc + n0,
                     ncols);
    });
  }
}

void bf16_dot_probe(int64_t iters) {
  RLX_ASSERT(bf16_dot_usable(IsaLevel::kAvx512));
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), w = (__m512bh)_mm512_set1_epi16(0x3f7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, w);
    asm volatile("" : "+v"(x));  // keeps the chains in registers, one round at a time
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float keep = _mm512_reduce_add_ps(s);
  (void)keep;
}

}  // namespace rlx::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

#else  // not x86-64: bf16_dot_usable() is false, so these are never entered.

namespace rlx::cpu {
void bf16_dot_gemm_prepacked(const KernelContext&, const GemmParams&, const float*, const PackedB&, float*) {
  RLX_ASSERT(false);
}
void bf16_dot_probe(int64_t) { RLX_ASSERT(false); }
}  // namespace rlx::cpu

#endif
