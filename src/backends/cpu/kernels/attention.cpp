// Attention driver: per-query visible key ranges from the mask and the task grids: over
// (head, query block) for prefill; for decode over (kv head, head group), or over
// ranges of whole cache rows for long contexts with the merge of the ranges' partial
// softmax states. The math lives in isa_impl.inc (attn_rows, attn_decode_rows); long
// prefills run their two GEMMs per key block on the micro-tiles or, where usable, on
// the AMX tiles (amx_gemm_prepacked: bf16 high + low parts, ~2^-16 per product).
#include "backends/cpu/kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/amx_matmul.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/half.h"
#include "rlx/base/status.h"

namespace rlx::cpu {
namespace {

using detail::AttnRows;
using detail::kAttnRows;

constexpr int64_t kQueryBlock = 16;     // query rows per prefill task
constexpr int64_t kGemmMinRows = 16;    // prefills of this many query rows take the GEMM blocks
constexpr int64_t kGemmRows = 64;       // query rows per task there
constexpr int64_t kGemmKeys = 512;      // keys per score block there
constexpr int64_t kRowsMinKeys = 512;   // decode over this many keys reads whole cache rows
constexpr int64_t kRowsChunk = 256;     // fewest keys per task of that path

struct Dense {
  int64_t qs, ks, vs, os;
  float scale;
};

Dense dense(const AttentionParams& p) {
  Dense d;
  d.qs = p.q_stride ? p.q_stride : p.n_heads * p.head_dim;
  d.ks = p.k_stride ? p.k_stride : p.n_kv_heads * p.head_dim;
  d.vs = p.v_stride ? p.v_stride : p.n_kv_heads * p.head_dim;
  d.os = p.o_stride ? p.o_stride : p.n_heads * p.head_dim;
  d.scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  return d;
}

// Visible keys [lo, hi) of query i.
void key_range(const AttentionParams& p, int64_t i, int64_t* lo, int64_t* hi) {
  const int64_t T = p.seq_kv;
  const int64_t pos = p.q_pos ? p.q_pos[i] : T - p.seq_q + i;
  *lo = 0;
  *hi = T;
  if (p.mask == AttnMask::kNone) return;
  *hi = std::clamp<int64_t>(pos + 1, 0, T);
  if (p.mask == AttnMask::kSlidingWindow && p.window > 0) *lo = std::clamp<int64_t>(pos - p.window + 1, 0, T);
  if (*lo > *hi) *lo = *hi;
}

void prefill(const KernelContext& ctx, const detail::IsaKernels& kk, const AttentionParams& p, const Dense& d,
             const float* q, const float* k, const float* v, float* o) {
  const int64_t S = p.seq_q, H = p.n_heads, D = p.head_dim, group = H / p.n_kv_heads;
  const int64_t qblocks = (S + kQueryBlock - 1) / kQueryBlock;
  // Later query blocks see more keys (causal): hand them out first for balance.
  parallel_for(ctx, H * qblocks, [&](int64_t t) {
    const int64_t qb = qblocks - 1 - t / H, h = t % H;
    const int64_t kvh = h / group;
    const int64_t i1 = std::min(S, (qb + 1) * kQueryBlock);
    for (int64_t i0 = qb * kQueryBlock; i0 < i1; i0 += kAttnRows) {
      int64_t lo[kAttnRows], hi[kAttnRows];
      const int nq = static_cast<int>(std::min<int64_t>(kAttnRows, i1 - i0));
      for (int r = 0; r < nq; ++r) key_range(p, i0 + r, &lo[r], &hi[r]);
      AttnRows a;
      a.nq = nq;
      a.head_dim = D;
      a.q = q + i0 * d.qs + h * D;
      a.q_stride = d.qs;
      a.k = k + kvh * D;
      a.k_stride = d.ks;
      a.v = v + kvh * D;
      a.v_stride = d.vs;
      a.lo = lo;
      a.hi = hi;
      a.scale = d.scale;
      a.softcap = p.softcap;
      a.o = o + i0 * d.os + h * D;
      a.o_stride = d.os;
      kk.attn_rows(a);
    }
  });
}

// Prefill of many rows as blocked GEMMs: per (KV head, block of kGemmRows query rows)
// the query rows of every head that reads the KV head are stacked (GQA: one K and V
// packing serves them all), and per block of kGemmKeys keys scores = q kᵀ and
// o += p v run through the f32 GEMM micro-tiles, with the online softmax (running max
// and sum per row, o rescaled) between them in the vector kernels. Same math as
// attn_rows without its horizontal sum per score. With AMX and at least amx_min_rows()
// stacked rows both GEMMs run on the BF16 tiles against the key block's K and V packed
// into panels (1.4x the micro-tiles at S = T = 512 on the AMX host: bench/NOTES.md).
void prefill_gemm(const KernelContext& ctx, const detail::IsaKernels& kk, const AttentionParams& p, const Dense& d,
                  const float* q, const float* k, const float* v, float* o) {
  const int64_t S = p.seq_q, D = p.head_dim, KVH = p.n_kv_heads, group = p.n_heads / KVH;
  // Blocks of kGemmRows positions, fewer when that leaves threads idle (few KV heads).
  int64_t block = kGemmRows;
  while (block > 16 && KVH * ((S + block - 1) / block) < 2 * ctx.n_threads()) block /= 2;
  const int64_t qblocks = (S + block - 1) / block;
  const KernelContext one = ctx.single_threaded();
  const bool cap = p.softcap > 0.0f;
  const bool amx = amx_enabled(ctx.isa);
  // Later query blocks see more keys (causal): hand them out first for balance.
  parallel_for(ctx, KVH * qblocks, [&](int64_t t) {
    const int64_t qb = qblocks - 1 - t / KVH, kvh = t % KVH;
    const int64_t i0 = qb * block, rows = std::min(block, S - i0), stacked = group * rows;
    int64_t lo[kGemmRows], hi[kGemmRows];
    int64_t jlo = p.seq_kv, jhi = 0;
    for (int64_t r = 0; r < rows; ++r) {
      key_range(p, i0 + r, &lo[r], &hi[r]);
      if (hi[r] > lo[r]) {
        jlo = std::min(jlo, lo[r]);
        jhi = std::max(jhi, hi[r]);
      }
    }
    // Scratch: stacked q rows [stacked][D], their outputs [stacked][D], scores
    // [stacked][kGemmKeys], running max and sum [stacked]; on the tiles, the panels of
    // one key block's K or V after them.
    const bool tiles = amx && stacked >= amx_min_rows();
    const size_t floats = static_cast<size_t>(stacked * (2 * D + kGemmKeys + 2));
    const size_t panel_at = (floats * sizeof(float) + 63) / 64 * 64;
    const size_t panel_bytes = tiles ? std::max(packed_b_bytes(one, D, kGemmKeys, WeightType::kF32),
                                                packed_b_bytes(one, kGemmKeys, D, WeightType::kF32))
                                     : 0;
    auto* qs = static_cast<float*>(thread_scratch(ScratchSlot::kAttention, panel_at + panel_bytes));
    void* panels = reinterpret_cast<uint8_t*>(qs) + panel_at;
    // One GEMM of the key block (A and C dense): on the tiles against B packed for it
    // (into the scratch: nothing is allocated per run), else on the micro-tiles.
    auto block_gemm = [&](GemmParams g, const float* a, const float* b, float* c) {
      if (tiles) {
        g.lda = g.k;
        g.ldc = g.n;
        amx_gemm_prepacked(one, g, a, pack_b_into(one, g.k, g.n, g.b_transposed, g.ldb, b, WeightType::kF32, panels), c);
      } else {
        gemm(one, g, a, b, WeightType::kF32, c);
      }
    };
    float* os = qs + stacked * D;
    float* s = os + stacked * D;
    float* m = s + stacked * kGemmKeys;
    float* l = m + stacked;
    for (int64_t g = 0; g < group; ++g)
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = q + (i0 + r) * d.qs + (kvh * group + g) * D;
        std::copy(src, src + D, qs + (g * rows + r) * D);
      }
    std::fill(os, os + stacked * D, 0.0f);
    std::fill(m, m + stacked, -INFINITY);
    std::fill(l, l + stacked, 0.0f);
    for (int64_t j0 = jlo; j0 < jhi; j0 += kGemmKeys) {
      const int64_t jn = std::min(kGemmKeys, jhi - j0);
      GemmParams g;
      g.m = stacked;
      g.n = jn;
      g.k = D;
      g.ldb = d.ks;
      block_gemm(g, qs, k + j0 * d.ks + kvh * D, s);
      for (int64_t row = 0; row < stacked; ++row) {
        const int64_t r = row % rows;
        float* sr = s + row * jn;
        const int64_t a = std::clamp(lo[r] - j0, int64_t{0}, jn), b = std::clamp(hi[r] - j0, int64_t{0}, jn);
        if (b <= a) {  // no visible key in this block: p = 0
          std::fill(sr, sr + jn, 0.0f);
          continue;
        }
        kk.binary_bs(BinaryOp::kMul, sr + a, d.scale, sr + a, b - a);
        if (cap) {
          kk.binary_bs(BinaryOp::kMul, sr + a, 1.0f / p.softcap, sr + a, b - a);
          kk.unary(UnaryOp::kTanh, sr + a, sr + a, b - a);
          kk.binary_bs(BinaryOp::kMul, sr + a, p.softcap, sr + a, b - a);
        }
        const float bm = kk.reduce_row(ReduceOp::kMax, sr + a, b - a);
        const float m_new = std::max(m[row], bm);
        const float alpha = m[row] == -INFINITY ? 0.0f : std::exp(m[row] - m_new);
        kk.binary_bs(BinaryOp::kSub, sr + a, m_new, sr + a, b - a);
        kk.unary(UnaryOp::kExp, sr + a, sr + a, b - a);
        std::fill(sr, sr + a, 0.0f);
        std::fill(sr + b, sr + jn, 0.0f);
        l[row] = l[row] * alpha + kk.reduce_row(ReduceOp::kSum, sr + a, b - a);
        if (alpha != 1.0f) kk.binary_bs(BinaryOp::kMul, os + row * D, alpha, os + row * D, D);
        m[row] = m_new;
      }
      GemmParams g2;
      g2.m = stacked;
      g2.n = D;
      g2.k = jn;
      g2.b_transposed = false;
      g2.ldb = d.vs;
      g2.beta = 1.0f;
      block_gemm(g2, s, v + j0 * d.vs + kvh * D, os);
    }
    for (int64_t g = 0; g < group; ++g)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = g * rows + r;
        float* dst = o + (i0 + r) * d.os + (kvh * group + g) * D;
        kk.binary_bs(BinaryOp::kMul, os + row * D, l[row] > 0.0f ? 1.0f / l[row] : 0.0f, dst, D);
      }
  });
}

