// Helpers shared by the CUDA attention kernels (kernels_attention.cu,
// kernels_attention_f16.cu, kernels_attention_rows.cu): which keys a query row sees,
// elements as floats, and the merge of a decode row's key splits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <type_traits>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_kernels.h"

namespace rlx::cuda_backend {

// Keys [jb, je) that the query at position `pos` of batch item b sees: the mask
// (1 causal, 2 sliding window, 3 local: |pos - key| <= window), then kv_len[b].
__device__ __forceinline__ void visible_keys(const AttentionParams& p, int64_t b, int64_t pos, int64_t& jb,
                                             int64_t& je) {
  jb = 0;
  je = p.T;
  if (p.mask == 1 || p.mask == 2) je = pos + 1 < p.T ? pos + 1 : p.T;
  if (p.mask == 2) jb = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
  if (p.mask == 3) {
    jb = pos - p.window > 0 ? pos - p.window : 0;
    je = pos + p.window + 1 < p.T ? pos + p.window + 1 : p.T;
  }
  if (p.kv_len) {
    const int64_t len = p.kv_len[b];
    if (len < je) je = len > 0 ? len : 0;
  }
  if (je < jb) je = jb;
}

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return __bfloat162float(v);
}

// The V elements of a 16-byte vector of T, as floats.
template <typename T>
__device__ __forceinline__ void unpack16(const uint4& u, float* f) {
  if constexpr (std::is_same_v<T, float>) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  } else {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 v;
      if constexpr (std::is_same_v<T, __half>) v = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      else v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
}

// Decode: query head h's result for head dim d from a split of its keys (accumulator A,
// max M, sum L): with one split the output A / L, else the split's partial at
// p.partial[(split * batch * n_heads + b * n_heads + h) * (hd + 2)] (M and L once, by d 0).
__device__ __forceinline__ void store_decode_split(const AttentionParams& p, int64_t b, int h, int hd, int d,
                                                   int split, int64_t active, float A, float M, float L) {
  if (active == 1) {
    st_f(p.out_dt, p.out, (b * p.S_full * p.n_heads + h) * static_cast<int64_t>(hd) + d, L > 0.0f ? A / L : 0.0f);
    return;
  }
  float* dst = p.partial + (static_cast<int64_t>(split) * p.batch * p.n_heads + b * p.n_heads + h) * (hd + 2);
  dst[2 + d] = A;
  if (d == 0) {
    dst[0] = M;
    dst[1] = L;
  }
}

// Decode with `active` > 1 splits of the keys: each block of query heads [h0, h0 + G) of
// sequence b has written its partial (max, sum, accumulator[hd]) per head at
// p.partial[(split * batch * n_heads + b * n_heads + h) * (hd + 2)]. The last block of
// its (sequence, grid column) to finish (a counter per column in p.counters, left at zero
// again) merges them into the output. w_s / ls_s: shared scratch for G heads and `active`
// splits. Every thread of the block calls it.
template <int GM, int MS>
__device__ __forceinline__ void finish_decode_splits(const AttentionParams& p, int64_t b, int h0, int G, int hd,
                                                     int64_t active, float (&w_s)[GM][MS], float (&ls_s)[GM][MS]) {
  __shared__ bool last_s;
  __threadfence();
  __syncthreads();
  unsigned* counter = p.counters + b * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) last_s = atomicAdd(counter, 1u) == static_cast<unsigned>(active - 1);
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  const int na = static_cast<int>(active);
  const int64_t rows_total = p.batch * p.n_heads;  // S == 1
  const int64_t qw = static_cast<int64_t>(p.n_heads) * hd;
  for (int e = threadIdx.x; e < G * na; e += blockDim.x) {  // (max, sum) of every split
    const int g = e / na, sp = e % na;
    const float* src = p.partial + (static_cast<int64_t>(sp) * rows_total + b * p.n_heads + h0 + g) * (hd + 2);
    ls_s[g][sp] = __ldcg(src + 1);
    w_s[g][sp] = ls_s[g][sp] > 0.0f ? __ldcg(src) : -FLT_MAX;
  }
  __syncthreads();
  if (threadIdx.x < G) {  // weights exp(m - M) / L per split
    const int g = threadIdx.x;
    float M = -FLT_MAX;
    for (int sp = 0; sp < na; ++sp) M = fmaxf(M, w_s[g][sp]);
    float L = 0.0f;
    for (int sp = 0; sp < na; ++sp)
      if (ls_s[g][sp] > 0.0f) L += ls_s[g][sp] * __expf(w_s[g][sp] - M);
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int sp = 0; sp < na; ++sp) w_s[g][sp] = ls_s[g][sp] > 0.0f ? __expf(w_s[g][sp] - M) * inv : 0.0f;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * hd; e += blockDim.x) {
    const int g = e / hd, d = e % hd;
    const int h = h0 + g;
    const float* src = p.partial + (b * p.n_heads + h) * (hd + 2) + 2 + d;
    float a = 0.0f;
#pragma unroll 4
    for (int sp = 0; sp < na; ++sp) a = fmaf(w_s[g][sp], __ldcg(src + static_cast<int64_t>(sp) * rows_total * (hd + 2)), a);
    st_f(p.out_dt, p.out, b * p.S_full * qw + static_cast<int64_t>(h) * hd + d, a);
  }
  if (threadIdx.x == 0) *counter = 0u;  // ready for the next run
}

}  // namespace rlx::cuda_backend
