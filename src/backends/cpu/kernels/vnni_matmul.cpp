// AVX-512 VNNI build of the many-row quantized matmuls (vnni_matmul.h). Function-level
// target pragma, so the binary runs on any x86-64; only entered when vnni_enabled().
//
// Weights: every type is stored as unsigned 8-bit quants u with the type's signed value
// u - offset (Q8_0: q + 128; Q4_0: the nibble, offset 8; Q5_0: offset 16; Q6_K: offset 32;
// Q4_K / Q5_K: the quant itself, offset 0, plus a min per group). A scale group (32
// elements, 16 for Q6_K) of one activation row r and 16 columns is then
//   S = vpdpbusd sums of u · x_q, started at -offset · Σ x_q (the row's group sum),
// exactly llama.cpp's integer sum. The f32 step, per (row, column) of a tile:
//   Q8_0 / Q4_0 / Q5_0 (x in Q8_0 blocks):  acc += float(S) · d_w · d_x           per group
//   K-quants (x in Q8_K blocks):  part += float(S) · d_w · sc per group, and per 256
//     (Q4_K / Q5_K) part -= dmin_w · Σ_j m_j · bsum_j (vpdpwssd of int16 pairs),
//     then acc += part · d_x.
// The register tile is kTileRows activation rows x 32 columns: 12 int32 sums and 12 f32
// parts in registers, two weight vectors, the activation quants broadcast from memory.
// acc lives in a per-task buffer [rows][kChunkCols] in cache; bias and the copy into y
// at the end.
#include "backends/cpu/kernels/vnni_matmul.h"

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

using formats::GgmlType;

constexpr int64_t kChunkCols = 64;  // output columns of one task (4 column groups of 16)
constexpr int64_t kKc = 512;        // K block decoded at once: 64 columns of it are 32 KiB
constexpr int kTileRows = 6;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t align64(size_t v) { return (v + 63) / 64 * 64; }

// What the tiles need to know about a weight type.
struct Traits {
  int group;          // elements per scale group (one integer sum)
  int groups_per_sb;  // groups sharing one activation scale (Q8_K: 256 / group; Q8_0: 1)
  int offset;         // stored quant u = value + offset
  bool mins;          // Q4_K / Q5_K: a min per group
};

Traits traits(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0:
      return {32, 1, 128, false};
    case GgmlType::Q4_0:
      return {32, 1, 8, false};
    case GgmlType::Q5_0:
      return {32, 1, 16, false};
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {32, 8, 0, true};
    default:
      return {16, 16, 32, false};  // Q6_K
  }
}

// Byte offsets of one column group's decoded K block (16 columns, kKc of K): the quads
// (K step of 4 for 16 columns, 64 bytes each), per group the 16 f32 scales, per
// superblock (mins types) the 16 dmin and the int16 pairs of the 8 mins.
struct GroupLayout {
  size_t dsc = 0, dmin = 0, mins = 0, bytes = 0;
  explicit GroupLayout(const Traits& tr) {
    const int64_t groups = kKc / tr.group, sbs = groups / tr.groups_per_sb;
    dsc = static_cast<size_t>(kKc) * 16;
    dmin = dsc + align64(static_cast<size_t>(groups) * 64);
    mins = dmin + (tr.mins ? align64(static_cast<size_t>(sbs) * 64) : 0);
    bytes = mins + (tr.mins ? align64(static_cast<size_t>(sbs) * 256) : 0);
  }
};

// The activation rows of one pass in the tiles' layout: quants row after row, the small
// per-group arrays interleaved by blocks of kTileRows rows (zero rows past the last) so
// one tile reads each from one pointer at fixed offsets.
struct ActRows {
  const int8_t* q = nullptr;      // [padded rows][k] quants
  const int32_t* comp = nullptr;  // [block][groups][kTileRows] -offset · group sum (offset != 0)
  const float* dx = nullptr;      // [block][superblocks][kTileRows] scales
  const int32_t* bsp = nullptr;   // [block][superblocks][4][kTileRows] int16 pairs of 32-group sums (mins)
  int64_t k = 0, groups = 0, sbs = 0;
};

