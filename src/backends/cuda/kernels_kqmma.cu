// The K-quant integer tensor-core product of mmq_kernels.h (launch_kqmma): a few rows of
// x (batched decode, short prompts) times Q4_K / Q5_K / Q6_K weights, with x as
// llama.cpp's Q8_K activation blocks -- the arithmetic of ggml's vec_dot_<type>_q8_K on
// the CPU: every sub-block's product is exact in int32, scaled by the sub-block's
// integer scale and summed in int32 over the 256-value super-block, then taken into f32
// once per super-block with the two f16 scales and x's scale.
//
// x is the mma's A operand (16 rows a tile, MT tiles), the weights its B operand (8 rows
// an n-tile, NT tiles a warp), read from global memory straight into the fragments: no
// shared-memory staging, no barrier inside the loop. A block's eight warps take the
// super-blocks of K in turn and add their partial sums in a fixed order at the end, so
// results do not depend on scheduling. Within a 32-value sub-block (16 for Q6_K, whose
// scales cover 16 values) the order of the values is free as long as x and W agree:
// thread t of a quad takes the sub-block's bytes 8t .. 8t + 7 (Q6_K: 4t .. 4t + 3), so
// each of its loads is one contiguous piece of the weight row.
//
// One launch may hold several products of the same x (a batched step's q / k / v, gate /
// up: KqMmaParams::n_parts): the blocks of each part follow the previous part's, and a
// block finds its part's weights, output and rows first thing (block_part).
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/mmq_kernels.h"
#include "backends/cuda/kqmma_parts.cuh"
#include "backends/cuda/smem_limit.cuh"
#include "rlx/base/env.h"

namespace rlx::cuda_backend {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kQK = 256;  // values of a super-block

// Q8_K quantization of x: one warp per 256 values, as formats::quantize_row_q8_k: the
// value of largest magnitude (the first of equals) gives iscale = -127 / max, q =
// min(127, round-half-even(iscale * x)), d = 1 / iscale; d = 0 and q = 0 for a block of
// zeros. A block holding a value that is not finite gets d = NaN and q = 0, so its
// products come out NaN. sums[b * 8 + j] is the sum of sub-block j's 32 quants.
__global__ void __launch_bounds__(kThreads)
    quantize_q8_k_kernel(const float* __restrict__ x, int8_t* __restrict__ q, float* __restrict__ d,
                         int* __restrict__ sums, int64_t blocks) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); b < blocks; b += warps) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = x[b * kQK + lane * 8 + i];
    bool finite = true;
    float amax = 0.0f, mine = 0.0f;
    int idx = lane * 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      finite = finite && isfinite(v[i]);
      const float a = fabsf(v[i]);
      if (a > amax) amax = a, idx = lane * 8 + i, mine = v[i];
    }
    const bool bad = __any_sync(0xFFFFFFFFu, !finite);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float oa = __shfl_xor_sync(0xFFFFFFFFu, amax, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, idx, o);
      const float om = __shfl_xor_sync(0xFFFFFFFFu, mine, o);
      if (oa > amax || (oa == amax && oi < idx)) amax = oa, idx = oi, mine = om;
    }
    uint32_t words[2] = {0, 0};
    int sum = 0;
    if (!bad && amax > 0.0f) {
      const float iscale = -127.0f / mine;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int qi = min(127, __float2int_rn(iscale * v[i]));
        sum += qi;
        words[i / 4] |= (static_cast<uint32_t>(qi) & 0xFFu) << (8 * (i % 4));
      }
      if (lane == 0) d[b] = 1.0f / iscale;
    } else if (lane == 0) {
      d[b] = bad ? __int_as_float(0x7FC00000) : 0.0f;
    }
    *reinterpret_cast<uint2*>(q + b * kQK + lane * 8) = make_uint2(words[0], words[1]);
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
    if ((lane & 3) == 0) sums[b * 8 + (lane >> 2)] = sum;
  }
}

__device__ __forceinline__ void mma_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)c, (void)a, (void)b0, (void)b1;  // not built for these architectures (RLX_CUDA_ARCHS >= 80)
#endif
}

__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(b));
#else
  (void)c, (void)a0, (void)a1, (void)b;
