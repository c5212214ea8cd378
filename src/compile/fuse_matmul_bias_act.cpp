// Fusion: MatMul(x, W[rank 2]) -> [Binary add bias[N]] -> [Activation epilogue] becomes
// FusedMatMulBiasAct(x, W, [bias]) {act, has_bias, transpose_b}. Each absorbed value
// must have exactly one user; a bias add or epilogue blocked by another user is
// reported as a miss. Semantics: act(x.W + bias), the same ops in the same order.
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

namespace {

bool epilogue(ActKind k) {
  switch (k) {
    case ActKind::Gelu: case ActKind::GeluTanh: case ActKind::Silu: case ActKind::Relu:
    case ActKind::Sigmoid: case ActKind::Tanh: return true;
    default: return false;
  }
}

struct Chain {
  ValueId mm = kNoValue, bias = kNoValue;
  ActKind act = ActKind::Identity;
};

}  // namespace

MirModule fuse_matmul_bias_act(const MirModule& m, FusionReport* report) {
  const Graph& g = m.graph;
  const auto uses = g.use_counts();
  const auto users = detail::users_of(g);
  auto sole_user = [&](ValueId v) -> ValueId {
    return uses[static_cast<size_t>(v)] == 1 && users[static_cast<size_t>(v)].size() == 1 ? users[static_cast<size_t>(v)][0] : kNoValue;
  };
  std::vector<Chain> root(static_cast<size_t>(g.size()));  // indexed by the chain's last node
  bool any = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    if (n.op != OpKind::MatMul) continue;
    const auto& mm = n.attr<MatMulAttrs>();
    const Node& w = g.node(n.inputs[1]);
    if (mm.transpose_a || w.shape.rank() != 2 || g.node(n.inputs[0]).shape.rank() < 2) continue;
    Chain c;
    c.mm = v;
    ValueId last = v;
    const Dim n_dim = n.shape.back();
    auto is_bias_add = [&](ValueId add, ValueId from) {
      const Node& a = g.node(add);
      if (a.op != OpKind::Binary || a.attr<BinaryAttrs>().kind != BinaryKind::Add || a.shape != g.node(from).shape) return kNoValue;
      const ValueId other = a.inputs[0] == from ? a.inputs[1] : a.inputs[0];
      const Node& b = g.node(other);
      return b.shape.rank() == 1 && b.shape[0] == n_dim && b.dtype == n.dtype ? other : kNoValue;
    };
    // bias
    if (const ValueId u = sole_user(last); u != kNoValue) {
      if (const ValueId bias = is_bias_add(u, last); bias != kNoValue && bias != last) {
        c.bias = bias;
        last = u;
      }
    } else if (report) {
      for (ValueId u : users[static_cast<size_t>(v)])
        if (is_bias_add(u, v) != kNoValue)
          report->miss({"matmul_bias_act", {g.describe(v), g.describe(u)},
                        fmt::format("matmul result has {} users, bias add not fused", uses[static_cast<size_t>(v)])});
    }
    // activation epilogue
    if (const ValueId u = sole_user(last); u != kNoValue) {
      const Node& a = g.node(u);
      if (a.op == OpKind::Activation && epilogue(a.attr<ActivationAttrs>().kind)) {
        c.act = a.attr<ActivationAttrs>().kind;
        last = u;
      }
    } else if (report && last != v) {
      for (ValueId u : users[static_cast<size_t>(last)])
        if (g.node(u).op == OpKind::Activation && epilogue(g.node(u).attr<ActivationAttrs>().kind))
          report->miss({"matmul_bias_act", {g.describe(last), g.describe(u)},
                        fmt::format("bias add has {} users, activation not fused", uses[static_cast<size_t>(last)])});
    }
    root[static_cast<size_t>(last)] = c;
    any = true;
  }
  if (!any) return m;

  detail::Rewriter rw(g);
  for (ValueId v = 0; v < g.size(); ++v) {
    const Chain& c = root[static_cast<size_t>(v)];
    if (c.mm == kNoValue) {
      rw.copy(v);
      continue;
    }
    const Node& mm = g.node(c.mm);
    std::vector<ValueId> in{rw.map(mm.inputs[0]), rw.map(mm.inputs[1])};
    if (c.bias != kNoValue) in.push_back(rw.map(c.bias));
    rw.b().label(mm.label);
    rw.set(v, rw.b().op(OpKind::FusedMatMulBiasAct, std::move(in),
                        FusedMatMulAttrs{c.act, c.bias != kNoValue, mm.attr<MatMulAttrs>().transpose_b}));
    if (report) report->record("matmul_bias_act");
  }
  return eliminate_dead_code(MirModule{rw.finish_ok()});
}

}  // namespace rlx::compile
