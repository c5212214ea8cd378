// Memory planner (last stage of the pipeline): MIR -> LIR. Views alias their root with
// a byte offset; liveness is inclusive [birth, last use] per root; elementwise ops may
// take a dying input's slot (in place); groups are placed largest first at the best
// (smallest sufficient) aligned gap among time-overlapping placed groups.
#include "rlx/compile/memory_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <queue>

#include "rewriter.h"

namespace rlx::compile {
namespace {
using namespace ir;

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

std::string boundary_name(const Node& n) {
  if (auto* a = std::get_if<InputAttrs>(&n.attrs)) return a->name;
  if (auto* p = std::get_if<ParamAttrs>(&n.attrs)) return p->name;
  if (auto* h = std::get_if<HandleAttrs>(&n.attrs)) return h->name;
  return n.label;
}

// Byte offset of a view of `in` produced by node `n`, or nullopt when `n` is not a view.
// `sized` = shapes are static (offsets computable).
std::optional<int64_t> view_offset(const Graph& g, const Node& n, bool sized) {
  if (n.inputs.empty()) return std::nullopt;
  // In-place writes (update_slice, a cache-writing fused_linear): the written input
  // (only when it is a handle: checked by the caller).
  if (in_place_input(n) >= 0) return 0;
  const Node& in = g.node(n.inputs[0]);
  switch (n.op) {
    case OpKind::Reshape: return 0;
    case OpKind::Cast: return n.dtype == in.dtype ? std::optional<int64_t>(0) : std::nullopt;
    case OpKind::Narrow: {
      const auto& a = n.attr<NarrowAttrs>();
      const auto axis = in.shape.axis(a.axis);
      if (!axis) return std::nullopt;
      for (int64_t i = 0; i < *axis; ++i)  // rows before the axis must be single: contiguous
        if (!(in.shape[i].is_static() && in.shape[i].value() == 1)) return std::nullopt;
      if (!sized) return 0;
      int64_t inner = 1;
      for (int64_t i = *axis + 1; i < in.shape.rank(); ++i) inner *= in.shape[i].value();
      return dtype_bytes(in.dtype, a.start * inner);
    }
    default: return std::nullopt;
  }
}

bool in_place_kind(OpKind k) { return is_elementwise(k) || k == OpKind::ElementwiseRegion; }

}  // namespace

PlanOptions plan_options(const CompileOptions& o) {
  PlanOptions po;
  po.alignment = o.arena_alignment;
  po.in_place = o.in_place;
  return po;
}

Expected<LirModule> plan_memory(const MirModule& m, const PlanOptions& opt) {
  if (opt.alignment <= 0 || (opt.alignment & (opt.alignment - 1)) != 0)
    return Error::invalid_argument("arena alignment {} is not a power of two", opt.alignment);
  const Graph& g = m.graph;
  const int32_t n = g.size();
  LirModule lir;
  lir.graph = g;
  lir.dynamic_symbols = free_symbols(g);
  const bool sized = lir.dynamic_symbols.empty();
  BufferPlan& plan = lir.plan;
  plan.alignment = opt.alignment;
  plan.schedule.resize(static_cast<size_t>(n));
  std::iota(plan.schedule.begin(), plan.schedule.end(), 0);
  plan.slots.assign(static_cast<size_t>(n), BufferSlot{});

  // 1. sizes, kinds, view roots.
  for (ValueId v = 0; v < n; ++v) {
    const Node& node = g.node(v);
    BufferSlot& s = plan.slots[static_cast<size_t>(v)];
    if (sized) {
      const auto count = node.shape.num_elements();
      const auto bytes = count ? dtype_bytes(node.dtype, *count) : std::nullopt;
      if (!bytes) return Error::invalid_argument("{}: size of {} overflows or is not whole blocks", g.describe(v),
                                                 node.type().to_string());
      s.size = *bytes;
    }
    switch (node.op) {
      case OpKind::Param: s.kind = SlotKind::kParam; continue;
      case OpKind::Handle: s.kind = SlotKind::kHandle; continue;
      case OpKind::Constant: s.kind = SlotKind::kConstant; continue;
      default: break;
    }
    std::optional<int64_t> off = view_offset(g, node, sized);
    // In-place writes (update_slice, a cache-writing fused_linear) alias a handle only.
    const int written = in_place_input(node);
    const ValueId alias_of = node.inputs.empty() ? kNoValue : node.inputs[static_cast<size_t>(std::max(written, 0))];
    if (off && written >= 0) {
      const BufferSlot& dst = plan.slots[static_cast<size_t>(alias_of)];
      const ValueId dst_root = dst.kind == SlotKind::kView ? dst.root : alias_of;
      if (plan.slots[static_cast<size_t>(dst_root)].kind != SlotKind::kHandle) off.reset();
    }
    if (off) {
      const ValueId in = alias_of;
      const BufferSlot& is = plan.slots[static_cast<size_t>(in)];
      s.kind = SlotKind::kView;
      s.root = is.kind == SlotKind::kView ? is.root : in;
      s.offset = (is.kind == SlotKind::kView ? is.offset : 0) + *off;
    } else {
      s.kind = SlotKind::kArena;
    }
  }
  auto root_of = [&](ValueId v) {
    const BufferSlot& s = plan.slots[static_cast<size_t>(v)];
    return s.kind == SlotKind::kView ? s.root : v;
  };

  // 2. liveness per storage root: birth = position (inputs: 0), last use = last reader
  //    of the root or of any view of it; outputs live to the end (position n).
  std::vector<int32_t> birth(static_cast<size_t>(n)), last(static_cast<size_t>(n));
  for (ValueId v = 0; v < n; ++v) {
    birth[static_cast<size_t>(v)] = g.node(v).op == OpKind::Input ? 0 : v;
    last[static_cast<size_t>(v)] = birth[static_cast<size_t>(v)];
  }
  for (ValueId v = 0; v < n; ++v) {
    for (ValueId in : g.node(v).inputs) {
      int32_t& l = last[static_cast<size_t>(root_of(in))];
      l = std::max(l, v);
    }
    if (plan.slots[static_cast<size_t>(v)].kind == SlotKind::kView) {
      int32_t& l = last[static_cast<size_t>(root_of(v))];
      l = std::max(l, v);
    }
  }
  for (const GraphOutput& o : g.outputs()) last[static_cast<size_t>(root_of(o.value))] = n;

  // 3. groups: a value either starts a group or joins the group of an input it replaces
  //    in place (input dies here, same shape and byte size, a plain arena value that is
  //    not a graph input, and no other input of this op reads the same storage).
  std::vector<int32_t> group(static_cast<size_t>(n), -1);
  struct Group {
    int32_t birth, death;
    int64_t size;
    int64_t offset = 0;
  };
  std::vector<Group> groups;
  for (ValueId v = 0; v < n; ++v) {
    const BufferSlot& s = plan.slots[static_cast<size_t>(v)];
    if (s.kind != SlotKind::kArena) continue;
    const Node& node = g.node(v);
    int32_t joined = -1;
    if (opt.in_place && sized && in_place_kind(node.op)) {
      for (size_t i = 0; i < node.inputs.size() && joined < 0; ++i) {
        const ValueId u = node.inputs[i];
        const Node& un = g.node(u);
        const BufferSlot& us = plan.slots[static_cast<size_t>(u)];
        if (us.kind != SlotKind::kArena || un.op == OpKind::Input || last[static_cast<size_t>(u)] != v ||
            us.size != s.size || un.shape != node.shape)
          continue;
        bool shared = false;
        for (size_t j = 0; j < node.inputs.size(); ++j)
          if (j != i && root_of(node.inputs[j]) == u) shared = true;
        if (!shared) joined = group[static_cast<size_t>(u)];
      }
    }
    if (joined >= 0) {
      group[static_cast<size_t>(v)] = joined;
      Group& gr = groups[static_cast<size_t>(joined)];
      gr.death = std::max(gr.death, last[static_cast<size_t>(v)]);
    } else {
      group[static_cast<size_t>(v)] = static_cast<int32_t>(groups.size());
      groups.push_back({birth[static_cast<size_t>(v)], last[static_cast<size_t>(v)], s.size});
    }
    plan.unshared_bytes += align_up(s.size, opt.alignment);
  }

  // 4. placement: largest first; among groups overlapping in time, take the smallest
  //    aligned gap that fits, else the aligned end.
  if (sized) {
    std::vector<int32_t> order(groups.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return groups[static_cast<size_t>(a)].size > groups[static_cast<size_t>(b)].size; });
    std::vector<int32_t> placed;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int32_t gi : order) {
      Group& gr = groups[static_cast<size_t>(gi)];
      const int64_t need = align_up(gr.size, opt.alignment);
      if (need == 0) continue;
      busy.clear();
      for (int32_t pi : placed) {
        const Group& p = groups[static_cast<size_t>(pi)];
        if (p.birth <= gr.death && gr.birth <= p.death) busy.emplace_back(p.offset, p.offset + align_up(p.size, opt.alignment));
      }
      std::sort(busy.begin(), busy.end());
      int64_t cursor = 0, best = -1, best_gap = 0;
      for (const auto& [lo, hi] : busy) {
        if (lo - cursor >= need && (best < 0 || lo - cursor < best_gap)) {
          best = cursor;
          best_gap = lo - cursor;
        }
        cursor = std::max(cursor, hi);
      }
      gr.offset = best >= 0 ? best : cursor;
      plan.arena_size = std::max(plan.arena_size, gr.offset + need);
      placed.push_back(gi);
    }
    for (ValueId v = 0; v < n; ++v)
      if (group[static_cast<size_t>(v)] >= 0)
        plan.slots[static_cast<size_t>(v)].offset = groups[static_cast<size_t>(group[static_cast<size_t>(v)])].offset;
  }

  // 5. manifest.
  auto entry = [&](ValueId v, std::string name) {
    ManifestEntry e;
    e.name = std::move(name);
    e.value = v;
    e.type = g.node(v).type();
    e.slot = plan.slots[static_cast<size_t>(v)];
    e.bytes = e.slot.size;
    return e;
  };
  for (ValueId v = 0; v < n; ++v) {
    const Node& node = g.node(v);
    if (node.op == OpKind::Input) lir.manifest.inputs.push_back(entry(v, boundary_name(node)));
    if (node.op == OpKind::Param) lir.manifest.params.push_back(entry(v, boundary_name(node)));
    if (node.op == OpKind::Handle) lir.manifest.handles.push_back(entry(v, boundary_name(node)));
  }
  for (const GraphOutput& o : g.outputs()) lir.manifest.outputs.push_back(entry(o.value, o.name));
  return lir;
}

