// Fusion: add(x, res) feeding RmsNorm/LayerNorm becomes FusedResidualRmsNorm/LayerNorm
// (x, res, gamma[, beta]) -> [2, ..] (0 = sum, 1 = normed), emitted where the add was;
// the sum's and the norm's users read reshape(narrow(F, 0, i, 1)) views (zero-copy).
// Requires x and res of the norm's exact type (no broadcast) and gamma/beta defined
// before the add or free of inputs (params/constants, then hoisted to the add). Semantics: the same add and the same norm.
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

MirModule fuse_residual_norm(const MirModule& m, FusionReport* report) {
  const Graph& g = m.graph;
  const auto users = detail::users_of(g);
  std::vector<ValueId> norm_of_add(static_cast<size_t>(g.size()), kNoValue);
  std::vector<ValueId> add_of_norm(static_cast<size_t>(g.size()), kNoValue);
  bool any = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    if (n.op != OpKind::RmsNorm && n.op != OpKind::LayerNorm) continue;
    const ValueId a = n.inputs[0];
    const Node& an = g.node(a);
    if (an.op != OpKind::Binary || an.attr<BinaryAttrs>().kind != BinaryKind::Add) continue;
    if (norm_of_add[static_cast<size_t>(a)] != kNoValue) continue;  // one norm per add
    if (g.node(an.inputs[0]).type() != an.type() || g.node(an.inputs[1]).type() != an.type()) {
      if (report) report->miss({"residual_norm", {g.describe(a), g.describe(v)}, "residual add broadcasts"});
      continue;
    }
    bool params_before = true;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      params_before = params_before && (n.inputs[i] < a || g.node(n.inputs[i]).inputs.empty());
    if (!params_before) {
      if (report) report->miss({"residual_norm", {g.describe(a), g.describe(v)}, "norm weights are computed after the add"});
      continue;
    }
    norm_of_add[static_cast<size_t>(a)] = v;
    add_of_norm[static_cast<size_t>(v)] = a;
    any = true;
  }
  if (!any) return m;
  detail::Rewriter rw(g);
  std::vector<ValueId> fused(static_cast<size_t>(g.size()), kNoValue);
  for (ValueId v = 0; v < g.size(); ++v) {
    GraphBuilder& b = rw.b();
    if (rw.mapped(v)) continue;  // a weight hoisted to its fused norm
    if (const ValueId nv = norm_of_add[static_cast<size_t>(v)]; nv != kNoValue) {
      const Node& norm = g.node(nv);
      const Node& add = g.node(v);
      std::vector<ValueId> in{rw.map(add.inputs[0]), rw.map(add.inputs[1])};
      for (size_t i = 1; i < norm.inputs.size(); ++i) {
        if (!rw.mapped(norm.inputs[i])) rw.copy(norm.inputs[i]);  // a later param/constant: hoist it
        in.push_back(rw.map(norm.inputs[i]));
      }
      b.label(norm.label);
      const ValueId f = b.op(norm.op == OpKind::RmsNorm ? OpKind::FusedResidualRmsNorm : OpKind::FusedResidualLayerNorm,
                             std::move(in), norm.attrs);
      fused[static_cast<size_t>(nv)] = f;
      rw.set(v, b.reshape(b.narrow(f, 0, 0, Dim(1)), add.shape));
      if (report) report->record("residual_norm");
      continue;
    }
    if (const ValueId a = add_of_norm[static_cast<size_t>(v)]; a != kNoValue) {
      rw.set(v, b.reshape(b.narrow(fused[static_cast<size_t>(v)], 0, 1, Dim(1)), g.node(v).shape));
      continue;
    }
    rw.copy(v);
  }
  return eliminate_dead_code(MirModule{rw.finish_ok()});
}

}  // namespace rlx::compile
