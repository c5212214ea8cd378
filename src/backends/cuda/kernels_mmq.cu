// The integer tensor-core GEMM of mmq_kernels.h: Q8_0 activation blocks times Q8_0 /
// Q4_0 weights, one exact int32 dot product per 32-element block, summed in f32.
//
// A block of 128 threads computes a 64 x 64 tile of y. Each step stages 128 values of
// K (four blocks) of the 64 x rows and the 64 weight rows in shared memory as int8,
// with their scales as f32; the next step's loads are in flight in registers while the
// tensor cores work on this one (two buffers, one barrier per step). Each warp owns a
// 32 x 32 quarter of the tile: 2 x 4 mma.sync.m16n8k32 per block, whose int32 results
// are scaled into f32 accumulators at once, so every block keeps its own scales.
// Q8_0 in the split layout with K a multiple of 128 (every real model's products) takes
// the pipelined form of the same tile (mmq_async_kernel: cp.async, four steps in
// flight, ldmatrix fragments); on an H200 it brings a 1B model's Q8_0 prefill from
// 52.6k / 55.5k to 60.8k / 63.0k tok/s (512 / 2048 tokens). Still under the f16 cuBLAS
// path it replaced (74.8k / 97.4k, which rounds both operands to f16): with one warp
// pair per scheduler the per-block scale work stalls each warp about 90 cycles a mma,
// and an eight-warp tile measured no better (57.5k / 60.7k).
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/mmq_kernels.h"
#include "backends/cuda/smem_limit.cuh"
#include "rlx/base/env.h"

namespace rlx::cuda_backend {
namespace {

constexpr int kTileM = 64;
constexpr int kTileN = 64;
static_assert(kTileM == kGroupTileRows, "a grouped product's tile is one tile of the kernel");
constexpr int kStepK = 128;                  // values of K per step: four Q8_0 blocks
constexpr int kStepBlocks = kStepK / 32;
constexpr int kThreads = 128;                // four warps, 2 x 2 over the tile
constexpr int kRowBytes = kStepK + 32;       // 40 words a row: the 8-byte fragment reads hit 32 banks
constexpr int kQuantWarps = 8;
// Each block product starts from the int32 bit pattern of 1.5 * 2^23, so the int32
// result read as an f32 is exactly 1.5 * 2^23 + dot (|dot| <= 32 * 127 * 128 < 2^22):
// one full-rate subtraction instead of an int-to-float conversion, a slow pipe that
// would otherwise bound the kernel (four conversions per mma and thread).
constexpr int kDotBias = 0x4B400000;
constexpr float kDotBiasValue = 12582912.0f;

// How the weight rows sit in memory.
enum class WLayout {
  kStored,   // GGUF blocks: f16 scale then the quants (2-byte aligned)
  kSplit,    // split layout (packed_split), rows not 16-byte aligned
  kSplit16,  // split layout, every row 16-byte aligned
};

__global__ void __launch_bounds__(kQuantWarps * 32)
    quantize_q8_0_kernel(const float* __restrict__ x, int8_t* __restrict__ q, float* __restrict__ d, int64_t blocks) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kQuantWarps;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kQuantWarps + (threadIdx.x >> 5); b < blocks; b += warps) {
    const float v = x[b * 32 + lane];
    const bool bad = __any_sync(0xFFFFFFFFu, !isfinite(v));
    float amax = fabsf(v);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    q[b * 32 + lane] = bad ? int8_t{0} : static_cast<int8_t>(__float2int_rn(v * id));
    if (lane == 0) d[b] = bad ? __int_as_float(0x7FC00000) : __half2float(__float2half_rn(amax / 127.0f));
  }
}

/// kWords 32-bit words from p (2-byte aligned, or 16-byte aligned when kVec).
template <int kWords, bool kVec>
__device__ __forceinline__ void load_words(const uint8_t* __restrict__ p, uint32_t (&w)[kWords]) {
  if constexpr (kVec) {
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  } else {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
#pragma unroll
    for (int i = 0; i < kWords; ++i)
      w[i] = static_cast<uint32_t>(__ldg(h + 2 * i)) | (static_cast<uint32_t>(__ldg(h + 2 * i + 1)) << 16);
  }
}

