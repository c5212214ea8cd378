// CUDA attention: a flash-style kernel (online softmax over 32-key tiles held in
// shared memory, no score matrix) with causal / sliding-window masks, GQA, softcap
// and explicit query positions. Each warp owns one query row, a block four rows of
// one head; for few query rows and many keys the keys are split across blocks and a
// second kernel merges the partial (max, sum, accumulator) triples. Decode (one query
// row) has its own kernel: one block per query head (short contexts) or per KV head's
// group (long ones), the keys the row actually sees (by its position, read on the
// device) split evenly across blocks, and the split partials merged by the last block
// to finish (no second launch); a row that sees few keys (head_dim 32 / 64: up to 256
// keys in f32, 512 in f16 / bf16 at head_dim 64) takes a one-trip path instead, one block
// per query head with every K / V load issued at once.
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <climits>

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/attention_tc_parts.cuh"
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
  pdl_wait();
  pdl_trigger();
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
    const int64_t pos = p.q_pos ? ld_i(p.pos_dt, p.q_pos, b * p.pos_bstride + i) : p.T - p.S + i;
    visible_keys(p, b, pos, jb, je);
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
  pdl_wait();
  pdl_trigger();
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

constexpr int kMaxGroup = 8;     // query heads per KV head
constexpr int kDecodeTile = 32;  // keys a warp scores at once (one per lane)
constexpr int kMaxDecodeSplits = 32;
// Warps per decode block for NC head-dim chunks; a split takes at least one tile per warp.
__host__ __device__ constexpr int decode_warps(int nc) { return nc <= 2 ? 8 : 4; }

// Short decode path (attention_decode_kernel, when the row sees at most C keys and
// head_dim is 32 or 64 with 16-byte aligned q / K / V rows): block (h, b, 0) alone serves
// query head h in one trip to memory. Right after the position is known every thread
// issues all its loads: its share of q, of the K rows (TK = RV / 4 threads a key, four
// 16-byte loads each, PK passes of KP keys) and of the V rows (one 16-byte load per key
// for RV threads a row, PV keys a thread), so a context of up to C keys costs one
// memory latency; then the scores (a dot per pass, reduced over the key's TK lanes) go
// to shared memory, the softmax takes two block reductions, P.V runs from registers and
// the VG key groups' partial sums are added in shared memory. `smem` holds C + THREADS *
// E + 2 * THREADS / 32 floats (16-byte aligned). No split partials, no counters.
constexpr int kShortRegs = 16;  // 16-byte registers a thread holds for K, and again for V

// C: the most keys the short path takes with THREADS threads and RV 16-byte loads a row
// (0: not served).
__host__ __device__ constexpr int decode_short_keys(int threads, int rv) {
  return rv >= 4 && rv <= 32 && threads % rv == 0 ? kShortRegs / 4 * (threads / (rv / 4)) : 0;
}

template <typename T, int THREADS, int RV>
__device__ __forceinline__ void attention_decode_short(const AttentionParams& p, float* smem, int64_t b, int h,
                                                       int kvh, int64_t jb, int n) {
  constexpr int E = 16 / static_cast<int>(sizeof(T));  // elements a 16-byte load
  constexpr int HD = RV * E;                          // head_dim
  constexpr int TK = RV / 4;                          // threads a key (scores)
  constexpr int KP = THREADS / TK;                    // keys a pass
  constexpr int PK = kShortRegs / 4;                  // passes
  constexpr int C = PK * KP;                          // keys at most
  constexpr int VG = THREADS / RV;                    // key groups of P.V
  constexpr int PV = C / VG;                          // keys a thread in P.V
  static_assert(PV == kShortRegs && C == decode_short_keys(THREADS, RV), "register budget");
  float* sc = smem;                                   // [C] scores, then softmax weights
  float* red = smem + C;                              // [VG][HD] partial P.V sums
  float* wmax = red + VG * HD;                        // [THREADS / 32]
  float* wsum = wmax + THREADS / 32;                  // [THREADS / 32]
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t qw = static_cast<int64_t>(p.n_heads) * HD;
  const int64_t kw4 = static_cast<int64_t>(p.n_kv) * RV;  // a cache row, in 16-byte units
  const uint4* q4 = reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + b * p.S_full * qw) + h * RV;
  const uint4* k4 = reinterpret_cast<const uint4*>(static_cast<const T*>(p.k)) + (b * p.T_full + jb) * kw4 + kvh * RV;
  const uint4* v4 = reinterpret_cast<const uint4*>(static_cast<const T*>(p.v)) + (b * p.T_full + jb) * kw4 + kvh * RV;
  // Every load of the block goes out here.
  const int pp = t % TK, kk = t / TK;  // scores: part of the row, first key
  uint4 qv[4], kr[PK][4];
