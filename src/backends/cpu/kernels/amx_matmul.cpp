// AMX build of the many-row matmuls (amx_matmul.h). Function-level target pragma, so the
// binary runs on any x86-64; only entered when cpu_features() reports usable AMX-BF16 and
// AMX-INT8 tiles (Linux granted XTILEDATA), AVX-512 BF16 and VNNI (IsaLevel::kAmx).
//
// One pass covers <= kAmxRowsPerPass rows of x; tasks are chunks of output columns, and
// per K block (<= kKc) a task decodes its chunk of W once into the tiles' layout.
// - f16 / bf16 pre-packed weights (amx_gemm_prepacked), BF16 tiles: x -> bf16 high and
//   low parts in tile order (row block of 16, K step of 32, 1 KiB tiles); W -> 1 KiB B
//   tiles whose row p holds, for 16 columns, the pairs (w[2p], w[2p+1]) TDPBF16PS takes
//   (and the low parts for f16); 32 x 32 blocks C0..C3 (tmm0-3) += A (tmm4-5) x B
//   (tmm6-7) over 256-wide K slices, f32 sums [m_pad][nc] between slices; epilogue
//   act(acc + bias) + beta * C into the caller's rows (AVX-512 table).
// - GGUF weights (amx_dequant_matmul), INT8 tiles: see the section below.
#include "backends/cpu/kernels/amx_matmul.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/env.h"
#include "rlx/formats/quant.h"
#include "rlx/formats/quant_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rlx::cpu {
namespace {

constexpr int64_t kKc = 2048;          // K block of one decoded B chunk (a multiple of 256)
// K slice of the tile loop: 32 A rows of it, high and low parts, are 32 KiB, which stay
// in L1 while the B tiles of the slice stream past. H200 host, 2 threads,
// BM_HalfGemm f16 256 / 512 x 2048 x 8192: slice 512 17.5 / 28.8 ms, 256 14.4 / 26.0,
// 128 16.9 / 36.6, 64 23.6 / 60.2.
constexpr int64_t kKSlice = 256;
constexpr size_t kChunkBytes = 1 << 20;  // decoded B chunk target (in L2)
constexpr int64_t kTileElems = 512;    // bf16 elements of one tile (16 rows x 64 bytes)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
size_t align64(size_t v) { return (v + 63) / 64 * 64; }

int amx_group_size(formats::GgmlType t) { return t == formats::GgmlType::Q6_K ? 16 : 32; }

// Q4_K / Q5_K run the superblock-sum loop (see its section below).
bool uses_split_sums(formats::GgmlType t) { return t == formats::GgmlType::Q4_K || t == formats::GgmlType::Q5_K; }

size_t a_plane_bytes(int64_t m, int64_t k) {
  return align64(static_cast<size_t>(round_up(std::min(m, kAmxRowsPerPass), 32)) *
                 static_cast<size_t>(round_up(k, 32)) * sizeof(uint16_t));
}

}  // namespace

bool amx_enabled(IsaLevel isa) { return resolve_isa(isa) == IsaLevel::kAmx; }

int64_t amx_min_rows() { return env_config().cpu_amx_min_rows; }

bool amx_supports(formats::GgmlType type) {
  switch (type) {
    case formats::GgmlType::Q4_0:
    case formats::GgmlType::Q5_0:
    case formats::GgmlType::Q8_0:
    case formats::GgmlType::Q4_K:
    case formats::GgmlType::Q5_K:
    case formats::GgmlType::Q6_K: return true;
    default: return false;
  }
}

size_t amx_dequant_scratch_bytes(formats::GgmlType type, int64_t m, int64_t k) {
  if (m <= 0 || k <= 0 || !amx_supports(type)) return 0;
  const int64_t rows = round_up(std::min(m, kAmxRowsPerPass), 16);
  const int64_t groups = k / amx_group_size(type);
  // A tiles, per row and tile step the activation scale, for Q4_K / Q5_K the group-sum pairs.
  const size_t pairs = uses_split_sums(type) ? align64(static_cast<size_t>(rows * (k / 256) * 4) * 4) : 0;
  return 64 + align64(static_cast<size_t>(rows * k)) + align64(static_cast<size_t>(rows * groups) * sizeof(float)) +
         pairs;
}

}  // namespace rlx::cpu

#if defined(__x86_64__)

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,amx-tile,amx-bf16,amx-int8")

namespace rlx::cpu {
namespace {

// Palette 1, all eight tiles 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Loads the tile configuration (all eight tiles 16 rows x 64 bytes: the BF16 loops and
// the Q4_K / Q5_K int8 loop) on the calling thread and releases it on scope exit.
class TileScope {
 public:
  TileScope() {
    TileConfig cfg;
    for (int i = 0; i < 8; ++i) {
      cfg.colsb[i] = 64;
      cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

inline __m256i to_bf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
inline __m512 bf16_to_f32(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// A operand: rows [0, rows) of x -> the bf16 high parts and the bf16-rounded remainders
// x - high, in tile order: row block of 16 rows, then K step of 32, then one 1 KiB tile
// (16 rows of 64 bytes), so every tile load is contiguous (rows k_pad apart would all
// fall in one L1 set). Zero past k and for the rows up to rows_pad.
void convert_rows(const KernelContext& ctx, const float* x, int64_t lda, int64_t rows, int64_t rows_pad, int64_t k,
                  int64_t k_pad, uint16_t* hi, uint16_t* lo) {
  const int64_t steps = k_pad / 32;
  parallel_for(ctx, rows_pad, [&](int64_t r) {
    const int64_t base = (r / 16) * steps * kTileElems + (r % 16) * 32;
    if (r >= rows) {
      for (int64_t s = 0; s < steps; ++s) {
        std::memset(hi + base + s * kTileElems, 0, 64);
        std::memset(lo + base + s * kTileElems, 0, 64);
      }
      return;
    }
    const float* src = x + r * lda;
    for (int64_t i = 0; i < k_pad; i += 16) {
      const int64_t left = k - i;
      const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(mask, src + i);
      const __m256i vh = to_bf16(v);
      const int64_t at = base + (i / 32) * kTileElems + i % 32;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + at), vh);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + at), to_bf16(_mm512_sub_ps(v, bf16_to_f32(vh))));
    }
  });
}

#include "backends/cpu/kernels/transpose16_avx512.inc"

inline __m512 load16(const uint8_t* panel, WeightType wt, int64_t index) {
  switch (wt) {
    case WeightType::kF32: return _mm512_loadu_ps(reinterpret_cast<const float*>(panel) + index);
    case WeightType::kF16:
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + index * 2)));
    case WeightType::kBF16:
      return bf16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + index * 2)));
  }
  return _mm512_setzero_ps();
}