#endif
}

// A 32-bit word at p: one load when kVec (p 4-byte aligned), else two 2-byte loads.
template <bool kVec>
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) {
  if constexpr (kVec) {
    return __ldg(reinterpret_cast<const uint32_t*>(p));
  } else {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return static_cast<uint32_t>(__ldg(h)) | (static_cast<uint32_t>(__ldg(h + 1)) << 16);
  }
}
template <bool kVec>
__device__ __forceinline__ uint2 ld64(const uint8_t* p) {
  if constexpr (kVec) return __ldg(reinterpret_cast<const uint2*>(p));
  else return make_uint2(ld32<false>(p), ld32<false>(p + 4));
}
template <bool kVec>
__device__ __forceinline__ uint4 ld128(const uint8_t* p) {
  if constexpr (kVec) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    const uint2 a = ld64<false>(p), b = ld64<false>(p + 8);
    return make_uint4(a.x, a.y, b.x, b.y);
  }
}

__device__ __forceinline__ uint32_t byte_of(uint32_t w, int k) { return (w >> (8 * k)) & 0xFFu; }
__device__ __forceinline__ int sbyte_of(uint32_t w, int k) { return static_cast<int8_t>(w >> (8 * k)); }

// x's scales of one super-block for the rows this thread's fragments hold (rows
// 16 mt + gid and 16 mt + gid + 8; 0 past M).
template <int MT>
__device__ __forceinline__ void load_x_scales(const KqMmaParams& p, int64_t sb, int gid, float (&xd)[MT][2]) {
  const int64_t nsb = p.K / kQK;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = mt * 16 + gid + 8 * h;
      xd[mt][h] = m < p.M ? __ldg(p.xd + m * nsb + sb) : 0.0f;
    }
  }
}

// The weights of one super-block in registers: row gid of each n-tile (its B fragments)
// and the scale fields of rows 2 tig and 2 tig + 1 (the columns of its C fragment).
// Q4_K / Q5_K as stored: d, dmin, 12 bytes of 6-bit scales and mins, [Q5_K: 32 bytes of
// high bits,] 128 bytes of nibbles. Q6_K as stored (ql[128], qh[64], int8 scales[16],
// f16 d) or split (the same without d; the row's d at d_offset).
template <DT T, int NT>
struct WRegs {
  uint2 q[NT][4];
  uint2 h[NT];  // (Q5_K)
  uint4 head[NT][2];
};
template <int NT>
struct WRegs<DT::Q6_K, NT> {
  uint32_t ql[NT][2][2][2], qh[NT][2][2];
  uint4 scales[NT][2];
  float d[NT][2];
};

template <DT T, int NT, bool kVec, bool kSplit>
__device__ __forceinline__ void load_w(const KqMmaParams& p, int64_t n0, int64_t sb, int gid, int tig,
                                       WRegs<T, NT>& r) {
  if constexpr (T == DT::Q6_K) {
    constexpr int kBytes = kSplit ? 208 : 210;
    const int64_t nsb = p.K / kQK;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int64_t n = min(n0 + nt * 8 + gid, p.N - 1);
      const uint8_t* b = p.w + n * p.row_bytes + sb * kBytes;
#pragma unroll
      for (int hn = 0; hn < 2; ++hn) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          r.ql[nt][hn][0][h] = ld32<kVec>(b + 64 * hn + 16 * h + 4 * tig);
          r.ql[nt][hn][1][h] = ld32<kVec>(b + 64 * hn + 32 + 16 * h + 4 * tig);
          r.qh[nt][hn][h] = ld32<kVec>(b + 128 + 32 * hn + 16 * h + 4 * tig);
        }
      }