#pragma unroll
  for (int u = 0; u < 4; ++u) qv[u] = __ldg(q4 + pp * 4 + u);
#pragma unroll
  for (int i = 0; i < PK; ++i)
    if (kk + i * KP < n)
#pragma unroll
      for (int u = 0; u < 4; ++u) kr[i][u] = __ldcs(k4 + (kk + i * KP) * kw4 + pp * 4 + u);
  const int dv = t % RV, kg = t / RV;  // P.V: 16-byte column of the row, first key
  uint4 vr[PV];
#pragma unroll
  for (int i = 0; i < PV; ++i)
    if (kg + i * VG < n) vr[i] = __ldcs(v4 + (kg + i * VG) * kw4 + dv);
  float qf[4 * E];
#pragma unroll
  for (int u = 0; u < 4; ++u) unpack16<T>(qv[u], qf + u * E);
#pragma unroll
  for (int e = 0; e < 4 * E; ++e) qf[e] *= p.scale;
  // Scores: pass i, key kk + i KP, this thread's 4 E dims, summed over the key's lanes.
#pragma unroll
  for (int i = 0; i < PK; ++i) {
    const int key = kk + i * KP;
    float s = 0.0f;
    if (key < n)
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float f[E];
        unpack16<T>(kr[i][u], f);
#pragma unroll
        for (int e = 0; e < E; ++e) s = fmaf(f[e], qf[u * E + e], s);
      }
#pragma unroll
    for (int o = TK / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (pp == 0 && key < n) sc[key] = p.softcap > 0.0f ? p.softcap * tanhf(s / p.softcap) : s;
  }
  __syncthreads();
  float mx = -FLT_MAX;
  for (int j = t; j < n; j += THREADS) mx = fmaxf(mx, sc[j]);
  mx = warp_max(mx);
  if (lane == 0) wmax[warp] = mx;
  __syncthreads();
  mx = wmax[0];
#pragma unroll
  for (int w = 1; w < THREADS / 32; ++w) mx = fmaxf(mx, wmax[w]);
  float l = 0.0f;
  for (int j = t; j < n; j += THREADS) {
    const float e = __expf(sc[j] - mx);
    sc[j] = e;
    l += e;
  }
  l = warp_sum(l);
  if (lane == 0) wsum[warp] = l;
  __syncthreads();
  float L = 0.0f;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w) L += wsum[w];
  // P.V over this thread's keys, then the key groups summed in shared memory.
  float acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.0f;
#pragma unroll
  for (int i = 0; i < PV; ++i)
    if (kg + i * VG < n) {
      const float w = sc[kg + i * VG];
      float f[E];
      unpack16<T>(vr[i], f);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = fmaf(w, f[e], acc[e]);
    }
  float4* r4 = reinterpret_cast<float4*>(red + kg * HD + dv * E);
#pragma unroll
  for (int e = 0; e < E; e += 4) r4[e / 4] = make_float4(acc[e], acc[e + 1], acc[e + 2], acc[e + 3]);
  __syncthreads();
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  const int64_t ob = b * p.S_full * qw + static_cast<int64_t>(h) * HD;
  if constexpr (THREADS >= HD) {
    // THREADS / HD lanes a dim (neighbours), each adding every (THREADS / HD)-th group.
    constexpr int PR = THREADS / HD;
    const int d = t / PR, part = t % PR;
    float a = 0.0f;
#pragma unroll
    for (int g = part; g < VG; g += PR) a += red[g * HD + d];
#pragma unroll
    for (int o = PR / 2; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    if (part == 0) st_f(p.out_dt, p.out, ob + d, a * inv);
  } else {
    for (int d = t; d < HD; d += THREADS) {
      float a = 0.0f;
#pragma unroll
      for (int g = 0; g < VG; ++g) a += red[g * HD + d];
      st_f(p.out_dt, p.out, ob + d, a * inv);
    }
  }
}

