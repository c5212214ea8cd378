// Dead-code elimination: keeps what the outputs need, plus boundary nodes (the
// executable's interface), UpdateSlice writes and state updates (side effects on handles).
// Semantics: unchanged outputs; value ids are renumbered densely in the same order.
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

MirModule eliminate_dead_code(const MirModule& m) {
  const Graph& g = m.graph;
  std::vector<char> live(static_cast<size_t>(g.size()), 0);
  std::vector<ValueId> stack;
  auto mark = [&](ValueId v) {
    if (!live[static_cast<size_t>(v)]) {
      live[static_cast<size_t>(v)] = 1;
      stack.push_back(v);
    }
  };
  for (const GraphOutput& o : g.outputs()) mark(o.value);
  for (ValueId v = 0; v < g.size(); ++v) {
    const OpKind op = g.node(v).op;
    if (op == OpKind::Input || op == OpKind::Param || op == OpKind::Handle || in_place_input(g.node(v)) >= 0 ||
        updates_state(op))
      mark(v);
  }
  while (!stack.empty()) {
    const ValueId v = stack.back();
    stack.pop_back();
    for (ValueId in : g.node(v).inputs) mark(in);
  }
  detail::Rewriter rw(g);
  for (ValueId v = 0; v < g.size(); ++v)
    if (live[static_cast<size_t>(v)]) rw.copy(v);
  return MirModule{rw.finish_ok()};
}

}  // namespace rlx::compile