// B tiles of the 16 columns n0..n0+15 from a pack_b panel [k][32] (column n0 % 32 on):
// K range [k0, k0 + kpad) (zero past k). `lo` (may be null) gets w - bf16(w) in bf16.
void fill_panel_tiles(const uint8_t* panel, WeightType wt, int64_t k, int64_t col, int64_t k0, int64_t kpad,
                      uint16_t* hi, uint16_t* lo) {
  // Lane 2j <- element j (first row of the pair), lane 2j + 1 <- element 16 + j (second row).
  alignas(64) static constexpr int16_t kInterleave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                          8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int64_t s = 0; s < kpad / 32; ++s) {
    for (int p = 0; p < 16; ++p) {
      const int64_t kk = k0 + s * 32 + 2 * p;
      const __m512 r0 = kk < k ? load16(panel, wt, kk * 32 + col) : _mm512_setzero_ps();
      const __m512 r1 = kk + 1 < k ? load16(panel, wt, (kk + 1) * 32 + col) : _mm512_setzero_ps();
      const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(r1, r0);
      const int64_t at = s * kTileElems + p * 32;
      _mm512_storeu_si512(hi + at, _mm512_permutexvar_epi16(idx, h));
      if (lo != nullptr) {
        const __m512 l0 = _mm512_sub_ps(r0, bf16_to_f32(_mm512_castsi512_si256(h)));
        const __m512 l1 = _mm512_sub_ps(r1, bf16_to_f32(_mm512_extracti64x4_epi64(h, 1)));
        _mm512_storeu_si512(lo + at, _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(l1, l0)));
      }
    }
  }
}

// C[32 x 32] (acc, row stride acc_ld floats) += A[32 x 32*steps] · B over `steps` K steps
// of 32. a_hi / a_lo: the first tile of the upper 16 rows (tiles of one row block are
// consecutive; the lower 16 rows' tiles start a_rb elements on); b*: the first tile of
// the two column blocks (consecutive as well). Always adds a_lo·b_hi; kLoB: a_hi·b_lo too.
// C0..C3 += the 2 x 2 products of the A tiles in tmm4-5 and the B tiles in tmm6-7.
inline void dp_bf16_2x2() {
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

template <bool kLoB>
void tile_block(const uint16_t* a_hi, const uint16_t* a_lo, int64_t a_rb, const uint16_t* b0, const uint16_t* b1,
                const uint16_t* b0_lo, const uint16_t* b1_lo, int64_t steps, float* acc, int64_t acc_ld, bool first) {
  const int64_t c_stride = acc_ld * 4;
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, acc, c_stride);
    _tile_loadd(1, acc + 16, c_stride);
    _tile_loadd(2, acc + 16 * acc_ld, c_stride);
    _tile_loadd(3, acc + 16 * acc_ld + 16, c_stride);
  }
  // Per K step the products hi·lo, hi·hi, lo·hi: each shares a loaded pair with the
  // one before, 8 tile loads for 12 products (kLoB).
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t kb = s * kTileElems;
    _tile_loadd(4, a_hi + kb, 64);
    _tile_loadd(5, a_hi + a_rb + kb, 64);
    if constexpr (kLoB) {
      _tile_loadd(6, b0_lo + kb, 64);
      _tile_loadd(7, b1_lo + kb, 64);
      dp_bf16_2x2();
    }
    _tile_loadd(6, b0 + kb, 64);
    _tile_loadd(7, b1 + kb, 64);
    dp_bf16_2x2();
    _tile_loadd(4, a_lo + kb, 64);
    _tile_loadd(5, a_lo + a_rb + kb, 64);
    dp_bf16_2x2();
  }
  _tile_stored(0, acc, c_stride);
  _tile_stored(1, acc + 16, c_stride);
  _tile_stored(2, acc + 16 * acc_ld, c_stride);
  _tile_stored(3, acc + 16 * acc_ld + 16, c_stride);
}

struct Epilogue {
  const float* bias = nullptr;
  Activation act = Activation::kIdentity;
  float beta = 0.0f;
};

// One pass: m rows (at most kAmxRowsPerPass) of A already in tiles, n columns, K of k.
// `fill` writes the B tiles of 16 columns: fill(n0, k0, kpad, hi, lo).
template <bool kLoB, typename Fill>
void run_pass(const KernelContext& ctx, int64_t m, int64_t n, int64_t k, const uint16_t* a_hi, const uint16_t* a_lo,
              Fill&& fill, const Epilogue& ep, float* y, int64_t ldc) {
  const int64_t k_pad = round_up(k, 32), m_pad = round_up(m, 32), a_steps = k_pad / 32;
  const int64_t kc = std::min(kKc, k_pad);
  const size_t planes_b = kLoB ? 2 : 1;
  int64_t nc = static_cast<int64_t>(kChunkBytes / (static_cast<size_t>(kc) * 2 * planes_b)) / 32 * 32;
  nc = std::clamp<int64_t>(nc, 32, 256);
  nc = std::min(nc, round_up(n, 32));
  const int threads = ctx.n_threads();
  while (nc > 32 && ceil_div(n, nc) < 2 * threads) nc = round_up(nc / 2, 32);
  const int64_t tasks = ceil_div(n, nc);
  const auto& epilogue_row = detail::isa_kernels(IsaLevel::kAvx512).epilogue_row;
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t n0 = t * nc, ncols = std::min(nc, n - n0);
    const int64_t blocks = round_up(ncols, 32) / 16;  // 16-column blocks, even
    auto* btiles = static_cast<uint16_t*>(
        thread_scratch(ScratchSlot::kPackB, static_cast<size_t>(blocks * 16 * kc) * 2 * planes_b));
    uint16_t* btiles_lo = kLoB ? btiles + blocks * 16 * kc : nullptr;
    auto* acc = static_cast<float*>(thread_scratch(ScratchSlot::kPackA, static_cast<size_t>(m_pad * nc) * 4));
    TileScope tiles;
    for (int64_t k0 = 0; k0 < k_pad; k0 += kc) {
      const int64_t kcur = std::min(kc, k_pad - k0), steps = kcur / 32;
      for (int64_t b = 0; b < blocks; ++b)
        fill(n0 + b * 16, k0, kcur, btiles + b * steps * kTileElems,
             kLoB ? btiles_lo + b * steps * kTileElems : nullptr);
      for (int64_t r0 = 0; r0 < m_pad; r0 += 32) {
        for (int64_t ks = 0; ks < kcur; ks += kKSlice) {
          const int64_t slice_steps = std::min(kKSlice, kcur - ks) / 32;
          const int64_t a_off = (r0 / 16) * a_steps * kTileElems + ((k0 + ks) / 32) * kTileElems;
          for (int64_t b = 0; b < blocks; b += 2) {
            const int64_t tb0 = b * steps * kTileElems + (ks / 32) * kTileElems;
            const int64_t tb1 = tb0 + steps * kTileElems;
            tile_block<kLoB>(a_hi + a_off, a_lo + a_off, a_steps * kTileElems, btiles + tb0, btiles + tb1,
                             kLoB ? btiles_lo + tb0 : nullptr, kLoB ? btiles_lo + tb1 : nullptr, slice_steps,
                             acc + r0 * nc + b * 16, nc, k0 == 0 && ks == 0);
          }
        }
      }
    }
    for (int64_t r = 0; r < m; ++r)
      epilogue_row(acc + r * nc, ep.bias ? ep.bias + n0 : nullptr, ep.act, ep.beta, y + r * ldc + n0, ncols);
  });
}