// Decode: one query row per (b, h). Block (h, b, split) serves query head h alone while
// the blocks that have keys fit one wave (`decode_wave`; short contexts, where the chain
// of dependent instructions per warp bounds this kernel), else the block of each KV
// head's first query head serves the whole group (K/V read once); with many streams
// (`group_grid`) the grid has one block per group, block (g, b, split). The keys the row sees
// ([jb, je), from its position on the device) go to min(splits, ceil(n / (32 W))) splits
// (W warps a block); the warps take tiles of 32 keys in turn. Per tile, lane j scores
// key j against the block's queries (its K row read with 16-byte loads when rows are
// aligned, the queries from shared memory), the warp folds the tile into an online
// softmax per head, and P.V runs with lane owning head dims lane + 32c; the tile's K rows
// and (for head_dim <= 64) all its V elements are loaded before the first is used, so a
// tile costs one trip to memory. The warps merge in shared memory. With one split the
// block writes the output; otherwise it writes a partial (max, sum, accumulator) and the
// last block of its head (group) to finish (a counter per block column in `p.counters`,
// left at zero again) merges the partials.
template <typename T, int NC>
__global__ void __launch_bounds__(decode_warps(NC) * 32) attention_decode_kernel(const AttentionParams p) {
  constexpr int kDecodeWarps = decode_warps(NC);
  constexpr int kSplitKeys = kDecodeWarps * kDecodeTile;  // fewest keys a split takes
  __shared__ __align__(16) float q_s[kMaxGroup * 32 * NC];  // [G][hd], scaled
  __shared__ __align__(16) float p_s[kDecodeWarps][kMaxGroup][kDecodeTile];
  __shared__ float m_s[kDecodeWarps][kMaxGroup], l_s[kDecodeWarps][kMaxGroup];
  __shared__ __align__(16) float acc_s[kDecodeWarps][kMaxGroup][32 * NC];  // also the short path's scratch
  __shared__ float w_s[kMaxGroup][kMaxDecodeSplits], ls_s[kMaxGroup][kMaxDecodeSplits];
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int split = blockIdx.z;  // (the slowest: every sequence's first split is scheduled first)
  const int64_t b = blockIdx.y;
  const int hd = p.hd, G_kv = p.n_heads / p.n_kv;  // query heads per KV head
  // The block's first query head (a grid of KV-head groups: the group's first).
  const int head = p.group_grid ? static_cast<int>(blockIdx.x) * G_kv : static_cast<int>(blockIdx.x);
  const int kvh = head / G_kv;
  const int64_t qw = static_cast<int64_t>(p.n_heads) * hd;
  const int kw = p.n_kv * hd;
  // Keys this row sees, the splits that share them, and this split's part. (The grid
  // has the splits of the longest context; blocks past this row's splits leave before
  // they read anything else.)
  const int64_t pos = p.q_pos ? ld_i(p.pos_dt, p.q_pos, b * p.pos_bstride) : p.T - 1;
  int64_t jb = 0, je = p.T;
  visible_keys(p, b, pos, jb, je);
  const int64_t n = je - jb;
  // Short contexts: one block per query head, one trip to memory (attention_decode_short).
  constexpr int kThreads = kDecodeWarps * 32;
  constexpr int kRV = 32 * NC * static_cast<int>(sizeof(T)) / 16;  // 16-byte loads a row at head_dim 32 NC
  constexpr int kShortKeys = decode_short_keys(kThreads, kRV);
  constexpr bool kShortFits =  // its scratch fits in acc_s
      kShortKeys + kThreads * (16 / static_cast<int>(sizeof(T))) + kThreads / 16 <= kDecodeWarps * kMaxGroup * 32 * NC;
  // (head_dim <= 64 only: inlined into the wider kernels, its registers made the
  // general path spill.)
  if constexpr (NC <= 2 && kShortKeys > 0 && kShortFits) {
    if (p.short_ok && n <= kShortKeys) {
      if (split == 0)
        attention_decode_short<T, kThreads, kRV>(p, &acc_s[0][0][0], b, static_cast<int>(blockIdx.x),
                                                  static_cast<int>(blockIdx.x) / G_kv, jb, static_cast<int>(n));
      return;
    }
  }
  int64_t active = (n + kSplitKeys - 1) / kSplitKeys;
  if (active > p.splits) active = p.splits;
  if (active < 1) active = 1;
  if (split >= active) return;
  // One query head per block while those blocks fit one wave (short contexts: the
  // shortest chain of work per warp); else the block of the group's first head takes
  // the whole group (K/V read once) and the others stand by.
  const bool per_head = !p.group_grid && active * p.n_heads * p.batch <= p.decode_wave;
  if (!per_head && head % G_kv != 0) return;
  // The queries of the KV head's group.
  for (int e = threadIdx.x; e < G_kv * hd; e += blockDim.x)
    q_s[e] = ld_f(p.dt, p.q, b * p.S_full * qw + static_cast<int64_t>(kvh) * G_kv * hd + e) * p.scale;
  const int G = per_head ? 1 : G_kv;                  // query heads of this block
  const int hq0 = head;                               // the first of them
  const float* qs0 = q_s + (hq0 - kvh * G_kv) * hd;   // their queries
  const int64_t per = (n + active - 1) / active;
  const int64_t k0 = jb + split * per < je ? jb + split * per : je;
  const int64_t k1 = k0 + per < je ? k0 + per : je;
  __syncthreads();  // q_s

  float acc[kMaxGroup][NC], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[g][c] = 0.0f;
  }
  const T* kbase = static_cast<const T*>(p.k) + b * p.T_full * kw + static_cast<int64_t>(kvh) * hd;
  const T* vbase = static_cast<const T*>(p.v) + b * p.T_full * kw + static_cast<int64_t>(kvh) * hd;
  const int lk = static_cast<int>(k1 - k0);  // keys of this split, counted from k0 (32-bit offsets below)
  const T* kb0 = kbase + k0 * kw;
  const T* vb0 = vbase + k0 * kw;
  constexpr int V = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  constexpr int kPiece = 16;                            // 16-byte K loads in flight per lane
  constexpr int kU = NC <= 2 ? kDecodeTile : NC <= 4 ? 16 : 8;  // keys whose V elements are loaded at once
  for (int t0 = warp * kDecodeTile; t0 < lk; t0 += kDecodeWarps * kDecodeTile) {
    const int nk = lk - t0 < kDecodeTile ? lk - t0 : kDecodeTile;
    const T* vt = vb0 + static_cast<int64_t>(t0) * kw;
    float vv[kU][NC];
    auto load_v = [&](int jj) {
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int d = lane + 32 * c;
          vv[u][c] = jj + u < nk && d < hd ? to_float(__ldcs(vt + (jj + u) * kw + d)) : 0.0f;
        }
    };
    load_v(0);  // in flight with the K loads below
    // Scores: lane j takes key t0 + j.
    const int j = t0 + lane;
    const bool valid = j < lk;
    float s[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) s[g] = 0.0f;
    if (valid) {
      const T* kr = kb0 + static_cast<int64_t>(j) * kw;
      if (p.kv_vec) {
        const uint4* k4 = reinterpret_cast<const uint4*>(kr);
        for (int d0 = 0; d0 < hd; d0 += kPiece * V) {
          uint4 kv[kPiece];
#pragma unroll
          for (int i = 0; i < kPiece; ++i)
            if (d0 + i * V < hd) kv[i] = __ldcs(k4 + d0 / V + i);
#pragma unroll
          for (int i = 0; i < kPiece; ++i) {
            if (d0 + i * V >= hd) break;
            float f[V];
            unpack16<T>(kv[i], f);
#pragma unroll
            for (int g = 0; g < kMaxGroup; ++g) {
              if (g >= G) break;
              const float* qq = qs0 + g * hd + d0 + i * V;
#pragma unroll
              for (int e = 0; e < V; e += 4) {
                const float4 q4 = *reinterpret_cast<const float4*>(qq + e);
                s[g] = fmaf(f[e], q4.x, fmaf(f[e + 1], q4.y, fmaf(f[e + 2], q4.z, fmaf(f[e + 3], q4.w, s[g]))));
              }
            }
          }
        }
      } else {
        for (int d = 0; d < hd; ++d) {
          const float kd = to_float(kr[d]);
#pragma unroll
          for (int g = 0; g < kMaxGroup; ++g)
            if (g < G) s[g] = fmaf(qs0[g * hd + d], kd, s[g]);
        }
      }
    }
    // Online softmax per head over the tile.
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= G) break;
      float sg = -FLT_MAX;
      if (valid) sg = p.softcap > 0.0f ? p.softcap * tanhf(s[g] / p.softcap) : s[g];
      const float m_new = fmaxf(m[g], warp_max(sg));  // lane 0's key is always valid
      const float corr = __expf(m[g] - m_new);
      const float pj = valid ? __expf(sg - m_new) : 0.0f;
      l[g] = l[g] * corr + warp_sum(pj);
      m[g] = m_new;
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[g][c] *= corr;
      p_s[warp][g][lane] = pj;
    }
    __syncwarp();
    // P.V: lane owns head dims lane + 32c; the tile's V rows are read coalesced.
    for (int jj = 0; jj < nk; jj += kU) {
      if (jj > 0) load_v(jj);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (jj + u >= nk) break;
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g >= G) break;
          const float w = p_s[warp][g][jj + u];
