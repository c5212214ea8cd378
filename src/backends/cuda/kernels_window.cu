// CUDA kernels of SAM's windowed ViT attention (see spatial_kernels.h): the window
// partition / unpartition copies and rel_pos_attention, either a flash-style kernel on the
// f32 cores that adds the decomposed relative-position bias to each score from two small
// per-query tables in shared memory, or the pieces around two cuBLASLt products (head
// split and merge, and a one-pass biased softmax per score row).
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/smem_limit.cuh"
#include "backends/cuda/spatial_kernels.h"

namespace rlx::cuda_backend {
namespace {

constexpr int kQueries = 32;  // query rows per block
constexpr int kWarps = 8;
constexpr int kPerWarp = kQueries / kWarps;
constexpr int kKeys = 32;  // keys per shared-memory tile

__global__ void window_kernel(const WindowKParams p) {
  pdl_wait();
  // One thread per element of the window tensor (partition) or of the image (unpartition).
  const int64_t total =
      p.partition ? p.images * p.nh * p.nw * p.win * p.win * p.chan : p.images * p.height * p.width * p.chan;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ch = i % p.chan;
    int64_t b, y, x, woff;
    if (p.partition) {
      const int64_t px = i / p.chan, c = px % p.win, r = (px / p.win) % p.win, w = px / (p.win * p.win);
      b = w / (p.nh * p.nw);
      y = (w / p.nw) % p.nh * p.win + r;
      x = w % p.nw * p.win + c;
      woff = i;
    } else {
      const int64_t px = i / p.chan;
      x = px % p.width;
      y = (px / p.width) % p.height;
      b = px / (p.width * p.height);
      const int64_t w = (b * p.nh + y / p.win) * p.nw + x / p.win;
      woff = ((w * p.win + y % p.win) * p.win + x % p.win) * p.chan + ch;
    }
    const int64_t ioff = ((b * p.height + y) * p.width + x) * p.chan + ch;
    if (p.partition)
      p.y[i] = (y < p.height && x < p.width) ? p.x[ioff] : 0.0f;
    else
      p.y[i] = p.x[woff];
  }
  pdl_trigger();
}

// This lane's share of q . (the table row bias column t of query i reads): column t < gh
// is rel_h[yi - t + gh - 1], else rel_w[xi - (t - gh) + gw - 1]; lanes stride head_dim.
template <class P>
__device__ float bias_dot(const float* q, const P& p, int i, int t, int lane) {
  const int D = static_cast<int>(p.head_dim), gh = static_cast<int>(p.grid_h), gw = static_cast<int>(p.grid_w);
  const float* tab = t < gh ? p.rel_h + int64_t{i / gw - t + gh - 1} * D : p.rel_w + int64_t{i % gw - (t - gh) + gw - 1} * D;
  float acc = 0.0f;
  for (int c = lane; c < D; c += 32) acc += q[c] * tab[c];
  return acc;
}

// Shared memory (floats): q tile [kQueries][D], K tile [kKeys][D + 4] (or D + 1 when D is
// no multiple of 4; padded: lanes read different rows), V tile [kKeys][D], bias
// [kQueries][gh + gw].
// kLaneDims = ceil(head_dim / 32): each lane's share of an output row, kept in registers.
template <int kLaneDims>
__global__ void __launch_bounds__(kWarps * 32) rel_pos_attention_kernel(const RelPosAttnKParams p) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(p.head_dim), gh = static_cast<int>(p.grid_h), gw = static_cast<int>(p.grid_w);
  const int T = gh * gw, nb = gh + gw;
  const int64_t W = p.n_heads * p.head_dim;
  const int q0 = blockIdx.x * kQueries, h = blockIdx.y;
  const int64_t item = blockIdx.z;
  const int KS = D % 4 == 0 ? D + 4 : D + 1;  // K rows padded: lanes read different rows
  float* qs = smem;
  float* ks = qs + kQueries * D;
  float* vs = ks + kKeys * KS;
  float* bias = vs + kKeys * D;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* qg = p.q + item * T * W + h * D;
  const float* kg = p.k + item * T * W + h * D;
  const float* vg = p.v + item * T * W + h * D;
  pdl_wait();
  for (int idx = tid; idx < kQueries * D; idx += blockDim.x) {
    const int r = idx / D, c = idx % D;
    qs[idx] = q0 + r < T ? qg[int64_t{q0 + r} * W + c] : 0.0f;
  }
  __syncthreads();
  // bias[r][ky] = q_r . rel_h[yi - ky + gh - 1], bias[r][gh + kx] = q_r . rel_w[xi - kx + gw - 1]:
  // a warp per dot product, its lanes across head_dim (coalesced table reads).
  for (int idx = warp; idx < kQueries * nb; idx += kWarps) {
    const int r = idx / nb, t = idx % nb, i = min(q0 + r, T - 1);
    bias[idx] = warp_sum(bias_dot(qs + r * D, p, i, t, lane));
  }
  float m[kPerWarp], l[kPerWarp], acc[kPerWarp][kLaneDims];
#pragma unroll
  for (int u = 0; u < kPerWarp; ++u) {
    m[u] = -INFINITY;
    l[u] = 0.0f;
#pragma unroll
    for (int t = 0; t < kLaneDims; ++t) acc[u][t] = 0.0f;
  }
  for (int j0 = 0; j0 < T; j0 += kKeys) {
    __syncthreads();  // the previous tile is consumed (and the bias written)
    for (int idx = tid; idx < kKeys * D; idx += blockDim.x) {
      const int r = idx / D, c = idx % D;
      const bool ok = j0 + r < T;
      ks[r * KS + c] = ok ? kg[int64_t{j0 + r} * W + c] : 0.0f;
      vs[idx] = ok ? vg[int64_t{j0 + r} * W + c] : 0.0f;
    }
    __syncthreads();
    const int j = j0 + lane;
    const bool valid = j < T;
    const int yj = j / gw, xj = j % gw;
    // The warp's query rows against this lane's key, each key value loaded once for all
    // of them (four at a time when head_dim allows).
    float dot[kPerWarp] = {};
    const float* qw = qs + warp * kPerWarp * D;
    if (D % 4 == 0) {
      const auto* kr = reinterpret_cast<const float4*>(ks + lane * KS);
      for (int c4 = 0; c4 < D / 4; ++c4) {
        const float4 kv = kr[c4];
#pragma unroll
        for (int u = 0; u < kPerWarp; ++u) {
          const float4 qv = reinterpret_cast<const float4*>(qw + u * D)[c4];
          dot[u] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
        }
      }
    } else {
      for (int c = 0; c < D; ++c) {
        const float kv = ks[lane * KS + c];
#pragma unroll
        for (int u = 0; u < kPerWarp; ++u) dot[u] += qw[u * D + c] * kv;
      }
    }
    float pr[kPerWarp];
#pragma unroll
    for (int u = 0; u < kPerWarp; ++u) {
      const int r = warp * kPerWarp + u;
      const float s = valid ? dot[u] * p.scale + bias[r * nb + yj] + bias[r * nb + gh + xj] : -INFINITY;
      const float m_new = fmaxf(m[u], warp_max(s));
      const float alpha = m[u] == -INFINITY ? 0.0f : __expf(m[u] - m_new);
      pr[u] = valid ? __expf(s - m_new) : 0.0f;
      l[u] = l[u] * alpha + warp_sum(pr[u]);
      m[u] = m_new;
#pragma unroll
      for (int t = 0; t < kLaneDims; ++t) acc[u][t] *= alpha;
    }
    for (int jj = 0; jj < kKeys; ++jj) {
      float pj[kPerWarp];
#pragma unroll
      for (int u = 0; u < kPerWarp; ++u) pj[u] = __shfl_sync(0xffffffffu, pr[u], jj);
#pragma unroll
      for (int t = 0; t < kLaneDims; ++t) {
        const int d = lane + 32 * t;
        const float vv = d < D ? vs[jj * D + d] : 0.0f;
#pragma unroll
        for (int u = 0; u < kPerWarp; ++u) acc[u][t] += pj[u] * vv;
      }
    }
  }
  for (int u = 0; u < kPerWarp; ++u) {
    const int i = q0 + warp * kPerWarp + u;
    if (i >= T) continue;
    float* orow = p.o + (item * T + i) * W + h * D;
    const float inv = 1.0f / l[u];
#pragma unroll
    for (int t = 0; t < kLaneDims; ++t) {
      const int d = lane + 32 * t;
      if (d < D) orow[d] = acc[u][t] * inv;
    }
  }
  pdl_trigger();
}

