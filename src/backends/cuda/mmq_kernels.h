// Integer tensor-core GEMM for prefill over weights whose products llama.cpp's CPU
// backend takes against Q8_0-rounded activations (Q8_0, Q4_0; the K-quants against Q8_K
// blocks, launch_kqmma, for a few rows): x is quantized to Q8_0
// blocks, every 32-element block product is exact in int32 (mma.sync m16n8k32 s8), and
// the blocks are summed in f32 times the product of their two scales -- the same
// arithmetic as ggml's vec-dot, so a CUDA prefill matches the CPU and llama.cpp to f32
// rounding instead of to f16's (the dequantize-to-f16 + cuBLAS path it replaces).
// Kept out of cuda_kernels.h so that a change here rebuilds two files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_kernels.h"

namespace rlx::cuda_backend {

/// True for the packed weight types launch_mmq multiplies (Q8_0, Q4_0).
bool mmq_supported(DT w);

/// x [rows, K] (f32, K a multiple of 32) as llama.cpp's Q8_0 activation blocks: for each
/// block of 32, d = f16(max|x| / 127) (kept as f32) and q = round-half-even(x * 127 /
/// max|x|). A block holding a value that is not finite gets d = NaN and q = 0, so its
/// products come out NaN rather than silently finite.
void launch_quantize_q8_0(const float* x, int8_t* q, float* d, int64_t rows, int64_t K, cudaStream_t s);

/// Rows of x a tile of a grouped product holds at most.
inline constexpr int64_t kGroupTileRows = 64;

/// The grouped form of a product (a mixture of experts' prefill): the rows of the
/// product come in tiles from a table made on the device, each tile against one
/// expert's matrix -- rows [e * N, e * N + N) of a stacked W [experts * N, K]. Row m of
/// the product reads row x_rows[m] of x and writes row y_rows[m] of y (null: row m).
/// Tiles past *n_tiles are empty (the grid has max_tiles).
struct GemmGroups {
  const int* tiles = nullptr;    ///< [max_tiles][3]: expert, first row, rows (<= kGroupTileRows)
  const int* n_tiles = nullptr;  ///< entries of `tiles` in use (device memory)
  const int* x_rows = nullptr;
  const int* y_rows = nullptr;
  int64_t max_tiles = 0;
};

/// y[m, n] = sum over blocks b of xd[m, b] * wd[n, b] * (int32) sum_{i<32} xq[m, 32b+i] * wq[n, 32b+i]
/// for packed W [N, K] (Q8_0 or Q4_0 as stored, or in the split layout when d_offset > 0;
/// see packed_split). xq / xd come from launch_quantize_q8_0; y is f32 [M, N]. With
/// `groups.tiles` set the product is grouped (W as stored only; M unused).
struct MmqParams {
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  const uint8_t* w = nullptr;
  float* y = nullptr;
  DT w_dt = DT::Q8_0;
  int64_t M = 0, N = 0, K = 0;
  int64_t row_bytes = 0;  ///< bytes of one weight row (scales excluded when split)
  int64_t d_offset = 0;   ///< split layout: where the f16 scales [N, K/32] start (0: as stored)
  GemmGroups groups;
};
void launch_mmq(const MmqParams& p, cudaStream_t s);

/// Most rows of x a packed product takes through launch_dqmma; more go through a full f16
/// copy of W and cuBLAS. Measured on an H200 (q4_k_m 1B, batched decode, same calls): the
/// tiles win at 8 and 16 rows (3.42-3.47 / 3.74-3.81 ms a step against 3.70-3.71 /
/// 3.87-3.91) and lose at 32 (4.56 against 4.24): each step waits on its weight loads,
/// which only many resident blocks hide.
inline constexpr int64_t kDqMmaMaxRows = 16;

/// True for the packed types launch_dqmma decodes (Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
/// IQ4_NL, IQ4_XS): those a prefill or a batch of several streams meets in the usual mixes
/// whose products do not take the int8 path (mmq_supported).
bool dqmma_supported(DT w);

/// y [M, N] (f32) = x [M, K] (f16) . W^T for packed W [N, K] (as stored, or split when
/// d_offset > 0), M <= kDqMmaMaxRows: W decoded into f16 tiles in shared memory, products
/// on the f16 tensor cores with f32 accumulation -- the arithmetic of dequantizing W to
/// f16 for cuBLAS, without the copy. With split K: `work`, f32 scratch of
/// dqmma_work_bytes for the partial sums, and `counters`, zeroed memory of
/// dqmma_counter_bytes that the kernel leaves zeroed.
struct DqMmaParams {
  const void* x = nullptr;  ///< f16 [M, K], 16-byte aligned
  const uint8_t* w = nullptr;
  float* y = nullptr;
  float* work = nullptr;
  unsigned* counters = nullptr;  ///< dqmma_counter_bytes, zero before and after (split K)
  DT w_dt = DT::Q4_K;
  int64_t M = 0, N = 0, K = 0;
  int64_t row_bytes = 0;
  int64_t d_offset = 0;
};
/// How many slices of K a product of N weight rows takes to give a GPU of `sms`
/// multiprocessors eight blocks each, each slice at least two steps of K (1: no split).
int dqmma_k_slices(int64_t N, int64_t K, int sms);
/// Bytes of `work` a product needs with `slices` slices of K (0 for one).
int64_t dqmma_work_bytes(int64_t M, int64_t N, int slices);
/// Bytes of the zeroed `counters` a split product needs (one per 32 weight rows).
int64_t dqmma_counter_bytes(int64_t N);
void launch_dqmma(const DqMmaParams& p, int slices, cudaStream_t s);

/// Most rows of x a product over K-quant weights takes through launch_kqmma (two tiles
/// of 16 rows); more are dequantized to f16 for cuBLAS. Measured on an H200 (q4_k_m 1B,
/// batched decode): 1.73 / 2.09 / 3.08 ms a step at 8 / 16 / 32 streams against 3.39 /
/// 3.75 / 4.37 before, but at 64 streams four tiles of 16 rows took 6.07 ms against
/// cuBLAS's 5.10.
inline constexpr int64_t kKqMmaMaxRows = 32;
/// Fewest rows the products over K-quants take launch_kqmma from (one row: the GEMV).
/// At 2-5 rows the GEMV's 8-bit x path read W once per row group: a batch-4 q4_k_m 1B
/// step took 2.74 ms on an H200, batch 8 on the int8 tensor cores 1.48.
inline constexpr int64_t kKqMmaMinRows = 2;
/// Most products of one x that one launch_kqmma takes (KqMmaParams::n_parts).
inline constexpr int kKqMmaMaxParts = 4;

/// True for the K-quant types launch_kqmma multiplies (Q4_K, Q5_K, Q6_K).
bool kqmma_supported(DT w);

/// x [rows, K] (f32, K a multiple of 256) as llama.cpp's Q8_K activation blocks
/// (formats::quantize_row_q8_k): per 256 values d (f32) and int8 q, and per 32 values
/// the sum of their q (`sums`, [rows, K / 32]). A block holding a value that is not
/// finite gets d = NaN and q = 0, so its products come out NaN.
void launch_quantize_q8_k(const float* x, int8_t* q, float* d, int* sums, int64_t rows, int64_t K,
                          cudaStream_t s);

/// y [M, N] (f32) = x . W^T for K-quant W [N, K] (as stored, or Q6_K split when d_offset >
/// 0) and M <= kKqMmaMaxRows rows of x in Q8_K blocks (launch_quantize_q8_k): every
/// sub-block product exact in int32 on the int8 tensor cores, scaled by the sub-block's
/// integer scale and summed over the super-block in int32, then taken into f32 once per
/// super-block -- the arithmetic of ggml's vec_dot_<type>_q8_K, which llama.cpp's CPU
/// backend and RLX's CPU kernels use for these weights. W is read once, straight into
/// the tensor-core fragments.
struct KqMmaParams {
  const int8_t* xq = nullptr;  ///< [M, K]
  const float* xd = nullptr;   ///< [M, K / 256]
  const int* xs = nullptr;     ///< [M, K / 32]
  const uint8_t* w = nullptr;
  float* y = nullptr;
  DT w_dt = DT::Q4_K;
  int64_t M = 0, N = 0, K = 0;
  int64_t row_bytes = 0;
  int64_t d_offset = 0;  ///< Q6_K split layout: where the f16 scales [N, K / 256] start
  bool w_const = false;  ///< no kernel writes W (a parameter): its loads may start before the kernels ahead finish
  int k_groups = 0;      ///< the staged form's warps along K (kqmma_k_groups; 0: the register form)
  /// More than one product of the same x (q / k / v, gate / up) in one launch: part i
  /// multiplies part_w[i] (part_n[i] rows, Q6_K scales at part_d_offset[i]) into
  /// part_y[i] [M, part_n[i]]; w, y, N and d_offset are then unused. 1: w, y, N, d_offset.
  int n_parts = 1;
  const uint8_t* part_w[kKqMmaMaxParts] = {};
  float* part_y[kKqMmaMaxParts] = {};
  int64_t part_n[kKqMmaMaxParts] = {}, part_d_offset[kKqMmaMaxParts] = {};
  /// f16 / bf16 weights (launch_rows_mma): x [M, K] rounded to the weights' type, 16-byte
  /// aligned; xq, xd and xs are then unused. (Q8_0 weights: xq, xd as launch_quantize_q8_0
  /// makes them; xs unused.)
  const void* xh = nullptr;
};
/// How many of a block's eight warps the staged form of launch_kqmma (weights streamed
/// through shared memory) puts along K: enough for each warp to stream four super-blocks
/// where K has them, more while the blocks of 16 * 8 / k_groups rows would not give each of
/// `sms` multiprocessors one.
int kqmma_k_groups(int64_t N, int64_t K, int sms);
/// True when the staged form's ring (72-104 KiB a block: 8 warps x 4 stages x 16 rows of
/// a super-block) fits the current device's opt-in shared memory per block; else the
/// products take the register form (k_groups 0). (Ampere's and Ada's 99 KiB, for one,
/// do not hold Q6_K's.)
bool kqmma_staged_fits(DT w);
/// False (nothing launched) when M > kKqMmaMaxRows, K is not whole super-blocks or the type
/// is not one of kqmma_supported's.
[[nodiscard]] bool launch_kqmma(const KqMmaParams& p, cudaStream_t s);

/// True for the weights launch_rows_mma multiplies -- F16, BF16 and Q8_0 -- with the same
/// few rows (kKqMmaMinRows .. kKqMmaMaxRows) and launch groups as launch_kqmma.
bool rows_mma_supported(DT w);
/// launch_rows_mma's warps along K (KqMmaParams::k_groups): the fewest whose blocks of
/// 128 / k_groups weight rows cover about 70 % of `sms` multiprocessors (one block holds
/// a multiprocessor), each group keeping a chunk of 128 values of K.
int rows_mma_k_groups(int64_t N, int64_t K, int sms);
/// y [M, N] (f32) = x . W^T for M <= kKqMmaMaxRows rows of x and W [N, K] streamed once
/// through the tensor cores, f32 sums added in a fixed order; grouped parts as for
/// launch_kqmma. f16 / bf16 W (K a multiple of 8): x already rounded to W's type (xh),
/// f32 accumulation. Q8_0 W in the split layout (d_offset > 0, K a multiple of 128): x
/// as Q8_0 blocks (xq, xd from launch_quantize_q8_0), each block product exact in int32,
/// then scaled by both blocks' scales -- launch_mmq's arithmetic. Every part 16-byte
/// aligned. False (nothing launched) when a condition fails.
[[nodiscard]] bool launch_rows_mma(const KqMmaParams& p, cudaStream_t s);

}  // namespace rlx::cuda_backend
