// CUDA attention: a flash-style kernel (online softmax over 32-key tiles held in
// shared memory, no score matrix) with causal / sliding-window masks, GQA, softcap
// and explicit query positions. Each warp owns one query row, a block four rows of
// one head; for few query rows and many keys the keys are split across blocks and a
// second kernel merges the partial (max, sum, accumulator) triples. Decode (one query
// row) has its own kernel: one block per KV head serves all the query heads of its
// group (K/V read once), and splits the keys the row actually sees (by its position,
// read on the device) evenly across blocks.
#include <atomic>
#include <cfloat>

#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kRows = 4;    // query rows (warps) per block
constexpr int kTile = 32;   // keys per tile
constexpr int kMaxChunks = 8;  // head_dim / 32

size_t attention_smem(int hd) {
  return sizeof(float) * (static_cast<size_t>(kTile) * (hd + 1) + static_cast<size_t>(kTile) * hd +
                          static_cast<size_t>(kRows) * hd);
}

__global__ void attention_kernel(const AttentionParams p) {
  extern __shared__ float smem[];
  const int hd = p.hd, nc = (hd + 31) / 32;
  float* k_s = smem;                           // [kTile][hd + 1]
  float* v_s = k_s + kTile * (hd + 1);         // [kTile][hd]
  float* q_s = v_s + kTile * hd;               // [kRows][hd]
  __shared__ int64_t range_s[kRows][2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z / p.splits;
  const int split = static_cast<int>(blockIdx.z % p.splits);
  const int kvh = h / (p.n_heads / p.n_kv);
  const int64_t qw = static_cast<int64_t>(p.n_heads) * hd, kw = static_cast<int64_t>(p.n_kv) * hd;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRows + warp;
  const bool active = i < p.S;

  // Key range of this split and of this warp's row.
  int64_t chunk = (p.T + p.splits - 1) / p.splits;
  chunk = (chunk + kTile - 1) / kTile * kTile;
  const int64_t s_begin = split * chunk;
  const int64_t s_end = s_begin + chunk < p.T ? s_begin + chunk : p.T;
  int64_t jb = 0, je = 0;
  if (active) {
    const int64_t pos = p.q_pos ? ld_i(p.pos_dt, p.q_pos, i) : p.T - p.S + i;
    je = p.T;
    if (p.mask != 0) je = pos + 1 < p.T ? pos + 1 : p.T;
    if (p.mask == 2) jb = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
    if (jb < s_begin) jb = s_begin;
    if (je > s_end) je = s_end;
    const int64_t q_off = (b * p.S_full + i) * qw + static_cast<int64_t>(h) * hd;
    for (int d = lane; d < hd; d += 32) q_s[warp * hd + d] = ld_f(p.dt, p.q, q_off + d) * p.scale;
  }
  if (lane == 0) {
    range_s[warp][0] = jb;
    range_s[warp][1] = je;
  }
  __syncthreads();
  int64_t lo = INT64_MAX, hi = 0;
  for (int w = 0; w < kRows; ++w)
    if (range_s[w][1] > range_s[w][0]) {
      lo = range_s[w][0] < lo ? range_s[w][0] : lo;
      hi = range_s[w][1] > hi ? range_s[w][1] : hi;
    }
  float acc[kMaxChunks];
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) acc[c] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  if (lo < hi) {
    lo = lo / kTile * kTile;
    for (int64_t t0 = lo; t0 < hi; t0 += kTile) {
      __syncthreads();
      for (int e = threadIdx.x; e < kTile * hd; e += blockDim.x) {
        const int kk = e / hd, d = e % hd;
        const int64_t j = t0 + kk;
        float kv = 0.0f, vv = 0.0f;
        if (j < p.T) {
          const int64_t off = (b * p.T_full + j) * kw + static_cast<int64_t>(kvh) * hd + d;
          kv = ld_f(p.dt, p.k, off);
          vv = ld_f(p.dt, p.v, off);
        }
        k_s[kk * (hd + 1) + d] = kv;
        v_s[kk * hd + d] = vv;
      }
      __syncthreads();
      if (!active || t0 >= je || t0 + kTile <= jb) continue;
      const int64_t j = t0 + lane;
      float s = -FLT_MAX;
      if (j >= jb && j < je) {
        const float* kr = k_s + lane * (hd + 1);
        const float* qr = q_s + warp * hd;
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot = fmaf(qr[d], kr[d], dot);
        if (p.softcap > 0.0f) dot = p.softcap * tanhf(dot / p.softcap);
        s = dot;
      }
      const float tile_max = warp_max(s);
      if (tile_max == -FLT_MAX) continue;
      const float m_new = fmaxf(m, tile_max);
      const float corr = m == -FLT_MAX ? 0.0f : __expf(m - m_new);
      const float pj = s == -FLT_MAX ? 0.0f : __expf(s - m_new);
      l = l * corr + warp_sum(pj);
      m = m_new;
#pragma unroll
      for (int c = 0; c < kMaxChunks; ++c) acc[c] *= corr;
      for (int t = 0; t < kTile; ++t) {
        const float w = __shfl_sync(0xffffffffu, pj, t);
        if (w == 0.0f) continue;
        const float* vr = v_s + t * hd + lane;
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c)
          if (c < nc && lane + 32 * c < hd) acc[c] = fmaf(w, vr[32 * c], acc[c]);
      }
    }
  }
  if (!active) return;
  const int64_t row = (b * p.n_heads + h) * p.S + i;  // for partials
  if (p.splits == 1) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int64_t o_off = (b * p.S_full + i) * qw + static_cast<int64_t>(h) * hd;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c)
      if (c < nc && lane + 32 * c < hd) st_f(p.out_dt, p.out, o_off + lane + 32 * c, acc[c] * inv);
  } else {
    const int64_t rows_total = p.batch * p.n_heads * p.S;
    float* dst = p.partial + (static_cast<int64_t>(split) * rows_total + row) * (hd + 2);
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c)
      if (c < nc && lane + 32 * c < hd) dst[2 + lane + 32 * c] = acc[c];
    if (lane == 0) {
      dst[0] = m;
      dst[1] = l;
    }
  }
}