/// Block `blk` of weight row n of w (p.w, or an expert's matrix in it) as 32 int8 values
/// (8 words) and its scale.
template <DT T, WLayout L>
__device__ __forceinline__ void load_w_block(const MmqParams& p, const uint8_t* w, int64_t n, int64_t blk,
                                             uint32_t (&q)[8], float& d) {
  constexpr bool kQ8 = T == DT::Q8_0;
  constexpr int kQuantBytes = kQ8 ? 32 : 16;
  const uint8_t* quants;
  if constexpr (L == WLayout::kStored) {
    const uint8_t* b = w + n * p.row_bytes + blk * (kQuantBytes + 2);
    d = f16_bits(b);
    quants = b + 2;
  } else {
    quants = w + n * p.row_bytes + blk * kQuantBytes;
    d = __half2float(__ldg(reinterpret_cast<const __half*>(w + p.d_offset) + n * (p.K / 32) + blk));
  }
  constexpr bool kVec = L == WLayout::kSplit16;
  if constexpr (kQ8) {
    load_words<8, kVec>(quants, q);
  } else {  // Q4_0: byte i holds value i (low nibble) and value i + 16 (high), offset by 8
    uint32_t nib[4];
    load_words<4, kVec>(quants, nib);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      q[j] = __vsub4(nib[j] & 0x0F0F0F0Fu, 0x08080808u);
      q[4 + j] = __vsub4((nib[j] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    }
  }
}

__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)c, (void)a, (void)b0, (void)b1;  // not built for these architectures (RLX_CUDA_ARCHS >= 80)
#endif
}

// One 16 x 8 fragment's product over one 32-value block, scaled into f32 accumulators:
// acc[r] += int32 dot * x scale of its row * W scale of its column (the mma C layout:
// rows gid / gid + 8 take sx[0] / sx[1], columns 2 tig / 2 tig + 1 take sw0 / sw1).
__device__ __forceinline__ void block_product(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                              const float (&sx)[2], float sw0, float sw1) {
  int c[4] = {kDotBias, kDotBias, kDotBias, kDotBias};
  mma_s8(c, a, b0, b1);
  acc[0] = fmaf(__int_as_float(c[0]) - kDotBiasValue, sx[0] * sw0, acc[0]);
  acc[1] = fmaf(__int_as_float(c[1]) - kDotBiasValue, sx[0] * sw1, acc[1]);
  acc[2] = fmaf(__int_as_float(c[2]) - kDotBiasValue, sx[1] * sw0, acc[2]);
  acc[3] = fmaf(__int_as_float(c[3]) - kDotBiasValue, sx[1] * sw1, acc[3]);
}

// A warp's 32 x 32 quarter of the tile (acc[m-tile][n-tile][fragment element], the
// mma C layout: rows gid and gid + 8, columns 2 tig and 2 tig + 1) into y, clipped to
// rows below m_end and N columns; row m goes to row y_rows[m] of y when y_rows is set.
__device__ __forceinline__ void store_tile(const MmqParams& p, const float (&acc)[2][4][4], int64_t m0, int64_t n0,
                                           int gid, int tig, int64_t m_end, const int* y_rows = nullptr) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + j * 8 + tig * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t m = m0 + i * 16 + gid + h * 8;
        if (m >= m_end) continue;
        float* y = p.y + (y_rows ? y_rows[m] : m) * p.N;
        if (n < p.N) y[n] = acc[i][j][2 * h];
        if (n + 1 < p.N) y[n + 1] = acc[i][j][2 * h + 1];
      }
    }
  }
}

// What one thread carries from global memory to shared memory for one step: two
// (row, block) pairs of x and of W, each 32 int8 values and a scale.
struct StepRegs {
  uint32_t x[2][8];
  float xd[2];
  uint32_t w[2][8];
  float wd[2];
};

// A block's 32 values in shared memory: words (4 values each) in the order 0 4 1 5 2 6
// 3 7, so the two words an mma fragment takes from a row (k = 4 tig .. and 16 + 4 tig ..)
// are one 8-byte load at 8 tig. x and W are permuted alike, which leaves every dot
// product as it was.
__device__ __forceinline__ void store_block(int8_t* dst, const uint32_t (&w)[8]) {
  uint4* d = reinterpret_cast<uint4*>(dst);
  d[0] = make_uint4(w[0], w[4], w[1], w[5]);
  d[1] = make_uint4(w[2], w[6], w[3], w[7]);
}

