// CUDA kernels of the gated delta rule (gated delta-net's linear attention), which
// updates its state handle S [batch, hv, dk, dv] in place (ir::updates_state). Per real
// row: decay S by exp(g), read mem_j = Σ_i S[i][j] k_i, take u_j = β (v_j - mem_j), add
// k_i u_j and read o_j = Σ_i S[i][j] q_i (q, k l2-normalized, q scaled).
//
// Token by token (chunk 0: decode; or a key head too large for the chunked form): for key
// heads up to 256 a block per (sequence, value head, slice of kDeltaCols state columns)
// keeps its columns of S in registers across the rows; larger heads take one block per
// (sequence, value head), a thread per column, S in device memory.
//
// Chunk by chunk (chunk > 0, several rows), in two kernels. With Γ_t the decay
// accumulated over the chunk up to row t, L[t][s] = β_t (k_t·k_s) Γ_t/Γ_s (s < t) and
// P[t][s] = (q_t·k_s) Γ_t/Γ_s (s <= t), the rows' updates are U = U0 - W S0 with
//   [U0 | W] = (I + L)^-1 [β V | β Γ K],
// and then O = Γ Q S0 + P U and S = Γ_C S0 + Σ_s Γ_C/Γ_s k_s u_sᵀ. Nothing before the
// last two steps depends on S, so
// - delta_prep_kernel runs every (sequence, value head, chunk) at once: it normalizes q
//   and k, forms L and P, forward-substitutes [β V | β Γ K] (a thread per column, right-
//   looking, the column in registers) and writes U0, W, P, Γ Q, (Γ_C/Γ_s) K and Γ_C to a
//   workspace;
// - delta_scan_kernel walks the chunks in order, a block per (sequence, value head, slice
//   of kDeltaCols columns) with its columns of S in shared memory: three products a chunk,
//   no sequential step inside it.
// Padding rows (past a sequence's real count) read the state and never change it: every
// sum over s runs over the real rows only, and what a padding row holds (even inf or NaN)
// is never multiplied into a real row or the state.
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/recurrent_seq.cuh"
#include "backends/cuda/smem_limit.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kDeltaCols = 32;  // state columns a block of the scan and register kernels
constexpr int kDeltaWarps = 8;  // warps of those blocks and of the prep kernel
constexpr int kDeltaThreads = kDeltaWarps * 32;
constexpr int kMaxChunk = 64;  // rows a chunk at most (the prep kernel's register columns)

__host__ __device__ constexpr int64_t round4(int64_t x) { return (x + 3) / 4 * 4; }

// The workspace of one (sequence, value head, chunk), in floats: W, Γ Q and (Γ_C/Γ_s) K
// [C][dk4] each, P [C][C4], Γ_C (and 3 floats of padding), then U0 [C][dv]; every part
// starts 16-byte aligned.
struct ChunkLayout {
  int64_t C, dk4, C4, dv;
  __host__ __device__ int64_t w() const { return 0; }
  __host__ __device__ int64_t qg() const { return C * dk4; }
  __host__ __device__ int64_t kf() const { return 2 * C * dk4; }
  __host__ __device__ int64_t pm() const { return 3 * C * dk4; }
  __host__ __device__ int64_t ec() const { return 3 * C * dk4 + C * C4; }
  __host__ __device__ int64_t u0() const { return ec() + 4; }
  __host__ __device__ int64_t size() const { return round4(u0() + C * dv); }
};

__host__ __device__ inline ChunkLayout chunk_layout(const DeltaRuleParams& p) {
  return ChunkLayout{p.chunk, round4(p.dk), round4(p.chunk), p.dv};
}

// Shared memory of the prep kernel (q and k rows, Lᵀ, Γ, β) and of the scan kernel (its
// columns of S, the updates, W, Γ Q, (Γ_C/Γ_s) K and P).
int64_t prep_smem(int64_t C, int64_t dk) { return 4 * (2 * C * (round4(dk) + 4) + C * round4(C) + 2 * C); }
int64_t scan_smem(int64_t C, int64_t dk) {
  return 4 * (round4(dk) * kDeltaCols + C * kDeltaCols + 3 * C * round4(dk) + C * round4(C));
}