// One warp per (b, h, i) row: merges the split partials.
__global__ void attention_combine_kernel(const AttentionParams p) {
  const int64_t rows_total = p.batch * p.n_heads * p.S;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows_total) return;
  const int hd = p.hd;
  const int64_t i = row % p.S, h = (row / p.S) % p.n_heads, b = row / (p.S * p.n_heads);
  float M = -FLT_MAX;
  for (int s = 0; s < p.splits; ++s) {
    const float* src = p.partial + (s * rows_total + row) * (hd + 2);
    if (src[1] > 0.0f) M = fmaxf(M, src[0]);
  }
  float L = 0.0f;
  for (int s = 0; s < p.splits; ++s) {
    const float* src = p.partial + (s * rows_total + row) * (hd + 2);
    if (src[1] > 0.0f) L += src[1] * __expf(src[0] - M);
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  const int64_t o_off = (b * p.S_full + i) * static_cast<int64_t>(p.n_heads) * hd + h * hd;
  for (int d = lane; d < hd; d += 32) {
    float a = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float* src = p.partial + (s * rows_total + row) * (hd + 2);
      if (src[1] > 0.0f) a += src[2 + d] * __expf(src[0] - M);
    }
    st_f(p.out_dt, p.out, o_off + d, a * inv);
  }
}

constexpr int kDecodeWarps = 4;
constexpr int kMaxGroup = 8;  // query heads per KV head

