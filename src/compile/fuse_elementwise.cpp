// Fusion: maximal chains of elementwise ops (Activation, Binary, Compare, Where, Cast)
// in which every absorbed value has exactly one user (inside the region) become one
// ElementwiseRegion, bounded by FusionLimits (max inputs, max steps). Values with other
// users (or graph outputs) are never absorbed, so nothing is hidden. Semantics: the
// steps are the original ops in their original order with the same broadcasting.
#include <algorithm>
#include <set>

#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

namespace {

uint8_t kind_of(const Node& n) {
  switch (n.op) {
    case OpKind::Activation: return static_cast<uint8_t>(n.attr<ActivationAttrs>().kind);
    case OpKind::Binary: return static_cast<uint8_t>(n.attr<BinaryAttrs>().kind);
    case OpKind::Compare: return static_cast<uint8_t>(n.attr<CompareAttrs>().kind);
    default: return 0;
  }
}

struct Region {
  std::vector<ValueId> members;  // ascending ids, last = root
  std::vector<ValueId> inputs;   // external values, in first-use order
};

}  // namespace

MirModule fuse_elementwise(const MirModule& m, const FusionLimits& limits, FusionReport* report) {
  const Graph& g = m.graph;
  const auto uses = g.use_counts();
  const auto users = detail::users_of(g);
  const int32_t n = g.size();
  std::vector<char> absorbed(static_cast<size_t>(n), 0);
  std::vector<std::optional<Region>> at(static_cast<size_t>(n));
  auto single_use_into = [&](ValueId v, const std::set<ValueId>& region) {
    return uses[static_cast<size_t>(v)] == 1 && users[static_cast<size_t>(v)].size() == 1 &&
           region.count(users[static_cast<size_t>(v)][0]) != 0;
  };
  bool any = false;
  for (ValueId root = n - 1; root >= 0; --root) {
    if (!is_elementwise(g.node(root).op) || absorbed[static_cast<size_t>(root)]) continue;
    std::set<ValueId> region{root};
    // Grow backwards: candidates are elementwise producers used only inside the region.
    bool limited = false;
    for (bool grew = true; grew;) {
      grew = false;
      std::vector<ValueId> cands;
      for (ValueId r : region)
        for (ValueId in : g.node(r).inputs)
          if (!region.count(in) && is_elementwise(g.node(in).op) && !absorbed[static_cast<size_t>(in)] &&
              single_use_into(in, region))
            cands.push_back(in);
      std::sort(cands.rbegin(), cands.rend());
      for (ValueId c : cands) {
        if (region.count(c)) continue;
        std::set<ValueId> trial = region;
        trial.insert(c);
        std::set<ValueId> ext;
        for (ValueId r : trial)
          for (ValueId in : g.node(r).inputs)
            if (!trial.count(in)) ext.insert(in);
        if ((limits.max_steps > 0 && static_cast<int32_t>(trial.size()) > limits.max_steps) ||
            (limits.max_inputs > 0 && static_cast<int32_t>(ext.size()) > limits.max_inputs)) {
          limited = true;
          continue;
        }
        region = std::move(trial);
        grew = true;
      }
    }
    if (limited && report)
      report->miss({"elementwise_region", {g.describe(root)},
                    fmt::format("region limits reached (max_steps {}, max_inputs {})", limits.max_steps, limits.max_inputs)});
    if (region.size() < 2) continue;
    Region reg;
    reg.members.assign(region.begin(), region.end());
    for (ValueId r : reg.members) {
      if (r != root) absorbed[static_cast<size_t>(r)] = 1;
      for (ValueId in : g.node(r).inputs)
        if (!region.count(in) && std::find(reg.inputs.begin(), reg.inputs.end(), in) == reg.inputs.end())
          reg.inputs.push_back(in);
    }
    at[static_cast<size_t>(root)] = std::move(reg);
    any = true;
  }
  if (!any) return m;

  return detail::rebuild_with_matches(g, at, [&](detail::Rewriter& rw, ValueId v, const Region& reg) {
    RegionAttrs ra;
    std::vector<ValueId> step_of(static_cast<size_t>(n), kNoValue);
    for (ValueId mv : reg.members) {
      const Node& mn = g.node(mv);
      RegionStep s;
      s.op = mn.op;
      s.kind = kind_of(mn);
      s.dtype = mn.dtype;
      for (ValueId in : mn.inputs) {
        if (step_of[static_cast<size_t>(in)] != kNoValue) {
          s.args.push_back(step_of[static_cast<size_t>(in)]);
        } else {
          const auto pos = std::find(reg.inputs.begin(), reg.inputs.end(), in) - reg.inputs.begin();
          s.args.push_back(static_cast<int32_t>(-1 - pos));
        }
      }
      step_of[static_cast<size_t>(mv)] = static_cast<ValueId>(ra.steps.size());
      ra.steps.push_back(std::move(s));
    }
    std::vector<ValueId> in;
    std::vector<TensorType> types;
    for (ValueId x : reg.inputs) {
      in.push_back(rw.map(x));
      types.push_back(g.node(x).type());
    }
    // The region's broadcast shape must be the root's (it is unless a step narrows
    // the broadcast, which elementwise ops cannot); otherwise keep the ops.
    auto t = infer_type(OpKind::ElementwiseRegion, ra, types, {});
    if (!t || *t != g.node(v).type()) {
      rw.copy(v);
      return;
    }
    rw.b().label(g.node(v).label);
    rw.set(v, rw.b().op(OpKind::ElementwiseRegion, std::move(in), std::move(ra)));
    if (report) report->record("elementwise_region");
  });
}

}  // namespace rlx::compile
