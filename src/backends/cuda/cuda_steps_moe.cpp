// CUDA steps of the mixture-of-experts ops: MoeRoute (router logits -> the k chosen
// experts' weights per token) and MoeFfn (each token's routed experts' gated FFN), both
// in kernels_moe.cu. MoeFfn keeps the choice on the device: its kernels find the
// experts from the route rows themselves, so a decode step with experts runs inside a
// CUDA graph. Rows past the active extent (bucketed prefill) are not computed. Runs of
// kMoeGroupedMinRows rows or more whose expert types allow it take the grouped form
// (moe_grouped.h: tokens sorted by expert, one tensor-core product per expert).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backends/cuda/cuda_steps_shared.h"
#include "backends/cuda/moe_grouped.h"
#include "rlx/base/env.h"

namespace rlx::cuda_backend {

using ir::DType;

namespace {

/// Rows that take part in a run: all of them, or the active prefix when they are the
/// bucket axis and an extent is set.
int64_t active_rows(int64_t rows, bool bucket, const RunCtx& ctx) {
  return bucket && ctx.extent_on ? rows / ctx.upper * ctx.actual : rows;
}

/// Whether the rows (axis 0) of `v` are the bucket axis; a bucket on another axis or
/// inside a combined dim leaves the step unable to run a prefix of the rows.
bool rows_are_bucket(BuildCtx& ctx, ir::ValueId v, Step& step) {
  const int b = ctx.bucket(v);
  if (b != -1 && b != 0) step.extent_ok = false;
  return b == 0;
}

struct RouteStepParams {
  MoeRouteParams k;
  bool bucket = false;
};

Status moe_route_fn(const Step& s, const RunCtx& ctx) {
  const RouteStepParams& p = s.p<RouteStepParams>();
  MoeRouteParams k = p.k;
  k.rows = active_rows(k.rows, p.bucket, ctx);
  k.logits = s.in_ptr[0];
  k.out = reinterpret_cast<float*>(s.out_ptr);
  launch_moe_route(k, ctx.stream);
  return {};
}

struct FfnStepParams {
  MoeFfnParams k;
  bool bucket = false;
  bool grouped = false;  // runs of kMoeGroupedMinRows rows or more take the grouped form
  int64_t h_off = 0;     // scratch: [rows, k_max, hidden] f32, or the grouped form's work
  int64_t d_off = 0;     // scratch: [pair_rows, k_max, dim] f32
  int64_t pair_rows = 0;  // most rows whose down product runs a block a (token, slot)
};

Status moe_ffn_fn(const Step& s, const RunCtx& ctx) {
  const FfnStepParams& p = s.p<FfnStepParams>();
  MoeFfnParams k = p.k;
  k.rows = active_rows(k.rows, p.bucket, ctx);
  k.x = reinterpret_cast<const float*>(s.in_ptr[0]);
  k.route = reinterpret_cast<const float*>(s.in_ptr[1]);
  k.w_gate = s.in_ptr[2];
  k.w_up = s.in_ptr[3];
  k.w_down = s.in_ptr[4];
  k.h = reinterpret_cast<float*>(ctx.scratch + p.h_off);
  // Few rows (decode) spread the down product over a block a (token, slot).
  k.d = k.rows <= p.pair_rows ? reinterpret_cast<float*>(ctx.scratch + p.d_off) : nullptr;
  k.y = reinterpret_cast<float*>(s.out_ptr);
  if (p.grouped && k.rows >= kMoeGroupedMinRows) launch_moe_ffn_grouped(k, ctx.scratch + p.h_off, ctx.stream);
  else launch_moe_ffn(k, ctx.stream);
  return {};
}

constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxGridY = 65535;

}  // namespace

Status build_moe_route(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  const auto& a = n.attr<ir::MoeRouteAttrs>();
  if (!float_dt(x.dtype)) return step_error(ctx, "router logits of {}", ir::dtype_name(x.dtype));
  const auto d = x.shape.static_dims();
  auto p = std::make_shared<RouteStepParams>();
  MoeRouteParams& k = p->k;
  k.rows = d[0];
  k.experts = d[1];
  if (k.experts > kMoeMaxExperts)
    return step_error(ctx, "{} experts (the routing kernel takes at most {})", k.experts, kMoeMaxExperts);
  if (k.rows > kMaxGridX) return step_error(ctx, "{} rows (at most {})", k.rows, kMaxGridX);
  k.k = a.k;
  k.in_dt = to_dt(x.dtype);
  k.sigmoid = a.gating == ir::MoeGating::Sigmoid;
  k.normalize = a.normalize;
  p->bucket = rows_are_bucket(ctx, n.inputs[0], step);
  step.fn = &moe_route_fn;
  step.params = p;
  return {};
}

Status build_moe_ffn(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::MoeFfnAttrs>();
  const auto xd = ctx.input(0).shape.static_dims();
  const auto wd = ctx.input(2).shape.static_dims();
  auto p = std::make_shared<FfnStepParams>();
  MoeFfnParams& k = p->k;
  k.rows = xd[0];
  k.dim = xd[1];
  k.experts = wd[0];
  k.hidden = wd[1];
  if (ctx.input(0).dtype != DType::F32 || ctx.input(1).dtype != DType::F32)
    return step_error(ctx, "x and route must be f32");
  DT* types[3] = {&k.gate_dt, &k.up_dt, &k.down_dt};
  int64_t* row_bytes[3] = {&k.gate_row_bytes, &k.up_row_bytes, &k.down_row_bytes};
  for (size_t i = 0; i < 3; ++i) {
    const ir::Node& w = ctx.input(2 + i);
    const DType dt = w.dtype;
    if (!float_dt(dt) && !(ir::is_packed(dt) && packed_supported(to_dt(dt))))
      return step_error(ctx, "expert weights of {} (f32, f16, bf16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, an i-quant or "
                        "TQ1_0 / TQ2_0)", ir::dtype_name(dt));
    // Packed decoders read whole 16-byte words of some blocks (Q4_K's nibbles).
    if (ir::is_packed(dt) && step.in[2 + i].offset % 16 != 0)
      return step_error(ctx, "expert weight {} does not start 16-byte aligned", i);
    const auto dims = w.shape.static_dims();
    const auto bytes = ir::dtype_bytes(dt, dims[2]);
    if (!bytes) return step_error(ctx, "expert weight {} rows are not whole blocks", i);
    *types[i] = to_dt(dt);
    *row_bytes[i] = *bytes;
  }
  switch (a.act) {
    case ir::ActKind::Silu: case ir::ActKind::Gelu: case ir::ActKind::GeluTanh: k.act = static_cast<uint8_t>(a.act); break;
    default: return step_error(ctx, "activation {}", ir::enum_name(a.act));
  }
  // Slots per token: a route made by moe_route has at most its k nonzeros a row; any
  // other route may have as many as there are experts.
  const ir::Node& route = ctx.input(1);
  k.k_max = route.op == ir::OpKind::MoeRoute ? std::min(route.attr<ir::MoeRouteAttrs>().k, k.experts) : k.experts;
  if (k.rows * std::max<int64_t>(k.k_max, 1) > kMaxGridX)
    return step_error(ctx, "{} rows of {} experts each (at most {} pairs)", k.rows, k.k_max, kMaxGridX);
  if ((k.hidden + kMoeRowsPerBlock - 1) / kMoeRowsPerBlock > kMaxGridY ||
      (k.dim + kMoeRowsPerBlock - 1) / kMoeRowsPerBlock > kMaxGridY)
    return step_error(ctx, "expert matrices of {} x {} (at most {} rows)", k.hidden, k.dim, kMaxGridY * kMoeRowsPerBlock);
  // Runs of many rows sort their pairs by expert and multiply each expert once
  // (moe_grouped.h): the same scratch, sized for whichever form needs more.
  // (It reads F16 expert rows 16 bytes at a time.)
  const bool aligned = step.in[2].offset % 16 == 0 && step.in[3].offset % 16 == 0 && step.in[4].offset % 16 == 0;
  p->grouped = k.rows >= kMoeGroupedMinRows && aligned && moe_grouped_supported(k) && env_config().cuda_moe_grouped;
  // The per-pair form then serves only runs of fewer rows.
  const int64_t h_bytes =
      (p->grouped ? kMoeGroupedMinRows - 1 : k.rows) * k.k_max * k.hidden * static_cast<int64_t>(sizeof(float));
  p->h_off = ctx.scratch(p->grouped ? std::max(h_bytes, moe_grouped_work_bytes(k)) : h_bytes);
  p->pair_rows = std::min<int64_t>(k.rows, kMoeGroupedMinRows - 1);
  p->d_off = ctx.scratch(p->pair_rows * k.k_max * k.dim * static_cast<int64_t>(sizeof(float)));
  p->bucket = rows_are_bucket(ctx, n.inputs[0], step);
  step.fn = &moe_ffn_fn;
  step.params = p;
  return {};
}

}  // namespace rlx::cuda_backend
