// Matmuls of many activation rows on the AMX tiles: y = x · Wᵀ with W kept packed.
// - GGUF blocks (dequant_matmul's prefill), AMX-INT8: x in its 8-bit activation blocks,
//   W decoded to int8 quants + per-group scales a column chunk and K block at a time,
//   TDPBSSD per scale group, scales applied in f32: llama.cpp's integer sums, so the
//   results match the AVX-512 loops to f32 rounding.
// - gemm's pre-packed f16 / bf16 panels (gemm_prepacked's prefill), AMX-BF16: x (and f16
//   W) as a bf16 high part plus the bf16-rounded remainder, the three largest cross
//   products summed in f32: ~2^-16 relative per product.
// x is converted once per pass of up to kAmxRowsPerPass rows; W once per pass.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernel_context.h"
#include "rlx/base/status.h"
#include "rlx/formats/ggml_type.h"

namespace rlx::cpu {

/// Fewest activation rows for which dequant_matmul (path kAuto) and gemm_prepacked use
/// the tiles when resolve_isa(ctx.isa) is kAmx; fewer rows take the AVX-512 loops.
/// RLX_CPU_AMX_MIN_ROWS sets it (default 32; 1 puts every quantized matmul on the tiles,
/// f16 / bf16 ones from kGemvMaxM + 1 rows).
int64_t amx_min_rows();

/// Activation rows converted and swept per pass (bounds the scratch; more rows repeat
/// the weight decode once per pass).
inline constexpr int64_t kAmxRowsPerPass = 512;

/// True when resolve_isa(isa) is kAmx (AMX-BF16 present, usable and not capped).
bool amx_enabled(IsaLevel isa);

/// Weight types amx_dequant_matmul takes: Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K.
bool amx_supports(formats::GgmlType type);

/// Caller scratch (bytes, any alignment) amx_dequant_matmul needs for m rows of k.
size_t amx_dequant_scratch_bytes(formats::GgmlType type, int64_t m, int64_t k);

/// y[i, :] = x_i · Wᵀ + bias for i < m with llama.cpp's integer sums: `act` holds the m
/// activation rows already in 8-bit blocks of qmatmul_vec_dot_type(type) (Q8_0 or Q8_K,
/// a_row_bytes apart), W = n rows of k/block_size GGUF blocks of `type` (row_bytes
/// apart). TDPBSSD sums each scale group (32 elements, 16 for Q6_K) exactly; the scales
/// are applied in f32 (the mins of Q4_K / Q5_K through a small f32 GEMM), as the AVX-512
/// loops do up to the order of f32 sums. Uses thread_scratch(kShared) of the calling
/// thread for the mins. Requires
/// amx_enabled(ctx.isa); kUnsupported for other types, kInvalidArgument on a short
/// scratch or k not a multiple of 64.
[[nodiscard]] Status amx_dequant_matmul(const KernelContext& ctx, int64_t m, int64_t n, int64_t k, const void* act,
                                        size_t a_row_bytes, formats::GgmlType type, const void* w, size_t row_bytes,
                                        const float* bias, float* y, int64_t ldc, void* scratch, size_t scratch_bytes);

/// gemm_prepacked on the tiles: C = act(A·B + bias) + beta·C for f16, bf16 or f32 B packed
/// by pack_b for AVX-512 (nr 32); f32 B splits like A (three products), so gemm_prepacked
/// keeps f32 weights on the exact f32 path and prefill attention calls this directly.
/// p must be resolved (lda, ldc set). Requires amx_enabled(ctx.isa); scratch is per
/// thread (thread_scratch kShared, kPackA, kPackB).
void amx_gemm_prepacked(const KernelContext& ctx, const GemmParams& p, const float* a, const PackedB& b, float* c);

/// Multiply-add FLOPs of one TDPBF16PS (16 x 16 outputs, 32 products each).
inline constexpr double kAmxFlopsPerTileOp = 2.0 * 16 * 16 * 32;

/// The AMX-BF16 peak probe of the benchmarks: `iters` rounds of four independent
/// TDPBF16PS on the calling thread with the tiles already loaded (no memory traffic),
/// 4 * kAmxFlopsPerTileOp FLOPs a round. Requires amx_enabled(IsaLevel::kAmx).
void amx_bf16_probe(int64_t iters);

}  // namespace rlx::cpu
