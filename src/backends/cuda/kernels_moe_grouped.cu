// The grouped form of moe_ffn (moe_grouped.h). One run is seven launches:
//   1. moe_group_kernel (one block): each token's routed slots (the nonzeros of its
//      route row in expert order, at most k_max) become (token, slot) pairs; the pairs
//      are counted per expert, placed expert by expert (order[]), and cut into tiles of
//      at most 64 rows of one expert (the tile table of GemmGroups).
//   2. x in the form the gate/up products take (Q8_0 blocks or f16).
//   3. gate and up: grouped products over the sorted rows, x rows gathered by token.
//   4. h = act(gate) * up, in the form the down product takes.
//   5. down: grouped, each row written to its (token, slot) pair's row.
//   6. y[t] = sum over t's slots in slot order of route weight * down row.
// Rows within an expert's tiles land in whatever order the placement's atomics give,
// but every product row depends only on its own x row and the expert's W, so results
// do not depend on it.
#include <algorithm>
#include <type_traits>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/mmq_kernels.h"
#include "backends/cuda/moe_grouped.h"

namespace rlx::cuda_backend {
namespace {

constexpr int kGroupThreads = 1024;
constexpr int kTileRows = static_cast<int>(kGroupTileRows);

// ---- 1. pairs sorted by expert -----------------------------------------------------------

struct GroupArgs {
  const float* route = nullptr;  // [rows, experts]
  int64_t rows = 0, experts = 0, k_max = 0;
  int* pair_e = nullptr;    // [rows * k_max]: the pair's expert, -1 for an empty slot
  float* pair_w = nullptr;  // [rows * k_max]: its route weight
  int* order = nullptr;     // [pairs]: sorted row -> pair
  int* x_rows = nullptr;    // [pairs]: sorted row -> token
  int* tiles = nullptr;     // [max_tiles][3]
  int* totals = nullptr;    // [2]: tiles, sorted rows
};

// Shared memory: counts, first sorted row, first tile -- one int each per expert.
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(const GroupArgs a) {
  extern __shared__ int sh[];
  const int E = static_cast<int>(a.experts);
  int* count = sh;
  int* first_row = sh + E;
  int* first_tile = sh + 2 * E;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  pdl_wait();
  for (int e = tid; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  // The slots of token t: the nonzero (or NaN) entries of its route row in expert order.
  const unsigned below = (1u << lane) - 1u;
  for (int64_t t = warp; t < a.rows; t += blockDim.x / 32) {
    const float* row = a.route + t * a.experts;
    int64_t seen = 0;
    for (int base = 0; base < E && seen < a.k_max; base += 32) {
      const float v = base + lane < E ? row[base + lane] : 0.0f;
      const unsigned mask = __ballot_sync(0xFFFFFFFFu, v != 0.0f);
      const int64_t slot = seen + __popc(mask & below);
      if (v != 0.0f && slot < a.k_max) {
        a.pair_e[t * a.k_max + slot] = base + lane;
        a.pair_w[t * a.k_max + slot] = v;
        atomicAdd(&count[base + lane], 1);
      }
      seen += __popc(mask);
    }
    for (int64_t s = (seen < a.k_max ? seen : a.k_max) + lane; s < a.k_max; s += 32) a.pair_e[t * a.k_max + s] = -1;
  }
  __syncthreads();
  if (warp == 0) {  // exclusive scans of the counts and of the tiles they make
    int rows_before = 0, tiles_before = 0;
    for (int base = 0; base < E; base += 32) {
      const int e = base + lane;
      const int c = e < E ? count[e] : 0, nt = (c + kTileRows - 1) / kTileRows;
      int sc = c, st = nt;
      for (int o = 1; o < 32; o <<= 1) {
        const int up_c = __shfl_up_sync(0xFFFFFFFFu, sc, o), up_t = __shfl_up_sync(0xFFFFFFFFu, st, o);
        if (lane >= o) sc += up_c, st += up_t;
      }
      if (e < E) {
        first_row[e] = rows_before + sc - c;
        first_tile[e] = tiles_before + st - nt;
      }
      rows_before += __shfl_sync(0xFFFFFFFFu, sc, 31);
      tiles_before += __shfl_sync(0xFFFFFFFFu, st, 31);
    }
    if (lane == 0) {
      a.totals[0] = tiles_before;
      a.totals[1] = rows_before;
    }
  }
  __syncthreads();
  for (int e = tid; e < E; e += blockDim.x) {
    for (int j = 0; j * kTileRows < count[e]; ++j) {
      int* tile = a.tiles + 3 * (first_tile[e] + j);
      tile[0] = e;
      tile[1] = first_row[e] + j * kTileRows;
      tile[2] = min(kTileRows, count[e] - j * kTileRows);
    }
  }
  __syncthreads();  // first_row now serves as each expert's placement cursor
  for (int64_t q = tid; q < a.rows * a.k_max; q += blockDim.x) {
    const int e = a.pair_e[q];
    if (e < 0) continue;
    const int at = atomicAdd(&first_row[e], 1);
    a.order[at] = static_cast<int>(q);
    a.x_rows[at] = static_cast<int>(q / a.k_max);
  }
  pdl_trigger();
}

// ---- 2 and 4. the operand forms ------------------------------------------------------------

__global__ void to_f16_kernel(const float* __restrict__ x, __half* __restrict__ y, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

// h = act(g) * u over the first *n_rows sorted rows (0 past them, so that every row a
// later kernel may read is written): into g itself (f32, for Q8_0 blocks next) or h16.
__global__ void moe_act_kernel(float* g, const float* __restrict__ u, __half* h16, const int* n_rows, int64_t rows,
                               int64_t hidden, uint8_t act) {
  pdl_wait();
  pdl_trigger();
  const int64_t live = static_cast<int64_t>(*n_rows) * hidden;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * hidden;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float h = i < live ? act_fn<float>(act, g[i]) * u[i] : 0.0f;
    if (h16)
      h16[i] = __float2half_rn(h);
    else
      g[i] = h;
  }
}

// ---- 3 and 5. grouped f16 tensor-core products ------------------------------------------------
// A block of 128 threads computes one tile's rows (at most 64) against 64 weight rows of
// its expert. Per step of 64 values of K: each thread decodes one 32-value unit of one
// weight row into f16 (decode_row_unit for packed types; F16 rows copied) and loads four
// 8-half pieces of the gathered x rows; each warp then runs its 16 weight rows against
// all 64 x rows (4 x 2 mma.sync m16n8k16 per 16 values). Rows of 72 halves: the fragment
// reads hit 32 banks.

constexpr int kF16Threads = 128;
constexpr int kF16TileN = 64;
constexpr int kF16StepK = 64;
constexpr int kF16Pitch = kF16StepK + 8;

struct F16GroupParams {
  const __half* x = nullptr;   // [x rows, K]
  const uint8_t* w = nullptr;  // [experts * N, K]: rows of row_bytes
  float* y = nullptr;          // [y rows, N]
  int64_t N = 0, K = 0, row_bytes = 0;
  GemmGroups groups;
};

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <DT T>
__global__ void __launch_bounds__(kF16Threads) moe_f16_gemm_kernel(const F16GroupParams p) {
  __shared__ __align__(16) __half xs[kTileRows][kF16Pitch];
  __shared__ __align__(16) __half ws[kF16TileN][kF16Pitch];
  pdl_wait();
  if (static_cast<int>(blockIdx.y) >= __ldg(p.groups.n_tiles)) return;
  const int* tile = p.groups.tiles + 3 * blockIdx.y;
  const int64_t expert = __ldg(tile), m0 = __ldg(tile + 1), m_end = m0 + __ldg(tile + 2);
  const uint8_t* w = p.w + expert * p.N * p.row_bytes;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kF16TileN;
  const int64_t units = p.K / 32;

  const __half* x_row[4];  // the x rows this thread loads from (null: past the tile)
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + (tid >> 3) + 16 * i;
    x_row[i] = m < m_end ? p.x + (p.groups.x_rows ? __ldg(p.groups.x_rows + m) : m) * p.K : nullptr;
  }
  const int wr = tid >> 1, wj = tid & 1;  // unit wj of weight row wr, each step
  const int xc = (tid & 7) * 8;           // x columns of this thread's loads

  float acc[4][2][4] = {};
  for (int64_t k0 = 0; k0 < p.K; k0 += kF16StepK) {
    uint4 xv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      xv[i] = x_row[i] && k0 + xc < p.K ? __ldg(reinterpret_cast<const uint4*>(x_row[i] + k0 + xc))
                                        : make_uint4(0, 0, 0, 0);
    const int64_t u = k0 / 32 + wj;
    const bool w_in = n0 + wr < p.N && u < units;
    __half* wdst = &ws[wr][32 * wj];
    if constexpr (T == DT::F16) {
      const uint4* src = reinterpret_cast<const uint4*>(w + (n0 + wr) * p.row_bytes) + 4 * u;
#pragma unroll
      for (int i = 0; i < 4; ++i) reinterpret_cast<uint4*>(wdst)[i] = w_in ? __ldg(src + i) : make_uint4(0, 0, 0, 0);
    } else {
      float y[32];
      if (w_in) {
        decode_row_unit<T>(w, p.row_bytes, 0, n0 + wr, u, y);
      } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) y[i] = 0.0f;
      }
      __half2* d = reinterpret_cast<__half2*>(wdst);
#pragma unroll
      for (int i = 0; i < 16; ++i) d[i] = __floats2half2_rn(y[2 * i], y[2 * i + 1]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) *reinterpret_cast<uint4*>(&xs[(tid >> 3) + 16 * i][xc]) = xv[i];
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kF16StepK; kk += 16) {
      uint32_t b[2][2];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int bn = warp * 16 + nt * 8 + gid;
        b[nt][0] = *reinterpret_cast<const uint32_t*>(&ws[bn][kk + 2 * tig]);
        b[nt][1] = *reinterpret_cast<const uint32_t*>(&ws[bn][kk + 2 * tig + 8]);
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        const int ar = mt * 16 + gid;
        uint32_t a[4];
        a[0] = *reinterpret_cast<const uint32_t*>(&xs[ar][kk + 2 * tig]);
        a[1] = *reinterpret_cast<const uint32_t*>(&xs[ar + 8][kk + 2 * tig]);
        a[2] = *reinterpret_cast<const uint32_t*>(&xs[ar][kk + 2 * tig + 8]);
        a[3] = *reinterpret_cast<const uint32_t*>(&xs[ar + 8][kk + 2 * tig + 8]);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) mma_f16(acc[mt][nt], a, b[nt][0], b[nt][1]);
      }
    }
    __syncthreads();
  }
  pdl_trigger();
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m0 + mt * 16 + gid + 8 * h;
      if (m >= m_end) continue;
      float* y = p.y + (p.groups.y_rows ? __ldg(p.groups.y_rows + m) : m) * p.N;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t c = n0 + warp * 16 + nt * 8 + 2 * tig + e;
          if (c < p.N) y[c] = acc[mt][nt][2 * h + e];
        }
      }
    }
  }
}

