// Elementwise kernels: unary activations/math, binary ops and comparisons with numpy
// broadcasting (fast paths for same-shape, row and scalar broadcast), where, and
// dtype casts between f32/f16/bf16/f64/i32/i64/i8/u8/bool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"
#include "rlx/base/status.h"

namespace rlx::cpu {

/// Element types the cast kernel understands (bool is one byte, 0 or 1).
enum class ElemType : uint8_t { kF32, kF16, kBF16, kF64, kI32, kI64, kI8, kU8, kBool };

/// Bytes per element.
size_t elem_size(ElemType t);

/// y[i] = op(x[i]) for n contiguous floats; y may equal x. exp/tanh/sigmoid/silu/gelu
/// use the vector approximations documented in isa_impl.inc (max errors there);
/// log/sin/cos and pow use the C library.
void unary_f32(const KernelContext& ctx, UnaryOp op, const float* x, float* y, int64_t n);

/// The UnaryOp for an epilogue Activation.
UnaryOp activation_op(Activation act);

/// Numpy broadcast of two shapes (right-aligned; 1 stretches). Error names both shapes.
Status broadcast_dims(const Dims& a, const Dims& b, Dims* out);

/// Element strides of a contiguous tensor of shape `in` read as shape `out` under
/// numpy broadcasting (0 along stretched or missing dims). `in` must broadcast to `out`.
void broadcast_strides(const Dims& in, const Dims& out, int64_t* strides);

/// y = a op b with broadcasting; y is contiguous with the broadcast shape.
Status binary_f32(const KernelContext& ctx, BinaryOp op, const float* a, const Dims& a_dims, const float* b,
                  const Dims& b_dims, float* y);

/// General strided form: out_dims is y's (contiguous) shape; a_strides/b_strides give,
/// per output dim, the operand's element stride (0 = broadcast). Views need no copy.
void binary_f32_strided(const KernelContext& ctx, BinaryOp op, const Dims& out_dims, const float* a,
                        const int64_t* a_strides, const float* b, const int64_t* b_strides, float* y);

/// y = (a op b) ? 1 : 0 as uint8, with broadcasting.
Status compare_f32(const KernelContext& ctx, CompareOp op, const float* a, const Dims& a_dims, const float* b,
                   const Dims& b_dims, uint8_t* y);

/// y = cond ? a : b (cond uint8, nonzero = true), all three broadcast together.
Status where_f32(const KernelContext& ctx, const uint8_t* cond, const Dims& cond_dims, const float* a,
                 const Dims& a_dims, const float* b, const Dims& b_dims, float* y);

/// Converts n elements. Float to integer truncates toward zero and saturates at the
/// integer range (NaN -> 0); anything to bool is (x != 0); f32 -> f16/bf16 rounds to
/// nearest even. Same type is a copy. x and y must not overlap unless identical.
void cast(const KernelContext& ctx, const void* x, ElemType from, void* y, ElemType to, int64_t n);

/// y = x rounded to `half` (kF16 or kBF16, nearest even, NaN kept) and back to f32, as
/// cast to that type and back would give; y may be x. What the reference engines do
/// to activations before a dot product with f16 / bf16 weights.
void round_to_half(const KernelContext& ctx, const float* x, float* y, int64_t n, ElemType half);

}  // namespace rlx::cpu