// u <- (I + L)^-1 u for one column, right-looking: once row s is final every later row
// takes its share, so the critical path is one FMA a row. Lt holds Lᵀ with rows of
// round4(C) floats, zero for t >= real. kFull (C == kMaxChunk): rows past real hold
// u = 0 and L = 0, so every update runs unguarded; otherwise only rows below real (and
// within Lt) are touched.
template <bool kFull>
__device__ __forceinline__ void forward_substitute(float (&u)[kMaxChunk], const float* Lt, int64_t lc, int64_t real) {
#pragma unroll
  for (int s2 = 0; s2 < kMaxChunk - 1; ++s2) {
    const float4* l4 = reinterpret_cast<const float4*>(Lt + s2 * (kFull ? kMaxChunk : lc));
#pragma unroll
    for (int tq = (s2 + 1) / 4; tq < kMaxChunk / 4; ++tq) {
      if (!kFull && !(s2 + 1 < real && 4 * tq < real)) continue;
      const float4 lv = l4[tq];
      const float le[4] = {lv.x, lv.y, lv.z, lv.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = 4 * tq + e;
        if (t > s2 && (kFull || t < real)) u[t] = fmaf(-le[e], u[s2], u[t]);
      }
    }
  }
}

__global__ void __launch_bounds__(kDeltaThreads) delta_prep_kernel(const DeltaRuleParams p) {
  extern __shared__ __align__(16) float sm[];
  const int64_t C = p.chunk, dk = p.dk, dk4 = round4(dk), ld = dk4 + 4, lc = round4(C);
  float* Qs = sm;            // [C][ld] q, then normalized and scaled (zeros past dk)
  float* Ks = Qs + C * ld;   // [C][ld] k, then normalized
  float* Lt = Ks + C * ld;   // [C][lc] Lᵀ: Lt[s][t] = L[t][s] (rows 16-byte aligned)
  float* gam = Lt + C * lc;  // [C] log Γ_t
  float* bet = gam + C;      // [C] β_t (0 on padding rows)
  pdl_wait();
  const int64_t bh = blockIdx.x, b = bh / p.hv, h = bh % p.hv, kh = h / (p.hv / p.hk), c0 = blockIdx.y * C;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
  int32_t seen = 0, len = 0;
  if (!seq_entry(p.seq, b, p.rows, p.err, p.err_code, &seen, &len)) return;
  const int64_t n = min(C, p.rows - c0);
  const int64_t real = max(int64_t{0}, min(static_cast<int64_t>(len) - c0, n));
  const ChunkLayout lay = chunk_layout(p);
  float* work = p.work + (bh * gridDim.y + blockIdx.y) * lay.size();
  // The chunk's q and k rows, every load in flight at once; meanwhile warp 0 scans
  // log Γ over the chunk (in double, two rows a lane) and takes β.
  for (int64_t e = tid; e < n * dk4; e += kDeltaThreads) {
    const int64_t t = e / dk4, i = e - t * dk4, r = b * p.rows + c0 + t;
    Qs[t * ld + i] = i < dk ? p.q[(r * p.hk + kh) * dk + i] : 0.0f;
    Ks[t * ld + i] = i < dk ? p.k[(r * p.hk + kh) * dk + i] : 0.0f;
  }
  if (warp == 0) {
    const int64_t t0 = 2 * lane, t1 = t0 + 1, r0 = b * p.rows + c0 + t0;
    const double x0 = t0 < real ? p.g[r0 * p.hv + h] : 0.0, x1 = t1 < real ? p.g[(r0 + 1) * p.hv + h] : 0.0;
    double incl = x0 + x1;
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const double before = incl - (x0 + x1);
    if (t0 < n) {
      gam[t0] = static_cast<float>(before + x0);
      bet[t0] = t0 < real ? p.beta[r0 * p.hv + h] : 0.0f;
    }
    if (t1 < n) {
      gam[t1] = static_cast<float>(incl);
      bet[t1] = t1 < real ? p.beta[(r0 + 1) * p.hv + h] : 0.0f;
    }
  }
  __syncthreads();
  // l2-normalized (q also scaled), a warp per row; Γ Q and (Γ_C/Γ_s) K to the workspace.
  for (int64_t t = warp; t < n; t += kDeltaWarps) {
    float qq = 0.0f, kk = 0.0f;
    for (int64_t i = lane; i < dk; i += 32) {
      qq += Qs[t * ld + i] * Qs[t * ld + i];
      kk += Ks[t * ld + i] * Ks[t * ld + i];
    }
    qq = warp_sum(qq);
    kk = warp_sum(kk);
    const float qs = (p.l2norm ? 1.0f / sqrtf(qq + 1e-6f) : 1.0f) * p.scale;
    const float ks = p.l2norm ? 1.0f / sqrtf(kk + 1e-6f) : 1.0f;
    const float eg = expf(gam[t]), fac = t < real ? expf(gam[real - 1] - gam[t]) : 0.0f;
    for (int64_t i = lane; i < dk4; i += 32) {
      const float qv = Qs[t * ld + i] * qs, kv = Ks[t * ld + i] * ks;
      Qs[t * ld + i] = qv;
      Ks[t * ld + i] = kv;
      work[lay.qg() + t * dk4 + i] = eg * qv;
      work[lay.kf() + t * dk4 + i] = t < real ? fac * kv : 0.0f;  // padding rows: 0, whatever k held
    }
  }
  if (tid == 0) work[lay.ec()] = real > 0 ? expf(gam[real - 1]) : 1.0f;
  __syncthreads();
  {  // k_t·k_s and q_t·k_s, a 4 x 4 tile of (t, s) a thread, four columns a load; rows
     // past n read row n-1
    const int tx = tid & 15, ty = tid >> 4;
    const float4 *kt[4], *qt[4], *ks[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int64_t t = min(static_cast<int64_t>(ty + 16 * a), n - 1),
                    s2 = min(static_cast<int64_t>(tx + 16 * a), n - 1);
      kt[a] = reinterpret_cast<const float4*>(Ks + t * ld);
      qt[a] = reinterpret_cast<const float4*>(Qs + t * ld);
      ks[a] = reinterpret_cast<const float4*>(Ks + s2 * ld);
    }
    float kk[4][4] = {}, qk[4][4] = {};
    for (int64_t i = 0; i < dk4 / 4; ++i) {
      float4 kv[4], qv[4], sv[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        kv[a] = kt[a][i];
        qv[a] = qt[a][i];
        sv[a] = ks[a][i];
      }
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int c = 0; c <= a; ++c) {  // tiles with a < c lie above the diagonal: not needed
          kk[a][c] =
              fmaf(kv[a].x, sv[c].x, fmaf(kv[a].y, sv[c].y, fmaf(kv[a].z, sv[c].z, fmaf(kv[a].w, sv[c].w, kk[a][c]))));
          qk[a][c] =
              fmaf(qv[a].x, sv[c].x, fmaf(qv[a].y, sv[c].y, fmaf(qv[a].z, sv[c].z, fmaf(qv[a].w, sv[c].w, qk[a][c]))));
        }
    }
    const int64_t C4 = lay.C4;
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t t = ty + 16 * a, s2 = tx + 16 * c;
        const bool in = t < n && s2 < n && c <= a;
        const float d = in && s2 <= t ? expf(gam[t] - gam[s2]) : 0.0f;
        if (s2 < C && t < C4) Lt[s2 * lc + t] = in && s2 < t && t < real ? bet[t] * kk[a][c] * d : 0.0f;
        if (t < C && s2 < C4) work[lay.pm() + t * C4 + s2] = in && s2 <= t && s2 < real ? qk[a][c] * d : 0.0f;
      }
  }
  __syncthreads();
  // [U0 | W] = (I + L)^-1 [β V | β Γ K]: a thread per column, right-looking, so the
  // critical path is one FMA a row; rows past the real ones are written as zeros.
  for (int64_t col = tid; col < p.dv + dk4; col += kDeltaThreads) {
    const bool is_v = col < p.dv;
    const int64_t i = col - p.dv;
    float u[kMaxChunk];
#pragma unroll
    for (int t = 0; t < kMaxChunk; ++t) {
      u[t] = 0.0f;
      if (t < real) {
        const int64_t r = b * p.rows + c0 + t;
        u[t] = is_v ? bet[t] * p.v[(r * p.hv + h) * p.dv + col] : bet[t] * expf(gam[t]) * Ks[t * ld + i];
      }
    }
    if (C == kMaxChunk)
      forward_substitute<true>(u, Lt, lc, real);
    else
      forward_substitute<false>(u, Lt, lc, real);
#pragma unroll
    for (int t = 0; t < kMaxChunk; ++t)
      if (t < C) {
        if (is_v)
          work[lay.u0() + t * p.dv + col] = u[t];
        else
          work[lay.w() + t * dk4 + i] = u[t];
      }
  }
  pdl_trigger();
}