// ---------------------------------------------------------------- int8 tiles (GGUF weights)
// Quantized weights keep llama.cpp's integer sums: x as its 8-bit activation blocks
// (Q8_0 / Q8_K, made by dequant_matmul), W as its integer quants. Q8_0, Q4_0, Q5_0 and
// Q6_K: TDPBSSD per scale group (32 or 16 elements) into an int32 tile, then in f32
//   Q8_0 x:  acc += float(sum) * (d_x * w_scale)            per group
//   Q8_K x:  part += float(sum) * w_scale per group, acc += part * d_x per 256.
// Q4_K / Q5_K fold their integer group scales into the weights and sum whole superblocks
// (the section after this one).

using formats::GgmlType;

int group_size(GgmlType t) { return amx_group_size(t); }

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// One weight row's K range [k0, k0 + kc) (src at the block holding k0) -> int8 quants q
// and per group scale ws (w = ws * q): Q8_0, Q4_0, Q5_0, Q6_K.
void decode_weight_groups(GgmlType t, const uint8_t* src, int64_t kc, int8_t* q, float* ws) {
  switch (t) {
    case GgmlType::Q8_0: {
      const auto* b = reinterpret_cast<const formats::BlockQ8_0*>(src);
      for (int64_t i = 0; i < kc / 32; ++i) {
        std::memcpy(q + i * 32, b[i].qs, 32);
        ws[i] = f16(b[i].d);
      }
      return;
    }
    case GgmlType::Q4_0: {
      const auto* b = reinterpret_cast<const formats::BlockQ4_0*>(src);
      for (int64_t i = 0; i < kc / 32; ++i) {
        for (int l = 0; l < 16; ++l) {
          q[i * 32 + l] = static_cast<int8_t>((b[i].qs[l] & 15) - 8);
          q[i * 32 + l + 16] = static_cast<int8_t>((b[i].qs[l] >> 4) - 8);
        }
        ws[i] = f16(b[i].d);
      }
      return;
    }
    case GgmlType::Q5_0: {
      const auto* b = reinterpret_cast<const formats::BlockQ5_0*>(src);
      for (int64_t i = 0; i < kc / 32; ++i) {
        uint32_t qh;
        std::memcpy(&qh, b[i].qh, 4);
        for (int l = 0; l < 16; ++l) {
          q[i * 32 + l] = static_cast<int8_t>(((b[i].qs[l] & 15) | (((qh >> l) & 1) << 4)) - 16);
          q[i * 32 + l + 16] = static_cast<int8_t>(((b[i].qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4)) - 16);
        }
        ws[i] = f16(b[i].d);
      }
      return;
    }
    case GgmlType::Q6_K: {
      const auto* b = reinterpret_cast<const formats::BlockQ6_K*>(src);
      for (int64_t i = 0; i < kc / 256; ++i) {
        const float d = f16(b[i].d);
        for (int j = 0; j < 16; ++j) ws[i * 16 + j] = d * static_cast<float>(b[i].scales[j]);
        for (int half = 0; half < 2; ++half) {
          const uint8_t* ql = b[i].ql + half * 64;
          const uint8_t* qh = b[i].qh + half * 32;
          int8_t* out = q + i * 256 + half * 128;
          for (int l = 0; l < 32; ++l) {
            out[l] = static_cast<int8_t>(((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32);
            out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
            out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
          }
        }
      }
      return;
    }
    default: RLX_ASSERT(false);
  }
}

// B of 16 weight rows (output columns n0.., zero past n) over [k0, k0 + kc): int8 tiles
// in TDPBSSD's layout (tile row p: 4 consecutive K quants of each column), K steps of 64
// one after the other (group j's tile at j * g * 16 bytes), per group the 16 columns'
// scales ws[j][16].
void fill_int8_tiles(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t n, int64_t n0, int64_t k0, int64_t kc,
                     int8_t* rows, float* row_ws, int8_t* tiles, float* ws) {
  const int g = group_size(t);
  const int64_t groups = kc / g;
  const int64_t block = formats::ggml_block_size(t);
  const size_t block_bytes = formats::ggml_block_bytes(t);
  for (int j = 0; j < 16; ++j) {
    int8_t* q = rows + j * kc;
    if (n0 + j < n) {
      const uint8_t* src = w + static_cast<size_t>(n0 + j) * row_bytes + static_cast<size_t>(k0 / block) * block_bytes;
      decode_weight_groups(t, src, kc, q, row_ws + j * groups);
    } else {
      std::memset(q, 0, static_cast<size_t>(kc));
      for (int64_t i = 0; i < groups; ++i) row_ws[j * groups + i] = 0.0f;
    }
  }
  for (int64_t i = 0; i < groups; ++i)
    for (int j = 0; j < 16; ++j) ws[i * 16 + j] = row_ws[j * groups + i];
  for (int64_t s = 0; s < kc / 64; ++s) {
    __m512i r[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(rows + j * kc + s * 64);
    transpose16(r);
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(tiles + s * 1024 + p * 64, r[p]);
  }
}

// A of one pass: rows of 8-bit activation blocks (Q8_0 or Q8_K, a_row_bytes apart) ->
// int8 tiles of K width tile_k (the group size, or 64 for Q4_K / Q5_K): row block of 16,
// step j (16 rows of tile_k quants) at (rb * steps + j) * 16 * tile_k, and per row and
// step the activation scale dx[rb][j][16]. For Q4_K / Q5_K (bsp not null) also, per row
// and superblock, the quant sums of its groups of 32 as int16 pairs (groups 2p, 2p + 1)
// bsp[rb][superblock][p][16], for the min terms.
void convert_int8_rows(const KernelContext& ctx, GgmlType t, const uint8_t* act, size_t a_row_bytes, int64_t rows,
                       int64_t rows_pad, int64_t k, int tile_k, int8_t* tiles, float* dx, int32_t* bsp) {
  const int64_t steps = k / tile_k, superblocks = k / 256;
  const bool k_act = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
  RLX_ASSERT(k_act || tile_k == 32);
  parallel_for(ctx, rows_pad, [&](int64_t r) {
    const int64_t rb = r / 16, rr = r % 16;
    const uint8_t* row = r < rows ? act + static_cast<size_t>(r) * a_row_bytes : nullptr;
    for (int64_t j = 0; j < steps; ++j) {
      int8_t* dst = tiles + ((rb * steps + j) * 16 + rr) * tile_k;
      float& d = dx[(rb * steps + j) * 16 + rr];
      if (row == nullptr) {
        std::memset(dst, 0, static_cast<size_t>(tile_k));
        d = 0.0f;
      } else if (k_act) {
        const auto* b = reinterpret_cast<const formats::BlockQ8_K*>(row) + (j * tile_k) / 256;
        std::memcpy(dst, b->qs + (j * tile_k) % 256, static_cast<size_t>(tile_k));
        d = b->d;
      } else {
        const auto* b = reinterpret_cast<const formats::BlockQ8_0*>(row) + j;
        std::memcpy(dst, b->qs, 32);
        d = f16(b->d);
      }
    }
    if (bsp == nullptr) return;
    for (int64_t sb = 0; sb < superblocks; ++sb)
      for (int p = 0; p < 4; ++p) {
        uint32_t pair = 0;
        if (row != nullptr) {
          const int16_t* bs = (reinterpret_cast<const formats::BlockQ8_K*>(row) + sb)->bsums + 4 * p;
          const auto lo = static_cast<uint16_t>(bs[0] + bs[1]), hi = static_cast<uint16_t>(bs[2] + bs[3]);
          pair = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
        }
        bsp[((rb * superblocks + sb) * 4 + p) * 16 + rr] = static_cast<int32_t>(pair);
      }
  });
}

// One output tile (16 rows x 16 columns) over `groups` groups, added into out (row
// stride out_ld floats; written, not added, when !accumulate). a: the row block's first
// group tile; b: the column block's tiles; dx: the row block's per-group activation
// scales; ws: the column block's per-group weight scales. kShare groups in a row share
// one activation scale (Q8_K: a block of 256): their sums take the weight scales only
// and the activation scale once per block.
template <int kG, int kShare>
inline void int8_tile(const int8_t* a, const int8_t* b, const float* dx, const float* ws, int64_t groups, float* out,
                      int64_t out_ld, bool accumulate, int32_t* buf0, int32_t* buf1) {
  constexpr int kATile = 16 * kG, kBTile = kG * 16;
  __m512 part[16];
  for (auto& v : part) v = _mm512_setzero_ps();
  bool written = accumulate;
  auto flush = [&](int64_t j) {  // out += part * dx (of group j), part = 0
    const float* dxj = dx + j * 16;
    for (int r = 0; r < 16; ++r) {
      float* o = out + r * out_ld;
      const __m512 base = written ? _mm512_loadu_ps(o) : _mm512_setzero_ps();
      if constexpr (kShare == 1) {
        _mm512_storeu_ps(o, _mm512_add_ps(base, part[r]));
      } else {
        _mm512_storeu_ps(o, _mm512_fmadd_ps(part[r], _mm512_set1_ps(dxj[r]), base));
      }
      part[r] = _mm512_setzero_ps();
    }
    written = true;
  };
  auto epilogue = [&](const int32_t* buf, int64_t j) {
    const __m512 scale = _mm512_loadu_ps(ws + j * 16);
    if constexpr (kShare == 1) {
      const float* dxj = dx + j * 16;
      for (int r = 0; r < 16; ++r) {
        const __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(buf + r * 16));
        part[r] = _mm512_fmadd_ps(v, _mm512_mul_ps(scale, _mm512_set1_ps(dxj[r])), part[r]);
      }
    } else {
      for (int r = 0; r < 16; ++r)
        part[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(buf + r * 16)), scale, part[r]);
      if ((j + 1) % kShare == 0) flush(j);
    }
  };
  // Software pipeline over the groups (an even count: k is a multiple of 64): group j
  // sums in tile j % 2; its tile is stored while group j + 1 computes, refilled with
  // group j + 2, and its buffer read one group later (the epilogue of j - 1 runs between
  // a tile store and the loads of what it stored).
  _tile_zero(0);
  _tile_loadd(2, a, kG);
  _tile_loadd(4, b, 64);
  _tile_dpbssd(0, 2, 4);
  _tile_zero(1);
  _tile_loadd(3, a + kATile, kG);
  _tile_loadd(5, b + kBTile, 64);
  _tile_dpbssd(1, 3, 5);
  for (int64_t j = 0; j < groups; j += 2) {
    _tile_stored(0, buf0, 64);
    if (j + 2 < groups) {
      _tile_zero(0);
      _tile_loadd(2, a + (j + 2) * kATile, kG);
      _tile_loadd(4, b + (j + 2) * kBTile, 64);
      _tile_dpbssd(0, 2, 4);
    }
    if (j > 0) epilogue(buf1, j - 1);
    _tile_stored(1, buf1, 64);
    if (j + 3 < groups) {
      _tile_zero(1);
      _tile_loadd(3, a + (j + 3) * kATile, kG);
      _tile_loadd(5, b + (j + 3) * kBTile, 64);
      _tile_dpbssd(1, 3, 5);
    }
    epilogue(buf0, j);
  }
  epilogue(buf1, groups - 1);
  if constexpr (kShare == 1) flush(groups - 1);
}

// Palette 1: tiles 0-1 the int32 sums (16 x 16), 2-3 activation quants (16 rows x g),
// 4-5 weight quants (g / 4 rows x 64 bytes).
class Int8TileScope {
 public:
  explicit Int8TileScope(int g) {
    TileConfig cfg;
    for (int i = 0; i < 2; ++i) {
      cfg.colsb[i] = 64;
      cfg.rows[i] = 16;
      cfg.colsb[2 + i] = static_cast<uint16_t>(g);
      cfg.rows[2 + i] = 16;
      cfg.colsb[4 + i] = 64;
      cfg.rows[4 + i] = static_cast<uint8_t>(g / 4);
    }
    _tile_loadconfig(&cfg);
  }
  ~Int8TileScope() { _tile_release(); }
  Int8TileScope(const Int8TileScope&) = delete;
  Int8TileScope& operator=(const Int8TileScope&) = delete;
};

// One pass of at most kAmxRowsPerPass rows: y = x · Wᵀ + bias (Q8_0, Q4_0, Q5_0, Q6_K).
template <int kG, int kShare>
void run_int8_pass(const KernelContext& ctx, GgmlType t, int64_t m, int64_t n, int64_t k, const int8_t* a_tiles,
                   const float* dx, const uint8_t* w, size_t row_bytes, const float* bias, float* y, int64_t ldc) {
  const int64_t m_pad = round_up(m, 16), kc = std::min(kKc, k);
  const int64_t a_groups = k / kG;
  int64_t nc = 256;
  nc = std::min(nc, round_up(n, 16));
  const int threads = ctx.n_threads();
  while (nc > 16 && ceil_div(n, nc) < 2 * threads) nc = round_up(nc / 2, 16);
  const int64_t tasks = ceil_div(n, nc);
  parallel_for(ctx, tasks, [&](int64_t task) {
    const int64_t n0 = task * nc, ncols = std::min(nc, n - n0);
    const int64_t blocks = ceil_div(ncols, 16);
    const int64_t kgroups = kc / kG;
    // Thread scratch: B tiles + per-group scales of the chunk, the decode rows and
    // their scales, the f32 sums of the chunk, two int32 tile buffers.
    const size_t tiles_bytes = static_cast<size_t>(blocks * 16 * kc);
    const size_t vec_bytes = static_cast<size_t>(blocks * kgroups * 16) * sizeof(float);
    const size_t rows_bytes = static_cast<size_t>(16 * kc) + static_cast<size_t>(16 * kgroups) * sizeof(float);
    auto* bt = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kPackB, align64(tiles_bytes) + align64(vec_bytes)));
    auto* btiles = reinterpret_cast<int8_t*>(bt);
    auto* bws = reinterpret_cast<float*>(bt + align64(tiles_bytes));
    auto* tmp = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kTemp, rows_bytes + 2 * 1024 + 64));
    auto* rows = reinterpret_cast<int8_t*>(tmp);
    auto* row_ws = reinterpret_cast<float*>(tmp + 16 * kc);
    auto* buf0 = reinterpret_cast<int32_t*>((reinterpret_cast<uintptr_t>(tmp + rows_bytes) + 63) / 64 * 64);
    int32_t* buf1 = buf0 + 256;
    const int64_t acc_ld = blocks * 16;
    auto* acc_all = static_cast<float*>(thread_scratch(ScratchSlot::kPackA, static_cast<size_t>(m_pad * acc_ld) * 4));
    Int8TileScope tiles(kG);
    for (int64_t k0 = 0; k0 < k; k0 += kc) {
      const int64_t kcur = std::min(kc, k - k0), groups = kcur / kG, g0 = k0 / kG;
      for (int64_t b = 0; b < blocks; ++b)
        fill_int8_tiles(t, w, row_bytes, n, n0 + b * 16, k0, kcur, rows, row_ws, btiles + b * 16 * kc,
                        bws + b * kgroups * 16);
      for (int64_t rb = 0; rb < m_pad / 16; ++rb) {
        const int64_t at = rb * a_groups + g0;  // first group of this K block in the row block
        for (int64_t b = 0; b < blocks; ++b)
          int8_tile<kG, kShare>(a_tiles + at * 16 * kG, btiles + b * 16 * kc, dx + at * 16, bws + b * kgroups * 16,
                                groups, acc_all + rb * 16 * acc_ld + b * 16, acc_ld, k0 > 0, buf0, buf1);
      }
    }
    const auto& epilogue_row = detail::isa_kernels(IsaLevel::kAvx512).epilogue_row;
    for (int64_t r = 0; r < m; ++r)
      epilogue_row(acc_all + r * acc_ld, bias ? bias + n0 : nullptr, Activation::kIdentity, 0.0f, y + r * ldc + n0,
                   ncols);
  });
}

