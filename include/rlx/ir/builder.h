// GraphBuilder: the ergonomic way to write graphs by hand. Every method returns a
// ValueId; the first error is remembered (and later calls become no-ops) so that
// model code reads like the math, and `build()` returns that error, naming the node.
//
//   GraphBuilder b;
//   auto x = b.input("x", DType::F32, {SEQ, 64});
//   auto w = b.param("w", DType::F32, {128, 64});
//   b.output(b.linear(x, w), "y");
//   Expected<Graph> g = b.build();
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx::ir {

class GraphBuilder {
 public:
  GraphBuilder() = default;

  // boundary
  ValueId input(const std::string& name, DType dt, Shape shape);
  ValueId param(const std::string& name, DType dt, Shape shape);
  ValueId handle(const std::string& name, DType dt, Shape shape);
  ValueId constant(DType dt, Shape shape, std::vector<uint8_t> bytes);
  ValueId scalar(float value);                       ///< f32[] constant
  ValueId constant_f32(Shape shape, const std::vector<float>& values);

  // elementwise
  ValueId activation(ActKind k, ValueId x);
  ValueId binary(BinaryKind k, ValueId a, ValueId b);
  ValueId add(ValueId a, ValueId b) { return binary(BinaryKind::Add, a, b); }
  ValueId sub(ValueId a, ValueId b) { return binary(BinaryKind::Sub, a, b); }
  ValueId mul(ValueId a, ValueId b) { return binary(BinaryKind::Mul, a, b); }
  ValueId div(ValueId a, ValueId b) { return binary(BinaryKind::Div, a, b); }
  ValueId compare(CompareKind k, ValueId a, ValueId b);
  ValueId where(ValueId cond, ValueId a, ValueId b);
  ValueId cast(ValueId x, DType to);

  // compute
  ValueId matmul(ValueId a, ValueId b, bool transpose_a = false, bool transpose_b = false);
  /// x[.., K] . W[N, K]^T (+ bias) then act; emits FusedMatMulBiasAct.
  ValueId linear(ValueId x, ValueId w, std::optional<ValueId> bias = std::nullopt, ActKind act = ActKind::Identity);
  ValueId dequant_matmul(ValueId x, ValueId packed_w);
  ValueId attention(ValueId q, ValueId k, ValueId v, const AttentionAttrs& a, std::optional<ValueId> q_pos = {});

  // reductions / norms
  ValueId reduce(ReduceKind k, ValueId x, std::vector<int64_t> axes, bool keep_dims = false);
  ValueId softmax(ValueId x, int64_t axis = -1);
  ValueId cumsum(ValueId x, int64_t axis = -1, bool exclusive = false);
  ValueId topk(ValueId x, int64_t k, bool values = false, bool finite_check = false);
  /// One token per row of logits[.., V] from the rows of params f32[.., kSampleParams]
  /// (draw, temperature, top_k, top_p, min_p; see kMaxSampleTopK in op.h).
  ValueId sample(ValueId logits, ValueId params);
  /// The sum of x over the `world` ranks of a tensor-parallel group (same shape).
  ValueId all_reduce(ValueId x, int64_t world);
  /// Every rank's x stacked: [world, *x.shape], rank r's at index r.
  ValueId all_gather(ValueId x, int64_t world);
  ValueId rms_norm(ValueId x, ValueId gamma, double eps);
  ValueId layer_norm(ValueId x, ValueId gamma, std::optional<ValueId> beta, double eps);
  ValueId rope(ValueId x, ValueId pos, const RopeAttrs& r);

  // movement
  ValueId reshape(ValueId x, Shape shape);
  ValueId transpose(ValueId x, std::vector<int64_t> perm);
  ValueId narrow(ValueId x, int64_t axis, int64_t start, Dim length);
  ValueId concat(const std::vector<ValueId>& xs, int64_t axis);
  ValueId expand(ValueId x, Shape shape);
  ValueId gather(ValueId table, ValueId indices, int64_t axis = 0);
  ValueId update_slice(ValueId handle, ValueId src, ValueId start, int64_t axis = 0);

  // mixture of experts (see MoeRouteAttrs / MoeFfnAttrs)
  /// Expert weights f32[T, E] of router logits[T, E]: zero except the k chosen per row.
  ValueId moe_route(ValueId logits, const MoeRouteAttrs& a);
  /// Sum over the routed experts of route[t, e] * down_e(act(gate_e(x)) * up_e(x)).
  ValueId moe_ffn(ValueId x, ValueId route, ValueId w_gate, ValueId w_up, ValueId w_down, ActKind act = ActKind::Silu);
  // recurrent state, updated in place (see CausalConvAttrs / DeltaRuleAttrs)
  ValueId causal_conv1d(ValueId state, ValueId x, ValueId w, ValueId seq, ActKind act = ActKind::Silu);
  ValueId gated_delta_rule(ValueId state, ValueId q, ValueId k, ValueId v, ValueId g, ValueId beta, ValueId seq,
                           const DeltaRuleAttrs& attrs);

  // spatial ops over NCL / NCHW tensors (see ConvAttrs, GroupNormAttrs, InterpolateAttrs)
  /// conv1d / conv2d of x[N, C, *S] with w[O, C/groups, *K] (+ bias[O]).
  ValueId conv(ValueId x, ValueId w, std::optional<ValueId> bias, const ConvAttrs& a);
  /// Transposed conv1d / conv2d of x[N, C, *S] with w[C, O/groups, *K] (+ bias[O]).
  ValueId conv_transpose(ValueId x, ValueId w, std::optional<ValueId> bias, const ConvTransposeAttrs& a);
  /// Group norm of x[N, C, *S] with gamma[C] (and beta[C]).
  ValueId group_norm(ValueId x, ValueId gamma, std::optional<ValueId> beta, int64_t groups, double eps);
  /// x[N, C, H, W] resampled to [N, C, size[0], size[1]].
  ValueId interpolate(ValueId x, const InterpolateAttrs& a);
  /// x[B, H, W, C] cut into zero-padded window x window tiles (see WindowAttrs).
  ValueId window_partition(ValueId x, int64_t window);
  /// Windows [B*nh*nw, window, window, C] put back into [B, height, width, C].
  ValueId window_unpartition(ValueId x, int64_t window, int64_t height, int64_t width);
  /// Attention over a token grid with SAM's decomposed relative-position bias.
  ValueId rel_pos_attention(ValueId q, ValueId k, ValueId v, ValueId rel_h, ValueId rel_w,
                            const RelPosAttentionAttrs& a);

  /// Any op with explicit attrs (fused, HIR, custom ...).
  ValueId op(OpKind k, std::vector<ValueId> inputs, Attrs attrs, const TensorType& declared = {});

  void output(ValueId v, std::string name = {});
  /// Label for the next node added (shows in errors and reports).
  GraphBuilder& label(std::string l) {
    next_label_ = std::move(l);
    return *this;
  }

  TensorType type(ValueId v) const { return graph_.node(v).type(); }
  bool ok() const { return !error_.has_value(); }
  const std::optional<Error>& error() const { return error_; }
  Graph& graph() { return graph_; }

  /// The graph, verified; or the first error.
  Expected<Graph> build();

 private:
  ValueId add(OpKind k, std::vector<ValueId> inputs, Attrs attrs, const TensorType& declared = {});
  Graph graph_;
  std::optional<Error> error_;
  std::string next_label_;
};

}  // namespace rlx::ir