// ---- 6. the weighted sum over each token's slots -------------------------------------------

__global__ void moe_combine_kernel(const float* __restrict__ d, const int* __restrict__ pair_e,
                                   const float* __restrict__ pair_w, float* __restrict__ y, int64_t dim,
                                   int64_t k_max) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x, c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  float acc = 0.0f;
  for (int64_t s = 0; s < k_max; ++s) {
    const int64_t q = t * k_max + s;
    if (pair_e[q] < 0) break;
    acc += pair_w[q] * d[q * dim + c];
  }
  y[t * dim + c] = acc;
}

// ---- host side -----------------------------------------------------------------------------

enum class Path { kNone, kMmq, kF16 };

// Calls f(tag) with std::integral_constant<DT, t> for the types moe_f16_gemm_kernel is
// instantiated for, and returns whether t is one: the one list both the choice of path
// and the launch read.
template <class F>
bool with_f16_tile_type(DT t, F&& f) {
  switch (t) {
    case DT::F16:
      f(std::integral_constant<DT, DT::F16>{});
      return true;
    case DT::Q4_1:
      f(std::integral_constant<DT, DT::Q4_1>{});
      return true;
    case DT::Q5_0:
      f(std::integral_constant<DT, DT::Q5_0>{});
      return true;
    case DT::Q5_1:
      f(std::integral_constant<DT, DT::Q5_1>{});
      return true;
    case DT::Q4_K:
      f(std::integral_constant<DT, DT::Q4_K>{});
      return true;
    case DT::Q5_K:
      f(std::integral_constant<DT, DT::Q5_K>{});
      return true;
    case DT::Q6_K:
      f(std::integral_constant<DT, DT::Q6_K>{});
      return true;
    case DT::IQ4_NL:
      f(std::integral_constant<DT, DT::IQ4_NL>{});
      return true;
    case DT::IQ4_XS:
      f(std::integral_constant<DT, DT::IQ4_XS>{});
      return true;
    default:
      return false;
  }
}