// ---------------------------------------------------------------- Q4_K / Q5_K: superblock sums
// A group's 6-bit scale sc splits into 8 * (sc >> 3) + (sc & 7), and a weight quant q
// (at most 31) times either part fits an unsigned byte (31 * 7 = 217). So W becomes two
// unsigned int8 planes, q * (sc >> 3) and q * (sc & 7), and TDPBSUD (signed x, unsigned
// W) over a whole superblock of 256 gives the two sums whose 8 * hi + lo is exactly the
// integer sum llama.cpp forms, Σ_j sc_j · (Σ x_q · q over group j). The min terms
// Σ_j m_j · (Σ x_q over group j) are integers as well: vpdpwssd of the 6-bit mins with the
// activations' group sums (Q8_K's bsums), per superblock. So the f32 step runs once per
// superblock (d_x · (d_w · sums − dmin_w · min sums)) instead of once per group of 32 plus
// an f32 GEMM for the mins, and every tile product spans the full K of 64 instead of 32.
// H200 host, 2 threads, BM_QPrefill Q4_K 512 x 2048 x 8192 (four alternated rounds, a
// loaded host): 25.0-29.4 ms with the per-group loop and min GEMM, 16.6-20.0 ms with this.

constexpr int64_t kSplitStepBytes = 2048;  // one K step of 64: the hi tile, then the lo tile
constexpr int64_t kSplitSuperBytes = 4 * kSplitStepBytes;