// The softmax states of `chunks` key ranges (range c, head h at part + (c * H + h) *
// (D + 2): D unnormalised output values, then max and sum) merged into o.
void merge_partials(const KernelContext& ctx, const float* part, int64_t chunks, int64_t H, int64_t D, float* o) {
  const int64_t row = D + 2;
  parallel_for(ctx, H, [&](int64_t h) {
    float M = -INFINITY;
    for (int64_t c = 0; c < chunks; ++c) M = std::max(M, part[(c * H + h) * row + D]);
    float* oh = o + h * D;
    std::fill(oh, oh + D, 0.0f);
    if (M == -INFINITY) return;
    float L = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      const float* pc = part + (c * H + h) * row;
      if (pc[D] == -INFINITY) continue;
      const float w = std::exp(pc[D] - M);
      L += w * pc[D + 1];
      for (int64_t i = 0; i < D; ++i) oh[i] += w * pc[i];
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int64_t i = 0; i < D; ++i) oh[i] *= inv;
  });
}

// S == 1 over many keys: a task per range of whole cache rows, every head at once
// (attn_decode_rows reads each K / V row front to back), then the ranges are merged.
void decode_rows(const KernelContext& ctx, const detail::IsaKernels& kk, const AttentionParams& p, const Dense& d,
                 const float* q, const float* k, const float* v, float* o, int64_t lo0, int64_t visible) {
  const int64_t H = p.n_heads, D = p.head_dim, row = D + 2;
  const int64_t chunks = std::clamp<int64_t>(visible / kRowsChunk, 1, 4 * ctx.n_threads());
  auto* part = static_cast<float*>(
      thread_scratch(ScratchSlot::kShared, static_cast<size_t>(chunks * H * row) * sizeof(float)));
  parallel_for(ctx, chunks, [&](int64_t c) {
    detail::AttnDecodeRows a;
    a.n_heads = H;
    a.n_kv_heads = p.n_kv_heads;
    a.head_dim = D;
    a.q = q;
    a.k = k;
    a.k_stride = d.ks;
    a.v = v;
    a.v_stride = d.vs;
    a.lo = lo0 + visible * c / chunks;
    a.hi = lo0 + visible * (c + 1) / chunks;
    a.scale = d.scale;
    a.softcap = p.softcap;
    a.state = part + c * H * row;
    a.scores = static_cast<float*>(
        thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(H * detail::kAttnDecodeBlock) * sizeof(float)));
    kk.attn_decode_rows(a);
  });
  merge_partials(ctx, part, chunks, H, D, o);
}

