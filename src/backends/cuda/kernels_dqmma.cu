// launch_dqmma (mmq_kernels.h): a packed product of a few rows of x (the decode steps of
// several streams, short prompts) on the f16 tensor cores, decoding W tile by tile into
// shared memory instead of into a full f16 copy in device memory. The arithmetic is the
// dequantize + cuBLAS path's (x and W rounded to f16, f32 accumulation), but each weight
// byte is read once per product and nothing the size of W is written.
//
// A block of 128 threads owns 32 weight rows and every row of x (up to 16: one m16
// tile; the kernel is written for up to four). Per step of 128 values of K, each thread decodes one 32-value unit of
// one weight row (decode_row_unit, either layout) into f16 in shared memory, the block stages the matching f16 x, and
// each warp runs its 8 weight rows against all of x with mma.sync m16n8k16. Every step first issues all its loads (x,
// then W), so their latencies overlap. When the weight rows alone give too few blocks to fill the GPU, K is split
// across blocks (gridDim.y): partial sums go to a workspace and the last block of each tile adds them in a fixed order,
// so results do not depend on scheduling and no second kernel is launched.
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/mmq_kernels.h"

namespace rlx::cuda_backend {
namespace {

constexpr int kRowsPerBlock = 32;  // weight rows (n) per block: 4 warps x 8
constexpr int kStepK = 128;        // values of K per step: one 32-value unit per thread
constexpr int kPad = 8;            // halves of padding per shared row: conflict-free fragment reads
constexpr int kThreads = 128;

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void store_unit(__half* dst, const float (&y)[32]) {
  __half2* d = reinterpret_cast<__half2*>(dst);
#pragma unroll
  for (int i = 0; i < 16; ++i) d[i] = __floats2half2_rn(y[2 * i], y[2 * i + 1]);
}

template <DT T, int kMTiles>
__global__ void __launch_bounds__(kThreads) dqmma_kernel(const DqMmaParams p, int64_t k_per_slice) {
  pdl_wait();
  pdl_trigger();
  constexpr int kXLoads = (kMTiles * 16 * (kStepK / 8) + kThreads - 1) / kThreads;  // 16-byte loads per thread
  __shared__ __align__(16) __half ws[kRowsPerBlock][kStepK + kPad];
  __shared__ __align__(16) __half xs[kMTiles * 16][kStepK + kPad];
  __shared__ bool last_slice;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * k_per_slice;
  const int64_t k_end = k_begin + k_per_slice < p.K ? k_begin + k_per_slice : p.K;
  const __half* x = static_cast<const __half*>(p.x);
  float acc[kMTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;

  for (int64_t k0 = k_begin; k0 < k_end; k0 += kStepK) {
    const int64_t valid = k_end - k0 < kStepK ? k_end - k0 : kStepK;  // a multiple of 32
    // The loads first, all independent: this step's x (eight halves a load; rows past M
    // and columns past the slice are zero) and one 32-value unit of one weight row.
    uint4 xv[kXLoads];
#pragma unroll
    for (int i = 0; i < kXLoads; ++i) {
      const int c = tid + i * kThreads, row = c / (kStepK / 8), col = (c % (kStepK / 8)) * 8;
      xv[i] = make_uint4(0, 0, 0, 0);
      if (row < kMTiles * 16 && row < p.M && col < valid)
        xv[i] = __ldg(reinterpret_cast<const uint4*>(x + row * p.K + k0 + col));
    }
    const int r = tid >> 2, j = tid & 3;  // unit j of row r
    float y0[32];
    if (n0 + r < p.N && 32 * j < valid) {
      decode_row_unit<T>(p.w, p.row_bytes, p.d_offset, n0 + r, k0 / 32 + j, y0);
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) y0[i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kXLoads; ++i) {
      const int c = tid + i * kThreads, row = c / (kStepK / 8), col = (c % (kStepK / 8)) * 8;
      if (row < kMTiles * 16) *reinterpret_cast<uint4*>(&xs[row][col]) = xv[i];
    }
    store_unit(&ws[r][32 * j], y0);
    __syncthreads();
    const int bn = warp * 8 + (lane >> 2), kq = (lane & 3) * 2;
#pragma unroll
    for (int kk = 0; kk < kStepK; kk += 16) {
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&ws[bn][kk + kq]);
      const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&ws[bn][kk + kq + 8]);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const int ar = mt * 16 + (lane >> 2);
        uint32_t a[4];
        a[0] = *reinterpret_cast<const uint32_t*>(&xs[ar][kk + kq]);
        a[1] = *reinterpret_cast<const uint32_t*>(&xs[ar + 8][kk + kq]);
        a[2] = *reinterpret_cast<const uint32_t*>(&xs[ar][kk + kq + 8]);
        a[3] = *reinterpret_cast<const uint32_t*>(&xs[ar + 8][kk + kq + 8]);
        mma_f16(acc[mt], a, b0, b1);
      }
    }
    __syncthreads();
  }
  // One slice: straight into y. Several: every block leaves its partial sums in `work`;
  // the last block of the tile to finish adds them, slice by slice, so the order of the
  // sums never depends on scheduling, and puts the tile's counter back to zero.
  const bool split = gridDim.y > 1;
  float* out = split ? p.work + static_cast<int64_t>(blockIdx.y) * p.M * p.N : p.y;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = mt * 16 + (lane >> 2) + 8 * h;
      if (row >= p.M) continue;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t col = n0 + warp * 8 + (lane & 3) * 2 + e;
        if (col < p.N) out[row * p.N + col] = acc[mt][2 * h + e];
      }
    }
  }
  if (!split) return;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const unsigned done = atomicAdd(p.counters + blockIdx.x, 1u) + 1;
    last_slice = done == gridDim.y;
    if (last_slice) p.counters[blockIdx.x] = 0;
  }
  __syncthreads();
  if (!last_slice) return;
  __threadfence();
  const int64_t cols = p.N - n0 < kRowsPerBlock ? p.N - n0 : kRowsPerBlock;
  for (int64_t i = tid; i < p.M * cols; i += kThreads) {
    const int64_t at = (i / cols) * p.N + n0 + i % cols;
    float sum = 0.0f;
    for (unsigned sl = 0; sl < gridDim.y; ++sl) sum += __ldcg(p.work + static_cast<int64_t>(sl) * p.M * p.N + at);
    p.y[at] = sum;
  }
}

