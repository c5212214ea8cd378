// CUDA kernels of the mixture-of-experts ops. launch_moe_route: one block per token row,
// one thread per expert: the gate probabilities, each expert's rank among them (ties to
// the lower expert, NaN below every number), the k best kept. launch_moe_ffn: two or
// three launches that find the chosen experts on the device (the s-th nonzero of a route row,
// by warp ballots), so that no expert id reaches the host and a CUDA graph can hold them:
// first the gated hidden rows h[t, s] = act(W_gate[e] . x[t]) * (W_up[e] . x[t]) of every
// (token t, slot s) pair, then each pair's d[t, s] = W_down[e] . h[t, s], then y[t] = sum
// over the slots in order of route[t, e] * d[t, s] (a fixed order: deterministic); without
// d scratch (many rows) the last two are one launch, a block a token. A warp computes one weight row
// at a time; its lanes decode 32-element units of the row (decode_row_unit for packed
// blocks, as stored) and dot them with the vector staged in shared memory (unit u at
// u * 33: no bank conflicts), or read from global memory when it is too long to stage.
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = static_cast<int>(kMoeRowsPerBlock) / kWarps;
static_assert(kRowsPerWarp * kWarps == kMoeRowsPerBlock, "a tile is whole warps' rows");
constexpr int kPitch = 33;                // a staged vector's unit u starts at u * kPitch
constexpr int64_t kStageLimit = 48 * 1024;  // bytes of dynamic shared memory at most

// ---- moe_route ----------------------------------------------------------------------