// One Q4_K / Q5_K weight row's K range [0, kc) (src at its first superblock) -> the
// planes hi / lo, per superblock d (dsb) and dmin (dmn), per group of 32 the min (mins).
void decode_split_row(GgmlType t, const uint8_t* src, int64_t kc, uint8_t* hi, uint8_t* lo, float* dsb, float* dmn,
                      uint8_t* mins) {
  const bool five = t == GgmlType::Q5_K;
  const size_t bytes = five ? sizeof(formats::BlockQ5_K) : sizeof(formats::BlockQ4_K);
  for (int64_t i = 0; i < kc / 256; ++i) {
    const uint8_t* blk = src + static_cast<size_t>(i) * bytes;
    uint16_t dh, mh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&mh, blk + 2, 2);
    dsb[i] = f16(dh);
    dmn[i] = f16(mh);
    const uint8_t* qh = five ? blk + 16 : nullptr;
    const uint8_t* ql = blk + (five ? 48 : 16);
    uint8_t sc[8];
    for (int j = 0; j < 8; ++j) formats::get_scale_min_k4(j, blk + 4, &sc[j], &mins[i * 8 + j]);
    for (int pair = 0; pair < 4; ++pair) {
      const uint8_t* qs = ql + pair * 32;
      const uint8_t h0 = sc[2 * pair] >> 3, l0 = sc[2 * pair] & 7;
      const uint8_t h1 = sc[2 * pair + 1] >> 3, l1 = sc[2 * pair + 1] & 7;
      uint8_t* oh = hi + i * 256 + pair * 64;
      uint8_t* ol = lo + i * 256 + pair * 64;
      for (int l = 0; l < 32; ++l) {
        int q0 = qs[l] & 15, q1 = qs[l] >> 4;
        if (five) {
          q0 |= ((qh[l] >> (2 * pair)) & 1) << 4;
          q1 |= ((qh[l] >> (2 * pair + 1)) & 1) << 4;
        }
        oh[l] = static_cast<uint8_t>(q0 * h0);
        ol[l] = static_cast<uint8_t>(q0 * l0);
        oh[32 + l] = static_cast<uint8_t>(q1 * h1);
        ol[32 + l] = static_cast<uint8_t>(q1 * l1);
      }
    }
  }
}