template <DT T>
void launch_for_type(const DqMmaParams& p, dim3 grid, int64_t k_per_slice, cudaStream_t s) {
  static_assert(kDqMmaMaxRows <= 16, "one m16 tile of x");
  launch_k(dqmma_kernel<T, 1>, grid, kThreads, 0, s, p, k_per_slice);
}

}  // namespace

bool dqmma_supported(DT w) {
  switch (w) {
    case DT::Q4_1:
    case DT::Q5_0:
    case DT::Q5_1:
    case DT::Q4_K:
    case DT::Q5_K:
    case DT::Q6_K:
    case DT::IQ4_NL:
    case DT::IQ4_XS:
      return true;
    default:
      return false;
  }
}

int dqmma_k_slices(int64_t N, int64_t K, int sms) {
  // A block waits on its weights' loads every step, so the loads in flight come from many
  // resident blocks: enough slices for eight blocks per multiprocessor, each slice at
  // least two steps of K.
  const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t want = (8 * static_cast<int64_t>(sms > 0 ? sms : 1) + blocks - 1) / blocks;
  const int64_t most = std::max<int64_t>(1, K / (2 * kStepK));
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 32)));
}

int64_t dqmma_work_bytes(int64_t M, int64_t N, int slices) { return slices > 1 ? slices * M * N * 4 : 0; }

int64_t dqmma_counter_bytes(int64_t N) { return (N + kRowsPerBlock - 1) / kRowsPerBlock * 4; }

void launch_dqmma(const DqMmaParams& p, int slices, cudaStream_t s) {
  if (p.M <= 0 || p.N <= 0) return;
  slices = std::max(slices, 1);
  // Slices of whole steps (the last one takes what is left).
  const int64_t steps = (p.K + kStepK - 1) / kStepK;
  const int64_t k_per_slice = (steps + slices - 1) / slices * kStepK;
  slices = static_cast<int>((p.K + k_per_slice - 1) / k_per_slice);
  const dim3 grid(static_cast<unsigned>((p.N + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(slices));
  switch (p.w_dt) {
    case DT::Q4_1:
      launch_for_type<DT::Q4_1>(p, grid, k_per_slice, s);
      break;
    case DT::Q5_0:
      launch_for_type<DT::Q5_0>(p, grid, k_per_slice, s);
      break;
    case DT::Q5_1:
      launch_for_type<DT::Q5_1>(p, grid, k_per_slice, s);
      break;
    case DT::Q4_K:
      launch_for_type<DT::Q4_K>(p, grid, k_per_slice, s);
      break;
    case DT::Q5_K:
      launch_for_type<DT::Q5_K>(p, grid, k_per_slice, s);
      break;
    case DT::Q6_K:
      launch_for_type<DT::Q6_K>(p, grid, k_per_slice, s);
      break;
    case DT::IQ4_NL:
      launch_for_type<DT::IQ4_NL>(p, grid, k_per_slice, s);
      break;
    case DT::IQ4_XS:
      launch_for_type<DT::IQ4_XS>(p, grid, k_per_slice, s);
      break;
    default:
      return;
  }
}

}  // namespace rlx::cuda_backend