int64_t padded_rows(int64_t rows) { return ceil_div(rows, kTileRows) * kTileRows; }

size_t pass_bytes(const Traits& tr, int64_t rows, int64_t k) {
  const int64_t groups = k / tr.group, sbs = groups / tr.groups_per_sb, pr = padded_rows(rows);
  return align64(static_cast<size_t>(pr * k)) + align64(static_cast<size_t>(pr * groups) * 4) +
         align64(static_cast<size_t>(pr * sbs) * 4) + (tr.mins ? align64(static_cast<size_t>(pr * sbs) * 16) : 0);
}

}  // namespace

bool vnni_enabled(IsaLevel isa) { return resolve_isa(isa) >= IsaLevel::kAvx512 && cpu_features().avx512vnni; }

bool vnni_supports(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

int64_t vnni_min_rows() { return env_config().cpu_vnni_min_rows; }

size_t vnni_dequant_scratch_bytes(GgmlType type, int64_t m, int64_t k) {
  if (m <= 0 || k <= 0 || !vnni_supports(type)) return 0;
  return 64 + pass_bytes(traits(type), std::min(m, kVnniRowsPerPass), k);
}

}  // namespace rlx::cpu

#if defined(__x86_64__)

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

namespace rlx::cpu {
namespace {

#include "backends/cpu/kernels/transpose16_avx512.inc"

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// ---------------------------------------------------------------- activations
// Rows of Q8_0 / Q8_K blocks -> ActRows (zero for the padding rows).
void convert_rows(const KernelContext& ctx, GgmlType t, const Traits& tr, const uint8_t* act, size_t a_row_bytes,
                  int64_t rows, int64_t k, uint8_t* base, ActRows& a) {
  a.k = k;
  a.groups = k / tr.group;
  a.sbs = a.groups / tr.groups_per_sb;
  const int64_t pr = padded_rows(rows);
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* comp = reinterpret_cast<int32_t*>(base + align64(static_cast<size_t>(pr * k)));
  auto* dx =
      reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(comp) + align64(static_cast<size_t>(pr * a.groups) * 4));
  auto* bsp = reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(dx) + align64(static_cast<size_t>(pr * a.sbs) * 4));
  a.q = q;
  a.comp = comp;
  a.dx = dx;
  a.bsp = tr.mins ? bsp : nullptr;
  const bool k_act = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
  constexpr int64_t R = kTileRows;
  parallel_for(ctx, pr, [&](int64_t r) {
    const int64_t rb = r / R, i = r % R;
    int8_t* qr = q + r * k;
    int32_t* cp = comp + rb * a.groups * R + i;
    float* dp = dx + rb * a.sbs * R + i;
    int32_t* bp = bsp + rb * a.sbs * 4 * R + i;
    if (r >= rows) {
      std::memset(qr, 0, static_cast<size_t>(k));
      for (int64_t g = 0; g < a.groups; ++g) cp[g * R] = 0;
      for (int64_t s = 0; s < a.sbs; ++s) dp[s * R] = 0.0f;
      if (tr.mins)
        for (int64_t j = 0; j < a.sbs * 4; ++j) bp[j * R] = 0;
      return;
    }
    const uint8_t* row = act + static_cast<size_t>(r) * a_row_bytes;
    if (!k_act) {
      const auto* b = reinterpret_cast<const formats::BlockQ8_0*>(row);
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      for (int64_t g = 0; g < a.groups; ++g) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[g].qs));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + g * 32), v);
        // Σ q = Σ (q + 128) - 32 · 128, the unsigned bytes summed by vpsadbw.
        const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, flip), _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
        const int sum = static_cast<int>(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128;
        cp[g * R] = -tr.offset * sum;
        dp[g * R] = f16(b[g].d);
      }
      return;
    }
    const auto* b = reinterpret_cast<const formats::BlockQ8_K*>(row);
    for (int64_t s = 0; s < a.sbs; ++s) {
      std::memcpy(qr + s * 256, b[s].qs, 256);
      dp[s * R] = b[s].d;
      if (tr.offset != 0) {  // Q6_K: groups of 16 = the bsums
        for (int j = 0; j < 16; ++j) cp[(s * 16 + j) * R] = -tr.offset * b[s].bsums[j];
      }
      if (tr.mins) {
        for (int p = 0; p < 4; ++p) {
          const int16_t* bs = b[s].bsums + 4 * p;
          const auto lo = static_cast<uint16_t>(bs[0] + bs[1]), hi = static_cast<uint16_t>(bs[2] + bs[3]);
          bp[(s * 4 + p) * R] = static_cast<int32_t>(static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16));
        }
      }
    }
  });
}

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store32(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline __m256i nibbles_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
inline __m256i nibbles_hi(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }
// (v >> shift) & mask in every byte, moved up by 4 bits (the high bits of a quant).
inline __m256i high_bits(__m256i v, int shift, int mask) {
  return _mm256_slli_epi16(
      _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(static_cast<char>(mask))), 4);
}

