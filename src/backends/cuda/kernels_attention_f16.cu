// The exact f16-cache attention of attention_f16_kernels.h, in two forms.
//
// Whole rows (attention_f16_exact_kernel): a block of four warps serves one query row of
// one head. Scores go to shared memory; block reductions give the maximum and the sum of
// the exponentials (in double); every probability is normalised and rounded to f16 in
// place; each warp then takes every fourth key for P.V with its lanes across head_dim,
// and the warps' partial rows are added in shared memory.
//
// Split rows (few rows, many keys: decode): the row's keys are cut into chunks of
// kChunk, G blocks a row taking every G-th chunk, over three kernels — the scores (to
// the step's scratch) and each chunk's maximum; the exponentials against the row's
// maximum and each chunk's sum of them (double); the normalised f16 probabilities times
// V as a partial row per chunk, which the row's last block adds in chunk order. A row of
// at most one chunk (the first steps of a generation) is done whole by one block of the
// first kernel; the other two pass it by.
//
// Both score a key as the CPU's attention_f16kv does, q.k summed over the dims in order:
// a warp copies 32 K rows at a time through its shared tile (f16 pairs, coalesced), and
// lane l sums the dot of row l.
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
constexpr int kMaxPairs = kMaxHeadDim / 64;  // f16 pairs of a row per lane
constexpr int kTileStride = 33;              // words a tile row takes (conflict-free column reads)
constexpr int kTileWords = 32 * kTileStride;  // one warp's tile: 32 rows x 64 dims
constexpr int kChunk = 256;                  // keys a block of the split form takes
// Shared memory a block may have (sm_80 and newer allow 163 KB and more on opt-in).
constexpr int64_t kSmemLimit = 160 * 1024;

// Dynamic shared memory of the whole-row kernel for T keys and head_dim hd: scores, q,
// the warps' partial rows, the warps' tiles.
int64_t smem_bytes(int64_t T, int hd) { return (T + static_cast<int64_t>(hd) * (1 + kWarps) + kWarps * kTileWords) * 4; }

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

// The raw dots q.k of keys k[0 .. count) (count <= 32, rows kw apart) for one warp:
// lane l gets key l's (0 past count), summed over the dims in order. The warp copies the
// rows through `tile` 64 dims at a time. Every lane of the warp must call it.
__device__ float tile_dots(const __half* k, int64_t kw, int count, const float* q_s, int hd, __half2* tile) {
  const int lane = threadIdx.x & 31;
  float acc = 0.0f;
  for (int d0 = 0; d0 < hd; d0 += 64) {
    const int words = min(32, (hd - d0) / 2);
    __syncwarp();
    for (int w = lane; w < 32 * words; w += 32) {
      const int row = w / words, col = w - row * words;
      tile[row * kTileStride + col] = row < count
                                          ? *reinterpret_cast<const __half2*>(k + row * kw + d0 + 2 * col)
                                          : __float2half2_rn(0.0f);
    }
    __syncwarp();
    for (int c = 0; c < words; ++c) {
      const float2 f = __half22float2(tile[lane * kTileStride + c]);
      acc = fmaf(q_s[d0 + 2 * c], f.x, acc);
      acc = fmaf(q_s[d0 + 2 * c + 1], f.y, acc);
    }
  }
  return lane < count ? acc : 0.0f;
}

// A query row's place: its output offset, its visible keys [jb, je), and the K / V
// rows of its KV head from jb on.
struct Row {
  int64_t o_off, jb, je;
  const __half *k, *v;
};

__device__ __forceinline__ Row row_of(const AttentionParams& p, int64_t b, int64_t i, int h) {
  const int kvh = h / (p.n_heads / p.n_kv);
  const int64_t qw = static_cast<int64_t>(p.n_heads) * p.hd, kw = static_cast<int64_t>(p.n_kv) * p.hd;
  Row r;
  r.o_off = (b * p.S_full + i) * qw + static_cast<int64_t>(h) * p.hd;
  const int64_t pos = p.q_pos ? ld_i(p.pos_dt, p.q_pos, b * p.pos_bstride + i) : p.T - p.S + i;
  visible_keys(p, b, pos, r.jb, r.je);
  const int64_t kv_off = (b * p.T_full + r.jb) * kw + static_cast<int64_t>(kvh) * p.hd;
  r.k = static_cast<const __half*>(p.k) + kv_off;
  r.v = static_cast<const __half*>(p.v) + kv_off;
  return r;
}

// q of the row, f16 -> f32, into shared memory (then a barrier).
__device__ __forceinline__ void load_q(const AttentionParams& p, const Row& r, float* q_s) {
  const __half* q = static_cast<const __half*>(p.q) + r.o_off;
  for (int d = threadIdx.x; d < p.hd; d += blockDim.x) q_s[d] = __half2float(q[d]);
  __syncthreads();
}

