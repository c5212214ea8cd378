// Internal to formats/: the scale searches ggml's quantizers share (quant_kquants.cpp)
// and the importance-weighted forms of the block quantizers behind
// quantize_row_weighted (quant.h). Null `qw` gives the reference quantizer, bit-exact
// with ggml's (the codebook i-quants: RLX's grid search, quant_iquant_encode.cpp); a
// non-null `qw` (n importance values, one per element of the row) fits every block's
// scales to minimise the error weighted by it.
#pragma once

#include <cstdint>

#include "rlx/formats/quant_blocks.h"

namespace rlx::formats::detail {

/// Round to nearest, ties to even, as ggml's nearest_int (|v| < 2^22).
int nearest_int(float v);
/// Symmetric fit of n values to scale * (L - nmax), L in [0, 2 nmax): 18 candidate scales
/// refined by least squares, weighted by x^2 (rmse_type 1) or by `qw` when given.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type, const float* qw);
/// Q3_K's symmetric fit by coordinate descent (unweighted).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);
/// Asymmetric fit x ~ scale * L - the_min, L in [0, nmax], over nstep + 1 candidate
/// scales, weighted least squares (absolute error when use_mad).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad);

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n, const float* qw);
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, const float* qw);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n, const float* qw);
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n, const float* qw);
void quantize_row_q2_k(const float* x, BlockQ2_K* y, int64_t n, const float* qw);
void quantize_row_q3_k(const float* x, BlockQ3_K* y, int64_t n, const float* qw);
void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n, const float* qw);
void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n, const float* qw);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n, const float* qw);
void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n, const float* qw);
void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n, const float* qw);
void quantize_row_iq3_s(const float* x, BlockIQ3_S* y, int64_t n, const float* qw);
void quantize_row_iq3_xxs(const float* x, BlockIQ3_XXS* y, int64_t n, const float* qw);
void quantize_row_iq2_s(const float* x, BlockIQ2_S* y, int64_t n, const float* qw);
void quantize_row_iq2_xs(const float* x, BlockIQ2_XS* y, int64_t n, const float* qw);
void quantize_row_iq2_xxs(const float* x, BlockIQ2_XXS* y, int64_t n, const float* qw);
void quantize_row_iq1_s(const float* x, BlockIQ1_S* y, int64_t n, const float* qw);
void quantize_row_iq1_m(const float* x, BlockIQ1_M* y, int64_t n, const float* qw);

}  // namespace rlx::formats::detail
