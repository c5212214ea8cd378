// CPU steps of the collectives (all_reduce, all_gather) of a tensor-parallel group: the
// ranks are threads of this process and meet through the HostCommunicator the
// executable was bound to (StepCtx::comm).
#include "backends/cpu/cpu_step.h"

namespace rlx::cpu_backend {
namespace {

struct CollectiveParams {
  runtime::CollectiveShape shape;
  std::string what;
};

Status check_comm(const StepCtx& ctx, const CollectiveParams& p) {
  if (ctx.comm == nullptr)
    return Error::invalid_argument(
        "cpu backend: {}: no communicator is bound (compile for a tensor-parallel device "
        "group such as cpu:0,1)",
        p.what);
  if (ctx.comm->world() != p.shape.world)
    return Error::invalid_argument("cpu backend: {}: the graph is for {} ranks, the bound group has {}", p.what,
                                   p.shape.world, ctx.comm->world());
  return {};
}

Status all_reduce_fn(const Step& s, const StepCtx& ctx) {
  const auto& p = s.p<CollectiveParams>();
  TRY(check_comm(ctx, p));
  if (s.out_ptr != s.in_ptr[0]) std::memcpy(s.out_ptr, s.in_ptr[0], static_cast<size_t>(p.shape.bytes));
  Status st = ctx.comm->all_reduce_sum(s.out_ptr, p.shape.count, p.shape.dtype);
  return st.ok() ? st : st.error().with_context(p.what);
}

Status all_gather_fn(const Step& s, const StepCtx& ctx) {
  const auto& p = s.p<CollectiveParams>();
  TRY(check_comm(ctx, p));
  Status st = ctx.comm->all_gather(s.in_ptr[0], s.out_ptr, p.shape.bytes);
  return st.ok() ? st : st.error().with_context(p.what);
}

Status build_collective(BuildCtx& ctx, Step& step, StepFn fn) {
  auto p = std::make_shared<CollectiveParams>();
  ASSIGN_OR_RETURN(p->shape, runtime::collective_shape(*ctx.graph, ctx.id, "cpu"));
  p->what = ctx.graph->describe(ctx.id);
  step.fn = fn;
  step.params = std::move(p);
  step.extent_ok = true;  // every rank moves whole buffers (padding rows included)
  return {};
}

}  // namespace

Status build_all_reduce(BuildCtx& ctx, Step& step) { return build_collective(ctx, step, &all_reduce_fn); }

Status build_all_gather(BuildCtx& ctx, Step& step) { return build_collective(ctx, step, &all_gather_fn); }

}  // namespace rlx::cpu_backend