#pragma unroll
      for (int cc = 0; cc < 2; ++cc) {
        const int64_t c = min(n0 + nt * 8 + 2 * tig + cc, p.N - 1);
        const uint8_t* cb = p.w + c * p.row_bytes + sb * kBytes;
        r.scales[nt][cc] = ld128<kVec>(cb + 192);
        if constexpr (kSplit) r.d[nt][cc] = __half2float(__ldg(reinterpret_cast<const __half*>(p.w + p.d_offset) + c * nsb + sb));
        else r.d[nt][cc] = f16_bits(cb + 208);
      }
    }
  } else {
    constexpr bool kFive = T == DT::Q5_K;
    constexpr int kBytes = kFive ? 176 : 144;
    constexpr int kQs = kFive ? 48 : 16;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int64_t n = min(n0 + nt * 8 + gid, p.N - 1);
      const uint8_t* b = p.w + n * p.row_bytes + sb * kBytes;
#pragma unroll
      for (int g = 0; g < 4; ++g) r.q[nt][g] = ld64<kVec>(b + kQs + 32 * g + 8 * tig);
      if constexpr (kFive) r.h[nt] = ld64<kVec>(b + 16 + 8 * tig);
#pragma unroll
      for (int cc = 0; cc < 2; ++cc) {
        const int64_t c = min(n0 + nt * 8 + 2 * tig + cc, p.N - 1);
        r.head[nt][cc] = ld128<kVec>(p.w + c * p.row_bytes + sb * kBytes);
      }
    }
  }
}

// Q4_K / Q5_K: one super-block of every n-tile into acc.
template <DT T, int MT, int NT>
__device__ __forceinline__ void q45k_superblock(const KqMmaParams& p, const WRegs<T, NT>& r, int64_t sb, int gid,
                                                int tig, float (&acc)[MT][NT][4]) {
  constexpr bool kFive = T == DT::Q5_K;
  float xd[MT][2];
  load_x_scales<MT>(p, sb, gid, xd);

  // The 6-bit scales (sc) and mins of the two columns, four a word.
  uint32_t sc[NT][2][2], mn[NT][2][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      const uint32_t w0 = r.head[nt][cc].y, w1 = r.head[nt][cc].z, w2 = r.head[nt][cc].w;
      sc[nt][cc][0] = w0 & 0x3F3F3F3Fu;
      sc[nt][cc][1] = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
      mn[nt][cc][0] = w1 & 0x3F3F3F3Fu;
      mn[nt][cc][1] = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
    }
  }

  int isum[MT][NT][4] = {};
  const int8_t* xrow = p.xq + sb * kQK + 8 * tig;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int64_t m = mt * 16 + gid;
      const uint2 top = m < p.M ? __ldg(reinterpret_cast<const uint2*>(xrow + m * p.K + 32 * j)) : make_uint2(0, 0);
      const uint2 bot =
          m + 8 < p.M ? __ldg(reinterpret_cast<const uint2*>(xrow + (m + 8) * p.K + 32 * j)) : make_uint2(0, 0);
      a[mt][0] = top.x, a[mt][1] = bot.x, a[mt][2] = top.y, a[mt][3] = bot.y;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint2 raw = r.q[nt][j / 2];
      uint32_t b0 = (raw.x >> (4 * (j & 1))) & 0x0F0F0F0Fu, b1 = (raw.y >> (4 * (j & 1))) & 0x0F0F0F0Fu;
      if constexpr (kFive) {
        b0 |= ((r.h[nt].x >> j) & 0x01010101u) << 4;
        b1 |= ((r.h[nt].y >> j) & 0x01010101u) << 4;
      }
      const int s0 = static_cast<int>(byte_of(sc[nt][0][j / 4], j % 4));
      const int s1 = static_cast<int>(byte_of(sc[nt][1][j / 4], j % 4));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        int c[4] = {0, 0, 0, 0};
        mma_k32(c, a[mt], b0, b1);
        isum[mt][nt][0] += s0 * c[0];
        isum[mt][nt][1] += s1 * c[1];
        isum[mt][nt][2] += s0 * c[2];
        isum[mt][nt][3] += s1 * c[3];
      }
    }
  }
  const int64_t nsb = p.K / kQK;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // x's sub-block sums of this row, for the mins
      const int64_t m = mt * 16 + gid + 8 * h;
      int xs[8] = {};
      if (m < p.M) {
        const int4* src = reinterpret_cast<const int4*>(p.xs + (m * nsb + sb) * 8);
        const int4 lo = __ldg(src), hi = __ldg(src + 1);
        xs[0] = lo.x, xs[1] = lo.y, xs[2] = lo.z, xs[3] = lo.w, xs[4] = hi.x, xs[5] = hi.y, xs[6] = hi.z, xs[7] = hi.w;
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          const uint32_t dd = r.head[nt][cc].x;
          const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(dd & 0xFFFFu)));
          const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(dd >> 16)));
          int msum = 0;