Path path_of(DT t, int64_t K) {
  if (K <= 0 || K % 32 != 0) return Path::kNone;
  if (mmq_supported(t)) return Path::kMmq;
  if (with_f16_tile_type(t, [](auto) {})) return Path::kF16;
  return Path::kNone;
}

/// Where each piece of the work area starts (bytes, 256-aligned).
struct Layout {
  int64_t pairs = 0, max_tiles = 0;
  int64_t pair_e = 0, pair_w = 0, order = 0, x_rows = 0, tiles = 0, totals = 0;
  int64_t xq = 0, xd = 0, x16 = 0, gate = 0, up = 0, down = 0, hq = 0, hd = 0, h16 = 0;
  int64_t bytes = 0;
};

Layout layout_of(const MoeFfnParams& p) {
  Layout l;
  l.pairs = p.rows * p.k_max;
  l.max_tiles = (l.pairs + kGroupTileRows - 1) / kGroupTileRows + p.experts;
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t off = at;
    at += (bytes + 255) / 256 * 256;
    return off;
  };
  l.pair_e = take(l.pairs * 4);
  l.pair_w = take(l.pairs * 4);
  l.order = take(l.pairs * 4);
  l.x_rows = take(l.pairs * 4);
  l.tiles = take(l.max_tiles * 3 * 4);
  l.totals = take(2 * 4);
  const Path gu[2] = {path_of(p.gate_dt, p.dim), path_of(p.up_dt, p.dim)};
  if (gu[0] == Path::kMmq || gu[1] == Path::kMmq) {
    l.xq = take(p.rows * p.dim);
    l.xd = take(p.rows * p.dim / 32 * 4);
  }
  if (gu[0] == Path::kF16 || gu[1] == Path::kF16) l.x16 = take(p.rows * p.dim * 2);
  if (path_of(p.down_dt, p.hidden) == Path::kMmq) {
    l.hq = take(l.pairs * p.hidden);
    l.hd = take(l.pairs * p.hidden / 32 * 4);
  } else {
    l.h16 = take(l.pairs * p.hidden * 2);
  }
  // gate and up are dead once h is made: the down rows take their place.
  const int64_t gu_bytes = 2 * ((l.pairs * p.hidden * 4 + 255) / 256 * 256);
  l.gate = take(std::max(gu_bytes, l.pairs * p.dim * 4));
  l.up = l.gate + gu_bytes / 2;
  l.down = l.gate;
  l.bytes = at;
  return l;
}

