// CUDA decode attention for many streams at once: one query row per (sequence, head),
// when batch x query heads is past one wave of blocks (a batched server step). The
// general decode kernel (kernels_attention.cu) gives a block 32 keys a warp, so at a few
// hundred keys a sequence its grid is one block a multiprocessor and a handful of warps
// whose chains of dependent instructions bound the step. Here a block is four warps over
// one KV head's group of query heads, one sequence and one split of the keys that row
// sees; splits hold at least 32 keys and aim at four blocks a multiprocessor, so many
// warps with short chains hide each other's memory latency.
//
// A block takes its keys in chunks of kChunk: (1) scores, LK lanes a key (each four
// 16-byte loads of the K row), the group's queries from shared memory, two passes' loads
// in flight; (2) the softmax per query head, one warp a head, against the running max of
// the earlier chunks (their sums and accumulators rescaled); (3) P.V with a lane owning
// head_dim / 32 adjacent dims, the warps taking keys in turn, four rows' loads in flight.
// The warps' accumulators are added in shared memory. With one split the block writes
// the output; otherwise a partial (max, sum, accumulator) per head, and the last block of
// its (sequence, KV head) to finish merges them (finish_decode_splits, shared with the
// general decode kernel: a counter per block column, left at zero again).
#include <algorithm>
#include <cfloat>

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kWarps = 4;  // warps a block
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 256;        // keys scored before the softmax and P.V take them
constexpr int kMinSplitKeys = 32;  // fewest keys a split takes
constexpr int kBlocksPerSm = 4;    // blocks a multiprocessor the split count aims at (96-130 registers: 4-5 fit)
constexpr int kMaxGroupDims = 1024;  // query heads of a group (rounded up) x head_dim
constexpr int kDecodeRowsMaxSplits = 32;

// N elements of T at `p` (N * sizeof(T) bytes, aligned to that: 2 to 32) as floats.
template <typename T, int N>
__device__ __forceinline__ void load_row_part(const T* p, float* f) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes >= 16) {
    constexpr int E = 16 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) unpack16<T>(__ldcs(reinterpret_cast<const uint4*>(p) + i), f + i * E);
  } else if constexpr (kBytes == 8 || kBytes == 4) {
    uint32_t w[2];
    if constexpr (kBytes == 8) {
      const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p));
      w[0] = u.x;
      w[1] = u.y;
    } else {
      w[0] = __ldcs(reinterpret_cast<const unsigned int*>(p));
    }
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        f[i] = __uint_as_float(w[i]);
      } else {
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
      }
    }
  } else {
    f[0] = to_float(p[0]);
  }
}

