// Row normalisations over the last axis: RMSNorm, LayerNorm (optional bias), and the
// fused residual forms that write both the sum x + r and its normalised value.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu {

/// y = x / sqrt(mean(x^2) + eps) * w for each of `rows` rows of n floats (w may be
/// null = ones). y may equal x.
void rms_norm_f32(const KernelContext& ctx, const float* x, const float* w, float* y, int64_t rows, int64_t n,
                  float eps);

/// y = (x - mean) / sqrt(var + eps) * gamma + beta (biased variance; gamma/beta may be
/// null = ones/zeros). y may equal x.
void layer_norm_f32(const KernelContext& ctx, const float* x, const float* gamma, const float* beta, float* y,
                    int64_t rows, int64_t n, float eps);

/// sum = x + residual; y = rms_norm(sum) * w. `sum` may equal x or residual; y may
/// equal sum.
void add_rms_norm_f32(const KernelContext& ctx, const float* x, const float* residual, float* sum,
                      const float* w, float* y, int64_t rows, int64_t n, float eps);

/// sum = x + residual; y = layer_norm(sum) * gamma + beta.
void add_layer_norm_f32(const KernelContext& ctx, const float* x, const float* residual, float* sum,
                        const float* gamma, const float* beta, float* y, int64_t rows, int64_t n, float eps);

}  // namespace rlx::cpu