Expected<LirModule> specialize(const LirModule& lir, const DimBinding& binding) {
  PlanOptions opt;
  opt.alignment = lir.plan.alignment;
  return specialize(lir, binding, opt);
}

Expected<LirModule> specialize(const LirModule& lir, const DimBinding& binding, const PlanOptions& options) {
  ASSIGN_OR_RETURN(Graph bound, bind(lir.graph, binding));
  return plan_memory(MirModule{std::move(bound)}, options);
}

std::string plan_report(const LirModule& lir) {
  const BufferPlan& p = lir.plan;
  std::string s = fmt::format("arena {} bytes (alignment {}), unshared {} bytes, saved {} bytes\n", p.arena_size,
                              p.alignment, p.unshared_bytes, p.bytes_saved());
  for (ValueId v : p.schedule) {
    const BufferSlot& b = p.slots[static_cast<size_t>(v)];
    const char* kind = "arena";
    switch (b.kind) {
      case SlotKind::kArena: break;
      case SlotKind::kView: kind = "view"; break;
      case SlotKind::kParam: kind = "param"; break;
      case SlotKind::kHandle: kind = "handle"; break;
      case SlotKind::kConstant: kind = "constant"; break;
    }
    if (b.kind == SlotKind::kView)
      s += fmt::format("  {:<40} view of %{} +{} ({} bytes)\n", lir.graph.describe(v), b.root, b.offset, b.size);
    else
      s += fmt::format("  {:<40} {} @{} ({} bytes)\n", lir.graph.describe(v), kind, b.offset, b.size);
  }
  return s;
}