// Per superblock and column block, what the f32 step needs besides the tile sums.
struct SplitScales {
  float d[16];          // the columns' superblock scales
  float dmin[16];       // and min scales
  int32_t mins[4][16];  // group mins (m_2p, m_2p+1) as int16 pairs, for vpdpwssd
};
static_assert(sizeof(SplitScales) == 384);

// B of 16 weight rows (output columns n0.., zero past n) over [k0, k0 + kc): per K step
// of 64 the hi tile then the lo tile (TDPBSUD layout), so superblock s of the block starts
// at s * kSplitSuperBytes, and its SplitScales at scales[s]. rows: scratch of
// 2 * 16 * kc bytes; row_scales: of 16 * (kc / 256) * (8 + 8) bytes.
void fill_split_tiles(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t n, int64_t n0, int64_t k0, int64_t kc,
                      uint8_t* rows, float* row_scales, uint8_t* tiles, SplitScales* scales) {
  const int64_t sbs = kc / 256;
  uint8_t* rows_lo = rows + 16 * kc;
  float* row_dmin = row_scales + 16 * sbs;
  auto* row_mins = reinterpret_cast<uint8_t*>(row_dmin + 16 * sbs);  // [16][sbs * 8]
  for (int j = 0; j < 16; ++j) {
    if (n0 + j < n) {
      const uint8_t* block0 =
          w + static_cast<size_t>(n0 + j) * row_bytes + static_cast<size_t>(k0 / 256) * formats::ggml_block_bytes(t);
      decode_split_row(t, block0, kc, rows + j * kc, rows_lo + j * kc, row_scales + j * sbs, row_dmin + j * sbs,
                       row_mins + j * sbs * 8);
    } else {
      std::memset(rows + j * kc, 0, static_cast<size_t>(kc));
      std::memset(rows_lo + j * kc, 0, static_cast<size_t>(kc));
      std::memset(row_mins + j * sbs * 8, 0, static_cast<size_t>(sbs * 8));
      for (int64_t i = 0; i < sbs; ++i) row_scales[j * sbs + i] = row_dmin[j * sbs + i] = 0.0f;
    }
  }
  for (int64_t i = 0; i < sbs; ++i) {
    SplitScales& sc = scales[i];
    for (int j = 0; j < 16; ++j) {
      sc.d[j] = row_scales[j * sbs + i];
      sc.dmin[j] = row_dmin[j * sbs + i];
      const uint8_t* m = row_mins + (j * sbs + i) * 8;
      for (int p = 0; p < 4; ++p) sc.mins[p][j] = static_cast<int32_t>(m[2 * p] | (m[2 * p + 1] << 16));
    }
  }
  for (int plane = 0; plane < 2; ++plane) {
    const uint8_t* src = plane == 0 ? rows : rows_lo;
    for (int64_t s = 0; s < kc / 64; ++s) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(src + j * kc + s * 64);
      transpose16(r);
      uint8_t* dst = tiles + s * kSplitStepBytes + plane * 1024;
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(dst + p * 64, r[p]);
    }
  }
}

// The f32 step of one stored superblock for 16 rows: per row r
//   d_x[r] · (d_w · (8 · hi + lo) − dmin_w · Σ_j m_j · bsum_j[r])
// added into acc[r] (rows acc_ld floats apart; written when !add). bsp: the rows'
// group-sum pairs [4][16] of this superblock (convert_int8_rows), dx: their scales.
inline void split_epilogue(const int32_t* buf_hi, const int32_t* buf_lo, const SplitScales& sc, const int32_t* bsp,
                           const float* dx, float* acc, int64_t acc_ld, bool add) {
  const __m512 dw = _mm512_loadu_ps(sc.d), dmin = _mm512_loadu_ps(sc.dmin);
  const __m512i m0 = _mm512_loadu_si512(sc.mins[0]), m1 = _mm512_loadu_si512(sc.mins[1]);
  const __m512i m2 = _mm512_loadu_si512(sc.mins[2]), m3 = _mm512_loadu_si512(sc.mins[3]);
  for (int r = 0; r < 16; ++r) {
    const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(buf_hi + r * 16), 3),
                                         _mm512_load_si512(buf_lo + r * 16));
    __m512i msum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(bsp[r]), m0);
    msum = _mm512_dpwssd_epi32(msum, _mm512_set1_epi32(bsp[16 + r]), m1);
    msum = _mm512_dpwssd_epi32(msum, _mm512_set1_epi32(bsp[32 + r]), m2);
    msum = _mm512_dpwssd_epi32(msum, _mm512_set1_epi32(bsp[48 + r]), m3);
    const __m512 v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), dmin, _mm512_mul_ps(_mm512_cvtepi32_ps(sum), dw));
    float* o = acc + r * acc_ld;
    _mm512_storeu_ps(o, _mm512_fmadd_ps(v, _mm512_set1_ps(dx[r]), add ? _mm512_loadu_ps(o) : _mm512_setzero_ps()));
  }
}

// The row blocks of one split pass at a K block: A tiles (K steps of 64, 1 KiB apart),
// their scales dx [step][16] and group-sum pairs bsp [superblock][4][16], each at the
// row block's first K step / superblock of this K block.
struct SplitRows {
  const int8_t* a;
  const float* dx;
  const int32_t* bsp;
  const int8_t* tile(int64_t sb) const { return a + sb * 4096; }
  const float* scale(int64_t sb) const { return dx + sb * 4 * 16; }
  const int32_t* pairs(int64_t sb) const { return bsp + sb * 64; }
};