#pragma unroll
          for (int c = 0; c < NC; ++c) acc[g][c] = fmaf(w, vv[u][c], acc[g][c]);
        }
      }
    }
    __syncwarp();
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
    store_decode_split(p, b, hq0 + g, hd, d, split, active, A, M, L);
  }
  if (active == 1) return;
  finish_decode_splits(p, b, hq0, G, hd, active, w_s, ls_s);
}

// ---- prefill attention on tensor cores -------------------------------------------------
// Flash attention with mma.sync (m16n8k16, f16 operands, f32 accumulation): a block is
// four warps and 64 query rows of one KV head's group, each warp 16 rows. The rows of the
// G = n_heads / n_kv query heads that share the KV head are interleaved (block row f is
// query row f / G of head f % G), so that each K / V tile serves all of them and a run of
// few rows a sequence (16 rows x 4 heads: a batched server step) still fills the block;
// a block's rows then span about 64 / G consecutive positions. Key tiles of 64 are
// converted to f16 in shared memory (K as rows, V transposed), S = Q K^T comes out of
// the tensor cores in accumulator fragments, the online softmax runs on them in f32,
// and P (rounded to f16) is fed back as the A operand of O += P V without leaving
// registers. Tiles past the block's last visible key are never loaded (causal).

constexpr int kTcWarps = 4;
constexpr int kTcRows = 16 * kTcWarps;  // query rows per block
constexpr int kTcKeys = 64;             // keys per tile (head_dim 256: half, for registers and shared memory)
constexpr int kTcPad = 8;               // halves of padding per shared row (no bank conflicts)