__global__ void __launch_bounds__(kDeltaThreads) delta_scan_kernel(const DeltaRuleParams p) {
  extern __shared__ __align__(16) float sm[];
  const int64_t C = p.chunk, dk = p.dk, dk4 = round4(dk);
  const ChunkLayout lay = chunk_layout(p);
  const int64_t C4 = lay.C4;
  float* Ss = sm;                     // [dk4][kDeltaCols] this block's columns of S (zero rows past dk)
  float* Us = Ss + dk4 * kDeltaCols;  // [C][kDeltaCols] the updates (zero past the real rows)
  float* Ws = Us + C * kDeltaCols;    // [C][dk4] W
  float* Qg = Ws + C * dk4;           // [C][dk4] Γ Q
  float* Kf = Qg + C * dk4;           // [C][dk4] (Γ_C/Γ_s) K
  float* Ps = Kf + C * dk4;           // [C][C4] P
  pdl_wait();
  const int64_t bh = blockIdx.x, b = bh / p.hv, h = bh % p.hv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kDeltaCols + lane;  // this lane's column
  const bool col_ok = j < p.dv;
  int32_t seen = 0, len = 0;
  if (!seq_entry(p.seq, b, p.rows, p.err, p.err_code, &seen, &len)) return;
  float* S = p.state + bh * dk * p.dv;
  for (int64_t i = warp; i < dk4; i += kDeltaWarps)
    Ss[i * kDeltaCols + lane] = seen > 0 && col_ok && i < dk ? S[i * p.dv + j] : 0.0f;
  const int64_t chunks = (p.rows + C - 1) / C;
  constexpr int kRows = kMaxChunk / kDeltaWarps;  // rows of U and O a thread
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t c0 = c * C, n = min(C, p.rows - c0);
    const int64_t real = max(int64_t{0}, min(static_cast<int64_t>(len) - c0, n));
    const float* work = p.work + (bh * chunks + c) * lay.size();
    {  // the chunk's W, Γ Q, (Γ_C/Γ_s) K and P, contiguous in both places, 16 bytes a load
      const float4* src = reinterpret_cast<const float4*>(work);
      float4* dst = reinterpret_cast<float4*>(Ws);
      for (int64_t e = tid; e < (3 * C * dk4 + C * C4) / 4; e += kDeltaThreads) dst[e] = src[e];
    }
    const float ec = work[lay.ec()];
    __syncthreads();  // the staged matrices, and (first chunk) S0
    // U = U0 - W S0 and O = Γ Q S0 for this lane's column, rows warp + 8a (rows past n
    // read row n-1 and are never stored).
    float acc_u[kRows] = {}, acc_o[kRows] = {};
    {
      const float4* w4 = reinterpret_cast<const float4*>(Ws);
      const float4* q4 = reinterpret_cast<const float4*>(Qg);
      int row[kRows];  // float4 offset of each row (32-bit: fewer registers than pointers)
#pragma unroll
      for (int a = 0; a < kRows; ++a)
        row[a] = static_cast<int>(min(static_cast<int64_t>(warp + kDeltaWarps * a), n - 1) * (dk4 / 4));
#pragma unroll 2
      for (int i4 = 0; i4 < static_cast<int>(dk4 / 4); ++i4) {
        const float* sc = Ss + 4 * i4 * kDeltaCols + lane;
        const float s0 = sc[0], s1 = sc[kDeltaCols], s2 = sc[2 * kDeltaCols], s3 = sc[3 * kDeltaCols];
#pragma unroll
        for (int a = 0; a < kRows; ++a) {
          const float4 w = w4[row[a] + i4], q = q4[row[a] + i4];
          acc_u[a] = fmaf(w.x, s0, fmaf(w.y, s1, fmaf(w.z, s2, fmaf(w.w, s3, acc_u[a]))));
          acc_o[a] = fmaf(q.x, s0, fmaf(q.y, s1, fmaf(q.z, s2, fmaf(q.w, s3, acc_o[a]))));
        }
      }
    }
#pragma unroll
    for (int a = 0; a < kRows; ++a) {
      const int64_t t = warp + kDeltaWarps * a;
      if (t < C) Us[t * kDeltaCols + lane] = t < real && col_ok ? work[lay.u0() + t * p.dv + j] - acc_u[a] : 0.0f;
    }
    __syncthreads();  // U complete; every reader of S0 is done
    // Outputs: O = Γ Q S0 + P U (P is 0 above the diagonal and past the real rows).
    {
      int prow[kRows];
#pragma unroll
      for (int a = 0; a < kRows; ++a)
        prow[a] = static_cast<int>(min(static_cast<int64_t>(warp + kDeltaWarps * a), n - 1) * C4);
#pragma unroll 4
      for (int s2 = 0; s2 < static_cast<int>(real); ++s2) {
        const float us = Us[s2 * kDeltaCols + lane];
#pragma unroll
        for (int a = 0; a < kRows; ++a) acc_o[a] = fmaf(Ps[prow[a] + s2], us, acc_o[a]);
      }
#pragma unroll
      for (int a = 0; a < kRows; ++a) {
        const int64_t t = warp + kDeltaWarps * a;
        if (t < n && col_ok) p.out[((b * p.rows + c0 + t) * p.hv + h) * p.dv + j] = acc_o[a];
      }
    }
    // The state: S = Γ_C S0 + Σ_s (Γ_C/Γ_s) k_s u_sᵀ over the real rows, 16 rows of S a
    // thread side by side (its own rows: nobody else reads them after the sync above).
    constexpr int kStateRows = 16;
    for (int64_t i0 = warp * kStateRows; i0 < dk4; i0 += kDeltaWarps * kStateRows) {
      float acc[kStateRows] = {};
#pragma unroll 4
      for (int s2 = 0; s2 < static_cast<int>(real); ++s2) {
        const float us = Us[s2 * kDeltaCols + lane];
        const float4* kr = reinterpret_cast<const float4*>(Kf + s2 * dk4 + i0);
#pragma unroll
        for (int a = 0; a < kStateRows / 4; ++a) {
          if (i0 + 4 * a >= dk4) break;
          const float4 k4 = kr[a];
          acc[4 * a] = fmaf(k4.x, us, acc[4 * a]);
          acc[4 * a + 1] = fmaf(k4.y, us, acc[4 * a + 1]);
          acc[4 * a + 2] = fmaf(k4.z, us, acc[4 * a + 2]);
          acc[4 * a + 3] = fmaf(k4.w, us, acc[4 * a + 3]);
        }
      }
#pragma unroll
      for (int a = 0; a < kStateRows; ++a) {
        const int64_t i = i0 + a;
        if (i < dk4) Ss[i * kDeltaCols + lane] = fmaf(ec, Ss[i * kDeltaCols + lane], acc[a]);
      }
    }
    __syncthreads();  // the next chunk overwrites the staged matrices and U
  }
  for (int64_t i = warp; i < dk; i += kDeltaWarps)
    if (col_ok) S[i * p.dv + j] = Ss[i * kDeltaCols + lane];
  pdl_trigger();
}

