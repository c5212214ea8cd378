// What the two tensor-core prefill attention kernels share (kernels_attention.cu's
// one-stage kernel and kernels_attention_flash.cu's pipelined one): a warp owns 16 rows
// of a block, each (query row, head) pair of one KV head's group with the group's heads
// interleaved; its thread (g, t) holds rows g and g + 8 in the m16n8k16 fragment layout.
// Here: those rows, the keys each sees, q as A fragments (scaled, rounded to f16), the
// online-softmax step over a tile of scores, and the output rows.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/attention_common.cuh"

namespace rlx::cuda_backend {

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// c += a . b for one m16n8k16 tile (row-major A, column-major B), f16 in, f32 out.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// A thread's two fragment rows: query row (S for a row past the end), head, and the
/// keys [jb, je) it sees (empty past the end).
struct TcRows {
  int row[2], head[2], jb[2], je[2];
};

/// Rows f0 and f0 + 8 of KV head kvh's interleaved (row, head) pairs, batch item b.
__device__ __forceinline__ TcRows tc_rows(const AttentionParams& p, int64_t f0, int kvh, int64_t b) {
  const int G = p.n_heads / p.n_kv;
  TcRows r;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t f = f0 + 8 * i;
    r.row[i] = static_cast<int>(f < p.S * G ? f / G : p.S);
    r.head[i] = kvh * G + static_cast<int>(f % G);
    r.jb[i] = 0;
    r.je[i] = 0;
    if (r.row[i] < p.S) {
      const int64_t pos = p.q_pos ? ld_i(p.pos_dt, p.q_pos, b * p.pos_bstride + r.row[i]) : p.T - p.S + r.row[i];
      int64_t e = p.T, s0 = 0;
      visible_keys(p, b, pos, s0, e);
      r.jb[i] = static_cast<int>(s0);
      r.je[i] = static_cast<int>(e);
    }
  }
  return r;
}

/// q of the thread's rows as the A fragments of S = Q K^T (scaled, rounded to f16; rows
/// past the end as zeros).
template <typename Q, int HD>
__device__ __forceinline__ void tc_load_q(const AttentionParams& p, const TcRows& r, int64_t b, int t,
                                          uint32_t (&qa)[HD / 16][4]) {
  const Q* q = static_cast<const Q*>(p.q);
  const int64_t qw = static_cast<int64_t>(p.n_heads) * HD;
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float a = 0.0f, c = 0.0f;
        if (r.row[i] < p.S) {
          const Q* src = q + (b * p.S_full + r.row[i]) * qw + static_cast<int64_t>(r.head[i]) * HD + ks * 16 + hi * 8 + 2 * t;
          a = to_float(src[0]) * p.scale;
          c = to_float(src[1]) * p.scale;
        }
        qa[ks][hi * 2 + i] = pack_half2(a, c);
      }
}

/// The online-softmax step over one tile of scores sc (C fragments of NT n-tiles, keys
/// t0 + 8 nt + 2 t (+1)): softcap and masks when `masked` (or softcap is on), running max
/// m and sum l per row, acc rescaled; sc becomes the tile's weights exp(s - m).
template <int NT, int DN>
__device__ __forceinline__ void tc_softmax_tile(const AttentionParams& p, const TcRows& r, int t0, int t, bool masked,
                                                float (&sc)[NT][4], float (&m)[2], float (&l)[2],
                                                float (&acc)[DN][4]) {
  constexpr float kLog2e = 1.4426950408889634f;
  if (masked || p.softcap > 0.0f) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        const int j = t0 + nt * 8 + 2 * t + (e & 1);
        float v = sc[nt][e];
        if (p.softcap > 0.0f) v = p.softcap * tanhf(v / p.softcap);
        if (j < r.jb[i] || j >= r.je[i]) v = -INFINITY;
        sc[nt][e] = v;
      }
  }
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    mx[0] = fmaxf(mx[0], fmaxf(sc[nt][0], sc[nt][1]));
    mx[1] = fmaxf(mx[1], fmaxf(sc[nt][2], sc[nt][3]));
  }
  float corr[2], mu[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
    mu[i] = mx[i] == -INFINITY ? 0.0f : mx[i] * kLog2e;
    corr[i] = exp2f(m[i] * kLog2e - mu[i]);  // 0 while m is -inf
    m[i] = mx[i];
    l[i] *= corr[i];
  }
#pragma unroll
  for (int dn = 0; dn < DN; ++dn) {
    acc[dn][0] *= corr[0];
    acc[dn][1] *= corr[0];
    acc[dn][2] *= corr[1];
    acc[dn][3] *= corr[1];
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pe = exp2f(fmaf(sc[nt][e], kLog2e, -mu[e >> 1]));  // 0 for masked keys
      sc[nt][e] = pe;
      l[e >> 1] += pe;
    }
}

/// The k-step j (16 keys) of P as an A fragment: the weights of n-tiles 2j and 2j + 1.
template <int NT>
__device__ __forceinline__ void tc_weights_a(const float (&sc)[NT][4], int j, uint32_t (&a)[4]) {
  a[0] = pack_half2(sc[2 * j][0], sc[2 * j][1]);
  a[1] = pack_half2(sc[2 * j][2], sc[2 * j][3]);
  a[2] = pack_half2(sc[2 * j + 1][0], sc[2 * j + 1][1]);
  a[3] = pack_half2(sc[2 * j + 1][2], sc[2 * j + 1][3]);
}

/// The thread's output rows acc / l (l summed over the row's four threads here).
template <int HD>
__device__ __forceinline__ void tc_store_rows(const AttentionParams& p, const TcRows& r, int64_t b, int t,
                                              const float (&acc)[HD / 8][4], float (&l)[2]) {
  const int64_t qw = static_cast<int64_t>(p.n_heads) * HD;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (r.row[i] >= p.S) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    const int64_t o_off = (b * p.S_full + r.row[i]) * qw + static_cast<int64_t>(r.head[i]) * HD + 2 * t;
    if (p.out_dt == DT::F32 && reinterpret_cast<uintptr_t>(p.out) % 8 == 0) {
      float* o = static_cast<float*>(p.out) + o_off;
#pragma unroll
      for (int dn = 0; dn < HD / 8; ++dn)
        *reinterpret_cast<float2*>(o + dn * 8) = make_float2(acc[dn][2 * i] * inv, acc[dn][2 * i + 1] * inv);
    } else {
#pragma unroll
      for (int dn = 0; dn < HD / 8; ++dn) {
        st_f(p.out_dt, p.out, o_off + dn * 8, acc[dn][2 * i] * inv);
        st_f(p.out_dt, p.out, o_off + dn * 8 + 1, acc[dn][2 * i + 1] * inv);
      }
    }
  }
}

}  // namespace rlx::cuda_backend