// True when probability a of expert ia ranks above b of expert ib: a number above NaN,
// then the larger, then the lower expert (the CPU backend's scan order).
__device__ __forceinline__ bool ranks_above(float a, int ia, float b, int ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// Block of roundup(experts, 32) threads per row; thread j is expert j. The arithmetic
// is the CPU backend's (f32 exponentials, their sum in double, one f32 reciprocal).
__global__ void moe_route_kernel(const MoeRouteParams p) {
  extern __shared__ float prob[];  // [experts]: the logits, then the probabilities
  __shared__ double red[32];
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x;
  const int E = static_cast<int>(p.experts);
  const int j = threadIdx.x;
  const bool on = j < E;
  const float v = on ? ld_f(p.in_dt, p.logits, r * E + j) : 0.0f;
  float pj;
  if (p.sigmoid) {
    pj = 1.0f / (1.0f + expf(-v));
  } else {
    if (on) prob[j] = v;
    __syncthreads();
    float mx = -INFINITY;  // (fmaxf passes over NaN, as the CPU's std::max does)
    for (int i = 0; i < E; ++i) mx = fmaxf(mx, prob[i]);
    const float ex = on ? expf(v - mx) : 0.0f;
    const double sum = block_sum_d(ex, red);  // (its barriers: every thread is done reading prob)
    pj = ex * static_cast<float>(1.0 / sum);
  }
  if (on) prob[j] = pj;
  __syncthreads();
  int64_t above = 0;
  if (on)
    for (int i = 0; i < E && above < p.k; ++i) above += ranks_above(prob[i], i, pj, j) ? 1 : 0;
  const bool chosen = on && above < p.k;
  const double chosen_sum = block_sum_d(chosen ? static_cast<double>(pj) : 0.0, red);
  const float scale = p.normalize && chosen_sum > 0 ? static_cast<float>(1.0 / chosen_sum) : 1.0f;
  if (on) p.out[r * E + j] = chosen ? pj * scale : 0.0f;
}

// ---- moe_ffn ------------------------------------------------------------------------

// The n-th (from 0) nonzero entry of route row `row` [E] in expert order, found by the
// calling warp (every lane gets it): its expert, and its weight in *w; -1 when the row
// has n or fewer nonzeros. NaN counts as nonzero (as route != 0 on the CPU).
__device__ __forceinline__ int64_t nth_routed(const float* row, int64_t E, int64_t n, float* w) {
  const int lane = threadIdx.x & 31;
  int64_t seen = 0;
  for (int64_t base = 0; base < E; base += 32) {
    const float v = base + lane < E ? row[base + lane] : 0.0f;
    unsigned mask = __ballot_sync(0xFFFFFFFFu, v != 0.0f);
    const int count = __popc(mask);
    if (n < seen + count) {
      for (int64_t i = seen; i < n; ++i) mask &= mask - 1;  // drop the lower set bits
      const int bit = __ffs(static_cast<int>(mask)) - 1;
      *w = __shfl_sync(0xFFFFFFFFu, v, bit);
      return base + bit;
    }
    seen += count;
  }
  *w = 0.0f;
  return -1;
}

// src[0, n) into shared memory, element i at (i / 32) * kPitch + i % 32 (every thread).
__device__ __forceinline__ void stage(const float* src, int64_t n, float* dst) {
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[(i >> 5) * kPitch + (i & 31)] = src[i];
}

// This lane's part of row r of W (rows of K elements of type T, row_bytes apart) dotted
// with the vector v (element 32u + i at v[u * pitch + i]): lanes take units lane,
// lane + 32, ...
template <DT T>
__device__ __forceinline__ float row_dot_t(const uint8_t* w, int64_t row_bytes, int64_t r, int64_t K, const float* v,
                                           int pitch) {
  const int lane = threadIdx.x & 31;
  const int64_t units = (K + 31) / 32;
  float s = 0.0f;
  for (int64_t u = lane; u < units; u += 32) {
    const float* vu = v + u * pitch;
    if constexpr (T == DT::F32 || T == DT::F16 || T == DT::BF16) {
      const uint8_t* row = w + r * row_bytes;
      const int64_t base = u * 32;
      const int n = K - base < 32 ? static_cast<int>(K - base) : 32;
      for (int i = 0; i < n; ++i) s = fmaf(ld_f(T, row, base + i), vu[i], s);
    } else {
      float y[32];
      decode_row_unit<T>(w, row_bytes, 0, r, u, y);
#pragma unroll
      for (int i = 0; i < 32; ++i) s = fmaf(y[i], vu[i], s);
    }
  }
  return s;
}

__device__ float row_dot(DT t, const uint8_t* w, int64_t row_bytes, int64_t r, int64_t K, const float* v, int pitch) {
  switch (t) {
    case DT::F32: return row_dot_t<DT::F32>(w, row_bytes, r, K, v, pitch);
    case DT::F16: return row_dot_t<DT::F16>(w, row_bytes, r, K, v, pitch);
    case DT::BF16: return row_dot_t<DT::BF16>(w, row_bytes, r, K, v, pitch);
    case DT::Q4_0: return row_dot_t<DT::Q4_0>(w, row_bytes, r, K, v, pitch);
    case DT::Q4_1: return row_dot_t<DT::Q4_1>(w, row_bytes, r, K, v, pitch);
    case DT::Q5_0: return row_dot_t<DT::Q5_0>(w, row_bytes, r, K, v, pitch);
    case DT::Q5_1: return row_dot_t<DT::Q5_1>(w, row_bytes, r, K, v, pitch);
    case DT::Q8_0: return row_dot_t<DT::Q8_0>(w, row_bytes, r, K, v, pitch);
    case DT::Q4_K: return row_dot_t<DT::Q4_K>(w, row_bytes, r, K, v, pitch);
    case DT::Q5_K: return row_dot_t<DT::Q5_K>(w, row_bytes, r, K, v, pitch);
    case DT::Q6_K: return row_dot_t<DT::Q6_K>(w, row_bytes, r, K, v, pitch);
    case DT::IQ4_NL: return row_dot_t<DT::IQ4_NL>(w, row_bytes, r, K, v, pitch);
    case DT::IQ4_XS: return row_dot_t<DT::IQ4_XS>(w, row_bytes, r, K, v, pitch);
    case DT::IQ3_S: return row_dot_t<DT::IQ3_S>(w, row_bytes, r, K, v, pitch);
    case DT::IQ3_XXS: return row_dot_t<DT::IQ3_XXS>(w, row_bytes, r, K, v, pitch);
    case DT::IQ2_S: return row_dot_t<DT::IQ2_S>(w, row_bytes, r, K, v, pitch);
    case DT::IQ2_XS: return row_dot_t<DT::IQ2_XS>(w, row_bytes, r, K, v, pitch);
    case DT::IQ2_XXS: return row_dot_t<DT::IQ2_XXS>(w, row_bytes, r, K, v, pitch);
    case DT::IQ1_S: return row_dot_t<DT::IQ1_S>(w, row_bytes, r, K, v, pitch);
    case DT::IQ1_M: return row_dot_t<DT::IQ1_M>(w, row_bytes, r, K, v, pitch);
    case DT::TQ1_0: return row_dot_t<DT::TQ1_0>(w, row_bytes, r, K, v, pitch);
    case DT::TQ2_0: return row_dot_t<DT::TQ2_0>(w, row_bytes, r, K, v, pitch);
    default: return 0.0f;
  }
}

// The vec-dot rule of llama.cpp's CPU path for Q4_0 / Q8_0 weights (the engine the GGUF
// references come from, and what the CPU backend does): the vector is quantized to Q8_0
// blocks of 32 (d = max|v| / 127 stored as f16, q = round(v / d)) before the products.
// Rounding the staged vector to q * d gives the same products. (Other weight types, and
// vectors too long to stage, are dotted in f32.)
__device__ __forceinline__ bool q8_0_vec_dot(DT t) { return t == DT::Q4_0 || t == DT::Q8_0; }

__device__ void round_staged_to_q8_0(float* v, int64_t n) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t u = warp; u < (n + 31) / 32; u += kWarps) {
    float* vu = v + u * kPitch;
    const bool in = lane < n - u * 32;
    const float x = in ? vu[lane] : 0.0f;
    float amax = fabsf(x);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    if (in) vu[lane] = roundf(x * id) * __half2float(__float2half_rn(d));
  }
}