constexpr int kSoftmaxThreads = 256;
constexpr int kSoftmaxPer = static_cast<int>(kRelPosSoftmaxMaxKeys / kSoftmaxThreads);

__global__ void rel_pos_split_kernel(const RelPosGemmKParams p) {
  pdl_wait();
  const int64_t T = p.grid_h * p.grid_w, D = p.head_dim, W = p.n_heads * D, total = p.items * T * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % D, h = (i / D) % p.n_heads, t = (i / W) % T, n = i / (T * W);
    const int64_t dst = ((n * p.n_heads + h) * T + t) * D + c;
    p.qh[dst] = p.q[i];
    p.kh[dst] = p.k[i];
    p.vh[dst] = p.v[i];
  }
  pdl_trigger();
}

__global__ void rel_pos_merge_kernel(const RelPosGemmKParams p) {
  pdl_wait();
  const int64_t T = p.grid_h * p.grid_w, D = p.head_dim, W = p.n_heads * D, total = p.items * T * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % D, h = (i / D) % p.n_heads, t = (i / W) % T, n = i / (T * W);
    p.o[i] = p.oh[((n * p.n_heads + h) * T + t) * D + c];
  }
  pdl_trigger();
}

// Block-wide reduction of one value per thread (max or sum) through `red` (32 floats).
template <bool kMax>
__device__ float block_reduce(float v, float* red) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // red may still be read from the previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(v) : warp_sum(v);
}