__device__ __forceinline__ float finish_score(const AttentionParams& p, float dot) {
  float s = dot * p.scale;
  if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
  return s;
}

// P.V over keys [j0, j1) of the row (warp w takes j0 + w, j0 + w + kWarps, ...), the
// probabilities in prob[j - j0]; the warps' rows added into part[0 .. hd) (a barrier first).
__device__ void weighted_values(const AttentionParams& p, const __half* v, int64_t j0, int64_t j1, const float* prob,
                                float* part, float* out_row) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, pairs = p.hd / 2;
  const int64_t kw = static_cast<int64_t>(p.n_kv) * p.hd;
  float2 acc[kMaxPairs];
#pragma unroll
  for (int c = 0; c < kMaxPairs; ++c) acc[c] = make_float2(0.0f, 0.0f);
  for (int64_t j = j0 + warp; j < j1; j += kWarps) {
    const float pj = prob[j - j0];
    const __half2* vr = reinterpret_cast<const __half2*>(v + j * kw);
#pragma unroll
    for (int c = 0; c < kMaxPairs; ++c) {
      const int d2 = lane + 32 * c;
      if (d2 < pairs) {
        const float2 vv = __half22float2(vr[d2]);
        acc[c].x = fmaf(pj, vv.x, acc[c].x);
        acc[c].y = fmaf(pj, vv.y, acc[c].y);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kMaxPairs; ++c) {
    const int d2 = lane + 32 * c;
    if (d2 < pairs) {
      part[warp * p.hd + 2 * d2] = acc[c].x;
      part[warp * p.hd + 2 * d2 + 1] = acc[c].y;
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < p.hd; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += part[w * p.hd + d];
    out_row[d] = o;
  }
}

__global__ void __launch_bounds__(kThreads) attention_f16_exact_kernel(const AttentionParams p) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float smem[];
  __shared__ float red_f[kWarps];
  __shared__ double red_d[kWarps];
  __shared__ float out_s[kMaxHeadDim];
  const int64_t i = blockIdx.x, b = blockIdx.z;
  const int h = static_cast<int>(blockIdx.y), hd = p.hd;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (i >= p.S) return;  // (the whole block)
  const Row r = row_of(p, b, i, h);
  if (r.je <= r.jb) {  // a row that sees no key gets zeros, as in the other kernels
    for (int d = t; d < hd; d += kThreads) st_f(p.out_dt, p.out, r.o_off + d, 0.0f);
    return;
  }
  const int64_t n = r.je - r.jb, kw = static_cast<int64_t>(p.n_kv) * hd;
  float* q_s = smem;                                              // [hd]
  float* part = q_s + hd;                                         // [kWarps][hd]
  __half2* tile = reinterpret_cast<__half2*>(part + kWarps * hd) + warp * kTileWords;  // per warp
  float* sc = part + kWarps * hd + kWarps * kTileWords;           // [n] scores, then probabilities
  load_q(p, r, q_s);

  float mx = -FLT_MAX;
  for (int64_t j0 = static_cast<int64_t>(warp) * 32; j0 < n; j0 += kThreads) {
    const int count = static_cast<int>(min(static_cast<int64_t>(32), n - j0));
    const float dot = tile_dots(r.k + j0 * kw, kw, count, q_s, hd, tile);
    if (lane < count) {
      const float s = finish_score(p, dot);
      sc[j0 + lane] = s;
      mx = fmaxf(mx, s);
    }
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
  weighted_values(p, r.v, 0, n, sc, part, out_s);
  __syncthreads();
  for (int d = t; d < hd; d += kThreads) st_f(p.out_dt, p.out, r.o_off + d, out_s[d]);
}

// ---- the split form: grid (G, heads, batch * S), G blocks per row ----
//
// A row's keys are cut into chunks of kChunk; block x of a row takes chunks x, x + G, ...
// A row of one chunk is done whole by its first block in the scores kernel.

// The scratch of the split form for R = batch * S * heads rows of at most T keys in C
// chunks: chunk sums [R, C] f64, scores (then exponentials) [R, T] f32, chunk maxima
// [R, C] f32, partial rows [R, C, hd] f32.
struct SplitScratch {
  double* chunk_sum;
  float* scores;
  float* chunk_max;
  float* part;
  int64_t T, C;
};

__host__ __device__ inline int64_t split_chunks(int64_t T) { return (T + kChunk - 1) / kChunk; }

__device__ inline SplitScratch split_scratch(const AttentionParams& p) {
  const int64_t R = p.batch * p.S_full * p.n_heads;
  SplitScratch s;
  s.T = p.T_full;
  s.C = split_chunks(p.T_full);
  s.chunk_sum = reinterpret_cast<double*>(p.partial);  // first: 8-byte aligned
  s.scores = reinterpret_cast<float*>(s.chunk_sum + R * s.C);
  s.chunk_max = s.scores + R * s.T;
  s.part = s.chunk_max + R * s.C;
  return s;
}

// The block's row: its place, its index among the R rows, its key count and chunks.
struct SplitRow {
  Row r;
  int64_t row, n, nc;
};

__device__ __forceinline__ SplitRow split_row(const AttentionParams& p) {
  const int64_t bi = blockIdx.z, b = bi / p.S, i = bi - b * p.S;
  const int h = static_cast<int>(blockIdx.y);
  SplitRow s;
  s.r = row_of(p, b, i, h);
  s.row = (b * p.S_full + i) * p.n_heads + h;
  s.n = s.r.je - s.r.jb;
  s.nc = split_chunks(s.n);
  return s;
}

// Scores of keys [c0, c1) of the row into sc[j - c0 + at] (at: 0 for shared memory that
// holds the chunk, c0 for the row's scratch); returns the block's maximum of them.
__device__ float score_chunk(const AttentionParams& p, const SplitRow& s, int64_t c0, int64_t c1, const float* q_s,
                             __half2* tiles, float* sc, float* red_f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t kw = static_cast<int64_t>(p.n_kv) * p.hd;
  float mx = -FLT_MAX;
  for (int64_t j0 = c0 + warp * 32; j0 < c1; j0 += kThreads) {
    const int count = static_cast<int>(min(static_cast<int64_t>(32), c1 - j0));
    const float dot = tile_dots(s.r.k + j0 * kw, kw, count, q_s, p.hd, tiles + warp * kTileWords);
    if (lane < count) {
      const float v = finish_score(p, dot);
      sc[j0 + lane] = v;
      mx = fmaxf(mx, v);
    }
  }
  return block_max(mx, red_f);
}

__global__ void __launch_bounds__(kThreads) f16_split_scores_kernel(const AttentionParams p) {
  pdl_wait();
  pdl_trigger();
  __shared__ float q_s[kMaxHeadDim];
  __shared__ __half2 tiles[kWarps * kTileWords];
  __shared__ float red_f[kWarps];
  __shared__ double red_d[kWarps];
  __shared__ float prob[kChunk];
  __shared__ float part[kWarps * kMaxHeadDim];
  __shared__ float o_s[kMaxHeadDim];
  const SplitRow s = split_row(p);
  if (s.nc <= 1) {  // the whole row here, in shared memory (or zeros for a row without keys)
    if (blockIdx.x != 0) return;
    if (s.n == 0) {
      for (int d = threadIdx.x; d < p.hd; d += kThreads) st_f(p.out_dt, p.out, s.r.o_off + d, 0.0f);
      return;
    }
    load_q(p, s.r, q_s);
    const float mx = score_chunk(p, s, 0, s.n, q_s, tiles, prob, red_f);
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < s.n; j += kThreads) {
      const float e = expf(prob[j] - mx);
      prob[j] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / block_sum_d(sum, red_d));
    for (int64_t j = threadIdx.x; j < s.n; j += kThreads) prob[j] = __half2float(__float2half_rn(prob[j] * inv));
    __syncthreads();
    weighted_values(p, s.r.v, 0, s.n, prob, part, o_s);
    __syncthreads();
    for (int d = threadIdx.x; d < p.hd; d += kThreads) st_f(p.out_dt, p.out, s.r.o_off + d, o_s[d]);
    return;
  }
  const SplitScratch x = split_scratch(p);
  load_q(p, s.r, q_s);
  float* sc = x.scores + s.row * x.T;
  for (int64_t c = blockIdx.x; c < s.nc; c += gridDim.x) {
    const float mx = score_chunk(p, s, c * kChunk, min(s.n, (c + 1) * kChunk), q_s, tiles, sc, red_f);
    if (threadIdx.x == 0) x.chunk_max[s.row * x.C + c] = mx;
  }
}

// The exponentials of the row's chunks against the row's maximum (in place) and each
// chunk's sum of them (double).
__global__ void __launch_bounds__(kThreads) f16_split_exp_kernel(const AttentionParams p) {
  pdl_wait();
  pdl_trigger();
  __shared__ double red_d[kWarps];
  const SplitRow s = split_row(p);
  if (s.nc <= 1) return;  // done by the scores kernel
  const SplitScratch x = split_scratch(p);
  float mx = -FLT_MAX;
  for (int64_t c = 0; c < s.nc; ++c) mx = fmaxf(mx, x.chunk_max[s.row * x.C + c]);
  float* sc = x.scores + s.row * x.T;
  for (int64_t c = blockIdx.x; c < s.nc; c += gridDim.x) {
    const int64_t c0 = c * kChunk, c1 = min(s.n, c0 + kChunk);
    double sum = 0.0;
    for (int64_t j = c0 + threadIdx.x; j < c1; j += kThreads) {
      const float e = expf(sc[j] - mx);
      sc[j] = e;
      sum += e;
    }
    sum = block_sum_d(sum, red_d);
    if (threadIdx.x == 0) x.chunk_sum[s.row * x.C + c] = sum;
    __syncthreads();  // (red_d is read by every thread before the next chunk writes it)
  }
}

// The row's normalised f16 probabilities times V, a partial row per chunk; the row's
// last block to finish adds them in chunk order.
__global__ void __launch_bounds__(kThreads) f16_split_values_kernel(const AttentionParams p) {
  pdl_wait();
  pdl_trigger();
  __shared__ float prob[kChunk];
  __shared__ float part[kWarps * kMaxHeadDim];
  __shared__ bool last;
  const SplitRow s = split_row(p);
  if (s.nc <= 1) return;  // done by the scores kernel
  const SplitScratch x = split_scratch(p);
  double total = 0.0;
  for (int64_t c = 0; c < s.nc; ++c) total += x.chunk_sum[s.row * x.C + c];
  const float inv = static_cast<float>(1.0 / total);
  const float* sc = x.scores + s.row * x.T;
  for (int64_t c = blockIdx.x; c < s.nc; c += gridDim.x) {
    const int64_t c0 = c * kChunk, c1 = min(s.n, c0 + kChunk);
    __syncthreads();  // (prob and part of the previous chunk are read)
    for (int64_t j = c0 + threadIdx.x; j < c1; j += kThreads) prob[j - c0] = __half2float(__float2half_rn(sc[j] * inv));
    __syncthreads();
    weighted_values(p, s.r.v, c0, c1, prob, part, x.part + (s.row * x.C + c) * p.hd);
  }
  // The last block of the row to get here adds the partial rows (the counter is left at 0).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned done = atomicAdd(p.counters + s.row, 1u);
    last = done == gridDim.x - 1;
    if (last) p.counters[s.row] = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int d = threadIdx.x; d < p.hd; d += kThreads) {
    float o = 0.0f;
    for (int64_t c = 0; c < s.nc; ++c) o += __ldcg(x.part + (s.row * x.C + c) * p.hd + d);
    st_f(p.out_dt, p.out, s.r.o_off + d, o);
  }
}

}  // namespace

