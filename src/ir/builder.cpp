// GraphBuilder: sticky-error convenience layer over Graph::add.
#include "rlx/ir/builder.h"

#include <cstring>

namespace rlx::ir {

ValueId GraphBuilder::add(OpKind k, std::vector<ValueId> inputs, Attrs attrs, const TensorType& declared) {
  std::string label = std::move(next_label_);
  next_label_.clear();
  if (error_) return kNoValue;
  for (ValueId v : inputs) {
    if (v == kNoValue) {
      error_ = Error::invalid_argument("{}{}: an input is missing", op_name(k), label.empty() ? "" : " '" + label + "'");
      return kNoValue;
    }
  }
  auto id = graph_.add(k, std::move(inputs), std::move(attrs), declared, std::move(label));
  if (!id) {
    error_ = id.error();
    return kNoValue;
  }
  return *id;
}

ValueId GraphBuilder::input(const std::string& name, DType dt, Shape shape) {
  return add(OpKind::Input, {}, InputAttrs{name}, {dt, std::move(shape)});
}
ValueId GraphBuilder::param(const std::string& name, DType dt, Shape shape) {
  return add(OpKind::Param, {}, ParamAttrs{name}, {dt, std::move(shape)});
}
ValueId GraphBuilder::handle(const std::string& name, DType dt, Shape shape) {
  return add(OpKind::Handle, {}, HandleAttrs{name}, {dt, std::move(shape)});
}
ValueId GraphBuilder::constant(DType dt, Shape shape, std::vector<uint8_t> bytes) {
  ConstantAttrs c;
  c.data.bytes = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  return add(OpKind::Constant, {}, std::move(c), {dt, std::move(shape)});
}
ValueId GraphBuilder::constant_f32(Shape shape, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return constant(DType::F32, std::move(shape), std::move(bytes));
}
ValueId GraphBuilder::scalar(float value) { return constant_f32(Shape{}, {value}); }

ValueId GraphBuilder::activation(ActKind k, ValueId x) { return add(OpKind::Activation, {x}, ActivationAttrs{k}); }
ValueId GraphBuilder::binary(BinaryKind k, ValueId a, ValueId b) { return add(OpKind::Binary, {a, b}, BinaryAttrs{k}); }
ValueId GraphBuilder::compare(CompareKind k, ValueId a, ValueId b) {
  return add(OpKind::Compare, {a, b}, CompareAttrs{k});
}
ValueId GraphBuilder::where(ValueId c, ValueId a, ValueId b) { return add(OpKind::Where, {c, a, b}, NoAttrs{}); }
ValueId GraphBuilder::cast(ValueId x, DType to) { return add(OpKind::Cast, {x}, NoAttrs{}, {to, {}}); }

ValueId GraphBuilder::matmul(ValueId a, ValueId b, bool ta, bool tb) {
  return add(OpKind::MatMul, {a, b}, MatMulAttrs{ta, tb});
}
ValueId GraphBuilder::linear(ValueId x, ValueId w, std::optional<ValueId> bias, ActKind act) {
  std::vector<ValueId> in{x, w};
  if (bias) in.push_back(*bias);
  return add(OpKind::FusedMatMulBiasAct, std::move(in), FusedMatMulAttrs{act, bias.has_value(), true});
}
ValueId GraphBuilder::dequant_matmul(ValueId x, ValueId w) { return add(OpKind::DequantMatMul, {x, w}, NoAttrs{}); }
ValueId GraphBuilder::attention(ValueId q, ValueId k, ValueId v, const AttentionAttrs& a, std::optional<ValueId> pos) {
  std::vector<ValueId> in{q, k, v};
  if (pos) in.push_back(*pos);
  return add(OpKind::Attention, std::move(in), a);
}

ValueId GraphBuilder::reduce(ReduceKind k, ValueId x, std::vector<int64_t> axes, bool keep) {
  return add(OpKind::Reduce, {x}, ReduceAttrs{k, std::move(axes), keep});
}
ValueId GraphBuilder::softmax(ValueId x, int64_t axis) { return add(OpKind::Softmax, {x}, SoftmaxAttrs{axis}); }
ValueId GraphBuilder::cumsum(ValueId x, int64_t axis, bool exclusive) {
  return add(OpKind::Cumsum, {x}, CumsumAttrs{axis, exclusive});
}
ValueId GraphBuilder::moe_route(ValueId logits, const MoeRouteAttrs& a) { return add(OpKind::MoeRoute, {logits}, a); }
ValueId GraphBuilder::moe_ffn(ValueId x, ValueId route, ValueId w_gate, ValueId w_up, ValueId w_down, ActKind act) {
  return add(OpKind::MoeFfn, {x, route, w_gate, w_up, w_down}, MoeFfnAttrs{act});
}

ValueId GraphBuilder::causal_conv1d(ValueId state, ValueId x, ValueId w, ValueId seq, ActKind act) {
  return add(OpKind::CausalConv1d, {state, x, w, seq}, CausalConvAttrs{act});
}

ValueId GraphBuilder::gated_delta_rule(ValueId state, ValueId q, ValueId k, ValueId v, ValueId g, ValueId beta,
                                       ValueId seq, const DeltaRuleAttrs& attrs) {
  return add(OpKind::GatedDeltaRule, {state, q, k, v, g, beta, seq}, attrs);
}
ValueId GraphBuilder::topk(ValueId x, int64_t k, bool values, bool finite_check) {
  return add(OpKind::TopK, {x}, TopKAttrs{k, values, finite_check});
}
ValueId GraphBuilder::sample(ValueId logits, ValueId params) { return add(OpKind::Sample, {logits, params}, NoAttrs{}); }
ValueId GraphBuilder::all_reduce(ValueId x, int64_t world) { return add(OpKind::AllReduce, {x}, CollectiveAttrs{world}); }
ValueId GraphBuilder::all_gather(ValueId x, int64_t world) { return add(OpKind::AllGather, {x}, CollectiveAttrs{world}); }
ValueId GraphBuilder::rms_norm(ValueId x, ValueId g, double eps) { return add(OpKind::RmsNorm, {x, g}, NormAttrs{eps}); }
ValueId GraphBuilder::layer_norm(ValueId x, ValueId g, std::optional<ValueId> beta, double eps) {
  std::vector<ValueId> in{x, g};
  if (beta) in.push_back(*beta);
  return add(OpKind::LayerNorm, std::move(in), NormAttrs{eps});
}
ValueId GraphBuilder::rope(ValueId x, ValueId pos, const RopeAttrs& r) { return add(OpKind::Rope, {x, pos}, r); }

ValueId GraphBuilder::reshape(ValueId x, Shape s) { return add(OpKind::Reshape, {x}, ShapeAttrs{std::move(s)}); }
ValueId GraphBuilder::transpose(ValueId x, std::vector<int64_t> perm) {
  return add(OpKind::Transpose, {x}, TransposeAttrs{std::move(perm)});
}
ValueId GraphBuilder::narrow(ValueId x, int64_t axis, int64_t start, Dim length) {
  return add(OpKind::Narrow, {x}, NarrowAttrs{axis, start, length});
}
ValueId GraphBuilder::concat(const std::vector<ValueId>& xs, int64_t axis) {
  return add(OpKind::Concat, xs, AxisAttrs{axis});
}
ValueId GraphBuilder::expand(ValueId x, Shape s) { return add(OpKind::Expand, {x}, ShapeAttrs{std::move(s)}); }
ValueId GraphBuilder::gather(ValueId t, ValueId i, int64_t axis) { return add(OpKind::Gather, {t, i}, AxisAttrs{axis}); }
ValueId GraphBuilder::update_slice(ValueId h, ValueId src, ValueId start, int64_t axis) {
  return add(OpKind::UpdateSlice, {h, src, start}, AxisAttrs{axis});
}
ValueId GraphBuilder::conv(ValueId x, ValueId w, std::optional<ValueId> bias, const ConvAttrs& a) {
  std::vector<ValueId> in{x, w};
  if (bias) in.push_back(*bias);
  return add(OpKind::Conv, std::move(in), a);
}
ValueId GraphBuilder::conv_transpose(ValueId x, ValueId w, std::optional<ValueId> bias, const ConvTransposeAttrs& a) {
  std::vector<ValueId> in{x, w};
  if (bias) in.push_back(*bias);
  return add(OpKind::ConvTranspose, std::move(in), a);
}
ValueId GraphBuilder::group_norm(ValueId x, ValueId gamma, std::optional<ValueId> beta, int64_t groups, double eps) {
  std::vector<ValueId> in{x, gamma};
  if (beta) in.push_back(*beta);
  return add(OpKind::GroupNorm, std::move(in), GroupNormAttrs{groups, eps});
}
ValueId GraphBuilder::interpolate(ValueId x, const InterpolateAttrs& a) { return add(OpKind::Interpolate, {x}, a); }
ValueId GraphBuilder::window_partition(ValueId x, int64_t window) {
  return add(OpKind::WindowPartition, {x}, WindowAttrs{window, 0, 0});
}
ValueId GraphBuilder::window_unpartition(ValueId x, int64_t window, int64_t height, int64_t width) {
  return add(OpKind::WindowUnpartition, {x}, WindowAttrs{window, height, width});
}
ValueId GraphBuilder::rel_pos_attention(ValueId q, ValueId k, ValueId v, ValueId rel_h, ValueId rel_w,
                                        const RelPosAttentionAttrs& a) {
  return add(OpKind::RelPosAttention, {q, k, v, rel_h, rel_w}, a);
}
ValueId GraphBuilder::op(OpKind k, std::vector<ValueId> inputs, Attrs attrs, const TensorType& declared) {
  return add(k, std::move(inputs), std::move(attrs), declared);
}

void GraphBuilder::output(ValueId v, std::string name) {
  if (error_) return;
  if (v == kNoValue) {
    error_ = Error::invalid_argument("output '{}' has no value", name);
    return;
  }
  graph_.add_output(v, std::move(name));
}

Expected<Graph> GraphBuilder::build() {
  if (error_) return *error_;
  TRY(verify(graph_, /*allow_hir=*/true));
  return std::move(graph_);
}

}  // namespace rlx::ir
