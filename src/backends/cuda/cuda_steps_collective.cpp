// CUDA steps of the collectives of a tensor-parallel group: NCCL all-reduce / all-gather
// enqueued on the executable's stream (so a captured CUDA graph holds them like any
// kernel), through the communicator the executable was bound to (RunCtx::nccl).
#include "backends/cuda/cuda_steps_shared.h"
#include "backends/cuda/nccl.h"

namespace rlx::cuda_backend {
namespace {

struct CollectiveParams {
  runtime::CollectiveShape shape;
};

Status check_comm(const Step& s, const RunCtx& ctx, const CollectiveParams& p) {
  if (ctx.nccl == nullptr)
    return Error::invalid_argument(
        "cuda backend: {}: no communicator is bound (compile for a tensor-parallel device "
        "group such as cuda:0,1)",
        *s.what);
  if (ctx.nccl->world() != p.shape.world)
    return Error::invalid_argument("cuda backend: {}: the graph is for {} ranks, the bound group has {}", *s.what,
                                   p.shape.world, ctx.nccl->world());
  return {};
}

Status all_reduce_fn(const Step& s, const RunCtx& ctx) {
  const auto& p = s.p<CollectiveParams>();
  TRY(check_comm(s, ctx, p));
  Status st = ctx.nccl->all_reduce(s.in_ptr[0], s.out_ptr, p.shape.count, p.shape.dtype, ctx.stream);
  return st.ok() ? st : st.error().with_context(*s.what);
}

Status all_gather_fn(const Step& s, const RunCtx& ctx) {
  const auto& p = s.p<CollectiveParams>();
  TRY(check_comm(s, ctx, p));
  Status st = ctx.nccl->all_gather(s.in_ptr[0], s.out_ptr, p.shape.bytes, ctx.stream);
  return st.ok() ? st : st.error().with_context(*s.what);
}

Status build_collective(BuildCtx& ctx, Step& step, StepFn fn) {
  auto p = std::make_shared<CollectiveParams>();
  ASSIGN_OR_RETURN(p->shape, runtime::collective_shape(*ctx.graph, ctx.id, "cuda"));
  step.fn = fn;
  step.params = std::move(p);
  step.extent_ok = true;  // whole buffers move (padding rows included)
  return {};
}

}  // namespace

Status build_all_reduce(BuildCtx& ctx, Step& step) { return build_collective(ctx, step, &all_reduce_fn); }

Status build_all_gather(BuildCtx& ctx, Step& step) { return build_collective(ctx, step, &all_gather_fn); }

}  // namespace rlx::cuda_backend