// The vector a block's warps dot weight rows with: v itself (pitch 32), or, with kStage,
// v staged in shared memory (pitch kPitch), rounded to Q8_0 blocks when `q8` (every
// thread; its barriers included).
template <bool kStage>
__device__ __forceinline__ const float* vector_for_dots(const float* v, int64_t n, bool q8, float* staged, int* pitch) {
  *pitch = 32;
  if constexpr (!kStage) return v;
  stage(v, n, staged);
  __syncthreads();
  if (q8) {
    round_staged_to_q8_0(staged, n);
    __syncthreads();
  }
  *pitch = kPitch;
  return staged;
}

// Grid (rows * k_max, hidden tiles): block (pair, tile) computes h[pair, f] for the
// tile's rows f, pair = t * k_max + s, with the expert of slot s of token t (a block
// whose slot is empty does nothing). kStage: x[t] staged in shared memory.
template <bool kStage>
__global__ void __launch_bounds__(kWarps * 32) moe_hidden_kernel(const MoeFfnParams p) {
  extern __shared__ float staged[];
  pdl_wait();
  pdl_trigger();
  const int64_t pair = blockIdx.x, t = pair / p.k_max, slot = pair % p.k_max;
  float weight;
  const int64_t e = nth_routed(p.route + t * p.experts, p.experts, slot, &weight);
  if (e < 0) return;  // (the same for every warp of the block)
  int pitch;
  const float* v = vector_for_dots<kStage>(p.x + t * p.dim, p.dim, q8_0_vec_dot(p.gate_dt) && q8_0_vec_dot(p.up_dt),
                                           staged, &pitch);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t f = (static_cast<int64_t>(blockIdx.y) * kWarps + warp) * kRowsPerWarp + rr;
    if (f >= p.hidden) break;
    const int64_t row = e * p.hidden + f;
    const float g = warp_sum(row_dot(p.gate_dt, p.w_gate, p.gate_row_bytes, row, p.dim, v, pitch));
    const float u = warp_sum(row_dot(p.up_dt, p.w_up, p.up_row_bytes, row, p.dim, v, pitch));
    if (lane == 0) p.h[pair * p.hidden + f] = act_fn<float>(p.act, g) * u;
  }
}

// Grid (rows * k_max, dim tiles): block (pair, tile) computes d[pair, c] = W_down[e] .
// h[pair] for the tile's rows c, e the expert of the pair's slot (an empty slot does
// nothing). kStage: the h row staged in shared memory. (One block a pair rather than a
// token: a decode step's eight slots give eight times the blocks, which its loads need.)
template <bool kStage>
__global__ void __launch_bounds__(kWarps * 32) moe_down_kernel(const MoeFfnParams p) {
  extern __shared__ float staged[];
  pdl_wait();
  pdl_trigger();
  const int64_t pair = blockIdx.x, t = pair / p.k_max, slot = pair % p.k_max;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float w;
  const int64_t e = nth_routed(p.route + t * p.experts, p.experts, slot, &w);
  if (e < 0) return;  // (the same for every warp of the block)
  int pitch;
  const float* v = vector_for_dots<kStage>(p.h + pair * p.hidden, p.hidden, q8_0_vec_dot(p.down_dt), staged, &pitch);
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * kWarps + warp) * kRowsPerWarp;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t c = c0 + rr;
    if (c >= p.dim) break;
    const float d = warp_sum(row_dot(p.down_dt, p.w_down, p.down_row_bytes, e * p.dim + c, p.hidden, v, pitch));
    if (lane == 0) p.d[pair * p.dim + c] = d;
  }
}

// Grid (rows, dim / 256): y[t, c] = sum over token t's slots in order of route weight *
// d[pair, c] (0 for a token routed nowhere). Warp 0 first lists the slots' weights: the
// nonzero entries of the route row in expert order, at most k_max (dynamic shared memory
// of k_max floats).
__global__ void __launch_bounds__(256) moe_combine_kernel(const MoeFfnParams p) {
  extern __shared__ float slot_w[];
  __shared__ int n_slots;
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x, c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const unsigned below = (1u << lane) - 1u;
    const float* row = p.route + t * p.experts;
    int64_t seen = 0;
    for (int64_t base = 0; base < p.experts && seen < p.k_max; base += 32) {
      const float v = base + lane < p.experts ? row[base + lane] : 0.0f;
      const unsigned mask = __ballot_sync(0xFFFFFFFFu, v != 0.0f);
      const int64_t at = seen + __popc(mask & below);
      if (v != 0.0f && at < p.k_max) slot_w[at] = v;
      seen += __popc(mask);
    }
    if (lane == 0) n_slots = static_cast<int>(seen < p.k_max ? seen : p.k_max);
  }
  __syncthreads();
  if (c >= p.dim) return;
  float acc = 0.0f;
  for (int s = 0; s < n_slots; ++s) acc += slot_w[s] * p.d[(t * p.k_max + s) * p.dim + c];
  p.y[t * p.dim + c] = acc;
}

