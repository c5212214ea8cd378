// CUDA steps of the recurrent-state ops (ir::updates_state): CausalConv1d and
// GatedDeltaRule, whose kernels (kernels_recurrent.cu) update the state handle — input
// 0 — in place. The seq input says which rows are real, so the steps run whole shapes
// under an active extent too; a bad seq entry sets the executable's error word, which
// the run reports naming the step.
#include <cmath>

#include "backends/cuda/cuda_steps_shared.h"

namespace rlx::cuda_backend {
namespace {

struct ConvStepParams {
  CausalConvParams k;
};

Status conv_fn(const Step& s, const RunCtx& ctx) {
  CausalConvParams k = s.p<ConvStepParams>().k;
  k.state = reinterpret_cast<float*>(const_cast<uint8_t*>(s.in_ptr[0]));  // the handle, written in place by design
  k.x = reinterpret_cast<const float*>(s.in_ptr[1]);
  k.w = reinterpret_cast<const float*>(s.in_ptr[2]);
  k.seq = reinterpret_cast<const int32_t*>(s.in_ptr[3]);
  k.y = reinterpret_cast<float*>(s.out_ptr);
  k.err = ctx.err;
  k.err_code = s.index + 1;
  launch_causal_conv1d(k, ctx.stream);
  return {};
}

struct DeltaStepParams {
  DeltaRuleParams k;
  int64_t work_off = 0;  // scratch: the chunked form's workspace
};

Status delta_fn(const Step& s, const RunCtx& ctx) {
  const DeltaStepParams& sp = s.p<DeltaStepParams>();
  DeltaRuleParams k = sp.k;
  if (k.chunk > 0) k.work = reinterpret_cast<float*>(ctx.scratch + sp.work_off);
  k.state = reinterpret_cast<float*>(const_cast<uint8_t*>(s.in_ptr[0]));  // the handle, written in place by design
  k.q = reinterpret_cast<const float*>(s.in_ptr[1]);
  k.k = reinterpret_cast<const float*>(s.in_ptr[2]);
  k.v = reinterpret_cast<const float*>(s.in_ptr[3]);
  k.g = reinterpret_cast<const float*>(s.in_ptr[4]);
  k.beta = reinterpret_cast<const float*>(s.in_ptr[5]);
  k.seq = reinterpret_cast<const int32_t*>(s.in_ptr[6]);
  k.out = reinterpret_cast<float*>(s.out_ptr);
  k.err = ctx.err;
  k.err_code = s.index + 1;
  launch_gated_delta_rule(k, ctx.stream);
  return {};
}

}  // namespace

Status build_causal_conv1d(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto sd = ctx.input(0).shape.static_dims();
  auto p = std::make_shared<ConvStepParams>();
  p->k.batch = sd[0];
  p->k.kernel = sd[1] + 1;
  p->k.chans = sd[2];
  p->k.rows = ctx.input(1).shape.static_dims()[0] / p->k.batch;
  p->k.silu = n.attr<ir::CausalConvAttrs>().act == ir::ActKind::Silu;
  if (p->k.batch > 65535) return step_error(ctx, "{} sequences (at most 65535)", p->k.batch);
  step.fn = &conv_fn;
  step.params = p;
  return {};
}

Status build_gated_delta_rule(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::DeltaRuleAttrs>();
  const auto sd = ctx.input(0).shape.static_dims();
  auto p = std::make_shared<DeltaStepParams>();
  DeltaRuleParams& k = p->k;
  k.batch = sd[0];
  k.hv = sd[1];
  k.dk = a.head_k_dim;
  k.dv = a.head_v_dim;
  k.hk = ctx.input(1).shape.static_dims()[1] / k.dk;
  k.rows = ctx.input(1).shape.static_dims()[0] / k.batch;
  k.l2norm = a.l2norm_qk;
  k.scale = static_cast<float>(a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(k.dk)));
  if (k.dv > 1024) return step_error(ctx, "value head dim {} (at most 1024)", k.dv);
  if (k.dk > 4096) return step_error(ctx, "key head dim {} (at most 4096)", k.dk);
  if (k.batch * k.hv > (int64_t{1} << 31) - 1) return step_error(ctx, "{} sequence heads", k.batch * k.hv);
  // Several rows run chunk by chunk when the op asks for it and the chunk's shared memory
  // fits the device; one row (decode), or a key head too large, runs token by token.
  if (a.chunk > 0 && k.rows > 1) k.chunk = prepare_gated_delta_chunked(a.chunk, k.dk);
  if (k.chunk > 0) p->work_off = ctx.scratch(gated_delta_workspace_bytes(k));
  step.fn = &delta_fn;
  step.params = p;
  return {};
}

}  // namespace rlx::cuda_backend