// kGrouped: blockIdx.y is a tile of p.groups (W as stored).
template <DT T, WLayout L, bool kGrouped = false>
__global__ void __launch_bounds__(kThreads, 3) mmq_kernel(const MmqParams p) {
  __shared__ __align__(16) int8_t xs[2][kTileM * kRowBytes];
  __shared__ __align__(16) int8_t ws[2][kTileN * kRowBytes];
  __shared__ __align__(8) float xds[2][kStepBlocks * kTileM];  // [block][row]
  __shared__ __align__(8) float wds[2][kStepBlocks * kTileN];  // [block][col]

  const int t = threadIdx.x;
  const int lane = t & 31, warp = t >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int wm = warp >> 1, wn = warp & 1;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int64_t kblocks = p.K / 32;
  const int steps = static_cast<int>((p.K + kStepK - 1) / kStepK);

  pdl_wait();

  int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, m_end = p.M;
  const uint8_t* w = p.w;
  int64_t x_row[2];  // the x row of each row this thread loads (-1: none)
  if constexpr (kGrouped) {
    if (static_cast<int>(blockIdx.y) >= __ldg(p.groups.n_tiles)) return;
    const int* tile = p.groups.tiles + 3 * blockIdx.y;
    w += static_cast<int64_t>(__ldg(tile)) * p.N * p.row_bytes;
    m0 = __ldg(tile + 1);
    m_end = m0 + __ldg(tile + 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t m = m0 + ((t + i * kThreads) >> 2);
    x_row[i] = m >= m_end ? -1 : kGrouped && p.groups.x_rows ? __ldg(p.groups.x_rows + m) : m;
  }

  StepRegs r;
  auto load_step = [&](int step) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // 64 rows x 4 blocks of x and of W
      const int c = t + i * kThreads;
      const int64_t row = c >> 2, blk = static_cast<int64_t>(step) * kStepBlocks + (c & 3);
      const int64_t m = x_row[i], n = n0 + row;
      if (m >= 0 && blk < kblocks) {
        const uint4* src = reinterpret_cast<const uint4*>(p.xq + m * p.K + blk * 32);
        const uint4 lo = __ldg(src), hi = __ldg(src + 1);
        r.x[i][0] = lo.x, r.x[i][1] = lo.y, r.x[i][2] = lo.z, r.x[i][3] = lo.w;
        r.x[i][4] = hi.x, r.x[i][5] = hi.y, r.x[i][6] = hi.z, r.x[i][7] = hi.w;
        r.xd[i] = __ldg(p.xd + m * kblocks + blk);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) r.x[i][j] = 0;
        r.xd[i] = 0.0f;
      }
      if (n < p.N && blk < kblocks) {
        load_w_block<T, L>(p, w, n, blk, r.w[i], r.wd[i]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) r.w[i][j] = 0;
        r.wd[i] = 0.0f;
      }
    }
  };
  auto store_step = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = t + i * kThreads;
      const int row = c >> 2, blk = c & 3;
      store_block(&xs[buf][row * kRowBytes + blk * 32], r.x[i]);
      store_block(&ws[buf][row * kRowBytes + blk * 32], r.w[i]);
      xds[buf][blk * kTileM + row] = r.xd[i];
      wds[buf][blk * kTileN + row] = r.wd[i];
    }
  };

  float acc[2][4][4] = {};

  if (steps > 0) load_step(0);
  for (int step = 0; step < steps; ++step) {
    const int buf = step & 1;
    store_step(buf);
    __syncthreads();  // (also: every warp is past the step that last read this buffer)
    if (step + 1 < steps) load_step(step + 1);
    const int8_t* xb = xs[buf];
    const int8_t* wb = ws[buf];
#pragma unroll
    for (int kb = 0; kb < kStepBlocks; ++kb) {
      uint32_t a[2][4];
      float sx[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = wm * 32 + i * 16 + gid;
        const uint2 top = *reinterpret_cast<const uint2*>(xb + row * kRowBytes + kb * 32 + tig * 8);
        const uint2 bot = *reinterpret_cast<const uint2*>(xb + (row + 8) * kRowBytes + kb * 32 + tig * 8);
        a[i][0] = top.x;
        a[i][1] = bot.x;
        a[i][2] = top.y;
        a[i][3] = bot.y;
        sx[i][0] = xds[buf][kb * kTileM + row];
        sx[i][1] = xds[buf][kb * kTileM + row + 8];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = wn * 32 + j * 8;
        const uint2 bw = *reinterpret_cast<const uint2*>(wb + (col + gid) * kRowBytes + kb * 32 + tig * 8);
        const float2 sw = *reinterpret_cast<const float2*>(&wds[buf][kb * kTileN + col + tig * 2]);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          block_product(acc[i][j], a[i], bw.x, bw.y, sx[i], sw.x, sw.y);
        }
      }
    }
  }
  pdl_trigger();

  store_tile(p, acc, m0 + wm * 32, n0 + wn * 32, gid, tig, m_end, kGrouped ? p.groups.y_rows : nullptr);
}