// Token by token, a thread per column of S, S in device memory (key heads past 256).
__global__ void gated_delta_rule_kernel(const DeltaRuleParams p) {
  extern __shared__ float smem[];
  float* qs = smem;         // [dk]
  float* ks = smem + p.dk;  // [dk]
  __shared__ float norms[2];
  pdl_wait();
  const int64_t bh = blockIdx.x, b = bh / p.hv, h = bh % p.hv, kh = h / (p.hv / p.hk);
  const int64_t j = threadIdx.x;
  int32_t seen = 0, len = 0;
  if (!seq_entry(p.seq, b, p.rows, p.err, p.err_code, &seen, &len)) return;
  float* S = p.state + bh * p.dk * p.dv;
  if (seen == 0 && j < p.dv)
    for (int64_t i = 0; i < p.dk; ++i) S[i * p.dv + j] = 0.0f;
  for (int64_t t = 0; t < p.rows; ++t) {
    const int64_t r = b * p.rows + t;
    const float* qr = p.q + (r * p.hk + kh) * p.dk;
    const float* kr = p.k + (r * p.hk + kh) * p.dk;
    __syncthreads();  // the previous row's readers of qs / ks are done
    for (int64_t i = threadIdx.x; i < p.dk; i += blockDim.x) {
      qs[i] = qr[i];
      ks[i] = kr[i];
    }
    if (threadIdx.x < 2) norms[threadIdx.x] = 0.0f;
    __syncthreads();
    if (threadIdx.x == 0 && p.l2norm) {
      double qq = 0, kk = 0;
      for (int64_t i = 0; i < p.dk; ++i) {
        qq += double(qs[i]) * qs[i];
        kk += double(ks[i]) * ks[i];
      }
      norms[0] = static_cast<float>(1.0 / sqrt(qq + 1e-6));
      norms[1] = static_cast<float>(1.0 / sqrt(kk + 1e-6));
    }
    __syncthreads();
    const float qscale = (p.l2norm ? norms[0] : 1.0f) * p.scale, kscale = p.l2norm ? norms[1] : 1.0f;
    if (j >= p.dv) continue;
    float o = 0.0f;
    if (t < len) {
      const float decay = expf(p.g[r * p.hv + h]), beta = p.beta[r * p.hv + h];
      float mem = 0.0f;
      for (int64_t i = 0; i < p.dk; ++i) {
        const float s = S[i * p.dv + j] * decay;
        S[i * p.dv + j] = s;
        mem += s * ks[i] * kscale;
      }
      const float u = beta * (p.v[(r * p.hv + h) * p.dv + j] - mem);
      for (int64_t i = 0; i < p.dk; ++i) {
        const float s = S[i * p.dv + j] + ks[i] * kscale * u;
        S[i * p.dv + j] = s;
        o += s * qs[i] * qscale;
      }
    } else {
      for (int64_t i = 0; i < p.dk; ++i) o += S[i * p.dv + j] * qs[i] * qscale;
    }
    p.out[(r * p.hv + h) * p.dv + j] = o;
  }
  pdl_trigger();
}