#pragma unroll
          for (int j = 0; j < 8; ++j) msum += static_cast<int>(byte_of(mn[nt][cc][j / 4], j % 4)) * xs[j];
          float& out = acc[mt][nt][2 * h + cc];
          out += (xd[mt][h] * d) * static_cast<float>(isum[mt][nt][2 * h + cc]) -
                 (xd[mt][h] * dmin) * static_cast<float>(msum);
        }
      }
    }
  }
}

// Q6_K: 16 groups of 16 values with a scale each, values q - 32. Group (n, qd, h) (n:
// half of the super-block, qd: its quarter, h: half of the quarter) holds values
// 128 n + 32 qd + 16 h + l: low bits from ql[64 n + 32 (qd & 1) + 16 h + l] (nibble
// qd >> 1), high bits from qh[32 n + 16 h + l] (bits 2 qd, 2 qd + 1).
template <int MT, int NT>
__device__ __forceinline__ void q6k_superblock(const KqMmaParams& p, const WRegs<DT::Q6_K, NT>& r, int64_t sb,
                                               int gid, int tig, float (&acc)[MT][NT][4]) {
  float xd[MT][2];
  load_x_scales<MT>(p, sb, gid, xd);
  int isum[MT][NT][4] = {};
  const int8_t* xrow = p.xq + sb * kQK + 4 * tig;
#pragma unroll
  for (int hn = 0; hn < 2; ++hn) {
#pragma unroll
    for (int qd = 0; qd < 4; ++qd) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int gi = 8 * hn + 2 * qd + h;
        const int off = 128 * hn + 32 * qd + 16 * h;
        uint32_t a0[MT], a1[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int64_t m = mt * 16 + gid;
          a0[mt] = m < p.M ? __ldg(reinterpret_cast<const uint32_t*>(xrow + m * p.K + off)) : 0u;
          a1[mt] = m + 8 < p.M ? __ldg(reinterpret_cast<const uint32_t*>(xrow + (m + 8) * p.K + off)) : 0u;
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint32_t lo = (r.ql[nt][hn][qd & 1][h] >> (4 * (qd >> 1))) & 0x0F0F0F0Fu;
          const uint32_t hi = ((r.qh[nt][hn][h] >> (2 * qd)) & 0x03030303u) << 4;
          const uint32_t b = __vsub4(lo | hi, 0x20202020u);
          const uint4& c0 = r.scales[nt][0];
          const uint4& c1 = r.scales[nt][1];
          const uint32_t sw0 = gi < 4 ? c0.x : gi < 8 ? c0.y : gi < 12 ? c0.z : c0.w;
          const uint32_t sw1 = gi < 4 ? c1.x : gi < 8 ? c1.y : gi < 12 ? c1.z : c1.w;
          const int s0 = sbyte_of(sw0, gi % 4), s1 = sbyte_of(sw1, gi % 4);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            int c[4] = {0, 0, 0, 0};
            mma_k16(c, a0[mt], a1[mt], b);
            isum[mt][nt][0] += s0 * c[0];
            isum[mt][nt][1] += s1 * c[1];
            isum[mt][nt][2] += s0 * c[2];
            isum[mt][nt][3] += s1 * c[3];
          }
        }
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[mt][nt][e] += (xd[mt][e >> 1] * r.d[nt][e & 1]) * static_cast<float>(isum[mt][nt][e]);
      }
    }
  }
}