// T: f32 or bf16 rows; head_dim 32 NC; GM: query heads a group, rounded up (G <= GM).
template <typename T, int NC, int GM>
__global__ void __launch_bounds__(kThreads) attention_decode_rows_kernel(const AttentionParams p) {
  constexpr int HD = 32 * NC;
  constexpr int E = 16 / static_cast<int>(sizeof(T));  // elements a 16-byte load
  constexpr int RV = HD / E;                           // 16-byte loads a row
  constexpr int LK = RV / 4 > 0 ? RV / 4 : 1;          // lanes a key in the scores
  constexpr int LD = RV / LK;                          // 16-byte loads a lane a key
  constexpr int KPW = 32 / LK;                         // keys a warp a pass
  constexpr int KPB = KPW * kWarps;                    // keys a block a pass
  static_assert(GM * HD <= kMaxGroupDims && LD * LK == RV, "shape");
  __shared__ __align__(16) float q_s[GM * HD];         // the group's queries, scaled
  __shared__ __align__(16) float sc[kChunk * GM];      // [key][head]: scores, then weights
  __shared__ __align__(16) float red[kWarps][GM * HD];  // the warps' accumulators
  __shared__ float m_s[GM], l_s[GM], corr_s[GM];        // running max and sum, rescale
  __shared__ float w_s[GM][kDecodeRowsMaxSplits], ls_s[GM][kDecodeRowsMaxSplits];
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = static_cast<int>(blockIdx.x), split = static_cast<int>(blockIdx.z);
  const int64_t b = blockIdx.y;
  const int G = p.n_heads / p.n_kv, h0 = kvh * G;
  const int64_t qw = static_cast<int64_t>(p.n_heads) * HD;
  const int64_t kw = static_cast<int64_t>(p.n_kv) * HD;
  // Keys this row sees, the splits that share them (on the device, by its position), and
  // this split's part; blocks past the row's splits leave before reading anything else.
  const int64_t pos = p.q_pos ? ld_i(p.pos_dt, p.q_pos, b * p.pos_bstride) : p.T - 1;
  int64_t jb = 0, je = p.T;
  visible_keys(p, b, pos, jb, je);
  const int64_t n = je - jb;
  int64_t active = (n + kMinSplitKeys - 1) / kMinSplitKeys;
  if (active > p.splits) active = p.splits;
  if (active < 1) active = 1;
  if (split >= active) return;
  const int64_t per = (n + active - 1) / active;
  const int64_t k0 = jb + split * per < je ? jb + split * per : je;
  const int64_t k1 = k0 + per < je ? k0 + per : je;
  for (int e = threadIdx.x; e < G * HD; e += kThreads)
    q_s[e] = ld_f(p.dt, p.q, b * p.S_full * qw + static_cast<int64_t>(h0) * HD + e) * p.scale;
  if (threadIdx.x < GM) {
    m_s[threadIdx.x] = -FLT_MAX;
    l_s[threadIdx.x] = 0.0f;
  }
  __syncthreads();
  const T* kb = static_cast<const T*>(p.k) + b * p.T_full * kw + static_cast<int64_t>(kvh) * HD;
  const T* vb = static_cast<const T*>(p.v) + b * p.T_full * kw + static_cast<int64_t>(kvh) * HD;
  float acc[GM][NC];
#pragma unroll
  for (int g = 0; g < GM; ++g)
#pragma unroll
    for (int d = 0; d < NC; ++d) acc[g][d] = 0.0f;
  const int pp = lane % LK, kl = lane / LK;  // scores: this lane's part of the row, its key in the pass
  for (int64_t c0 = k0; c0 < k1; c0 += kChunk) {
    const int cn = k1 - c0 < kChunk ? static_cast<int>(k1 - c0) : kChunk;
    const T* kc = kb + c0 * kw;
    const T* vc = vb + c0 * kw;
    // (1) Scores: lane part pp of key t0 + u KPB + kl, 16-byte loads pp, pp + LK, ...
    for (int t0 = warp * KPW; t0 < cn; t0 += 2 * KPB) {
      uint4 kr[2][LD];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int key = t0 + u * KPB + kl;
        if (key < cn) {
          const uint4* k4 = reinterpret_cast<const uint4*>(kc + static_cast<int64_t>(key) * kw);
#pragma unroll
          for (int i = 0; i < LD; ++i) kr[u][i] = __ldcs(k4 + pp + LK * i);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int key = t0 + u * KPB + kl;
        float s[GM];
#pragma unroll
        for (int g = 0; g < GM; ++g) s[g] = 0.0f;
        if (key < cn) {
#pragma unroll
          for (int i = 0; i < LD; ++i) {
            float f[E];
            unpack16<T>(kr[u][i], f);
            const int d0 = (pp + LK * i) * E;
#pragma unroll
            for (int g = 0; g < GM; ++g) {
              if (g >= G) break;
              const float* qq = q_s + g * HD + d0;
#pragma unroll
              for (int e = 0; e < E; e += 4) {
                const float4 q4 = *reinterpret_cast<const float4*>(qq + e);
                s[g] = fmaf(f[e], q4.x, fmaf(f[e + 1], q4.y, fmaf(f[e + 2], q4.z, fmaf(f[e + 3], q4.w, s[g]))));
              }
            }
          }
        }
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          if (g >= G) break;
#pragma unroll
          for (int o = LK / 2; o > 0; o >>= 1) s[g] += __shfl_xor_sync(0xffffffffu, s[g], o);
          if (pp == 0 && key < cn) sc[key * GM + g] = p.softcap > 0.0f ? p.softcap * tanhf(s[g] / p.softcap) : s[g];
        }
      }
    }
    __syncthreads();
    // (2) Softmax per query head against the running max; the weights replace the scores.
    for (int g = warp; g < G; g += kWarps) {
      float mx = -FLT_MAX;
      for (int i = lane; i < cn; i += 32) mx = fmaxf(mx, sc[i * GM + g]);
      mx = warp_max(mx);
      const float m_old = m_s[g], m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int i = lane; i < cn; i += 32) {
        const float w = __expf(sc[i * GM + g] - m_new);
        sc[i * GM + g] = w;
        sum += w;
      }
      sum = warp_sum(sum);
      __syncwarp();  // every lane has read m_s[g] before lane 0 replaces it
      if (lane == 0) {
        const float corr = __expf(m_old - m_new);
        corr_s[g] = corr;
        l_s[g] = l_s[g] * corr + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();
    // (3) P.V: warp w takes keys w, w + 4, ...; lane owns dims [lane NC, lane NC + NC).
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      if (g >= G) break;
      const float c = corr_s[g];
#pragma unroll
      for (int d = 0; d < NC; ++d) acc[g][d] *= c;
    }
    // (Loading a warp's first 16 V rows with the chunk's K rows measured slower: 128
    // registers, 19.5 against 15.7 us a layer at 16 streams of ~284 keys on an H200.)
    constexpr int UV = 4;  // V rows a warp loads at once
    for (int i0 = warp; i0 < cn; i0 += kWarps * UV) {
      float vv[UV][NC];
#pragma unroll
      for (int u = 0; u < UV; ++u) {
        const int key = i0 + u * kWarps;
        if (key < cn) load_row_part<T, NC>(vc + static_cast<int64_t>(key) * kw + lane * NC, vv[u]);
      }
#pragma unroll
      for (int u = 0; u < UV; ++u) {
        const int key = i0 + u * kWarps;
        if (key >= cn) break;
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          if (g >= G) break;
          const float w = sc[key * GM + g];
#pragma unroll
          for (int d = 0; d < NC; ++d) acc[g][d] = fmaf(w, vv[u][d], acc[g][d]);
        }
      }
    }
    __syncthreads();  // the next chunk rewrites sc
  }
  // The warps' accumulators added; the output, or this split's partial.
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (g >= G) break;
#pragma unroll
    for (int d = 0; d < NC; ++d) red[warp][g * HD + lane * NC + d] = acc[g][d];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * HD; e += kThreads) {
    const int g = e / HD, d = e % HD;
    float A = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) A += red[w][e];
    store_decode_split(p, b, h0 + g, HD, d, split, active, A, m_s[g], l_s[g]);
  }
  if (active == 1) return;
  finish_decode_splits(p, b, h0, G, HD, active, w_s, ls_s);
}