// Token by token with the state in registers: one block per (sequence, value head, slice
// of kDeltaCols columns); lane j of warp w holds S[w + 8a][j] for a < R, so every row
// costs two block-wide sums of eight partials and no trip of the state through memory.
template <int R>
__global__ void __launch_bounds__(kDeltaThreads) gated_delta_regs_kernel(const DeltaRuleParams p) {
  extern __shared__ __align__(16) float sm[];
  float* qs = sm;                                     // [dk]
  float* ks = sm + p.dk;                              // [dk]
  __shared__ float part[2][kDeltaWarps][kDeltaCols];  // per-warp partial sums of Sᵀk and Sᵀq
  __shared__ float norms[2];
  pdl_wait();
  const int64_t bh = blockIdx.x, b = bh / p.hv, h = bh % p.hv, kh = h / (p.hv / p.hk), dk = p.dk;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kDeltaCols + lane;
  const bool col_ok = j < p.dv;
  int32_t seen = 0, len = 0;
  if (!seq_entry(p.seq, b, p.rows, p.err, p.err_code, &seen, &len)) return;
  float* S = p.state + bh * dk * p.dv;
  float st[R];
#pragma unroll
  for (int a = 0; a < R; ++a) {
    const int64_t i = warp + kDeltaWarps * a;
    st[a] = seen > 0 && col_ok && i < dk ? S[i * p.dv + j] : 0.0f;
  }
  for (int64_t t = 0; t < p.rows; ++t) {
    const int64_t r = b * p.rows + t;
    const float* qr = p.q + (r * p.hk + kh) * dk;
    const float* kr = p.k + (r * p.hk + kh) * dk;
    for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
      qs[i] = qr[i];
      ks[i] = kr[i];
    }
    __syncthreads();
    if (warp == 0) {
      float qq = 0.0f, kk = 0.0f;
      for (int64_t i = lane; i < dk; i += 32) {
        qq += qs[i] * qs[i];
        kk += ks[i] * ks[i];
      }
      qq = warp_sum(qq);
      kk = warp_sum(kk);
      if (lane == 0) {
        norms[0] = (p.l2norm ? 1.0f / sqrtf(qq + 1e-6f) : 1.0f) * p.scale;
        norms[1] = p.l2norm ? 1.0f / sqrtf(kk + 1e-6f) : 1.0f;
      }
    }
    __syncthreads();
    const float qn = norms[0], kn = norms[1];
    if (t < len) {  // the same for the whole block
      const float decay = expf(p.g[r * p.hv + h]), beta = p.beta[r * p.hv + h];
      float pm = 0.0f;
#pragma unroll
      for (int a = 0; a < R; ++a) {
        const int64_t i = warp + kDeltaWarps * a;
        st[a] *= decay;
        pm = fmaf(st[a], i < dk ? ks[i] * kn : 0.0f, pm);
      }
      part[0][warp][lane] = pm;
      __syncthreads();
      float mem = 0.0f;
      for (int w = 0; w < kDeltaWarps; ++w) mem += part[0][w][lane];
      const float u = beta * ((col_ok ? p.v[(r * p.hv + h) * p.dv + j] : 0.0f) - mem);
#pragma unroll
      for (int a = 0; a < R; ++a) {
        const int64_t i = warp + kDeltaWarps * a;
        st[a] = fmaf(i < dk ? ks[i] * kn : 0.0f, u, st[a]);
      }
    }
    float po = 0.0f;
#pragma unroll
    for (int a = 0; a < R; ++a) {
      const int64_t i = warp + kDeltaWarps * a;
      po = fmaf(st[a], i < dk ? qs[i] * qn : 0.0f, po);
    }
    part[1][warp][lane] = po;
    __syncthreads();  // also: every reader of this row's q, k and Sᵀk partials is done
    if (warp == 0 && col_ok) {
      float o = 0.0f;
      for (int w = 0; w < kDeltaWarps; ++w) o += part[1][w][lane];
      p.out[(r * p.hv + h) * p.dv + j] = o;
    }
  }
