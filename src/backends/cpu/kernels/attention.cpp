// Attention driver: per-query visible key ranges from the mask, task grids over
// (head, query block), or for decode (kv head, head group, key chunk) — or ranges of
// whole cache rows over long contexts — and the merge of per-chunk partial softmax
// states. Row-group math lives in isa_impl.inc (attn_rows).
#include "backends/cpu/kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/half.h"
#include "rlx/base/status.h"

namespace rlx::cpu {
namespace {

using detail::AttnRows;
using detail::kAttnRows;

constexpr int64_t kQueryBlock = 16;     // query rows per prefill task
constexpr int64_t kDecodeChunk = 512;   // keys per decode task when T is split
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

// Partial softmax states (per head h and key chunk c, at part + h * head_step + c *
// chunk_step: D unnormalised output values, then max and sum) merged into o.
void merge_partials(const KernelContext& ctx, const float* part, int64_t chunks, int64_t head_step,
                    int64_t chunk_step, int64_t H, int64_t D, float* o) {
  parallel_for(ctx, H, [&](int64_t h) {
    const float* ph = part + h * head_step;
    float M = -INFINITY;
    for (int64_t c = 0; c < chunks; ++c) M = std::max(M, ph[c * chunk_step + D]);
    float* oh = o + h * D;
    std::fill(oh, oh + D, 0.0f);
    if (M == -INFINITY) return;
    float L = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      const float* pc = ph + c * chunk_step;
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
  merge_partials(ctx, part, chunks, row, H * row, H, D, o);
}

// S == 1: rows of a task are the heads of one kv group (they share K/V loads); long
// contexts are also split into key chunks whose partial softmax states are merged.
void decode(const KernelContext& ctx, const detail::IsaKernels& kk, const AttentionParams& p, const Dense& d,
            const float* q, const float* k, const float* v, float* o) {
  const int64_t H = p.n_heads, D = p.head_dim, KVH = p.n_kv_heads, group = H / KVH;
  int64_t lo0, hi0;
  key_range(p, 0, &lo0, &hi0);
  const int64_t visible = hi0 - lo0;
  if (visible >= kRowsMinKeys) return decode_rows(ctx, kk, p, d, q, k, v, o, lo0, visible);
  const int64_t hgroups = (group + kAttnRows - 1) / kAttnRows;
  int64_t chunks = 1;
  if (ctx.n_threads() > 1 && visible > kDecodeChunk)
    chunks = std::min<int64_t>((visible + kDecodeChunk - 1) / kDecodeChunk, 4 * ctx.n_threads());
  const int64_t tasks = KVH * hgroups * chunks;
  auto run = [&](int64_t t, float* part) {
    const int64_t c = t % chunks, hg = (t / chunks) % hgroups, kvh = t / (chunks * hgroups);
    const int64_t h0 = kvh * group + hg * kAttnRows;
    const int nq = static_cast<int>(std::min<int64_t>(kAttnRows, kvh * group + group - h0));
    int64_t lo[kAttnRows], hi[kAttnRows];
    const int64_t c_lo = lo0 + visible * c / chunks, c_hi = lo0 + visible * (c + 1) / chunks;
    for (int r = 0; r < nq; ++r) {
      lo[r] = c_lo;
      hi[r] = c_hi;
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
    if (part == nullptr) {
      a.o = o + h0 * D;
      a.o_stride = D;
    } else {
      // partial state of (head h, chunk c): [D] o, then m, l
      const int64_t row = D + 2;
      float* base = part + (h0 * chunks + c) * row;
      a.o = base;
      a.o_stride = chunks * row;
      float m[kAttnRows], l[kAttnRows];
      a.m_out = m;
      a.l_out = l;
      kk.attn_rows(a);
      for (int r = 0; r < nq; ++r) {
        base[r * chunks * row + D] = m[r];
        base[r * chunks * row + D + 1] = l[r];
      }
      return;
    }
    kk.attn_rows(a);
  };
  if (chunks == 1) {
    parallel_for(ctx, tasks, [&](int64_t t) { run(t, nullptr); });
    return;
  }
  auto* part = static_cast<float*>(
      thread_scratch(ScratchSlot::kShared, static_cast<size_t>(H * chunks * (D + 2)) * sizeof(float)));
  parallel_for(ctx, tasks, [&](int64_t t) { run(t, part); });
  merge_partials(ctx, part, chunks, chunks * (D + 2), D + 2, H, D, o);
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