// One row block x one column block over `sbs` superblocks into acc: tiles 0-1 the hi / lo
// sums, 2 the A tile, 3-4 the hi / lo B tiles.
void split_block_1x1(const SplitRows& x, const uint8_t* b, const SplitScales* scales, int64_t sbs, float* acc,
                     int64_t acc_ld, bool accumulate, int32_t* buf) {
  for (int64_t sb = 0; sb < sbs; ++sb) {
    const int8_t* a = x.tile(sb);
    const uint8_t* bs = b + sb * kSplitSuperBytes;
    _tile_zero(0);
    _tile_zero(1);
    for (int st = 0; st < 4; ++st) {
      _tile_loadd(2, a + st * 1024, 64);
      _tile_loadd(3, bs + st * kSplitStepBytes, 64);
      _tile_dpbsud(0, 2, 3);
      _tile_loadd(4, bs + st * kSplitStepBytes + 1024, 64);
      _tile_dpbsud(1, 2, 4);
    }
    _tile_stored(0, buf, 64);
    _tile_stored(1, buf + 256, 64);
    split_epilogue(buf, buf + 256, scales[sb], x.pairs(sb), x.scale(sb), acc, acc_ld, accumulate || sb > 0);
  }
}

// Two row blocks x one column block over one superblock, the sums added into acc (the
// second row block's rows 16 on; written when !add): tiles 0-3 the hi / lo sums of rows
// 0-15 and 16-31, 4-5 the A tiles of a K step, 6-7 its hi / lo B tiles, so each B tile
// serves two products and four independent sums are in flight. x0 / x1 at the
// superblock; b: its B tiles; sc: its scales.
void split_block_2x1(const SplitRows& x0, const SplitRows& x1, const uint8_t* b, const SplitScales& sc, float* acc,
                     int64_t acc_ld, bool add, int32_t* buf) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int st = 0; st < 4; ++st) {
    _tile_loadd(4, x0.a + st * 1024, 64);
    _tile_loadd(6, b + st * kSplitStepBytes, 64);
    _tile_dpbsud(0, 4, 6);
    _tile_loadd(5, x1.a + st * 1024, 64);
    _tile_dpbsud(2, 5, 6);
    _tile_loadd(7, b + st * kSplitStepBytes + 1024, 64);
    _tile_dpbsud(1, 4, 7);
    _tile_dpbsud(3, 5, 7);
  }
  _tile_stored(0, buf, 64);
  _tile_stored(1, buf + 256, 64);
  _tile_stored(2, buf + 512, 64);
  _tile_stored(3, buf + 768, 64);
  split_epilogue(buf, buf + 256, sc, x0.bsp, x0.dx, acc, acc_ld, add);
  split_epilogue(buf + 512, buf + 768, sc, x1.bsp, x1.dx, acc + 16 * acc_ld, acc_ld, add);
}

// One pass of at most kAmxRowsPerPass rows for Q4_K / Q5_K: y = x · Wᵀ + bias, mins
// included. a_tiles / dx / bsp from convert_int8_rows with tile_k 64.
void run_split_pass(const KernelContext& ctx, GgmlType t, int64_t m, int64_t n, int64_t k, const int8_t* a_tiles,
                    const float* dx, const int32_t* bsp, const uint8_t* w, size_t row_bytes, const float* bias,
                    float* y, int64_t ldc) {
  const int64_t m_pad = round_up(m, 16), kc = std::min(kKc, k);
  const int64_t a_steps = k / 64, a_sbs = k / 256;
  int64_t nc = std::min<int64_t>(256, round_up(n, 16));  // B tiles of a chunk: 2 * nc * kc bytes
  const int threads = ctx.n_threads();
  while (nc > 16 && ceil_div(n, nc) < 2 * threads) nc = round_up(nc / 2, 16);
  const int64_t tasks = ceil_div(n, nc);
  parallel_for(ctx, tasks, [&](int64_t task) {
    const int64_t n0 = task * nc, ncols = std::min(nc, n - n0);
    const int64_t blocks = ceil_div(ncols, 16), ksbs = kc / 256;
    // Thread scratch: the chunk's B tiles and SplitScales, the decode rows and their
    // scales, the f32 sums of the chunk, four int32 tile buffers.
    const int64_t block_bytes = 2 * 16 * kc;  // B tiles of one column block
    const size_t tiles_bytes = static_cast<size_t>(blocks * block_bytes);
    const size_t scales_bytes = static_cast<size_t>(blocks * ksbs) * sizeof(SplitScales);
    const size_t rows_bytes = static_cast<size_t>(2 * 16 * kc) + align64(static_cast<size_t>(16 * ksbs) * 16);
    auto* bt = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kPackB, align64(tiles_bytes) + scales_bytes));
    auto* bscales = reinterpret_cast<SplitScales*>(bt + align64(tiles_bytes));
    auto* tmp = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kTemp, rows_bytes + 4 * 1024 + 64));
    auto* row_scales = reinterpret_cast<float*>(tmp + 2 * 16 * kc);
    auto* buf = reinterpret_cast<int32_t*>((reinterpret_cast<uintptr_t>(tmp + rows_bytes) + 63) / 64 * 64);
    const int64_t acc_ld = blocks * 16;
    auto* acc_all = static_cast<float*>(thread_scratch(ScratchSlot::kPackA, static_cast<size_t>(m_pad * acc_ld) * 4));
    TileScope tiles;  // all eight tiles 16 x 64 bytes
    for (int64_t k0 = 0; k0 < k; k0 += kc) {
      const int64_t kcur = std::min(kc, k - k0), sbs = kcur / 256;
      for (int64_t b = 0; b < blocks; ++b)
        fill_split_tiles(t, w, row_bytes, n, n0 + b * 16, k0, kcur, tmp, row_scales, bt + b * block_bytes,
                         bscales + b * ksbs);
      auto rows_at = [&](int64_t rb, int64_t sb0) {
        const int64_t step = rb * a_steps + k0 / 64 + sb0 * 4;
        return SplitRows{a_tiles + step * 1024, dx + step * 16, bsp + (rb * a_sbs + k0 / 256 + sb0) * 64};
      };
      const int64_t row_blocks = m_pad / 16;
      int64_t rb = 0;
      // Pairs of row blocks superblock by superblock: a pair's A tiles of one superblock
      // (8 KiB) stay in L1 while the column blocks' B tiles pass. (Slices of 2 and 8
      // superblocks, and one row block at a time, ran no faster in alternated runs.)
      for (; rb + 1 < row_blocks; rb += 2) {
        for (int64_t sb = 0; sb < sbs; ++sb) {
          const SplitRows x0 = rows_at(rb, sb), x1 = rows_at(rb + 1, sb);
          for (int64_t b = 0; b < blocks; ++b)
            split_block_2x1(x0, x1, bt + b * block_bytes + sb * kSplitSuperBytes, bscales[b * ksbs + sb],
                            acc_all + rb * 16 * acc_ld + b * 16, acc_ld, k0 > 0 || sb > 0, buf);
        }
      }
      for (; rb < row_blocks; ++rb) {
        const SplitRows x = rows_at(rb, 0);
        for (int64_t b = 0; b < blocks; ++b)
          split_block_1x1(x, bt + b * block_bytes, bscales + b * ksbs, sbs, acc_all + rb * 16 * acc_ld + b * 16,
                          acc_ld, k0 > 0, buf);
      }
    }
    const auto& epilogue_row = detail::isa_kernels(IsaLevel::kAvx512).epilogue_row;
    for (int64_t r = 0; r < m; ++r)
      epilogue_row(acc_all + r * acc_ld, bias ? bias + n0 : nullptr, Activation::kIdentity, 0.0f, y + r * ldc + n0,
                   ncols);
  });
}

}  // namespace