Status check_plan(const LirModule& lir) {
  const Graph& g = lir.graph;
  const BufferPlan& p = lir.plan;
  const int32_t n = g.size();
  if (static_cast<int32_t>(p.slots.size()) != n) return Error::verify("plan has {} slots for {} values", p.slots.size(), n);
  auto root_of = [&](ValueId v) { return p.slots[static_cast<size_t>(v)].kind == SlotKind::kView ? p.slots[static_cast<size_t>(v)].root : v; };
  std::vector<int32_t> birth(static_cast<size_t>(n)), last(static_cast<size_t>(n));
  for (ValueId v = 0; v < n; ++v) {
    const BufferSlot& s = p.slots[static_cast<size_t>(v)];
    birth[static_cast<size_t>(v)] = last[static_cast<size_t>(v)] = g.node(v).op == OpKind::Input ? 0 : v;
    if (s.kind == SlotKind::kArena) {
      if (s.offset % p.alignment != 0) return Error::verify("{}: offset {} not aligned to {}", g.describe(v), s.offset, p.alignment);
      if (s.offset + s.size > p.arena_size) return Error::verify("{}: slot ends past the arena", g.describe(v));
    }
    if (s.kind == SlotKind::kView) {
      if (s.root < 0 || s.root >= v) return Error::verify("{}: view root %{} invalid", g.describe(v), s.root);
      if (s.offset < 0 || s.offset + s.size > p.slots[static_cast<size_t>(s.root)].size)
        return Error::verify("{}: view [{}, {}) outside its root", g.describe(v), s.offset, s.offset + s.size);
    }
  }
  for (ValueId v = 0; v < n; ++v) {
    for (ValueId in : g.node(v).inputs) last[static_cast<size_t>(root_of(in))] = std::max(last[static_cast<size_t>(root_of(in))], v);
    if (p.slots[static_cast<size_t>(v)].kind == SlotKind::kView)
      last[static_cast<size_t>(root_of(v))] = std::max(last[static_cast<size_t>(root_of(v))], v);
  }
  for (const GraphOutput& o : g.outputs()) last[static_cast<size_t>(root_of(o.value))] = n;
  // Arena values in order of birth; the live ones (born, not yet past their last use)
  // kept by offset. In a valid plan the live ones are disjoint, so each new value meets
  // at most its neighbours: n log n (an AOT load checks every plan it reads). The one
  // legal overlap is in-place reuse: b is an elementwise op reading a, a dies at b, same
  // slot; b then takes a's place.
  std::vector<ValueId> order;
  for (ValueId v = 0; v < n; ++v) {
    const BufferSlot& s = p.slots[static_cast<size_t>(v)];
    if (s.kind == SlotKind::kArena && s.size > 0) order.push_back(v);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](ValueId a, ValueId b) { return birth[static_cast<size_t>(a)] < birth[static_cast<size_t>(b)]; });
  std::map<int64_t, ValueId> live;  // offset -> value
  using Death = std::pair<int32_t, ValueId>;
  std::priority_queue<Death, std::vector<Death>, std::greater<>> deaths;
  for (ValueId b : order) {
    const int32_t t = birth[static_cast<size_t>(b)];
    while (!deaths.empty() && deaths.top().first < t) {
      const ValueId d = deaths.top().second;
      deaths.pop();
      auto it = live.find(p.slots[static_cast<size_t>(d)].offset);
      if (it != live.end() && it->second == d) live.erase(it);
    }
    const BufferSlot& sb = p.slots[static_cast<size_t>(b)];
    auto it = live.upper_bound(sb.offset);
    if (it != live.begin()) --it;  // the last live value starting at or before b's start
    bool replaced = false;  // (by b, in place: at most one value)
    for (; it != live.end() && it->first < sb.offset + sb.size; ++it) {
      const ValueId a = it->second;
      const BufferSlot& sa = p.slots[static_cast<size_t>(a)];
      if (sa.offset + sa.size <= sb.offset) continue;  // ends before b starts
      const Node& nb = g.node(b);
      const bool reads = std::find(nb.inputs.begin(), nb.inputs.end(), a) != nb.inputs.end();
      if (!replaced && reads && last[static_cast<size_t>(a)] == b && sa.offset == sb.offset && sa.size == sb.size &&
          (is_elementwise(nb.op) || nb.op == OpKind::ElementwiseRegion)) {
        replaced = true;
        continue;
      }
      const auto [first, second] = std::minmax(a, b);
      return Error::verify("{} and {} are live together and overlap in the arena", g.describe(first), g.describe(second));
    }
    live[sb.offset] = b;  // (replaces the in-place predecessor, which dies here)
    deaths.emplace(last[static_cast<size_t>(b)], b);
  }
  return {};
}

}  // namespace rlx::compile
