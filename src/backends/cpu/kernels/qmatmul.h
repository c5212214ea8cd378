// DequantMatMul: y[M,N] = x[M,K] · W[N,K]ᵀ (+ bias) with W kept in its GGUF block
// layout (Q4_0 ... Q8_0, Q2_K ... Q6_K; F32/F16/BF16 route to gemm). Numerics follow
// llama.cpp's CPU path: x is first quantized per row to the weight's "vec_dot type".
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"
#include "rlx/base/status.h"
#include "rlx/formats/ggml_type.h"

namespace rlx::cpu {

/// Which loop nest serves the call. kAuto picks kGemv at every m for the types whose
/// integer loops beat the f32 panels with the ISA in use (the K-quants everywhere: 1.2x
/// for Q4_K, 1.5x for Q6_K at 512x2048x8192 on AVX-512 VNNI; Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 with
/// the AVX-512 VNNI loops), for the other types when m <= kQGemvMaxM; else kPanel.
enum class QMatmulPath : uint8_t {
  kAuto,
  kGemv,   ///< fused dequant GEMV: integer dots per block, weights decoded once per group of
           ///< 4 activation rows (AVX-512: 8; 12 for Q8_0, 6 for Q4_0/Q4_1/Q5_0/Q5_1), in
           ///< cache-sized chunks of weight rows
  kPanel,  ///< prefill: weight panels decoded to f32 once per call, f32 GEMM micro-tiles
  kAmx,    ///< prefill on the AMX-INT8 tiles (amx_matmul.h): the same 8-bit activation
           ///< blocks, weights decoded to int8 tiles once per call and 512 rows; needs
           ///< resolve_isa(isa) == kAmx, a type amx_supports() and k a multiple of 64
  kVnni,   ///< prefill on AVX-512 VNNI register tiles (vnni_matmul.h): the same 8-bit
           ///< activation blocks, weights decoded once per call into 16-column vectors;
           ///< needs vnni_enabled(isa) and a type vnni_supports()
};

/// Largest m that kAuto serves with the GEMV path for the types without integer prefill.
inline constexpr int64_t kQGemvMaxM = 16;

/// The path kAuto takes for `type` at `m` rows with the kernels of resolve_isa(isa)
/// (kAmx from amx_min_rows() rows for the types amx_supports() where the tiles are
/// usable, else kVnni from vnni_min_rows() rows for the types vnni_supports() where
/// AVX-512 VNNI is, else kGemv or kPanel). A call whose k is not a multiple of 64 does
/// not take kAmx but the path this would give without the AMX tiles; kVnni takes any k.
QMatmulPath qmatmul_auto_path(formats::GgmlType type, int64_t m, IsaLevel isa);

/// Shapes of one call. Strides in elements; 0 means dense (lda = k, ldc = n).
struct QMatmulParams {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldc = 0;
  const float* bias = nullptr;  ///< [n] or null
  QMatmulPath path = QMatmulPath::kAuto;
};

/// Caller-owned scratch memory (sized by qmatmul_scratch_bytes, any alignment). It holds
/// the quantized activation rows and, for the panel path, the packed f32 activations.
struct QMatmulScratch {
  void* data = nullptr;
  size_t bytes = 0;
};

/// True for the weight types dequant_matmul accepts: F32, F16, BF16, Q4_0, Q4_1, Q5_0,
/// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool qmatmul_supported(formats::GgmlType type);

/// The activation type llama.cpp converts x to before the dot products with `type`
/// weights: Q8_0 (Q4_0, Q5_0, Q8_0), Q8_1 (Q4_1, Q5_1), Q8_K (K-quants), F16 (F16),
/// BF16 (BF16), F32 (F32). For F16/BF16 weights this kernel keeps x in f32 (gemm).
formats::GgmlType qmatmul_vec_dot_type(formats::GgmlType type);

/// Quantizes one activation row of k floats to qmatmul_vec_dot_type(type) blocks at
/// `dst` (ggml_bytes_for(vec_dot_type, k) bytes), exactly as dequant_matmul does before
/// its dot products. `type` must be a quantized weight type and k a multiple of its block.
/// `isa` picks the code (every level gives the same bytes; Q8_K has vector versions).
void qmatmul_quantize_activation(formats::GgmlType type, const float* x, void* dst, int64_t k,
                                 IsaLevel isa = IsaLevel::kAmx);

/// Scratch bytes a call with these m and k needs on `path` (kAuto: the path it picks
/// with resolve_isa(isa); the GEMV path needs only the quantized rows); 0 for
/// F32/F16/BF16. Returns 0 as well for unsupported types or invalid k (dequant_matmul
/// reports those). A call with ctx.isa == isa and the same path fits in it.
size_t qmatmul_scratch_bytes(formats::GgmlType type, int64_t m, int64_t k, QMatmulPath path, IsaLevel isa);

/// y = x · Wᵀ + bias. `w_packed` holds n rows of k/block_size consecutive blocks
/// (ggml_bytes_for(type, k) bytes per row, 4-byte aligned). Uses ctx.pool and
/// resolve_isa(ctx.isa) (the AVX-512 integer path also needs AVX-512 VNNI; without it
/// the AVX2 loops run). Allocates nothing per call beyond the per-thread scratch.
/// Errors (kInvalidArgument / kUnsupported): unsupported type, negative sizes, k not a
/// multiple of the block size, lda < k, ldc < n, null operands, scratch too small.
[[nodiscard]] Status dequant_matmul(const KernelContext& ctx, const QMatmulParams& p, formats::GgmlType type,
                                    const float* x, const void* w_packed, float* y, QMatmulScratch scratch);

}  // namespace rlx::cpu