// Eight consecutive elements (16-byte aligned) as floats.
template <typename T>
__device__ __forceinline__ void load8(const T* src, float* f) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 a = *reinterpret_cast<const float4*>(src), b = *reinterpret_cast<const float4*>(src + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  } else {
    unpack16<T>(*reinterpret_cast<const uint4*>(src), f);
  }
}

template <typename T, int HD, int KT>
__global__ void __launch_bounds__(kTcWarps * 32) attention_tc_kernel(const AttentionParams p) {
  pdl_wait();
  pdl_trigger();
  constexpr int KS = HD / 16;      // k-steps of S = Q K^T
  constexpr int DN = HD / 8;       // n-tiles of O
  constexpr int NT = KT / 8;  // n-tiles of S
  constexpr int kRowK = HD + kTcPad, kRowV = KT + kTcPad;
  __shared__ __align__(16) __half k_s[KT * kRowK];  // [key][d]
  __shared__ __align__(16) __half v_s[HD * kRowV];       // [d][key]
  __shared__ int range_s[2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int kvh = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int64_t kw = static_cast<int64_t>(p.n_kv) * HD;
  const TcRows r = tc_rows(p, static_cast<int64_t>(blockIdx.x) * kTcRows + warp * 16 + g, kvh, b);
  if (threadIdx.x == 0) {
    range_s[0] = INT_MAX;
    range_s[1] = 0;
  }
  __syncthreads();
  int wlo = INT_MAX, whi = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i)
    if (r.je[i] > r.jb[i]) {
      wlo = min(wlo, r.jb[i]);
      whi = max(whi, r.je[i]);
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    wlo = min(wlo, __shfl_xor_sync(0xffffffffu, wlo, o));
    whi = max(whi, __shfl_xor_sync(0xffffffffu, whi, o));
  }
  if (lane == 0 && whi > 0) {
    atomicMin(&range_s[0], wlo);
    atomicMax(&range_s[1], whi);
  }
  uint32_t qa[KS][4];  // q fragments (scaled), rows past S as zeros
  tc_load_q<T, HD>(p, r, b, t, qa);
  __syncthreads();
  const int lo = range_s[0], hi_key = range_s[1];
  float acc[DN][4];
#pragma unroll
  for (int dn = 0; dn < DN; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dn][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const T* kg = static_cast<const T*>(p.k) + b * p.T_full * kw + static_cast<int64_t>(kvh) * HD;
  const T* vg = static_cast<const T*>(p.v) + b * p.T_full * kw + static_cast<int64_t>(kvh) * HD;
  for (int t0 = lo; t0 < hi_key; t0 += KT) {
    __syncthreads();  // the previous tile is no longer read
    for (int e = threadIdx.x; e < KT * (HD / 8); e += kTcWarps * 32) {
      const int kk = e / (HD / 8), d8 = (e % (HD / 8)) * 8;
      const int64_t j = t0 + kk;
      float kf[8], vf[8];
      if (j < p.T) {
        load8<T>(kg + j * kw + d8, kf);
        load8<T>(vg + j * kw + d8, vf);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) kf[i] = vf[i] = 0.0f;
      }
      uint4 kp;
      kp.x = pack_half2(kf[0], kf[1]);
      kp.y = pack_half2(kf[2], kf[3]);
      kp.z = pack_half2(kf[4], kf[5]);
      kp.w = pack_half2(kf[6], kf[7]);
      *reinterpret_cast<uint4*>(k_s + kk * kRowK + d8) = kp;
#pragma unroll
      for (int i = 0; i < 8; ++i) v_s[(d8 + i) * kRowV + kk] = __float2half(vf[i]);
    }
    __syncthreads();
    if (whi <= wlo || t0 >= whi || t0 + KT <= wlo) continue;  // no key of this tile for this warp
    float sc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[nt][e] = 0.0f;
      const uint32_t* kr = reinterpret_cast<const uint32_t*>(k_s + (nt * 8 + g) * kRowK) + t;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) mma_16816(sc[nt], qa[ks], kr[ks * 8], kr[ks * 8 + 4]);
    }
    tc_softmax_tile<NT, DN>(p, r, t0, t, true, sc, m, l, acc);
