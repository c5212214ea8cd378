// Reductions (sum, mean, max, min) over any set of axes, softmax along the last or any
// axis, cumulative sum, and top-k along the last axis.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"
#include "rlx/base/status.h"

namespace rlx::cpu {

/// y = reduce(x) over the axes set in `axes_mask` (bit i = axis i of `dims`). y is
/// contiguous with the reduced axes of size 1 (keepdim layout, same as dropping them).
/// x is contiguous, or (`x_strides`, elements per step of each axis) any layout, e.g.
/// the first rows of a longer axis. Accumulates in f32; mean divides by the number of
/// reduced elements (an empty reduction gives 0 for sum, NaN for mean, -inf/+inf for
/// max/min).
void reduce_f32(const KernelContext& ctx, ReduceOp op, const float* x, const Dims& dims, uint32_t axes_mask,
                float* y, const int64_t* x_strides = nullptr);

/// Softmax of each of `rows` contiguous rows of length n (y may equal x). A row that is
/// all -inf gives zeros.
void softmax_f32(const KernelContext& ctx, const float* x, float* y, int64_t rows, int64_t n);

/// Softmax along `axis` of a contiguous tensor.
void softmax_axis_f32(const KernelContext& ctx, const float* x, float* y, const Dims& dims, int axis);

/// Inclusive cumulative sum along `axis` (exclusive: shifted by one, starting at 0;
/// reverse: from the end). f32 accumulation.
void cumsum_f32(const KernelContext& ctx, const float* x, float* y, const Dims& dims, int axis,
                bool exclusive = false, bool reverse = false);

/// The k largest entries of each row (last axis, length n): values[rows, k] and
/// indices[rows, k] (int32), sorted descending; ties go to the lower index; NaN counts
/// as larger than any number. Error if k > n.
Status topk_f32(const KernelContext& ctx, const float* x, int64_t rows, int64_t n, int64_t k, float* values,
                int32_t* indices);

}  // namespace rlx::cpu