/// One grouped product y = x . W_e^T per tile, by the path of W's type.
void grouped_product(Path path, DT w_dt, const uint8_t* w, int64_t row_bytes, int64_t N, int64_t K, const GemmGroups& g,
                     const int8_t* xq, const float* xd, const __half* x16, float* y, cudaStream_t s) {
  if (path == Path::kMmq) {
    MmqParams m;
    m.xq = xq;
    m.xd = xd;
    m.w = w;
    m.y = y;
    m.w_dt = w_dt;
    m.N = N;
    m.K = K;
    m.row_bytes = row_bytes;
    m.groups = g;
    launch_mmq(m, s);
    return;
  }
  F16GroupParams f;
  f.x = x16;
  f.w = w;
  f.y = y;
  f.N = N;
  f.K = K;
  f.row_bytes = row_bytes;
  f.groups = g;
  const dim3 grid(static_cast<unsigned>((N + kF16TileN - 1) / kF16TileN), static_cast<unsigned>(g.max_tiles));
  with_f16_tile_type(
      w_dt, [&](auto tag) { launch_k(moe_f16_gemm_kernel<decltype(tag)::value>, grid, kF16Threads, 0, s, f); });
}

int elementwise_grid(int64_t n) { return grid_for(n, 256, 65535LL * 8); }

}  // namespace

bool moe_grouped_supported(const MoeFfnParams& p) {
  if (p.experts <= 0 || p.experts > kMoeMaxExperts || p.k_max <= 0) return false;
  // (the tile table is the grid's y dimension)
  if ((p.rows * p.k_max + kGroupTileRows - 1) / kGroupTileRows + p.experts > 65535) return false;
  const bool f16_rows_aligned = (p.gate_dt != DT::F16 || p.gate_row_bytes % 16 == 0) &&
                                (p.up_dt != DT::F16 || p.up_row_bytes % 16 == 0) &&
                                (p.down_dt != DT::F16 || p.down_row_bytes % 16 == 0);
  return f16_rows_aligned && path_of(p.gate_dt, p.dim) != Path::kNone && path_of(p.up_dt, p.dim) != Path::kNone &&
         path_of(p.down_dt, p.hidden) != Path::kNone;
}