#pragma unroll
    for (int j = 0; j < KT / 16; ++j) {
      uint32_t a[4];
      tc_weights_a<NT>(sc, j, a);
#pragma unroll
      for (int dn = 0; dn < DN; ++dn) {
        const uint32_t* vr = reinterpret_cast<const uint32_t*>(v_s + (dn * 8 + g) * kRowV) + j * 8 + t;
        mma_16816(acc[dn], a, vr[0], vr[4]);
      }
    }
  }
  tc_store_rows<HD>(p, r, b, t, acc, l);
}

}  // namespace

bool attention_decode_supported(int64_t S, int n_heads, int n_kv, int hd) {
  return S == 1 && n_kv > 0 && n_heads % n_kv == 0 && n_heads / n_kv <= kMaxGroup && hd >= 1 && hd <= 32 * kMaxChunks;
}

int attention_decode_splits(int64_t batch, int64_t T, int groups, int sms) {
  const int64_t blocks = batch * groups;
  int64_t splits = (2 * sms + blocks - 1) / blocks;
  const int64_t max_by_keys = T / 16 > 1 ? T / 16 : 1;  // keys are split by what the row sees, on the device
  if (splits > max_by_keys) splits = max_by_keys;
  if (splits > kMaxDecodeSplits) splits = kMaxDecodeSplits;
  return splits < 1 ? 1 : static_cast<int>(splits);
}