// One block: NT * 8 weight rows (columns of y) for all M <= 16 MT rows of x; warp w takes
// super-blocks w, w + 8, ...; the warps' sums are added in warp order.
// (A form with one column tile, two blocks an SM and the next super-block's weights
// loaded while this one's products ran measured slower: 2.26 / 3.18 ms a batch-16 / 32
// step against 2.16 / 2.91 on an H200.)
template <DT T, int MT, int NT, bool kVec, bool kSplit>
__global__ void __launch_bounds__(kThreads) kqmma_kernel(const KqMmaParams launch) {
  constexpr int kCols = NT * 8, kRows = MT * 16;
  __shared__ float red[kWarps][kRows][kCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  int64_t bx = blockIdx.x;
  const KqMmaParams p = block_part(launch, kCols, bx);
  const int64_t n0 = bx * kCols;
  const int64_t nsb = p.K / kQK;

  float acc[MT][NT][4] = {};
  // (Weights no kernel writes are loaded before the wait for the kernels ahead: the first
  // loads overlap x's quantization.)
  int64_t sb = warp;
  WRegs<T, NT> w;
  if (p.w_const && sb < nsb) load_w<T, NT, kVec, kSplit>(p, n0, sb, gid, tig, w);
  pdl_wait();
  if (!p.w_const && sb < nsb) load_w<T, NT, kVec, kSplit>(p, n0, sb, gid, tig, w);
  for (; sb < nsb; sb += kWarps) {
    if constexpr (T == DT::Q6_K) q6k_superblock<MT, NT>(p, w, sb, gid, tig, acc);
    else q45k_superblock<T, MT, NT>(p, w, sb, gid, tig, acc);
    if (sb + kWarps < nsb) load_w<T, NT, kVec, kSplit>(p, n0, sb + kWarps, gid, tig, w);
  }
  pdl_trigger();

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) red[warp][mt * 16 + gid + 8 * (e >> 1)][nt * 8 + 2 * tig + (e & 1)] = acc[mt][nt][e];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * kCols; i += kThreads) {
    const int r = i / kCols, col = i % kCols;
    const int64_t n = n0 + col;
    if (r >= p.M || n >= p.N) continue;
    float s = red[0][r][col];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += red[w][r][col];
    p.y[r * p.N + n] = s;
  }
}

// ---- the staged form: weights streamed by cp.async through a ring in shared memory ----
// The register form holds one super-block of weights per warp in flight, and with K of
// 2,048 each warp has just one: a block loads, then computes, then the next wave loads.
// Here a warp copies its 16 weight rows of each super-block into its own ring of
// kStages stages (cp.async, 16 bytes a copy, no registers held), kStages - 1 super-blocks
// ahead of the one it computes, and takes each into the same WRegs as the register form.
// A block's eight warps are kg groups along K times 8 / kg groups of 16 rows, so that
// each warp streams several super-blocks (p.k_groups, chosen by kqmma_k_groups).
constexpr int kStages = 4;

template <DT T, bool kSplit>
__host__ __device__ constexpr int sb_bytes() {
  return T == DT::Q4_K ? 144 : T == DT::Q5_K ? 176 : kSplit ? 208 : 210;
}
template <DT T>
constexpr int staged_smem() {
  return kWarps * kStages * 16 * sb_bytes<T, true>();
}

// A stage's 16 rows (row r at r * sb_bytes) into the registers load_w fills; Q6_K's d
// (split layout) from global memory.
template <DT T>
__device__ __forceinline__ void load_w_stage(const KqMmaParams& p, const uint8_t* st, int64_t n0, int64_t sb,
                                             int gid, int tig, WRegs<T, 2>& r) {
  constexpr int kB = sb_bytes<T, true>();
  if constexpr (T == DT::Q6_K) {
    const int64_t nsb = p.K / kQK;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const uint8_t* b = st + (nt * 8 + gid) * kB;
#pragma unroll
      for (int hn = 0; hn < 2; ++hn) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          r.ql[nt][hn][0][h] = *reinterpret_cast<const uint32_t*>(b + 64 * hn + 16 * h + 4 * tig);
          r.ql[nt][hn][1][h] = *reinterpret_cast<const uint32_t*>(b + 64 * hn + 32 + 16 * h + 4 * tig);
          r.qh[nt][hn][h] = *reinterpret_cast<const uint32_t*>(b + 128 + 32 * hn + 16 * h + 4 * tig);
        }
      }
