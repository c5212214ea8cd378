// The shared part of the step-list executors: value storage resolution,
// set_active_extent's checks, broadcast strides.
#include "runtime/executor_skeleton.h"

namespace rlx::runtime {

using ir::SlotKind;
using ir::ValueId;

Expected<StorageMap> resolve_storage(const ir::LirModule& lir, std::string_view backend) {
  const ir::Graph& g = lir.graph;
  const ir::IoManifest& m = lir.manifest;
  if (lir.plan.slots.size() != static_cast<size_t>(g.size()))
    return Error::internal("{} backend: buffer plan has {} slots for {} values", backend, lir.plan.slots.size(),
                           g.size());
  const auto n = static_cast<size_t>(g.size());
  std::vector<int32_t> param_idx(n, -1), handle_idx(n, -1), const_idx(n, -1);
  auto index_of = [&](std::vector<int32_t>& idx, ValueId v, size_t i, const char* what) -> Status {
    if (v < 0 || static_cast<size_t>(v) >= n)
      return Error::internal("{} backend: manifest {} {} names value %{} of {}", backend, what, i, v, n);
    idx[static_cast<size_t>(v)] = static_cast<int32_t>(i);
    return {};
  };
  for (size_t i = 0; i < m.params.size(); ++i) TRY(index_of(param_idx, m.params[i].value, i, "param"));
  for (size_t i = 0; i < m.handles.size(); ++i) TRY(index_of(handle_idx, m.handles[i].value, i, "handle"));
  StorageMap out;
  for (ValueId v = 0; v < g.size(); ++v) {
    if (g.node(v).op != ir::OpKind::Constant) continue;
    const_idx[static_cast<size_t>(v)] = static_cast<int32_t>(out.constants.size());
    out.constants.push_back(v);
  }
  out.refs.resize(n);
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::BufferSlot& slot = lir.plan.slots[static_cast<size_t>(v)];
    ValueRef r;
    r.bytes = slot.size;
    auto indexed = [&](const std::vector<int32_t>& idx, StorageKind kind, const char* missing) -> Status {
      if (idx[static_cast<size_t>(v)] < 0) return Error::internal("{} backend: {} {}", backend, g.describe(v), missing);
      r.kind = kind;
      r.index = idx[static_cast<size_t>(v)];
      return {};
    };
    switch (slot.kind) {
      case SlotKind::kArena:
        r.kind = StorageKind::kArena;
        r.offset = slot.offset;
        break;
      case SlotKind::kView:
        if (slot.root < 0 || slot.root >= v)
          return Error::internal("{} backend: {} is a view of invalid root {}", backend, g.describe(v), slot.root);
        r = out.refs[static_cast<size_t>(slot.root)];
        r.offset += slot.offset;
        r.bytes = slot.size;
        break;
      case SlotKind::kParam:
        TRY(indexed(param_idx, StorageKind::kParam, "not in the manifest"));
        break;
      case SlotKind::kHandle:
        TRY(indexed(handle_idx, StorageKind::kHandle, "not in the manifest"));
        break;
      case SlotKind::kConstant:
        TRY(indexed(const_idx, StorageKind::kConstant, "is not a constant"));
        break;
    }
    out.refs[static_cast<size_t>(v)] = r;
  }
  if (lir.plan.arena_size < 0) return Error::internal("{} backend: negative arena size", backend);
  return out;
}

Status check_active_extent(const ExtentInfo& extent, int64_t actual, int64_t upper) {
  if (extent.empty())
    return Error::invalid_argument(
        "set_active_extent: the graph was compiled without a symbolic (bucket) dim; compile it with a symbol "
        "and CompileOptions::binding");
  if (upper != extent.upper)
    return Error::invalid_argument("set_active_extent: upper {} differs from the compiled size {}={}", upper,
                                   ir::symbol_name(extent.symbol), extent.upper);
  if (actual < 1 || actual > upper)
    return Error::invalid_argument("set_active_extent: actual {} must be in [1, {}]", actual, upper);
  return {};
}

Expected<CollectiveShape> collective_shape(const ir::Graph& g, ir::ValueId v, std::string_view backend) {
  const ir::Node& n = g.node(v);
  const ir::Node& in = g.node(n.inputs[0]);
  const std::optional<int64_t> count = in.shape.num_elements();
  const std::optional<int64_t> bytes = count ? ir::dtype_bytes(in.dtype, *count) : std::nullopt;
  if (!bytes)
    return Error::unsupported("{} backend: {}: input {} has no static size", backend, g.describe(v),
                              in.type().to_string());
  if (n.op == ir::OpKind::AllReduce && in.dtype != ir::DType::F32 && in.dtype != ir::DType::F16 &&
      in.dtype != ir::DType::BF16)
    return Error::unsupported("{} backend: {}: all_reduce of {} (f32, f16, bf16 are summed)", backend, g.describe(v),
                              ir::dtype_name(in.dtype));
  return CollectiveShape{*count, *bytes, in.dtype, n.attr<ir::CollectiveAttrs>().world};
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t acc = 1;
  for (size_t k = 0; k < in.size() && k < out.size(); ++k) {
    const size_t di = in.size() - 1 - k, doo = out.size() - 1 - k;
    st[doo] = in[di] == 1 ? 0 : acc;
    acc *= in[di];
  }
  return st;
}

}  // namespace rlx::runtime
