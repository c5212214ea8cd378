// Internal: emitters shared by lowering (Fusable policy), legalization and the fusion
// passes' recognizers, so that one primitive form of each fused op exists. Also typed
// constant encoding/decoding (never reads a constant as f32 blindly).
#pragma once

#include <optional>
#include <vector>

#include "rlx/ir/builder.h"

namespace rlx::compile::detail {

/// Bytes of one element of `dt` holding `v` (float types round to nearest even; ints
/// truncate toward zero; bool is v != 0). `dt` must be a scalar (non-packed) type.
std::vector<uint8_t> encode_scalar(ir::DType dt, double v);
/// Element `i` of a constant payload of dtype `dt` as a double (exact for every scalar
/// dtype except i64 beyond 2^53).
double decode_element(ir::DType dt, const uint8_t* bytes, int64_t i);
/// Rank-0 constant of `dt` holding `v`.
ir::ValueId emit_scalar(ir::GraphBuilder& b, ir::DType dt, double v);
/// The value of a constant whose elements are all equal (any shape), else nullopt.
std::optional<double> uniform_constant(const ir::Graph& g, ir::ValueId v);

/// act(x . W (+ bias)) as MatMul (+ Binary add) (+ Activation). Rank-1 x is reshaped to
/// [1, K] and back; a weight of another float dtype is cast to x's dtype first.
ir::ValueId emit_linear_primitives(ir::GraphBuilder& b, ir::ValueId x, ir::ValueId w, std::optional<ir::ValueId> bias,
                                   ir::ActKind act, bool transpose_b);
/// silu(x . Wg) * (x . Wu) as two MatMuls, an Activation and a Binary mul.
ir::ValueId emit_swiglu_primitives(ir::GraphBuilder& b, ir::ValueId x, ir::ValueId wg, ir::ValueId wu, bool transpose_b);
/// Attention as primitives (see emit.cpp for the exact form fuse_attention recognizes;
/// it does not recognize the local mask or kv_len, which only legalization emits).
ir::ValueId emit_attention_primitives(ir::GraphBuilder& b, ir::ValueId q, ir::ValueId k, ir::ValueId v,
                                      const ir::AttentionAttrs& a, std::optional<ir::ValueId> q_pos,
                                      std::optional<ir::ValueId> kv_len = std::nullopt);
/// Rope as primitives (see emit.cpp for the exact form): cos/sin of the angles from an
/// f32 frequency table, the half-split or pairwise rotation by narrows, muls and a concat.
ir::ValueId emit_rope_primitives(ir::GraphBuilder& b, ir::ValueId x, ir::ValueId pos, const ir::RopeAttrs& r);
/// The effective attention scale (attrs.scale, or 1/sqrt(head_dim) when 0).
double attention_scale(const ir::AttentionAttrs& a);

}  // namespace rlx::compile::detail