#pragma unroll
      for (int cc = 0; cc < 2; ++cc) {
        const int row = nt * 8 + 2 * tig + cc;
        r.scales[nt][cc] = *reinterpret_cast<const uint4*>(st + row * kB + 192);
        const int64_t c = min(n0 + row, p.N - 1);
        r.d[nt][cc] = __half2float(__ldg(reinterpret_cast<const __half*>(p.w + p.d_offset) + c * nsb + sb));
      }
    }
  } else {
    constexpr int kQs = T == DT::Q5_K ? 48 : 16;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const uint8_t* b = st + (nt * 8 + gid) * kB;
#pragma unroll
      for (int g = 0; g < 4; ++g) r.q[nt][g] = *reinterpret_cast<const uint2*>(b + kQs + 32 * g + 8 * tig);
      if constexpr (T == DT::Q5_K) r.h[nt] = *reinterpret_cast<const uint2*>(b + 16 + 8 * tig);
#pragma unroll
      for (int cc = 0; cc < 2; ++cc) r.head[nt][cc] = *reinterpret_cast<const uint4*>(st + (nt * 8 + 2 * tig + cc) * kB);
    }
  }
}

// W as stored (Q4_K, Q5_K) or split (Q6_K), every row 16-byte aligned.
template <DT T, int MT>
__global__ void __launch_bounds__(kThreads, 1) kqmma_staged_kernel(const KqMmaParams launch) {
  constexpr int kB = sb_bytes<T, true>();
  constexpr int kStageBytes = 16 * kB;
  constexpr int kChunksPerRow = kB / 16;
  static_assert(kB % 16 == 0, "16-byte copies");
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int kg_n = launch.k_groups, rg_n = kWarps / kg_n;
  const int rg = warp % rg_n, kg = warp / rg_n;
  int64_t bx = blockIdx.x;
  const KqMmaParams p = block_part(launch, rg_n * 16, bx);
  const int64_t n0 = (bx * rg_n + rg) * 16;
  const int64_t nsb = p.K / kQK;
  const int64_t count = kg < nsb ? (nsb - kg + kg_n - 1) / kg_n : 0;  // super-blocks kg, kg + kg_n, ...
  uint8_t* ring = smem + warp * kStages * kStageBytes;

  auto issue = [&](int64_t i) {
    uint8_t* dst = ring + (i % kStages) * kStageBytes;
    const uint8_t* src = p.w + (kg + i * kg_n) * kB;
    for (int c = lane; c < 16 * kChunksPerRow; c += 32) {
      const int r = c / kChunksPerRow, o = (c % kChunksPerRow) * 16;
      cp_async(dst + r * kB + o, src + min(n0 + r, p.N - 1) * p.row_bytes + o);
    }
  };
  auto prologue = [&] {
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
      if (i < count) issue(i);
      cp_async_commit();
    }
  };
  if (p.w_const) prologue();
  pdl_wait();
  if (!p.w_const) prologue();

  float acc[MT][2][4] = {};
  for (int64_t i = 0; i < count; ++i) {
    if (i + kStages - 1 < count) issue(i + kStages - 1);  // into the stage emptied last time round
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();  // every lane's copies of stage i have landed
    const int64_t sb = kg + i * kg_n;
    WRegs<T, 2> r;
    load_w_stage<T>(p, ring + (i % kStages) * kStageBytes, n0, sb, gid, tig, r);
    __syncwarp();  // stage i is free for the copies of the next round
    if constexpr (T == DT::Q6_K) q6k_superblock<MT, 2>(p, r, sb, gid, tig, acc);
    else q45k_superblock<T, MT, 2>(p, r, sb, gid, tig, acc);
  }
  cp_async_wait<0>();
  pdl_trigger();

  store_k_group_sums<kThreads, MT>(p, reinterpret_cast<float*>(smem), acc, kg, kg_n, rg, rg_n, bx, gid, tig);
}

template <DT T>
void launch_staged(const KqMmaParams& p, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(part_blocks(p, (kWarps / p.k_groups) * 16));
  constexpr int kSmem = staged_smem<T>();
  raise_smem_limit<kqmma_staged_kernel<T, 1>>(kSmem);
  launch_k(kqmma_staged_kernel<T, 1>, blocks, kThreads, kSmem, s, p);
}