int64_t moe_grouped_work_bytes(const MoeFfnParams& p) { return layout_of(p).bytes; }

void launch_moe_ffn_grouped(const MoeFfnParams& p, uint8_t* work, cudaStream_t s) {
  if (p.rows <= 0 || !moe_grouped_supported(p)) return;
  const Layout l = layout_of(p);
  auto at = [work](int64_t off) { return work + off; };
  int* pair_e = reinterpret_cast<int*>(at(l.pair_e));
  float* pair_w = reinterpret_cast<float*>(at(l.pair_w));
  int* totals = reinterpret_cast<int*>(at(l.totals));
  GroupArgs ga;
  ga.route = p.route;
  ga.rows = p.rows;
  ga.experts = p.experts;
  ga.k_max = p.k_max;
  ga.pair_e = pair_e;
  ga.pair_w = pair_w;
  ga.order = reinterpret_cast<int*>(at(l.order));
  ga.x_rows = reinterpret_cast<int*>(at(l.x_rows));
  ga.tiles = reinterpret_cast<int*>(at(l.tiles));
  ga.totals = totals;
  launch_k(moe_group_kernel, 1, kGroupThreads, static_cast<size_t>(3 * p.experts) * sizeof(int), s, ga);

  const Path gate_path = path_of(p.gate_dt, p.dim), up_path = path_of(p.up_dt, p.dim);
  const Path down_path = path_of(p.down_dt, p.hidden);
  int8_t* xq = reinterpret_cast<int8_t*>(at(l.xq));
  float* xd = reinterpret_cast<float*>(at(l.xd));
  __half* x16 = reinterpret_cast<__half*>(at(l.x16));
  if (gate_path == Path::kMmq || up_path == Path::kMmq) launch_quantize_q8_0(p.x, xq, xd, p.rows, p.dim, s);
  if (gate_path == Path::kF16 || up_path == Path::kF16)
    launch_k(to_f16_kernel, elementwise_grid(p.rows * p.dim), 256, 0, s, p.x, x16, p.rows * p.dim);

  GemmGroups g;
  g.tiles = ga.tiles;
  g.n_tiles = totals;
  g.x_rows = ga.x_rows;
  g.max_tiles = l.max_tiles;
  float* gate = reinterpret_cast<float*>(at(l.gate));
  float* up = reinterpret_cast<float*>(at(l.up));
  grouped_product(gate_path, p.gate_dt, p.w_gate, p.gate_row_bytes, p.hidden, p.dim, g, xq, xd, x16, gate, s);
  grouped_product(up_path, p.up_dt, p.w_up, p.up_row_bytes, p.hidden, p.dim, g, xq, xd, x16, up, s);

  int8_t* hq = reinterpret_cast<int8_t*>(at(l.hq));
  float* hd = reinterpret_cast<float*>(at(l.hd));
  __half* h16 = down_path == Path::kF16 ? reinterpret_cast<__half*>(at(l.h16)) : nullptr;
  launch_k(moe_act_kernel, elementwise_grid(l.pairs * p.hidden), 256, 0, s, gate, static_cast<const float*>(up), h16,
           static_cast<const int*>(totals + 1), l.pairs, p.hidden, p.act);
  if (down_path == Path::kMmq) launch_quantize_q8_0(gate, hq, hd, l.pairs, p.hidden, s);

  GemmGroups gd = g;
  gd.x_rows = nullptr;  // the down product reads the sorted hidden rows in place
  gd.y_rows = ga.order;
  float* down = reinterpret_cast<float*>(at(l.down));
  grouped_product(down_path, p.down_dt, p.w_down, p.down_row_bytes, p.dim, p.hidden, gd, hq, hd, h16, down, s);
  const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>((p.dim + 255) / 256));
  launch_k(moe_combine_kernel, grid, 256, 0, s, static_cast<const float*>(down), static_cast<const int*>(pair_e),
           static_cast<const float*>(pair_w), p.y, p.dim, p.k_max);
}

}  // namespace rlx::cuda_backend