bool attention_tc_supported(int64_t S, int n_heads, int n_kv, int64_t hd) {
  return S >= 2 && n_kv > 0 && n_heads % n_kv == 0 && S * (n_heads / n_kv) >= kTcRows &&
         (hd == 64 || hd == 128 || hd == 256);
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
    AttentionParams q = p;
    const int64_t esz = p.dt == DT::F32 ? 4 : 2;
    q.kv_vec = reinterpret_cast<uintptr_t>(p.k) % 16 == 0 && (p.n_kv * p.hd * esz) % 16 == 0 && (p.hd * esz) % 16 == 0;
    const int nc = p.hd <= 32 ? 1 : p.hd <= 64 ? 2 : p.hd <= 128 ? 4 : 8;
    // The short path (one block per query head, a KV head's rows read once for each) and
    // the per-head blocks of the general one are taken while those blocks fit one wave
    // (a few streams). Beyond that (a batched server step: 512 blocks at 16 streams of 32
    // heads, most of them waiting for a multiprocessor one after another) the grid has
    // one column per KV head's group, whose block reads the rows once for all its heads.
    const bool few = p.batch * p.n_heads <= p.decode_wave;
    // (many_rows: set by the step builder for this shape; the alignment is known here.)
    if (p.many_rows && reinterpret_cast<uintptr_t>(p.k) % 16 == 0 && reinterpret_cast<uintptr_t>(p.v) % 16 == 0 &&
        attention_decode_rows_supported(p)) {
      launch_attention_decode_rows(p, s);
      return;
    }
    q.short_ok = p.short_ok && q.kv_vec && p.hd == 32 * nc && reinterpret_cast<uintptr_t>(p.v) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && few;
    q.group_grid = !few;
    // The kernel's registers hold one block on a multiprocessor, so a block that finds no
    // keys in its split still takes a turn on one: splits go last in the grid (the blocks
    // that have work go first), and the group grid keeps to one wave's worth of splits
    // (16 streams of 8 KV heads: one split, every block all its sequence's keys).
    if (!few) q.splits = static_cast<int>(std::clamp<int64_t>(p.decode_wave / (p.batch * p.n_kv), 1, p.splits));
    const dim3 grid(static_cast<unsigned>(few ? p.n_heads : p.n_kv), static_cast<unsigned>(p.batch),
                    static_cast<unsigned>(q.splits));
    const unsigned threads = static_cast<unsigned>(decode_warps(nc) * 32);
    auto go = [&](auto tag) {
      using T = decltype(tag);
      switch (nc) {
        case 1: launch_k(attention_decode_kernel<T, 1>, grid, threads, 0, s, q); break;
        case 2: launch_k(attention_decode_kernel<T, 2>, grid, threads, 0, s, q); break;
        case 4: launch_k(attention_decode_kernel<T, 4>, grid, threads, 0, s, q); break;
        default: launch_k(attention_decode_kernel<T, 8>, grid, threads, 0, s, q); break;
      }
    };
    if (p.dt == DT::F16) go(__half{});
    else if (p.dt == DT::BF16) go(__nv_bfloat16{});
    else go(float{});
    return;
  }
  if (p.tensor_cores) {
    const int64_t esz = p.dt == DT::F32 ? 4 : 2;
    const bool aligned = reinterpret_cast<uintptr_t>(p.k) % 16 == 0 && reinterpret_cast<uintptr_t>(p.v) % 16 == 0 &&
                         (p.n_kv * p.hd * esz) % 16 == 0;
    if (aligned && p.splits == 1) {
      if (p.kv16 && attention_flash_supported(p.hd, p.dt) && reinterpret_cast<uintptr_t>(p.out) % 8 == 0 &&
          p.S * (p.n_heads / p.n_kv) <= 65535LL * 128) {  // (its row tiles are grid.y)
        launch_attention_flash(p, s);
        return;
      }
      const int64_t block_rows = p.S * (p.n_heads / p.n_kv);  // a KV head's group, interleaved
      const dim3 grid(static_cast<unsigned>((block_rows + kTcRows - 1) / kTcRows), static_cast<unsigned>(p.n_kv),
                      static_cast<unsigned>(p.batch));
      auto go = [&](auto tag) {
        using T = decltype(tag);
        if (p.hd == 64) launch_k(attention_tc_kernel<T, 64, kTcKeys>, grid, kTcWarps * 32, 0, s, p);
        else if (p.hd == 128) launch_k(attention_tc_kernel<T, 128, kTcKeys>, grid, kTcWarps * 32, 0, s, p);
        else launch_k(attention_tc_kernel<T, 256, kTcKeys / 2>, grid, kTcWarps * 32, 0, s, p);
      };
      if (p.dt == DT::F16) go(__half{});
      else if (p.dt == DT::BF16) go(__nv_bfloat16{});
      else go(float{});
      return;
    }
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
  launch_k(attention_kernel, grid, 32 * kRows, smem, s, p);
  if (p.splits > 1) {
    const int64_t rows = p.batch * p.n_heads * p.S;
    launch_k(attention_combine_kernel, grid_for(rows, 4), 128, 0, s, p);
  }
}

}  // namespace rlx::cuda_backend
