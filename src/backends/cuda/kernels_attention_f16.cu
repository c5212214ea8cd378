// The exact f16-cache attention of attention_f16_kernels.h. A block of four warps serves
// one query row of one head: the row's scores go to shared memory (each thread scores
// its own keys, K rows read whole), block reductions give the maximum and the sum of
// the exponentials (in double), every probability is normalised and rounded to f16 in
// place, and then each warp takes every fourth key for P.V with its lanes across
// head_dim; the warps' partial rows are added in shared memory.
#include <algorithm>
#include <cfloat>

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/attention_f16_kernels.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/smem_limit.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxChunks = kMaxHeadDim / 32;
// Shared memory a block may have (sm_80 and newer allow 163 KB and more on opt-in).
constexpr int64_t kSmemLimit = 160 * 1024;

// Dynamic shared memory for T keys and head_dim hd: scores, q, the warps' partial rows.
int64_t smem_bytes(int64_t T, int hd) { return (T + static_cast<int64_t>(hd) * (1 + kWarps)) * 4; }

__device__ __forceinline__ float block_max(float v, float* red) {
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  return m;
}

__device__ __forceinline__ double block_sum_d(double v, double* red) {
  v = warp_sum_d(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  double s = 0.0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) s += red[w];
  return s;
}

__global__ void __launch_bounds__(kThreads) attention_f16_exact_kernel(const AttentionParams p) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float smem[];
  __shared__ float red_f[kWarps];
  __shared__ double red_d[kWarps];
  const int64_t i = blockIdx.x, b = blockIdx.z;
  const int h = static_cast<int>(blockIdx.y), hd = p.hd;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int kvh = h / (p.n_heads / p.n_kv);
  const int64_t qw = static_cast<int64_t>(p.n_heads) * hd, kw = static_cast<int64_t>(p.n_kv) * hd;
  const int64_t o_off = (b * p.S_full + i) * qw + static_cast<int64_t>(h) * hd;
  if (i >= p.S) return;  // (the whole block)
  const int64_t pos = p.q_pos ? ld_i(p.pos_dt, p.q_pos, b * p.pos_bstride + i) : p.T - p.S + i;
  int64_t jb = 0, je = 0;
  visible_keys(p, b, pos, jb, je);
  if (je <= jb) {  // a row that sees no key gets zeros, as in the other kernels
    for (int d = t; d < hd; d += kThreads) st_f(p.out_dt, p.out, o_off + d, 0.0f);
    return;
  }
  const int64_t n = je - jb;
  float* q_s = smem;                 // [hd]
  float* part = q_s + hd;            // [kWarps][hd]
  float* sc = part + kWarps * hd;    // [n] scores, then probabilities
  const __half* q = static_cast<const __half*>(p.q) + o_off;
  for (int d = t; d < hd; d += kThreads) q_s[d] = __half2float(q[d]);
  __syncthreads();

  const __half* k = static_cast<const __half*>(p.k) + (b * p.T_full + jb) * kw + static_cast<int64_t>(kvh) * hd;
  float mx = -FLT_MAX;
  for (int64_t j = t; j < n; j += kThreads) {
    const __half* kr = k + j * kw;
    float acc = 0.0f;
    for (int d = 0; d < hd; ++d) acc = fmaf(q_s[d], __half2float(kr[d]), acc);
    float s = acc * p.scale;
    if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
    sc[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red_f);
  double sum = 0.0;
  for (int64_t j = t; j < n; j += kThreads) {
    const float e = expf(sc[j] - mx);
    sc[j] = e;
    sum += e;
  }
  const float inv = static_cast<float>(1.0 / block_sum_d(sum, red_d));
  for (int64_t j = t; j < n; j += kThreads) sc[j] = __half2float(__float2half_rn(sc[j] * inv));
  __syncthreads();

  const __half* v = static_cast<const __half*>(p.v) + (b * p.T_full + jb) * kw + static_cast<int64_t>(kvh) * hd;
  float acc[kMaxChunks];
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) acc[c] = 0.0f;
  for (int64_t j = warp; j < n; j += kWarps) {
    const float pj = sc[j];
    const __half* vr = v + j * kw;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < hd) acc[c] = fmaf(pj, __half2float(vr[d]), acc[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int d = lane + 32 * c;
    if (d < hd) part[warp * hd + d] = acc[c];
  }
  __syncthreads();
  for (int d = t; d < hd; d += kThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += part[w * hd + d];
    st_f(p.out_dt, p.out, o_off + d, o);
  }
}

}  // namespace

int64_t attention_f16_exact_max_keys() { return kSmemLimit / 4 - static_cast<int64_t>(kMaxHeadDim) * (1 + kWarps); }

void launch_attention_f16_exact(const AttentionParams& p, cudaStream_t s) {
  if (p.S <= 0 || p.batch <= 0) return;
  const int64_t smem = smem_bytes(p.T, p.hd);
  if (smem > 48 * 1024) raise_smem_limit<attention_f16_exact_kernel>(static_cast<int>(kSmemLimit));
  const dim3 grid(static_cast<unsigned>(p.S), static_cast<unsigned>(p.n_heads), static_cast<unsigned>(p.batch));
  launch_k(attention_f16_exact_kernel, grid, kThreads, static_cast<size_t>(smem), s, p);
}

}  // namespace rlx::cuda_backend