// One block per score row: the row's bias terms (from the q . table products made by
// two GEMMs) in shared memory, the biased scores in registers (kPer per thread), their max
// and sum, and the probabilities written back once.
template <int kPer>
__global__ void __launch_bounds__(kSoftmaxThreads) rel_pos_softmax_kernel(const RelPosGemmKParams p) {
  extern __shared__ float smem[];
  const int gh = static_cast<int>(p.grid_h), gw = static_cast<int>(p.grid_w);
  const int T = gh * gw, nb = gh + gw, lh = 2 * gh - 1, lw = 2 * gw - 1, tid = threadIdx.x;
  const int64_t row = blockIdx.x;
  const int i = static_cast<int>(row % T), yi = i / gw, xi = i % gw;
  float* bias = smem;
  float* red = bias + nb;
  float* s = p.scores + row * T;
  pdl_wait();
  // bias[ky] = q . rel_h[yi - ky + gh - 1], bias[gh + kx] = q . rel_w[xi - kx + gw - 1].
  for (int t = tid; t < nb; t += kSoftmaxThreads)
    bias[t] = t < gh ? p.bias_h[row * lh + yi - t + gh - 1] : p.bias_w[row * lw + xi - (t - gh) + gw - 1];
  __syncthreads();
  float v[kPer];
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = tid + k * kSoftmaxThreads;
    v[k] = j < T ? s[j] * p.scale + bias[j / gw] + bias[gh + j % gw] : -INFINITY;
    mx = fmaxf(mx, v[k]);
  }
  mx = block_reduce<true>(mx, red);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    v[k] = tid + k * kSoftmaxThreads < T ? __expf(v[k] - mx) : 0.0f;
    sum += v[k];
  }
  const float inv = 1.0f / block_reduce<false>(sum, red);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = tid + k * kSoftmaxThreads;
    if (j < T) s[j] = v[k] * inv;
  }
  pdl_trigger();
}

// One launch of the flash kernel over at most 65535 items (gridDim.z).
void launch_rel_pos_slice(const RelPosAttnKParams& p, int64_t T, size_t bytes, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((T + kQueries - 1) / kQueries), static_cast<unsigned>(p.n_heads),
                  static_cast<unsigned>(p.items));
  switch ((p.head_dim + 31) / 32) {
    case 1: launch_k(rel_pos_attention_kernel<1>, grid, kWarps * 32, bytes, s, p); break;
    case 2: launch_k(rel_pos_attention_kernel<2>, grid, kWarps * 32, bytes, s, p); break;
    case 3: launch_k(rel_pos_attention_kernel<3>, grid, kWarps * 32, bytes, s, p); break;
    case 4: launch_k(rel_pos_attention_kernel<4>, grid, kWarps * 32, bytes, s, p); break;
    case 5: launch_k(rel_pos_attention_kernel<5>, grid, kWarps * 32, bytes, s, p); break;
    case 6: launch_k(rel_pos_attention_kernel<6>, grid, kWarps * 32, bytes, s, p); break;
    case 7: launch_k(rel_pos_attention_kernel<7>, grid, kWarps * 32, bytes, s, p); break;
    default: launch_k(rel_pos_attention_kernel<8>, grid, kWarps * 32, bytes, s, p); break;
  }
}

}  // namespace