// One weight row's K range [0, kc) (src at its first block) -> unsigned quants u, per
// group the f32 scale, per superblock (mins types) dmin and the 8 six-bit mins.
void decode_row(GgmlType t, const uint8_t* src, int64_t kc, uint8_t* u, float* dsc, float* dmin, uint8_t* mins) {
  switch (t) {
    case GgmlType::Q8_0: {
      const auto* b = reinterpret_cast<const formats::BlockQ8_0*>(src);
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      for (int64_t i = 0; i < kc / 32; ++i) {
        store32(u + i * 32, _mm256_xor_si256(load32(reinterpret_cast<const uint8_t*>(b[i].qs)), flip));
        dsc[i] = f16(b[i].d);
      }
      return;
    }
    case GgmlType::Q4_0:
    case GgmlType::Q5_0: {
      const bool five = t == GgmlType::Q5_0;
      const size_t bb = five ? sizeof(formats::BlockQ5_0) : sizeof(formats::BlockQ4_0);
      for (int64_t i = 0; i < kc / 32; ++i) {
        const uint8_t* blk = src + static_cast<size_t>(i) * bb;
        uint16_t d;
        std::memcpy(&d, blk, 2);
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (five ? 6 : 2)));
        __m128i lo = _mm_and_si128(v, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15));
        if (five) {  // the fifth bits: qh bit l for element l
          uint32_t qh;
          std::memcpy(&qh, blk + 2, 4);
          lo = _mm_or_si128(lo, _mm_maskz_set1_epi8(static_cast<__mmask16>(qh & 0xFFFF), 16));
          hi = _mm_or_si128(hi, _mm_maskz_set1_epi8(static_cast<__mmask16>(qh >> 16), 16));
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(u + i * 32), lo);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(u + i * 32 + 16), hi);
        dsc[i] = f16(d);
      }
      return;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool five = t == GgmlType::Q5_K;
      const size_t bb = five ? sizeof(formats::BlockQ5_K) : sizeof(formats::BlockQ4_K);
      for (int64_t s = 0; s < kc / 256; ++s) {
        const uint8_t* blk = src + static_cast<size_t>(s) * bb;
        uint16_t d, dm;
        std::memcpy(&d, blk, 2);
        std::memcpy(&dm, blk + 2, 2);
        const uint8_t* scales = blk + 4;
        const uint8_t* qs = five ? blk + 48 : blk + 16;
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          formats::get_scale_min_k4(j, scales, &sc, &m);
          dsc[s * 8 + j] = f16(d) * static_cast<float>(sc);
          mins[s * 8 + j] = m;
        }
        dmin[s] = f16(dm);
        const __m256i qh = five ? load32(blk + 16) : _mm256_setzero_si256();
        uint8_t* o = u + s * 256;
        for (int j = 0; j < 4; ++j) {
          const __m256i v = load32(qs + 32 * j);
          __m256i lo = nibbles_lo(v), hi = nibbles_hi(v);
          if (five) {
            lo = _mm256_or_si256(lo, high_bits(qh, 2 * j, 1));
            hi = _mm256_or_si256(hi, high_bits(qh, 2 * j + 1, 1));
          }
          store32(o + 64 * j, lo);
          store32(o + 64 * j + 32, hi);
        }
      }
      return;
    }
    default: {  // Q6_K
      const auto* b = reinterpret_cast<const formats::BlockQ6_K*>(src);
      for (int64_t s = 0; s < kc / 256; ++s) {
        const float d = f16(b[s].d);
        for (int j = 0; j < 16; ++j) dsc[s * 16 + j] = d * static_cast<float>(b[s].scales[j]);
        for (int half = 0; half < 2; ++half) {
          const __m256i ql0 = load32(b[s].ql + half * 64), ql1 = load32(b[s].ql + half * 64 + 32);
          const __m256i qh = load32(b[s].qh + half * 32);
          uint8_t* o = u + s * 256 + half * 128;
          store32(o, _mm256_or_si256(nibbles_lo(ql0), high_bits(qh, 0, 3)));
          store32(o + 32, _mm256_or_si256(nibbles_lo(ql1), high_bits(qh, 2, 3)));
          store32(o + 64, _mm256_or_si256(nibbles_hi(ql0), high_bits(qh, 4, 3)));
          store32(o + 96, _mm256_or_si256(nibbles_hi(ql1), high_bits(qh, 6, 3)));
        }
      }
      return;
    }
  }
}