#pragma unroll
  for (int a = 0; a < R; ++a) {
    const int64_t i = warp + kDeltaWarps * a;
    if (col_ok && i < dk) S[i * p.dv + j] = st[a];
  }
  pdl_trigger();
}

}  // namespace

int64_t prepare_gated_delta_chunked(int64_t want, int64_t dk) {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return 0;
  int64_t c = std::min<int64_t>(want, kMaxChunk);
  while (c > 0 && std::max(prep_smem(c, dk), scan_smem(c, dk)) > optin) c = c > 8 ? c / 2 : 0;
  if (c > 0) {
    raise_smem_limit<delta_prep_kernel>(optin);
    raise_smem_limit<delta_scan_kernel>(optin);
  }
  return c;
}

int64_t gated_delta_workspace_bytes(const DeltaRuleParams& p) {
  if (p.chunk <= 0) return 0;
  DeltaRuleParams q = p;
  const int64_t chunks = (p.rows + p.chunk - 1) / p.chunk;
  return 4 * p.batch * p.hv * chunks * chunk_layout(q).size();
}

void launch_gated_delta_rule(const DeltaRuleParams& p, cudaStream_t s) {
  const dim3 block(kDeltaThreads);
  if (p.chunk > 0) {
    const int64_t chunks = (p.rows + p.chunk - 1) / p.chunk;
    launch_k(delta_prep_kernel, dim3(static_cast<unsigned>(p.batch * p.hv), static_cast<unsigned>(chunks)), block,
             static_cast<size_t>(prep_smem(p.chunk, p.dk)), s, p);
    launch_k(delta_scan_kernel,
             dim3(static_cast<unsigned>(p.batch * p.hv), static_cast<unsigned>((p.dv + kDeltaCols - 1) / kDeltaCols)),
             block, static_cast<size_t>(scan_smem(p.chunk, p.dk)), s, p);
    return;
  }
  const dim3 slices(static_cast<unsigned>(p.batch * p.hv), static_cast<unsigned>((p.dv + kDeltaCols - 1) / kDeltaCols));
  const auto qk_bytes = static_cast<size_t>(2 * p.dk) * sizeof(float);
  if (p.dk <= 4 * kDeltaWarps) return launch_k(gated_delta_regs_kernel<4>, slices, block, qk_bytes, s, p);
  if (p.dk <= 8 * kDeltaWarps) return launch_k(gated_delta_regs_kernel<8>, slices, block, qk_bytes, s, p);
  if (p.dk <= 16 * kDeltaWarps) return launch_k(gated_delta_regs_kernel<16>, slices, block, qk_bytes, s, p);
  if (p.dk <= 32 * kDeltaWarps) return launch_k(gated_delta_regs_kernel<32>, slices, block, qk_bytes, s, p);
  const auto threads = static_cast<unsigned>((std::max<int64_t>(p.dv, 32) + 31) / 32 * 32);
  launch_k(gated_delta_rule_kernel, dim3(static_cast<unsigned>(p.batch * p.hv)), dim3(threads),
           static_cast<size_t>(2 * p.dk) * sizeof(float), s, p);
}

}  // namespace rlx::cuda_backend