// S == 1 over fewer than kRowsMinKeys keys: a task per group of up to kAttnRows heads of
// one KV head (they share the K/V loads).
void decode(const KernelContext& ctx, const detail::IsaKernels& kk, const AttentionParams& p, const Dense& d,
            const float* q, const float* k, const float* v, float* o) {
  const int64_t H = p.n_heads, D = p.head_dim, KVH = p.n_kv_heads, group = H / KVH;
  int64_t lo0, hi0;
  key_range(p, 0, &lo0, &hi0);
  const int64_t visible = hi0 - lo0;
  if (visible >= kRowsMinKeys) return decode_rows(ctx, kk, p, d, q, k, v, o, lo0, visible);
  const int64_t hgroups = (group + kAttnRows - 1) / kAttnRows;
  parallel_for(ctx, KVH * hgroups, [&](int64_t t) {
    const int64_t hg = t % hgroups, kvh = t / hgroups;
    const int64_t h0 = kvh * group + hg * kAttnRows;
    const int nq = static_cast<int>(std::min<int64_t>(kAttnRows, kvh * group + group - h0));
    int64_t lo[kAttnRows], hi[kAttnRows];
    for (int r = 0; r < nq; ++r) {
      lo[r] = lo0;
      hi[r] = hi0;
    }
    AttnRows a;
    a.nq = nq;
    a.head_dim = D;
    a.q = q + h0 * D;
    a.q_stride = D;
    a.k = k + kvh * D;
    a.k_stride = d.ks;
    a.v = v + kvh * D;
    a.v_stride = d.vs;
    a.lo = lo;
    a.hi = hi;
    a.scale = d.scale;
    a.softcap = p.softcap;
    a.o = o + h0 * D;
    a.o_stride = D;
    kk.attn_rows(a);
  });
}

}  // namespace

