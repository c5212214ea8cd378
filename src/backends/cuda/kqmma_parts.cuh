// What the few-row product kernels share (KqMmaParams, mmq_kernels.h): the K-quant int8
// kernels (kernels_kqmma.cu) and the Q8_0 / f16 / bf16 ones (kernels_rows_mma.cu). The
// parts of a grouped launch (n_parts: several products of one x whose blocks follow each
// other in one grid), the cp.async copies of the warps' weight rings, and the sum of a
// block's k groups.
#pragma once

#include <cstdint>

#include "backends/cuda/mmq_kernels.h"

namespace rlx::cuda_backend {

/// The product block `bx` of a launch works on: p itself, or for a grouped launch
/// (n_parts > 1) p with w, y, N and d_offset of the part holding block bx (each part
/// `rows` weight rows a block, parts in order), bx then counted from the part's first
/// block.
__device__ __forceinline__ KqMmaParams block_part(const KqMmaParams& p, int64_t rows, int64_t& bx) {
  KqMmaParams q = p;
  if (p.n_parts <= 1) return q;
  bool found = false;
#pragma unroll
  for (int i = 0; i < kKqMmaMaxParts; ++i) {  // (constant indices: the parts stay in parameter space)
    const int64_t blocks = i < p.n_parts ? (p.part_n[i] + rows - 1) / rows : 0;
    if (found) continue;
    if (bx < blocks) {
      q.w = p.part_w[i];
      q.y = p.part_y[i];
      q.N = p.part_n[i];
      q.d_offset = p.part_d_offset[i];
      found = true;
    } else {
      bx -= blocks;
    }
  }
  return q;
}

/// Blocks of `rows` weight rows a launch takes over all its parts.
inline int64_t part_blocks(const KqMmaParams& p, int64_t rows) {
  if (p.n_parts <= 1) return (p.N + rows - 1) / rows;
  int64_t blocks = 0;
  for (int i = 0; i < p.n_parts; ++i) blocks += (p.part_n[i] + rows - 1) / rows;
  return blocks;
}

/// True when every weight pointer of the launch (its parts' when grouped) is 16-byte aligned.
inline bool parts_aligned16(const KqMmaParams& p) {
  bool ok = true;
  for (int i = 0; i < (p.n_parts > 1 ? p.n_parts : 1); ++i)
    ok = ok && reinterpret_cast<uintptr_t>(p.n_parts > 1 ? p.part_w[i] : p.w) % 16 == 0;
  return ok;
}

/// A 16-byte copy global -> shared of which only the first `bytes` are read, the rest
/// written as zeros (pieces past K); with kBytes 8, an 8-byte one.
template <int kBytes = 16>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int bytes = kBytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// The end of a staged few-row kernel of kThreads threads: warp (kg, rg) of the block
/// holds in `acc` the sums of its 16 weight rows (n-tiles of 8, C-fragment layout) over
/// its share of K; the k groups' sums are added in group order through `red` (shared
/// memory of kg_n * rg_n * 16 * MT * 16 floats, free once every warp is done with it) and
/// stored to y [M, N]. Every thread of the block calls it.
template <int kThreads, int MT>
__device__ __forceinline__ void store_k_group_sums(const KqMmaParams& p, float* red, const float (&acc)[MT][2][4],
                                                   int kg, int kg_n, int rg, int rg_n, int64_t bx, int gid, int tig) {
  constexpr int kXRows = MT * 16;  // red[kg][row of the block][x row]
  __syncthreads();  // every warp is done with its ring
  const int block_rows = rg_n * 16;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = rg * 16 + nt * 8 + 2 * tig + (e & 1), xr = mt * 16 + gid + 8 * (e >> 1);
        red[(kg * block_rows + col) * kXRows + xr] = acc[mt][nt][e];
      }
    }
  }
  __syncthreads();
  const int64_t nb0 = bx * block_rows;
  for (int i = threadIdx.x; i < block_rows * kXRows; i += kThreads) {
    const int col = i / kXRows, xr = i % kXRows;
    const int64_t n = nb0 + col;
    if (xr >= p.M || n >= p.N) continue;
    float v = red[col * kXRows + xr];
    for (int g = 1; g < kg_n; ++g) v += red[(g * block_rows + col) * kXRows + xr];
    p.y[xr * p.N + n] = v;
  }
}

}  // namespace rlx::cuda_backend