// The register form: 16 weight rows a block, one or two tiles of 16 rows of x.
template <DT T, bool kVec, bool kSplit>
void launch_layout(const KqMmaParams& p, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(part_blocks(p, 16));
  if (p.M > 16) launch_k(kqmma_kernel<T, 2, 2, kVec, kSplit>, blocks, kThreads, 0, s, p);
  else launch_k(kqmma_kernel<T, 1, 2, kVec, kSplit>, blocks, kThreads, 0, s, p);
}

}  // namespace

bool kqmma_supported(DT w) { return w == DT::Q4_K || w == DT::Q5_K || w == DT::Q6_K; }

int kqmma_k_groups(int64_t N, int64_t K, int sms) {
  const int64_t nsb = K / kQK;
  int kg = 1;  // at least four super-blocks a warp where K has them
  while (kg < kWarps && nsb / (2 * kg) >= 4) kg *= 2;
  // more groups along K (fewer rows a block) while the blocks would not give each SM one
  // and every group keeps a super-block
  while (kg < kWarps && 2 * kg <= nsb && (N + (kWarps / kg) * 16 - 1) / ((kWarps / kg) * 16) < sms) kg *= 2;
  return kg;
}

bool kqmma_staged_fits(DT w) {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return false;
  const int need = w == DT::Q4_K ? staged_smem<DT::Q4_K>() : w == DT::Q5_K ? staged_smem<DT::Q5_K>()
                                                                              : staged_smem<DT::Q6_K>();
  return need <= optin;
}

void launch_quantize_q8_k(const float* x, int8_t* q, float* d, int* sums, int64_t rows, int64_t K,
                          cudaStream_t s) {
  const int64_t blocks = rows * (K / kQK);
  if (blocks <= 0) return;
  const unsigned g = static_cast<unsigned>(std::min<int64_t>((blocks + kWarps - 1) / kWarps, 65535));
  launch_k(quantize_q8_k_kernel, g, kThreads, 0, s, x, q, d, sums, blocks);
}

bool launch_kqmma(const KqMmaParams& p, cudaStream_t s) {
  static_assert(kKqMmaMaxRows <= 32, "two tiles of 16 rows");
  if (p.M > kKqMmaMaxRows || p.K % kQK != 0 || !kqmma_supported(p.w_dt)) return false;
  if (p.n_parts > kKqMmaMaxParts) return false;
  if (p.M <= 0 || part_blocks(p, 16) <= 0) return true;
  // Vector loads (up to 16 bytes) need every row on a 16-byte boundary; else 2-byte loads.
  // (The parts of a grouped launch share K and the type, so row_bytes and the layout.)
  const bool vec = p.row_bytes % 16 == 0 && parts_aligned16(p);
  const bool split = (p.n_parts > 1 ? p.part_d_offset[0] : p.d_offset) > 0;
  const bool staged_layout = p.w_dt != DT::Q6_K || split;
  // The staged form wins for one tile of x rows and loses for two (H200, q4_k_m 1B, same
  // call: batch 16 2.05 against 2.16 ms a step, batch 32 3.04 against 2.90).
  if (vec && staged_layout && p.M <= 16 && p.k_groups > 0 && kWarps % p.k_groups == 0 &&
      env_config().cuda_kqmma_staged) {
    if (p.w_dt == DT::Q4_K) launch_staged<DT::Q4_K>(p, s);
    else if (p.w_dt == DT::Q5_K) launch_staged<DT::Q5_K>(p, s);
    else launch_staged<DT::Q6_K>(p, s);
    return true;
  }
  switch (p.w_dt) {
    case DT::Q4_K:
      if (vec) launch_layout<DT::Q4_K, true, false>(p, s);
      else launch_layout<DT::Q4_K, false, false>(p, s);
      break;
    case DT::Q5_K:
      if (vec) launch_layout<DT::Q5_K, true, false>(p, s);
      else launch_layout<DT::Q5_K, false, false>(p, s);
      break;
    default:  // Q6_K: split rows are 208-byte blocks; as stored, 210 (2-byte aligned)
      if (split && vec) launch_layout<DT::Q6_K, true, true>(p, s);
      else if (split) launch_layout<DT::Q6_K, false, true>(p, s);
      else launch_layout<DT::Q6_K, false, false>(p, s);
      break;
  }
  return true;
}

}  // namespace rlx::cuda_backend
