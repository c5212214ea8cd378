// Common-subexpression elimination: a node equal to an earlier one (op, attrs, type and
// already-merged inputs) is replaced by it. Boundary nodes, UpdateSlice (a write) and
// Custom (maybe impure) are never merged. Semantics: pure ops give equal results.
#include <unordered_map>

#include "rewriter.h"
#include "rlx/base/hash.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

namespace {

bool mergeable(OpKind k) {
  return k != OpKind::Input && k != OpKind::Param && k != OpKind::Handle && k != OpKind::UpdateSlice &&
         k != OpKind::Custom && !updates_state(k);
}

// Cheap key: op, type, inputs (and constant size); attrs are compared exactly on a hit.
uint64_t key_of(const Node& n, const std::vector<ValueId>& inputs) {
  StableHasher h;
  h.u64(static_cast<uint64_t>(n.op));
  h.u64(static_cast<uint64_t>(n.dtype));
  for (const Dim& d : n.shape) {
    h.i64(d.coeff);
    h.u64(d.syms[0]);
    h.u64(d.syms[1]);
  }
  h.str("|");
  for (ValueId v : inputs) h.i64(v);
  if (const auto* c = std::get_if<ConstantAttrs>(&n.attrs))
    if (c->data.bytes) h.bytes(c->data.bytes->data(), c->data.bytes->size());
  return h.digest();
}

}  // namespace

MirModule eliminate_common_subexpressions(const MirModule& m) {
  const Graph& g = m.graph;
  detail::Rewriter rw(g);
  std::unordered_multimap<uint64_t, ValueId> seen;  // key -> rebuilt id
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    if (!mergeable(n.op) || in_place_input(n) >= 0) {
      rw.copy(v);
      continue;
    }
    std::vector<ValueId> inputs;
    for (ValueId in : n.inputs) inputs.push_back(rw.map(in));
    const uint64_t key = key_of(n, inputs);
    bool merged = false;
    auto [lo, hi] = seen.equal_range(key);
    for (auto it = lo; it != hi; ++it) {
      const Node& other = rw.dst().node(it->second);
      if (other.op == n.op && other.dtype == n.dtype && other.shape == n.shape && other.inputs == inputs &&
          attrs_equal(other.attrs, n.attrs)) {
        rw.set(v, it->second);
        merged = true;
        break;
      }
    }
    if (!merged) seen.emplace(key, rw.copy(v));
  }
  return MirModule{rw.finish_ok()};
}

}  // namespace rlx::compile