// Decode: one query row per (b, h). Block (kv head, split, b): its warps take the keys of
// the split in turn; per key, each warp dots it with the group's query heads (lane owns
// head dims lane + 32c) and folds it into an online softmax per head. The warps merge in
// shared memory; the block writes the output (one split) or a partial for the combine.
template <int NC>
__global__ void __launch_bounds__(kDecodeWarps * 32) attention_decode_kernel(const AttentionParams p) {
  __shared__ float m_s[kDecodeWarps][kMaxGroup], l_s[kDecodeWarps][kMaxGroup];
  __shared__ float acc_s[kDecodeWarps][kMaxGroup][32 * NC];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = blockIdx.x, split = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int G = p.n_heads / p.n_kv, hd = p.hd;
  const int64_t qw = static_cast<int64_t>(p.n_heads) * hd, kw = static_cast<int64_t>(p.n_kv) * hd;
  // Keys this row sees, then this split's share of them.
  const int64_t pos = p.q_pos ? ld_i(p.pos_dt, p.q_pos, 0) : p.T - 1;
  int64_t jb = 0, je = p.T;
  if (p.mask != 0) je = pos + 1 < p.T ? pos + 1 : p.T;
  if (p.mask == 2) jb = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
  if (je < jb) je = jb;
  const int64_t per = (je - jb + p.splits - 1) / p.splits;
  const int64_t k0 = jb + split * per, k1 = k0 + per < je ? k0 + per : je;

  float q[kMaxGroup][NC], acc[kMaxGroup][NC], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      acc[g][c] = 0.0f;
      const int d = lane + 32 * c;
      q[g][c] = g < G && d < hd ? ld_f(p.dt, p.q, b * p.S_full * qw + static_cast<int64_t>(kvh * G + g) * hd + d) * p.scale
                                : 0.0f;
    }
  }
  constexpr int kKeys = 4;  // keys per warp whose K/V rows are loaded before use
  for (int64_t j0 = k0 + warp * kKeys; j0 < k1; j0 += kDecodeWarps * kKeys) {
    float kv[kKeys][NC], vv[kKeys][NC];
#pragma unroll
    for (int t = 0; t < kKeys; ++t) {
      const int64_t off = (b * p.T_full + j0 + t) * kw + static_cast<int64_t>(kvh) * hd;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d = lane + 32 * c;
        const bool ok = d < hd && j0 + t < k1;
        kv[t][c] = ok ? ld_f(p.dt, p.k, off + d) : 0.0f;
        vv[t][c] = ok ? ld_f(p.dt, p.v, off + d) : 0.0f;
      }
    }
#pragma unroll
    for (int t = 0; t < kKeys; ++t) {
      if (j0 + t >= k1) break;
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= G) break;
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; ++c) s = fmaf(q[g][c], kv[t][c], s);
        s = warp_sum(s);
        if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
        const float m_new = fmaxf(m[g], s);
        const float corr = __expf(m[g] - m_new), pj = __expf(s - m_new);
        l[g] = l[g] * corr + pj;
        m[g] = m_new;
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[g][c] = fmaf(acc[g][c], corr, pj * vv[t][c]);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    if (lane == 0) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) acc_s[warp][g][lane + 32 * c] = acc[g][c];
  }
  __syncthreads();
  // Merge the warps: thread t handles (g, d) pairs.
  for (int e = threadIdx.x; e < G * hd; e += blockDim.x) {
    const int g = e / hd, d = e % hd;
    float M = -FLT_MAX;
    for (int w = 0; w < kDecodeWarps; ++w)
      if (l_s[w][g] > 0.0f) M = fmaxf(M, m_s[w][g]);
    float L = 0.0f, A = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w)
      if (l_s[w][g] > 0.0f) {
        const float f = __expf(m_s[w][g] - M);
        L += l_s[w][g] * f;
        A += acc_s[w][g][d] * f;
      }
    const int h = kvh * G + g;
    if (p.splits == 1) {
      st_f(p.out_dt, p.out, b * p.S_full * qw + static_cast<int64_t>(h) * hd + d, L > 0.0f ? A / L : 0.0f);
    } else {
      const int64_t rows_total = p.batch * p.n_heads;  // S == 1
      float* dst = p.partial + (static_cast<int64_t>(split) * rows_total + b * p.n_heads + h) * (hd + 2);
      dst[2 + d] = A;
      if (d == 0) {
        dst[0] = M;
        dst[1] = L;
      }
    }
  }
}

}  // namespace