// ---- the pipelined form: Q8_0 in the split layout, 16-byte aligned rows, K % 128 == 0 ----
// The same tile and arithmetic, with the staging done by cp.async straight into shared
// memory, kStages steps in flight (a load has three steps of tensor-core work to land
// behind), and the mma fragments read by ldmatrix. Rows keep their natural order here
// (cp.async cannot permute), at 144 bytes a row: the eight rows of an ldmatrix 8x8
// matrix start 4 words apart, on distinct banks.
constexpr int kStages = 4;
constexpr int kAsyncRowBytes = kStepK + 16;
constexpr int kStageQuantBytes = kTileM * kAsyncRowBytes;  // x quants; W's follow, as many
constexpr int kStageBytes = 2 * kStageQuantBytes + kTileM * kStepBlocks * 4 + kTileN * kStepBlocks * 2;
constexpr int kAsyncSmem = kStages * kStageBytes;
static_assert(kTileM == kTileN && kStageBytes % 16 == 0, "stage layout");

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 8 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__global__ void __launch_bounds__(kThreads, 2) mmq_async_kernel(const MmqParams p) {
  extern __shared__ __align__(16) int8_t smem[];
  const int t = threadIdx.x;
  const int lane = t & 31, warp = t >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int lq = lane >> 3, lr = lane & 7;  // ldmatrix: which 8x8 matrix this lane addresses, and its row
  const int wm = warp >> 1, wn = warp & 1;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int64_t kblocks = p.K / 32;
  const int steps = static_cast<int>(p.K / kStepK);
  const __half* wd = reinterpret_cast<const __half*>(p.w + p.d_offset);

  pdl_wait();

  auto load_stage = [&](int step, int stage) {
    int8_t* base = smem + stage * kStageBytes;
    const int64_t k0 = static_cast<int64_t>(step) * kStepK;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // 64 rows x 8 chunks of 16 bytes, of x and of W
      const int c = t + i * kThreads;
      const int row = c >> 3, ch = c & 7;
      const int64_t m = m0 + row, n = n0 + row;
      cp_async16(base + row * kAsyncRowBytes + ch * 16, p.xq + (m < p.M ? m : 0) * p.K + k0 + ch * 16, m < p.M);
      cp_async16(base + kStageQuantBytes + row * kAsyncRowBytes + ch * 16,
                 p.w + (n < p.N ? n : 0) * p.row_bytes + k0 + ch * 16, n < p.N);
    }
    int8_t* scales = base + 2 * kStageQuantBytes;
    if (t < kTileM) {  // x scales: 4 f32 a row; W scales: 4 f16 a row
      const int64_t m = m0 + t;
      cp_async16(scales + t * 16, p.xd + (m < p.M ? m : 0) * kblocks + k0 / 32, m < p.M);
    } else {
      const int row = t - kTileM;
      const int64_t n = n0 + row;
      cp_async8(scales + kTileM * 16 + row * 8, wd + (n < p.N ? n : 0) * kblocks + k0 / 32, n < p.N);
    }
  };

  float acc[2][4][4] = {};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_stage(s, s);
    cp_async_commit();
  }
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // this step's stage has landed for every thread; the one refilled below is free
    if (step + kStages - 1 < steps) load_stage(step + kStages - 1, (step + kStages - 1) % kStages);
    cp_async_commit();
    const int8_t* xb = smem + (step % kStages) * kStageBytes;
    const int8_t* wb = xb + kStageQuantBytes;
    const float* xds = reinterpret_cast<const float*>(xb + 2 * kStageQuantBytes);
    const __half* wds = reinterpret_cast<const __half*>(xb + 2 * kStageQuantBytes + kTileM * 16);
