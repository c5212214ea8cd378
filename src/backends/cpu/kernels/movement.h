// Data movement kernels, dtype-agnostic (element size in bytes): embedding row gather
// with bounds checks, concat along an axis, strided copy (narrow / views), general
// transpose (tiled fast path for 2-D swaps) and broadcast (expand) copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"
#include "rlx/base/status.h"

namespace rlx::cpu {

/// out[i, :] = table[ids[i], :] for rows of `row_bytes` bytes. An id outside
/// [0, n_rows) is an error naming its position and value (out is then unspecified).
Status gather_rows(const KernelContext& ctx, const void* table, int64_t n_rows, size_t row_bytes,
                   const int32_t* ids, int64_t n_ids, void* out);
Status gather_rows(const KernelContext& ctx, const void* table, int64_t n_rows, size_t row_bytes,
                   const int64_t* ids, int64_t n_ids, void* out);

/// Concatenates contiguous inputs along `axis`; all inputs share `dims` except along
/// axis, whose sizes are axis_sizes[i]. out is contiguous.
void concat(const KernelContext& ctx, const void* const* inputs, const int64_t* axis_sizes, int n_inputs,
            const Dims& dims, int axis, size_t elem_size, void* out);

/// Copies the strided view (shape `dims`, element strides `strides`, may be 0 or
/// negative) starting at `src` into contiguous `dst`.
void copy_strided(const KernelContext& ctx, const void* src, const Dims& dims, const int64_t* strides,
                  size_t elem_size, void* dst);

/// dst = src[..., start:start+length, ...] along `axis` (src contiguous with `dims`).
void narrow(const KernelContext& ctx, const void* src, const Dims& dims, int axis, int64_t start, int64_t length,
            size_t elem_size, void* dst);

/// dst = src permuted: dst dim i is src dim perm[i] (src contiguous with `dims`).
void transpose(const KernelContext& ctx, const void* src, const Dims& dims, const int* perm, size_t elem_size,
               void* dst);

/// Broadcast copy of contiguous src (shape `src_dims`) to contiguous dst (`dst_dims`),
/// numpy rules.
Status expand(const KernelContext& ctx, const void* src, const Dims& src_dims, const Dims& dst_dims,
              size_t elem_size, void* dst);

}  // namespace rlx::cpu