Status amx_dequant_matmul(const KernelContext& ctx, int64_t m, int64_t n, int64_t k, const void* act,
                          size_t a_row_bytes, formats::GgmlType type, const void* w, size_t row_bytes,
                          const float* bias, float* y, int64_t ldc, void* scratch, size_t scratch_bytes) {
  RLX_ASSERT(amx_enabled(ctx.isa));
  if (!amx_supports(type))
    return Error::unsupported("amx_dequant_matmul: no tile path for {} weights", formats::ggml_type_name(type));
  if (m <= 0 || n <= 0) return Status::ok_status();
  if (k <= 0 || k % formats::ggml_block_size(type) != 0 || k % 64 != 0)
    return Error::invalid_argument("amx_dequant_matmul: k={} is not a positive multiple of {}'s block and of 64", k,
                                   formats::ggml_type_name(type));
  const size_t need = amx_dequant_scratch_bytes(type, m, k);
  if (scratch == nullptr || scratch_bytes < need)
    return Error::invalid_argument("amx_dequant_matmul: scratch of {} bytes, needs {}", scratch_bytes, need);
  const int g = group_size(type);
  const bool split = uses_split_sums(type);
  const int64_t rows_max = round_up(std::min(m, kAmxRowsPerPass), 16), groups = k / g;
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) / 64 * 64);
  auto* a_tiles = reinterpret_cast<int8_t*>(base);
  auto* dx = reinterpret_cast<float*>(base + align64(static_cast<size_t>(rows_max * k)));
  auto* bsp =
      split ? reinterpret_cast<int32_t*>(dx + align64(static_cast<size_t>(rows_max * groups) * 4) / 4) : nullptr;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  for (int64_t r0 = 0; r0 < m; r0 += kAmxRowsPerPass) {
    const int64_t rows = std::min(kAmxRowsPerPass, m - r0);
    convert_int8_rows(ctx, type, ab + static_cast<size_t>(r0) * a_row_bytes, a_row_bytes, rows, round_up(rows, 16),
                      k, split ? 64 : g, a_tiles, dx, bsp);
    float* yp = y + r0 * ldc;
    if (split) {
      run_split_pass(ctx, type, rows, n, k, a_tiles, dx, bsp, wb, row_bytes, bias, yp, ldc);
    } else if (g == 16) {
      run_int8_pass<16, 16>(ctx, type, rows, n, k, a_tiles, dx, wb, row_bytes, bias, yp, ldc);
    } else {
      run_int8_pass<32, 1>(ctx, type, rows, n, k, a_tiles, dx, wb, row_bytes, bias, yp, ldc);
    }
  }
  return Status::ok_status();
}

void amx_gemm_prepacked(const KernelContext& ctx, const GemmParams& p, const float* a, const PackedB& b, float* c) {
  RLX_ASSERT(amx_enabled(ctx.isa) && b.nr() == 32 && p.k == b.k() && p.n == b.n());
  if (p.m <= 0 || p.n <= 0) return;
  const int64_t k_pad = round_up(p.k, 32);
  const bool lo_b = b.type() != WeightType::kBF16;  // bf16 weights are exact in one term
  const size_t plane = a_plane_bytes(p.m, p.k);
  auto* a_hi = static_cast<uint16_t*>(thread_scratch(ScratchSlot::kShared, 2 * plane));
  uint16_t* a_lo = a_hi + plane / 2;
  const size_t esize = weight_type_size(b.type());
  auto fill = [&](int64_t n0, int64_t k0, int64_t kpad, uint16_t* hi, uint16_t* lo) {
    const uint8_t* panel = b.data() + static_cast<size_t>(n0 / 32) * static_cast<size_t>(p.k * 32) * esize;
    fill_panel_tiles(panel, b.type(), p.k, n0 % 32, k0, kpad, hi, lo);
  };
  Epilogue ep;
  ep.bias = p.bias;
  ep.act = p.act;
  ep.beta = p.beta;
  for (int64_t r0 = 0; r0 < p.m; r0 += kAmxRowsPerPass) {
    const int64_t rows = std::min(kAmxRowsPerPass, p.m - r0);
    convert_rows(ctx, a + r0 * p.lda, p.lda, rows, round_up(rows, 32), p.k, k_pad, a_hi, a_lo);
    if (lo_b) {
      run_pass<true>(ctx, rows, p.n, p.k, a_hi, a_lo, fill, ep, c + r0 * p.ldc, p.ldc);
    } else {
      run_pass<false>(ctx, rows, p.n, p.k, a_hi, a_lo, fill, ep, c + r0 * p.ldc, p.ldc);
    }
  }
}

void amx_bf16_probe(int64_t iters) {
  RLX_ASSERT(amx_enabled(IsaLevel::kAmx));
  TileScope tiles;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(6);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(3, 4, 6);
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  volatile float keep = out[0];
  (void)keep;
}

}  // namespace rlx::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

#else  // not x86-64: amx_enabled() is false, so these are never entered.

namespace rlx::cpu {
Status amx_dequant_matmul(const KernelContext&, int64_t, int64_t, int64_t, const void*, size_t, formats::GgmlType,
                          const void*, size_t, const float*, float*, int64_t, void*, size_t) {
  return Error::unsupported("amx_dequant_matmul: no AMX on this architecture");
}
void amx_gemm_prepacked(const KernelContext&, const GemmParams&, const float*, const PackedB&, float*) {
  RLX_ASSERT(false);
}
void amx_bf16_probe(int64_t) { RLX_ASSERT(false); }
}  // namespace rlx::cpu

#endif