// Decodes the 16 weight rows n0.. (zero past n) over [k0, k0 + kc) into one column
// group's layout at dst. tmp: 16 * (kKc + kKc / 16 * 4 + kKc / 256 * 4 + kKc / 32) bytes.
void fill_column_group(GgmlType t, const Traits& tr, const GroupLayout& L, const uint8_t* w, size_t row_bytes,
                       int64_t n, int64_t n0, int64_t k0, int64_t kc, uint8_t* tmp, uint8_t* dst) {
  const int64_t groups = kc / tr.group, sbs = groups / tr.groups_per_sb;
  const int64_t gmax = kKc / tr.group, smax = kKc / 256;
  uint8_t* rows = tmp;                                          // [16][kKc]
  auto* rdsc = reinterpret_cast<float*>(tmp + 16 * kKc);        // [16][gmax]
  float* rdmin = rdsc + 16 * gmax;                              // [16][smax]
  auto* rmins = reinterpret_cast<uint8_t*>(rdmin + 16 * smax);  // [16][8 * smax]
  const int64_t block = formats::ggml_block_size(t);
  const size_t block_bytes = formats::ggml_block_bytes(t);
  const int64_t kc64 = (kc + 63) / 64 * 64;
  for (int j = 0; j < 16; ++j) {
    uint8_t* u = rows + j * kKc;
    if (n0 + j < n) {
      const uint8_t* src = w + static_cast<size_t>(n0 + j) * row_bytes + static_cast<size_t>(k0 / block) * block_bytes;
      decode_row(t, src, kc, u, rdsc + j * gmax, rdmin + j * smax, rmins + j * 8 * smax);
      if (kc64 > kc) std::memset(u + kc, 0, static_cast<size_t>(kc64 - kc));
    } else {
      std::memset(u, 0, static_cast<size_t>(kc64));
      for (int64_t g = 0; g < groups; ++g) rdsc[j * gmax + g] = 0.0f;
      for (int64_t s = 0; s < smax; ++s) rdmin[j * smax + s] = 0.0f;
      std::memset(rmins + j * 8 * smax, 0, static_cast<size_t>(8 * smax));
    }
  }
  for (int64_t s64 = 0; s64 < kc64 / 64; ++s64) {
    __m512i r[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(rows + j * kKc + s64 * 64);
    transpose16(r);
    for (int p = 0; p < 16; ++p) _mm512_store_si512(dst + (s64 * 16 + p) * 64, r[p]);
  }
  auto* dsc = reinterpret_cast<float*>(dst + L.dsc);
  for (int64_t g = 0; g < groups; ++g)
    for (int j = 0; j < 16; ++j) dsc[g * 16 + j] = rdsc[j * gmax + g];
  if (!tr.mins) return;
  auto* dmin = reinterpret_cast<float*>(dst + L.dmin);
  auto* mins = reinterpret_cast<int32_t*>(dst + L.mins);
  for (int64_t s = 0; s < sbs; ++s)
    for (int j = 0; j < 16; ++j) {
      dmin[s * 16 + j] = rdmin[j * smax + s];
      const uint8_t* m = rmins + j * 8 * smax + s * 8;
      for (int p = 0; p < 4; ++p)
        mins[(s * 4 + p) * 16 + j] =
            static_cast<int32_t>(static_cast<uint32_t>(m[2 * p]) | (static_cast<uint32_t>(m[2 * p + 1]) << 16));
    }
}

// ---------------------------------------------------------------- register tile
struct TileArgs {
  const int8_t* q;                     // the row block's first row at this K block's start
  int64_t k;                           // row stride of q
  const int32_t* comp;                 // the row block's sums at this K block's first group
  const float* dx;                     // the row block's scales at this K block's first superblock
  const int32_t* bsp;                  // the row block's min sums at this K block's first superblock
  const uint8_t* w[2];                 // the column groups' decoded blocks
  size_t dsc_off, dmin_off, mins_off;  // GroupLayout
  int64_t n_sbs;                       // superblocks in this K block
  float* out;                          // acc rows (kChunkCols floats apart) at the first column group
};

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// kTileRows rows x C column groups of 16 over one K block. GQ: K steps of 4 per group;
// SG: groups per superblock (one activation scale); kComp: start each group's sums at
// comp.
template <int C, int GQ, int SG, bool kComp, bool kMins>
void tile(const TileArgs& a) {
  constexpr int R = kTileRows;
  const uint8_t* w[C];
  const float* dsc[C];
  for (int c = 0; c < C; ++c) {
    w[c] = a.w[c];
    dsc[c] = reinterpret_cast<const float*>(a.w[c] + a.dsc_off);
  }
  const int8_t* xq[R];
  for (int i = 0; i < R; ++i) xq[i] = a.q + i * a.k;
  const int32_t* comp = a.comp;
  const float* dx = a.dx;
  const int32_t* bsp = a.bsp;
  float* out = a.out;
  for (int64_t s = 0; s < a.n_sbs; ++s) {
    __m512 part[R][C];
    for (int g = 0; g < SG; ++g) {
      __m512i acc[R][C];
      for (int i = 0; i < R; ++i) {
        const __m512i init = kComp ? _mm512_set1_epi32(comp[i]) : _mm512_setzero_si512();
        for (int c = 0; c < C; ++c) acc[i][c] = init;
      }
      for (int qd = 0; qd < GQ; ++qd) {
        __m512i wv[C];
        for (int c = 0; c < C; ++c) wv[c] = _mm512_load_si512(w[c] + qd * 64);
        for (int i = 0; i < R; ++i) {
          const __m512i xv = _mm512_set1_epi32(load_i32(xq[i] + qd * 4));
          for (int c = 0; c < C; ++c) acc[i][c] = _mm512_dpbusd_epi32(acc[i][c], wv[c], xv);
        }
      }
      for (int c = 0; c < C; ++c) {
        const __m512 sc = _mm512_load_ps(dsc[c]);
        for (int i = 0; i < R; ++i) {
          const __m512 f = _mm512_cvtepi32_ps(acc[i][c]);
          part[i][c] = g == 0 ? _mm512_mul_ps(f, sc) : _mm512_fmadd_ps(f, sc, part[i][c]);
        }
        w[c] += GQ * 64;
        dsc[c] += 16;
      }
      for (int i = 0; i < R; ++i) xq[i] += GQ * 4;
      comp += R;
    }
    if constexpr (kMins) {
      for (int c = 0; c < C; ++c) {
        const auto* mins = reinterpret_cast<const int32_t*>(a.w[c] + a.mins_off) + s * 64;
        const __m512 dmin = _mm512_load_ps(reinterpret_cast<const float*>(a.w[c] + a.dmin_off) + s * 16);
        for (int i = 0; i < R; ++i) {
          __m512i ms = _mm512_setzero_si512();
          for (int p = 0; p < 4; ++p)
            ms = _mm512_dpwssd_epi32(ms, _mm512_load_si512(mins + p * 16), _mm512_set1_epi32(bsp[p * R + i]));
          part[i][c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), dmin, part[i][c]);
        }
      }
      bsp += 4 * R;
    }
    for (int i = 0; i < R; ++i) {
      const __m512 d = _mm512_set1_ps(dx[i]);
      for (int c = 0; c < C; ++c) {
        float* o = out + i * kChunkCols + c * 16;
        _mm512_store_ps(o, _mm512_fmadd_ps(part[i][c], d, _mm512_load_ps(o)));
      }
    }
    dx += R;
  }
}

