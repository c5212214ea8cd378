// Fusion: rope(narrow(x, last axis, start, len), pos) — the q or k slice of a fused qkv
// projection — becomes rope(x, pos) {offset = start, width = len}: the rope reads its
// columns where they are instead of after a strided copy. The narrow stays only if it has
// other users. Semantics: identical (the same elements rotated by the same table).
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

MirModule fuse_narrow_rope(const MirModule& m, FusionReport* report) {
  const Graph& g = m.graph;
  std::vector<std::optional<RopeAttrs>> at(static_cast<size_t>(g.size()));
  bool any = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    if (n.op != OpKind::Rope || n.attr<RopeAttrs>().width != 0) continue;
    const ValueId nv = n.inputs[0];
    const Node& nn = g.node(nv);
    if (nn.op != OpKind::Narrow) continue;
    const auto& na = nn.attr<NarrowAttrs>();
    const Shape& src = g.node(nn.inputs[0]).shape;
    const int64_t last = src.rank() - 1;
    if (na.axis != last && na.axis != -1) continue;  // a row slice is a view already
    if (!src.back().is_static() || !na.length.is_static()) {
      if (report) report->miss({"narrow_rope", {g.describe(nv), g.describe(v)}, "the sliced width is symbolic"});
      continue;
    }
    RopeAttrs r = n.attr<RopeAttrs>();
    r.offset = na.start;
    r.width = na.length.value();
    at[static_cast<size_t>(v)] = r;
    any = true;
  }
  if (!any) return m;
  return detail::rebuild_with_matches(g, at, [&](detail::Rewriter& rw, ValueId v, const RopeAttrs& r) {
    const Node& n = g.node(v);
    rw.b().label(n.label);
    const ValueId src = g.node(n.inputs[0]).inputs[0];
    rw.set(v, rw.b().op(OpKind::Rope, {rw.map(src), rw.map(n.inputs[1])}, r));
    if (report) report->record("narrow_rope");
  });
}

}  // namespace rlx::compile
