// CPU step for Custom ops (kernels looked up by name in the runtime's CPU custom-kernel
// registry at compile time) and the CPU kernel table: the one list of op kinds the CPU
// executor runs, from which CpuBackend::supported_ops() is derived.
#include "backends/cpu/cpu_step.h"
#include "rlx/runtime/custom_kernels.h"

namespace rlx::cpu_backend {
namespace {

constexpr size_t kMaxCustomInputs = 16;

struct CustomParams {
  std::shared_ptr<const CpuCustomKernel> kernel;
  std::vector<std::vector<int64_t>> in_shapes;
  std::vector<ir::DType> in_dtypes;
  std::vector<int64_t> out_shape;
  ir::DType out_dtype = ir::DType::F32;
  std::string config;
  std::string what;
};

Status custom_fn(const Step& s, const StepCtx&) {
  const CustomParams& p = s.p<CustomParams>();
  TensorView views[kMaxCustomInputs];
  for (size_t i = 0; i < p.in_shapes.size(); ++i) views[i] = TensorView{p.in_dtypes[i], p.in_shapes[i], s.in_ptr[i]};
  CpuCustomCall call;
  call.inputs = std::span<const TensorView>(views, p.in_shapes.size());
  call.out_dtype = p.out_dtype;
  call.out_shape = p.out_shape;
  call.out = s.out_ptr;
  call.config = p.config;
  Status st = (*p.kernel)(call);
  if (!st.ok()) return st.error().with_context(p.what);
  return {};
}

}  // namespace

Status build_custom(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& c = n.attr<ir::CustomAttrs>();
  auto kernel = find_cpu_custom_kernel(c.name);
  if (!kernel) return Error::unsupported("no CPU kernel registered for custom op '{}' ({})", c.name, ctx.graph->describe(ctx.id));
  if (n.inputs.size() > kMaxCustomInputs) return step_error(ctx, "more than {} inputs", kMaxCustomInputs);
  auto p = std::make_shared<CustomParams>();
  p->kernel = std::move(kernel);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    p->in_shapes.push_back(ctx.input(i).shape.static_dims());
    p->in_dtypes.push_back(ctx.input(i).dtype);
  }
  p->out_shape = n.shape.static_dims();
  p->out_dtype = n.dtype;
  p->config = c.config;
  p->what = ctx.graph->describe(ctx.id);
  step.fn = &custom_fn;
  step.params = p;
  step.extent_ok = ctx.bucket(ctx.id) == -1;  // a custom kernel always sees full shapes
  return {};
}

bool BuildCtx::outer_is_bucket(ir::ValueId v, int64_t inner_from) const {
  const int b = bucket(v);
  if (b < 0 || b >= inner_from) return false;
  const ir::Shape& s = graph->node(v).shape;
  for (int64_t i = 0; i < b; ++i)
    if (!(s[i] == ir::Dim(1))) return false;
  return true;
}

const std::vector<KernelEntry>& cpu_kernel_table() {
  using ir::OpKind;
  static const std::vector<KernelEntry> table = {
      {OpKind::Input, &build_boundary},
      {OpKind::Param, &build_boundary},
      {OpKind::Constant, &build_boundary},
      {OpKind::Handle, &build_boundary},
      {OpKind::Activation, &build_activation},
      {OpKind::Binary, &build_binary},
      {OpKind::Compare, &build_compare},
      {OpKind::Where, &build_where},
      {OpKind::Cast, &build_cast},
      {OpKind::MatMul, &build_matmul},
      {OpKind::DequantMatMul, &build_dequant_matmul},
      {OpKind::Reduce, &build_reduce},
      {OpKind::Softmax, &build_softmax},
      {OpKind::Cumsum, &build_cumsum},
      {OpKind::TopK, &build_topk},
      {OpKind::Sample, &build_sample},
      {OpKind::LayerNorm, &build_layer_norm},
      {OpKind::RmsNorm, &build_rms_norm},
      {OpKind::Rope, &build_rope},
      {OpKind::Attention, &build_attention},
      {OpKind::Reshape, &build_copy},
      {OpKind::Transpose, &build_transpose},
      {OpKind::Narrow, &build_narrow},
      {OpKind::Concat, &build_concat},
      {OpKind::Expand, &build_expand},
      {OpKind::Gather, &build_gather},
      {OpKind::UpdateSlice, &build_update_slice},
      {OpKind::FusedMatMulBiasAct, &build_fused_matmul},
      {OpKind::FusedSwiGLU, &build_fused_swiglu},
      {OpKind::FusedResidualRmsNorm, &build_fused_residual_norm},
      {OpKind::FusedResidualLayerNorm, &build_fused_residual_norm},
      {OpKind::ElementwiseRegion, &build_region},
      {OpKind::MoeRoute, &build_moe_route},
      {OpKind::MoeFfn, &build_moe_ffn},
      {OpKind::CausalConv1d, &build_causal_conv1d},
      {OpKind::GatedDeltaRule, &build_gated_delta_rule},
      {OpKind::Conv, &build_conv},
      {OpKind::ConvTranspose, &build_conv_transpose},
      {OpKind::GroupNorm, &build_group_norm},
      {OpKind::Interpolate, &build_interpolate},
      {OpKind::WindowPartition, &build_window_partition},
      {OpKind::WindowUnpartition, &build_window_partition},
      {OpKind::RelPosAttention, &build_rel_pos_attention},
      {OpKind::Custom, &build_custom},
      {OpKind::AllReduce, &build_all_reduce},
      {OpKind::AllGather, &build_all_gather},
  };
  return table;
}

}  // namespace rlx::cpu_backend
