// Block codecs for GGML tensor types: dequantize packed rows to f32 and quantize f32
// rows to packed blocks -- bit-exact with ggml's reference (quantize_row_*_ref,
// dequantize_row_*) including the K-quant scale searches, except the codebook i-quants
// below 4 bits, which ggml quantizes only with an importance matrix and RLX by its own
// exact grid search; importance-weighted forms of the quantizers; and the Q8_0 / Q8_K
// activation quantizers llama.cpp's CPU vec_dot paths use.
#pragma once

#include <cstdint>

#include "rlx/base/status.h"
#include "rlx/formats/ggml_type.h"
#include "rlx/formats/quant_blocks.h"

namespace rlx::formats {

/// Types dequantize_row accepts: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K,
/// Q8_K, the i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL,
/// IQ4_XS) and the ternary TQ1_0, TQ2_0.
bool can_dequantize(GgmlType type);
/// Types quantize_row accepts: every type of can_dequantize. The codebook i-quants below
/// 4 bits (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_S, IQ1_M) search their grids
/// exactly (quant_iquant_encode.cpp): slow (thousands of operations a value) and, as with
/// ggml, far better with an importance (quantize_row_weighted).
bool can_quantize(GgmlType type);

/// Decodes `n` elements of packed `type` data at `src` into `dst` (n floats).
/// Errors: kUnsupported for a type without a decoder, kInvalidArgument when `n` is
/// negative or not a multiple of the type's block size. Reads ggml_bytes_for(type, n) bytes;
/// `src` must be aligned for the block struct (4 bytes covers all; GGUF data is 32-aligned).
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
/// Encodes `n` floats into packed `type` blocks at `dst` (ggml_bytes_for(type, n) bytes)
/// with ggml's reference quantizer for that type (the codebook i-quants below 4 bits:
/// RLX's grid search, see can_quantize). Errors as dequantize_row.
Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n);
/// Types whose quantizer takes an importance vector (quantize_row_weighted): Q4_0, Q4_1,
/// Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and every i-quant. Q8_0 and the ternary types
/// do not (as in ggml).
bool takes_importance(GgmlType type);
/// As quantize_row, but every block's scales (and minimum) are fitted to minimise the
/// error weighted per element by importance[i] * sqrt(sigma^2 + x[i]^2) (sigma^2 the
/// mean square of the row (32-value types), or twice that of the 256-value super-block
/// (K-quants, i-quants)), the weighting ggml's quantizers give an importance matrix:
/// `importance` holds n values >= 0, e.g. an imatrix's mean x^2 per input column repeated
/// for each row. Null `importance`, or a type that takes none: quantize_row exactly.
/// Errors as quantize_row, and kInvalidArgument for a negative or non-finite importance.
Status quantize_row_weighted(GgmlType type, const float* src, void* dst, int64_t n, const float* importance);

// Per-type entry points (n must be a multiple of the block size; no checks).
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_q8_k(const BlockQ8_K* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n);
void dequantize_row_tq1_0(const BlockTQ1_0* x, float* y, int64_t n);
void dequantize_row_tq2_0(const BlockTQ2_0* x, float* y, int64_t n);
void dequantize_row_iq2_xxs(const BlockIQ2_XXS* x, float* y, int64_t n);
void dequantize_row_iq2_xs(const BlockIQ2_XS* x, float* y, int64_t n);
void dequantize_row_iq2_s(const BlockIQ2_S* x, float* y, int64_t n);
void dequantize_row_iq3_xxs(const BlockIQ3_XXS* x, float* y, int64_t n);
void dequantize_row_iq3_s(const BlockIQ3_S* x, float* y, int64_t n);
void dequantize_row_iq1_s(const BlockIQ1_S* x, float* y, int64_t n);
void dequantize_row_iq1_m(const BlockIQ1_M* x, float* y, int64_t n);

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n);
/// Reference Q8_0 (weights): d = amax/127, q = round-half-away(x * (1/d)), d stored as f16.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q2_k(const float* x, BlockQ2_K* y, int64_t n);
void quantize_row_q3_k(const float* x, BlockQ3_K* y, int64_t n);
void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);
/// Q8_K (reference = activation quantizer): max = signed value of the largest |x|,
/// iscale = -127/max, q = min(127, nearest_int(iscale*x)), d = 1/iscale (f32), bsums of 16.
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n);
/// IQ4_NL / IQ4_XS as ggml's reference without an importance matrix: per 32 values the
/// scale (of 15 trials around amax / 127) that best fits x with weights x², over the 16
/// non-linear levels; IQ4_XS then stores 6-bit scales relative to one f16 scale.
void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n);
/// Ternary: d = amax of the 256 values, t = round(x / d) + 1.
void quantize_row_tq1_0(const float* x, BlockTQ1_0* y, int64_t n);
void quantize_row_tq2_0(const float* x, BlockTQ2_0* y, int64_t n);

/// Activation rows for Q8_0 dot products as llama.cpp's x86 CPU path makes them:
/// d = f16(amax/127), q = round-half-even(x * (127/amax)). n is a multiple of 32.
void quantize_activation_q8_0(const float* x, BlockQ8_0* y, int64_t n);
/// Activation rows for K-quant dot products (identical to quantize_row_q8_k). n % 256 == 0.
inline void quantize_activation_q8_k(const float* x, BlockQ8_K* y, int64_t n) { quantize_row_q8_k(x, y, n); }

}  // namespace rlx::formats