using TileFn = void (*)(const TileArgs&);

template <int GQ, int SG, bool kComp, bool kMins>
TileFn pick(int c) {
  return c == 2 ? &tile<2, GQ, SG, kComp, kMins> : &tile<1, GQ, SG, kComp, kMins>;
}

TileFn tile_fn(GgmlType t, int c) {
  switch (t) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return pick<8, 8, false, true>(c);
    case GgmlType::Q6_K:
      return pick<4, 16, true, false>(c);
    default:
      return pick<8, 1, true, false>(c);
  }
}

// Prefetches bytes [from, from + bytes) of weight rows [r0, r1) into L2.
void prefetch_block(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1, size_t from, size_t bytes) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* p = w + static_cast<size_t>(r) * row_bytes + from;
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
  }
}

// One pass of at most kVnniRowsPerPass rows: y = x · Wᵀ + bias.
void run_pass(const KernelContext& ctx, GgmlType t, const Traits& tr, const ActRows& a, int64_t rows, int64_t n,
              const uint8_t* w, size_t row_bytes, const float* bias, float* y, int64_t ldc) {
  const GroupLayout L(tr);
  const int64_t k = a.k, pr = padded_rows(rows);
  const size_t tmp_bytes = 16 * static_cast<size_t>(kKc + kKc / tr.group * 4 + kKc / 256 * 4 + kKc / 32);
  const TileFn tile2 = tile_fn(t, 2), tile1 = tile_fn(t, 1);
  const int64_t block = formats::ggml_block_size(t);
  const size_t block_bytes = formats::ggml_block_bytes(t);
  parallel_for(ctx, ceil_div(n, kChunkCols), [&](int64_t task) {
    const int64_t n0 = task * kChunkCols, ncols = std::min(kChunkCols, n - n0);
    const int n_cg = static_cast<int>(ceil_div(ncols, 16));
    auto* acc = static_cast<float*>(thread_scratch(ScratchSlot::kPackA, static_cast<size_t>(pr * kChunkCols) * 4));
    auto* wbuf = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kPackB, L.bytes * (kChunkCols / 16)));
    auto* tmp = static_cast<uint8_t*>(thread_scratch(ScratchSlot::kTemp, tmp_bytes));
    std::memset(acc, 0, static_cast<size_t>(pr * kChunkCols) * 4);
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kc = std::min(kKc, k - k0);
      for (int cg = 0; cg < n_cg; ++cg)
        fill_column_group(t, tr, L, w, row_bytes, n, n0 + cg * 16, k0, kc, tmp, wbuf + cg * L.bytes);
      // The weight rows are short runs far apart, which the hardware prefetchers do not
      // follow: fetch the next K block of this chunk (after the last, the next chunk's
      // first) while the tiles run.
      if (k0 + kKc < k) {
        prefetch_block(w, row_bytes, n0, n0 + ncols, (k0 + kKc) / block * block_bytes,
                       std::min(kKc, k - k0 - kKc) / block * block_bytes);
      } else if (n0 + kChunkCols < n) {
        prefetch_block(w, row_bytes, n0 + kChunkCols, std::min(n, n0 + 2 * kChunkCols), 0,
                       std::min(kKc, k) / block * block_bytes);
      }
      const int64_t g0 = k0 / tr.group, s0 = g0 / tr.groups_per_sb;
      TileArgs ta;
      ta.k = k;
      ta.dsc_off = L.dsc;
      ta.dmin_off = L.dmin;
      ta.mins_off = L.mins;
      ta.n_sbs = kc / tr.group / tr.groups_per_sb;
      for (int64_t rb = 0; rb < pr / kTileRows; ++rb) {
        ta.q = a.q + rb * kTileRows * k + k0;
        ta.comp = a.comp + (rb * a.groups + g0) * kTileRows;
        ta.dx = a.dx + (rb * a.sbs + s0) * kTileRows;
        ta.bsp = a.bsp ? a.bsp + (rb * a.sbs + s0) * 4 * kTileRows : nullptr;
        for (int cg = 0; cg < n_cg; cg += 2) {
          ta.w[0] = wbuf + cg * L.bytes;
          ta.w[1] = wbuf + (cg + 1) * L.bytes;
          ta.out = acc + rb * kTileRows * kChunkCols + cg * 16;
          (n_cg - cg >= 2 ? tile2 : tile1)(ta);
        }
      }
    }
    const auto& epilogue_row = detail::isa_kernels(IsaLevel::kAvx512).epilogue_row;
    for (int64_t r = 0; r < rows; ++r)
      epilogue_row(acc + r * kChunkCols, bias ? bias + n0 : nullptr, Activation::kIdentity, 0.0f, y + r * ldc + n0,
                   ncols);
  });
}

}  // namespace

