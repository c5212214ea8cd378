// Prefill of GGUF-quantized matmuls on AVX-512 VNNI register tiles: y = x · Wᵀ for many
// activation rows on CPUs without AMX (AMD Zen 4 / Zen 5, Intel before Sapphire Rapids).
//
// The layout turns llama.cpp's dot products into an outer-product GEMM: every vpdpbusd
// multiplies 4 consecutive K quants of 16 weight columns (one 64-byte vector, unsigned)
// by 4 quants of one activation row (signed, broadcast), so 16 output columns are summed
// per instruction with no horizontal reduction. Per call a task decodes its chunk of W
// (64 columns x a K block) once into that layout, in cache, and sweeps every activation
// row over it. Per scale group the integer sum is exact (llama.cpp's), the scales are
// applied in f32; results match the integer GEMV loops to f32 rounding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"
#include "rlx/base/status.h"
#include "rlx/formats/ggml_type.h"

namespace rlx::cpu {

/// True when the VNNI tiles can run with the cap `isa`: resolve_isa(isa) is at least
/// kAvx512 and the CPU has AVX-512 VNNI.
bool vnni_enabled(IsaLevel isa);

/// Weight types vnni_dequant_matmul takes: Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K.
bool vnni_supports(formats::GgmlType type);

/// Fewest activation rows for which dequant_matmul's kAuto takes the VNNI tiles (where
/// the AMX tiles do not serve the call). RLX_CPU_VNNI_MIN_ROWS sets it (default 16).
int64_t vnni_min_rows();

/// Activation rows converted and swept per pass (bounds the scratch).
inline constexpr int64_t kVnniRowsPerPass = 512;

/// Caller scratch (bytes, any alignment) vnni_dequant_matmul needs for m rows of k.
size_t vnni_dequant_scratch_bytes(formats::GgmlType type, int64_t m, int64_t k);

/// y[i, :] = x_i · Wᵀ + bias for i < m: `act` holds the m activation rows already in the
/// 8-bit blocks of qmatmul_vec_dot_type(type) (Q8_0 or Q8_K, a_row_bytes apart); W is n
/// rows of k / block_size GGUF blocks of `type` (row_bytes apart). Uses ctx.pool and per
/// thread scratch (thread_scratch kPackA, kPackB, kTemp). Requires vnni_enabled(ctx.isa);
/// kUnsupported for other types, kInvalidArgument on a short scratch or a k that is not
/// a multiple of the block size.
[[nodiscard]] Status vnni_dequant_matmul(const KernelContext& ctx, int64_t m, int64_t n, int64_t k, const void* act,
                                         size_t a_row_bytes, formats::GgmlType type, const void* w, size_t row_bytes,
                                         const float* bias, float* y, int64_t ldc, void* scratch, size_t scratch_bytes);

}  // namespace rlx::cpu