bool attention_decode_supported(int64_t S, int n_heads, int n_kv, int hd) {
  return S == 1 && n_kv > 0 && n_heads % n_kv == 0 && n_heads / n_kv <= kMaxGroup && hd >= 1 && hd <= 32 * kMaxChunks;
}

int attention_decode_splits(int64_t batch, int64_t T, int n_kv, int sms) {
  const int64_t blocks = batch * n_kv;
  int64_t splits = (2 * sms + blocks - 1) / blocks;
  const int64_t max_by_keys = T / 16 > 1 ? T / 16 : 1;  // keys are split by what the row sees, on the device
  if (splits > max_by_keys) splits = max_by_keys;
  if (splits > 64) splits = 64;
  return splits < 1 ? 1 : static_cast<int>(splits);
}

bool attention_head_dim_supported(int64_t hd) { return hd >= 1 && hd <= 32 * kMaxChunks; }

int attention_splits(int64_t batch, int64_t S, int64_t T, int n_heads, int sms) {
  const int64_t blocks = (S + kRows - 1) / kRows * n_heads * batch;
  if (blocks >= sms || T <= 2 * kTile) return 1;
  int64_t splits = (2 * sms + blocks - 1) / blocks;
  const int64_t max_by_keys = (T + 2 * kTile - 1) / (2 * kTile);
  if (splits > max_by_keys) splits = max_by_keys;
  if (splits > 64) splits = 64;
  return splits < 1 ? 1 : static_cast<int>(splits);
}

void launch_attention(const AttentionParams& p, cudaStream_t s) {
  if (p.S == 0) return;
  if (p.decode) {
    const dim3 grid(static_cast<unsigned>(p.n_kv), static_cast<unsigned>(p.splits), static_cast<unsigned>(p.batch));
    switch ((p.hd + 31) / 32) {
      case 1: attention_decode_kernel<1><<<grid, kDecodeWarps * 32, 0, s>>>(p); break;
      case 2: attention_decode_kernel<2><<<grid, kDecodeWarps * 32, 0, s>>>(p); break;
      case 3: attention_decode_kernel<3><<<grid, kDecodeWarps * 32, 0, s>>>(p); break;
      case 4: attention_decode_kernel<4><<<grid, kDecodeWarps * 32, 0, s>>>(p); break;
      case 5: attention_decode_kernel<5><<<grid, kDecodeWarps * 32, 0, s>>>(p); break;
      case 6: attention_decode_kernel<6><<<grid, kDecodeWarps * 32, 0, s>>>(p); break;
      case 7: attention_decode_kernel<7><<<grid, kDecodeWarps * 32, 0, s>>>(p); break;
      default: attention_decode_kernel<8><<<grid, kDecodeWarps * 32, 0, s>>>(p); break;
    }
    if (p.splits > 1) attention_combine_kernel<<<grid_for(p.batch * p.n_heads, 4), 128, 0, s>>>(p);
    return;
  }
  const size_t smem = attention_smem(p.hd);
  if (smem > 48 * 1024) {  // beyond the default dynamic limit (head_dim > 160): raised once per device, to
                           // the most any head_dim needs (a run being captured into a graph then sets nothing)
    static std::atomic<uint64_t> raised{0};
    int dev = 0;
    cudaGetDevice(&dev);
    const uint64_t bit = uint64_t{1} << (dev & 63);
    if ((raised.load() & bit) == 0) {
      cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(attention_smem(32 * kMaxChunks)));
      raised.fetch_or(bit);
    }
  }
  const dim3 grid(static_cast<unsigned>((p.S + kRows - 1) / kRows), static_cast<unsigned>(p.n_heads),
                  static_cast<unsigned>(p.batch * p.splits));
  attention_kernel<<<grid, 32 * kRows, smem, s>>>(p);
  if (p.splits > 1) {
    const int64_t rows = p.batch * p.n_heads * p.S;
    attention_combine_kernel<<<grid_for(rows, 4), 128, 0, s>>>(p);
  }
}

}  // namespace rlx::cuda_backend