Status vnni_dequant_matmul(const KernelContext& ctx, int64_t m, int64_t n, int64_t k, const void* act,
                           size_t a_row_bytes, GgmlType type, const void* w, size_t row_bytes, const float* bias,
                           float* y, int64_t ldc, void* scratch, size_t scratch_bytes) {
  RLX_ASSERT(vnni_enabled(ctx.isa));
  if (!vnni_supports(type))
    return Error::unsupported("vnni_dequant_matmul: no VNNI tile path for {} weights", formats::ggml_type_name(type));
  if (m <= 0 || n <= 0) return Status::ok_status();
  if (k <= 0 || k % formats::ggml_block_size(type) != 0)
    return Error::invalid_argument("vnni_dequant_matmul: k={} is not a positive multiple of {}'s block", k,
                                   formats::ggml_type_name(type));
  const size_t need = vnni_dequant_scratch_bytes(type, m, k);
  if (scratch == nullptr || scratch_bytes < need)
    return Error::invalid_argument("vnni_dequant_matmul: scratch of {} bytes, needs {}", scratch_bytes, need);
  const Traits tr = traits(type);
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) / 64 * 64);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  for (int64_t r0 = 0; r0 < m; r0 += kVnniRowsPerPass) {
    const int64_t rows = std::min(kVnniRowsPerPass, m - r0);
    ActRows a;
    convert_rows(ctx, type, tr, ab + static_cast<size_t>(r0) * a_row_bytes, a_row_bytes, rows, k, base, a);
    run_pass(ctx, type, tr, a, rows, n, wb, row_bytes, bias, y + r0 * ldc, ldc);
  }
  return Status::ok_status();
}

}  // namespace rlx::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

#else  // not x86-64: vnni_enabled() is false, so this is never reached

namespace rlx::cpu {
Status vnni_dequant_matmul(const KernelContext&, int64_t, int64_t, int64_t, const void*, size_t, formats::GgmlType,
                           const void*, size_t, const float*, float*, int64_t, void*, size_t) {
  return Error::unsupported("vnni_dequant_matmul: not an x86-64 build");
}
}  // namespace rlx::cpu

#endif