// Without d scratch (runs of many rows): grid (rows, dim tiles), block (t, tile) computes
// y[t, c] for the tile's rows c over token t's slots in order, the same sums as
// moe_down_kernel + moe_combine_kernel. kStage: each slot's h row staged in shared memory.
template <bool kStage>
__global__ void __launch_bounds__(kWarps * 32) moe_down_token_kernel(const MoeFfnParams p) {
  extern __shared__ float staged[];
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * kWarps + warp) * kRowsPerWarp;
  float acc[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) acc[rr] = 0.0f;
  for (int64_t slot = 0; slot < p.k_max; ++slot) {
    float w;
    const int64_t e = nth_routed(p.route + t * p.experts, p.experts, slot, &w);
    if (e < 0) break;  // (the same for every warp of the block)
    if constexpr (kStage) __syncthreads();  // every warp is done with the previous slot's row
    int pitch;
    const float* v = vector_for_dots<kStage>(p.h + (t * p.k_max + slot) * p.hidden, p.hidden,
                                             q8_0_vec_dot(p.down_dt), staged, &pitch);
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int64_t c = c0 + rr;
      if (c < p.dim) {
        const float d = warp_sum(row_dot(p.down_dt, p.w_down, p.down_row_bytes, e * p.dim + c, p.hidden, v, pitch));
        acc[rr] += w * d;
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t c = c0 + rr;
    if (lane == 0 && c < p.dim) p.y[t * p.dim + c] = acc[rr];
  }
}

// Shared memory that stages a vector of n floats.
int64_t stage_bytes(int64_t n) { return (n + 31) / 32 * kPitch * static_cast<int64_t>(sizeof(float)); }

}  // namespace

void launch_moe_route(const MoeRouteParams& p, cudaStream_t s) {
  if (p.rows <= 0 || p.experts <= 0 || p.experts > kMoeMaxExperts) return;
  const unsigned threads = static_cast<unsigned>((p.experts + 31) / 32 * 32);
  launch_k(moe_route_kernel, dim3(static_cast<unsigned>(p.rows)), dim3(threads),
           static_cast<size_t>(p.experts) * sizeof(float), s, p);
}

void launch_moe_ffn(const MoeFfnParams& p, cudaStream_t s) {
  if (p.rows <= 0 || p.dim <= 0) return;
  const dim3 block(kWarps * 32);
  if (p.hidden > 0 && p.k_max > 0) {
    const dim3 grid(static_cast<unsigned>(p.rows * p.k_max),
                    static_cast<unsigned>((p.hidden + kMoeRowsPerBlock - 1) / kMoeRowsPerBlock));
    const int64_t bytes = stage_bytes(p.dim);
    if (bytes <= kStageLimit) launch_k(moe_hidden_kernel<true>, grid, block, static_cast<size_t>(bytes), s, p);
    else launch_k(moe_hidden_kernel<false>, grid, block, 0, s, p);
  }
  const int64_t bytes = stage_bytes(p.hidden);
  const dim3 tiles(static_cast<unsigned>((p.dim + kMoeRowsPerBlock - 1) / kMoeRowsPerBlock));
  if (p.d == nullptr) {  // many rows: a block a token, its slots summed in the block
    const dim3 grid(static_cast<unsigned>(p.rows), tiles.x);
    if (bytes <= kStageLimit) launch_k(moe_down_token_kernel<true>, grid, block, static_cast<size_t>(bytes), s, p);
    else launch_k(moe_down_token_kernel<false>, grid, block, 0, s, p);
    return;
  }
  if (p.k_max > 0) {  // few rows (decode): a block a (token, slot), then the sum in order
    const dim3 grid(static_cast<unsigned>(p.rows * p.k_max), tiles.x);
    if (bytes <= kStageLimit) launch_k(moe_down_kernel<true>, grid, block, static_cast<size_t>(bytes), s, p);
    else launch_k(moe_down_kernel<false>, grid, block, 0, s, p);
  }
  const dim3 combine(static_cast<unsigned>(p.rows), static_cast<unsigned>((p.dim + 255) / 256));
  launch_k(moe_combine_kernel, combine, 256, static_cast<size_t>(std::max<int64_t>(p.k_max, 1)) * sizeof(float), s, p);
}

}  // namespace rlx::cuda_backend