void attention_f32(const KernelContext& ctx, const AttentionParams& p, const float* q, const float* k,
                   const float* v, float* o) {
  RLX_ASSERT(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
  if (p.seq_q <= 0 || p.n_heads <= 0 || p.head_dim <= 0) return;
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  const Dense d = dense(p);
  if (p.seq_q == 1) {  // one row: heads are adjacent whatever the row strides
    decode(ctx, kk, p, d, q, k, v, o);
  } else if (p.seq_q >= kGemmMinRows) {
    prefill_gemm(ctx, kk, p, d, q, k, v, o);
  } else {
    prefill(ctx, kk, p, d, q, k, v, o);
  }
}

void attention_f16kv(const KernelContext& ctx, const AttentionParams& p, const float* q, const uint16_t* k,
                     const uint16_t* v, float* o) {
  RLX_ASSERT(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
  if (p.seq_q <= 0 || p.n_heads <= 0 || p.head_dim <= 0) return;
  const Dense d = dense(p);
  const int64_t S = p.seq_q, H = p.n_heads, D = p.head_dim, T = p.seq_kv, group = H / p.n_kv_heads;
  parallel_for(ctx, S * H, [&](int64_t t) {
    const int64_t i = t / H, h = t % H, kvh = h / group;
    int64_t lo, hi;
    key_range(p, i, &lo, &hi);
    float* o_row = o + i * d.os + h * D;
    std::fill(o_row, o_row + D, 0.0f);
    if (hi <= lo) return;
    auto* scratch = static_cast<float*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(T + D) * sizeof(float)));
    float* qh = scratch + T;  // q rounded to f16
    for (int64_t c = 0; c < D; ++c) qh[c] = f16_bits_to_f32(f32_to_f16_bits(q[i * d.qs + h * D + c]));
    float* s = scratch;
    float m = -INFINITY;
    for (int64_t j = lo; j < hi; ++j) {
      const uint16_t* kr = k + j * d.ks + kvh * D;
      float acc = 0.0f;
      for (int64_t c = 0; c < D; ++c) acc += qh[c] * f16_bits_to_f32(kr[c]);
      float sc = acc * d.scale;
      if (p.softcap > 0.0f) sc = p.softcap * std::tanh(sc / p.softcap);
      s[j] = sc;
      m = std::max(m, sc);
    }
    double sum = 0.0;
    for (int64_t j = lo; j < hi; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = lo; j < hi; ++j) {
      const float pj = f16_bits_to_f32(f32_to_f16_bits(s[j] * inv));
      const uint16_t* vr = v + j * d.vs + kvh * D;
      for (int64_t c = 0; c < D; ++c) o_row[c] += pj * f16_bits_to_f32(vr[c]);
    }
  });
}

}  // namespace rlx::cpu