#pragma unroll
    for (int kb = 0; kb < kStepBlocks; ++kb) {
      uint32_t a[2][4];
      float sx[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row0 = wm * 32 + i * 16;
        ldmatrix_x4(a[i], xb + (row0 + (lq & 1) * 8 + lr) * kAsyncRowBytes + kb * 32 + (lq >> 1) * 16);
        sx[i][0] = xds[(row0 + gid) * kStepBlocks + kb];
        sx[i][1] = xds[(row0 + gid + 8) * kStepBlocks + kb];
      }
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        uint32_t bf[4];  // b0, b1 of n-tile 2 jj, then of 2 jj + 1
        ldmatrix_x4(bf, wb + (wn * 32 + jj * 16 + (lq >> 1) * 8 + lr) * kAsyncRowBytes + kb * 32 + (lq & 1) * 16);
#pragma unroll
        for (int jo = 0; jo < 2; ++jo) {
          const int j = 2 * jj + jo;
          const int col = wn * 32 + j * 8 + tig * 2;
          const float sw0 = __half2float(wds[col * kStepBlocks + kb]);
          const float sw1 = __half2float(wds[(col + 1) * kStepBlocks + kb]);
          const uint32_t b[2] = {bf[2 * jo], bf[2 * jo + 1]};
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            block_product(acc[i][j], a[i], b[0], b[1], sx[i], sw0, sw1);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  pdl_trigger();

  store_tile(p, acc, m0 + wm * 32, n0 + wn * 32, gid, tig, p.M);
}

// RLX_CUDA_MMQ_PIPELINE=0: every product takes the register-staged kernel (to compare).
bool mmq_register_staging() { return !env_config().cuda_mmq_pipelined; }

template <DT T>
void launch_typed(const MmqParams& p, dim3 grid, cudaStream_t s) {
  if (p.d_offset == 0) {
    launch_k(mmq_kernel<T, WLayout::kStored>, grid, kThreads, 0, s, p);
    return;
  }
  const bool aligned = reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && p.row_bytes % 16 == 0;
  if constexpr (T == DT::Q8_0) {
    if (aligned && p.K % kStepK == 0 && p.d_offset % 8 == 0 && reinterpret_cast<uintptr_t>(p.xq) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(p.xd) % 16 == 0 && !mmq_register_staging()) {
      raise_smem_limit<mmq_async_kernel>(kAsyncSmem);
      launch_k(mmq_async_kernel, grid, kThreads, kAsyncSmem, s, p);
      return;
    }
  }
  if (aligned) launch_k(mmq_kernel<T, WLayout::kSplit16>, grid, kThreads, 0, s, p);
  else launch_k(mmq_kernel<T, WLayout::kSplit>, grid, kThreads, 0, s, p);
}

}  // namespace

bool mmq_supported(DT w) { return w == DT::Q8_0 || w == DT::Q4_0; }

void launch_quantize_q8_0(const float* x, int8_t* q, float* d, int64_t rows, int64_t K, cudaStream_t s) {
  const int64_t blocks = rows * (K / 32);
  if (blocks <= 0) return;
  const unsigned g = static_cast<unsigned>(std::min<int64_t>((blocks + kQuantWarps - 1) / kQuantWarps, 65535));
  launch_k(quantize_q8_0_kernel, g, kQuantWarps * 32, 0, s, x, q, d, blocks);
}

void launch_mmq(const MmqParams& p, cudaStream_t s) {
  if (p.groups.tiles) {
    if (p.groups.max_tiles <= 0 || p.N <= 0) return;
    const dim3 grid(static_cast<unsigned>((p.N + kTileN - 1) / kTileN), static_cast<unsigned>(p.groups.max_tiles));
    if (p.w_dt == DT::Q8_0) launch_k(mmq_kernel<DT::Q8_0, WLayout::kStored, true>, grid, kThreads, 0, s, p);
    else launch_k(mmq_kernel<DT::Q4_0, WLayout::kStored, true>, grid, kThreads, 0, s, p);
    return;
  }
  if (p.M <= 0 || p.N <= 0) return;
  const dim3 grid(static_cast<unsigned>((p.N + kTileN - 1) / kTileN), static_cast<unsigned>((p.M + kTileM - 1) / kTileM));
  if (p.w_dt == DT::Q8_0) launch_typed<DT::Q8_0>(p, grid, s);
  else launch_typed<DT::Q4_0>(p, grid, s);
}

}  // namespace rlx::cuda_backend
