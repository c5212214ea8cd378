// Fusion: mul(silu(x.Wg), x.Wu) (either operand order) with both matmuls reading the
// same x with the same transpose flags, rank-2 weights, and every intermediate used once,
// becomes FusedSwiGLU(x, Wg, Wu). Run before fuse_matmul_bias_act. Semantics: the same
// products, silu and multiply.
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

MirModule fuse_swiglu(const MirModule& m, FusionReport* report) {
  const Graph& g = m.graph;
  const auto uses = g.use_counts();
  struct Match { ValueId x, wg, wu; bool tb; };
  std::vector<std::optional<Match>> at(static_cast<size_t>(g.size()));
  bool any = false;
  auto plain_mm = [&](ValueId v) {
    const Node& n = g.node(v);
    return n.op == OpKind::MatMul && !n.attr<MatMulAttrs>().transpose_a && g.node(n.inputs[1]).shape.rank() == 2 &&
           g.node(n.inputs[0]).shape.rank() >= 2;
  };
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    if (n.op != OpKind::Binary || n.attr<BinaryAttrs>().kind != BinaryKind::Mul) continue;
    for (int side = 0; side < 2; ++side) {
      const ValueId s = n.inputs[static_cast<size_t>(side)], u = n.inputs[static_cast<size_t>(1 - side)];
      const Node& sn = g.node(s);
      if (sn.op != OpKind::Activation || sn.attr<ActivationAttrs>().kind != ActKind::Silu) continue;
      const ValueId gate = sn.inputs[0];
      if (!plain_mm(gate) || !plain_mm(u) || s == u) continue;
      const Node& gn = g.node(gate);
      const Node& un = g.node(u);
      std::vector<std::string> nodes{g.describe(gate), g.describe(u), g.describe(v)};
      if (gn.inputs[0] != un.inputs[0]) {
        if (report) report->miss({"swiglu", nodes, "gate and up matmuls read different inputs"});
        break;
      }
      if (gn.attr<MatMulAttrs>().transpose_b != un.attr<MatMulAttrs>().transpose_b || gn.shape != un.shape) {
        if (report) report->miss({"swiglu", nodes, "gate and up weights differ in layout"});
        break;
      }
      if (uses[static_cast<size_t>(gate)] != 1 || uses[static_cast<size_t>(s)] != 1 || uses[static_cast<size_t>(u)] != 1) {
        if (report) report->miss({"swiglu", nodes, "an intermediate (gate, silu or up) has another user"});
        break;
      }
      at[static_cast<size_t>(v)] = Match{gn.inputs[0], gn.inputs[1], un.inputs[1], gn.attr<MatMulAttrs>().transpose_b};
      any = true;
      break;
    }
  }
  if (!any) return m;
  return detail::rebuild_with_matches(g, at, [&](detail::Rewriter& rw, ValueId v, const Match& mt) {
    rw.b().label(g.node(v).label.empty() ? g.node(g.node(v).inputs[0]).label : g.node(v).label);
    rw.set(v, rw.b().op(OpKind::FusedSwiGLU, {rw.map(mt.x), rw.map(mt.wg), rw.map(mt.wu)}, FusedSwiGLUAttrs{mt.tb}));
    if (report) report->record("swiglu");
  });
}

}  // namespace rlx::compile