void launch_rel_pos_split(const RelPosGemmKParams& p, cudaStream_t s) {
  const int64_t total = p.items * p.grid_h * p.grid_w * p.n_heads * p.head_dim;
  if (total > 0) launch_k(rel_pos_split_kernel, grid_for(total, 256), 256, 0, s, p);
}

void launch_rel_pos_merge(const RelPosGemmKParams& p, cudaStream_t s) {
  const int64_t total = p.items * p.grid_h * p.grid_w * p.n_heads * p.head_dim;
  if (total > 0) launch_k(rel_pos_merge_kernel, grid_for(total, 256), 256, 0, s, p);
}

void launch_rel_pos_softmax(const RelPosGemmKParams& p, cudaStream_t s) {
  const int64_t rows = p.items * p.n_heads * p.grid_h * p.grid_w;
  if (rows == 0) return;
  const size_t smem = sizeof(float) * static_cast<size_t>(p.grid_h + p.grid_w + 32);
  const int64_t per = (p.grid_h * p.grid_w + kSoftmaxThreads - 1) / kSoftmaxThreads;
  const auto blocks = static_cast<unsigned>(rows);
  if (per <= 1) launch_k(rel_pos_softmax_kernel<1>, blocks, kSoftmaxThreads, smem, s, p);
  else if (per <= 4) launch_k(rel_pos_softmax_kernel<4>, blocks, kSoftmaxThreads, smem, s, p);
  else if (per <= 16) launch_k(rel_pos_softmax_kernel<16>, blocks, kSoftmaxThreads, smem, s, p);
  else launch_k(rel_pos_softmax_kernel<kSoftmaxPer>, blocks, kSoftmaxThreads, smem, s, p);
}

void launch_window(const WindowKParams& p, cudaStream_t s) {
  const int64_t total =
      p.partition ? p.images * p.nh * p.nw * p.win * p.win * p.chan : p.images * p.height * p.width * p.chan;
  if (total == 0) return;
  launch_k(window_kernel, grid_for(total, 256), 256, 0, s, p);
}

int64_t rel_pos_attention_smem(int64_t head_dim, int64_t grid_h, int64_t grid_w) {
  const int64_t ks = head_dim % 4 == 0 ? head_dim + 4 : head_dim + 1;
  return 4 * (kQueries * head_dim + kQueries * (grid_h + grid_w) + kKeys * ks + kKeys * head_dim);
}

bool prepare_rel_pos_attention(int64_t smem_bytes) {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return false;
  if (smem_bytes > optin) return false;
  // Every later launch fits under the opt-in maximum.
  raise_smem_limit<rel_pos_attention_kernel<1>>(optin);
  raise_smem_limit<rel_pos_attention_kernel<2>>(optin);
  raise_smem_limit<rel_pos_attention_kernel<3>>(optin);
  raise_smem_limit<rel_pos_attention_kernel<4>>(optin);
  raise_smem_limit<rel_pos_attention_kernel<5>>(optin);
  raise_smem_limit<rel_pos_attention_kernel<6>>(optin);
  raise_smem_limit<rel_pos_attention_kernel<7>>(optin);
  raise_smem_limit<rel_pos_attention_kernel<8>>(optin);
  return true;
}

void launch_rel_pos_attention(const RelPosAttnKParams& p, cudaStream_t s) {
  const int64_t T = p.grid_h * p.grid_w;
  if (p.items == 0 || T == 0) return;
  const auto smem = static_cast<int>(rel_pos_attention_smem(p.head_dim, p.grid_h, p.grid_w));
  const auto bytes = static_cast<size_t>(smem);
  // gridDim.z holds at most 65535 items: launch slices of them.
  constexpr int64_t kMaxItems = 65535;
  const int64_t per_item = T * p.n_heads * p.head_dim;
  for (int64_t n0 = 0; n0 < p.items; n0 += kMaxItems) {
    RelPosAttnKParams slice = p;
    slice.items = std::min(kMaxItems, p.items - n0);
    slice.q += n0 * per_item;
    slice.k += n0 * per_item;
    slice.v += n0 * per_item;
    slice.o += n0 * per_item;
    launch_rel_pos_slice(slice, T, bytes, s);
  }
}

}  // namespace rlx::cuda_backend