// Query heads a group, rounded up to an instantiated GM (0: more than 8).
int group_bound(int g) { return g == 1 ? 1 : g <= 4 ? 4 : g <= 8 ? 8 : 0; }

template <typename T, int NC>
void launch_nc(const AttentionParams& p, dim3 grid, cudaStream_t s) {
  const int gm = group_bound(p.n_heads / p.n_kv);
  if (gm == 1) launch_k(attention_decode_rows_kernel<T, NC, 1>, grid, kThreads, 0, s, p);
  else if (gm == 4) launch_k(attention_decode_rows_kernel<T, NC, 4>, grid, kThreads, 0, s, p);
  else if constexpr (8 * 32 * NC <= kMaxGroupDims) launch_k(attention_decode_rows_kernel<T, NC, 8>, grid, kThreads, 0, s, p);
}

template <typename T>
void launch_t(const AttentionParams& p, dim3 grid, cudaStream_t s) {
  switch (p.hd) {
    case 32: launch_nc<T, 1>(p, grid, s); break;
    case 64: launch_nc<T, 2>(p, grid, s); break;
    case 128: launch_nc<T, 4>(p, grid, s); break;
    default: launch_nc<T, 8>(p, grid, s); break;
  }
}

}  // namespace

bool attention_decode_rows_supported(const AttentionParams& p) {
  if (p.S != 1 || p.n_kv <= 0 || p.n_heads % p.n_kv != 0) return false;
  if (p.dt != DT::F32 && p.dt != DT::BF16) return false;
  if (p.hd != 32 && p.hd != 64 && p.hd != 128 && p.hd != 256) return false;
  const int gm = group_bound(p.n_heads / p.n_kv);
  return gm > 0 && gm * p.hd <= kMaxGroupDims;
}

int attention_decode_rows_splits(int64_t batch, int64_t T, int n_kv, int sms) {
  const int64_t blocks = batch * std::max(n_kv, 1);
  int64_t splits = (static_cast<int64_t>(kBlocksPerSm) * sms + blocks - 1) / blocks;
  const int64_t max_by_keys = std::max<int64_t>(T / kMinSplitKeys, 1);
  splits = std::min({splits, max_by_keys, static_cast<int64_t>(kDecodeRowsMaxSplits)});
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

void launch_attention_decode_rows(const AttentionParams& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(p.n_kv), static_cast<unsigned>(p.batch), static_cast<unsigned>(p.splits));
  if (p.dt == DT::BF16) launch_t<__nv_bfloat16>(p, grid, s);
  else launch_t<float>(p, grid, s);
}

}  // namespace rlx::cuda_backend