int64_t attention_f16_exact_max_keys() {
  return kSmemLimit / 4 - static_cast<int64_t>(kMaxHeadDim) * (1 + kWarps) - kWarps * kTileWords;
}

bool attention_f16_split(int64_t batch, int64_t S, int n_heads, int64_t T, int sms) {
  return T > kChunk && batch * S * n_heads < 2 * static_cast<int64_t>(sms);
}

int64_t attention_f16_split_scratch_bytes(int64_t batch, int64_t S_full, int n_heads, int64_t T_full, int hd) {
  const int64_t R = batch * S_full * n_heads, C = split_chunks(T_full);
  return R * C * 8 + (R * T_full + R * C + R * C * hd) * 4;
}

void launch_attention_f16_exact(const AttentionParams& p, cudaStream_t s) {
  if (p.S <= 0 || p.batch <= 0) return;
  if (p.splits > 1) {
    // G blocks a row: eight a multiprocessor over the rows (loads in flight), at most a
    // chunk each.
    const int64_t rows = p.batch * p.S * p.n_heads, sms = std::max<int64_t>(p.decode_wave, 1);
    const int64_t g = std::clamp<int64_t>((8 * sms + rows - 1) / rows, 1, split_chunks(p.T));
    const dim3 grid(static_cast<unsigned>(g), static_cast<unsigned>(p.n_heads), static_cast<unsigned>(p.batch * p.S));
    launch_k(f16_split_scores_kernel, grid, kThreads, 0, s, p);
    launch_k(f16_split_exp_kernel, grid, kThreads, 0, s, p);
    launch_k(f16_split_values_kernel, grid, kThreads, 0, s, p);
    return;
  }
  const int64_t smem = smem_bytes(p.T, p.hd);
  if (smem > 48 * 1024) raise_smem_limit<attention_f16_exact_kernel>(static_cast<int>(kSmemLimit));
  const dim3 grid(static_cast<unsigned>(p.S), static_cast<unsigned>(p.n_heads), static_cast<unsigned>(p.batch));
  launch_k(attention_f16_exact_kernel, grid, kThreads, static_cast<size_t>(smem), s, p);
}

}  // namespace rlx::cuda_backend
