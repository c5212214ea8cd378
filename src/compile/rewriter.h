// Internal helper for passes: rebuilds a graph node by node into a GraphBuilder, keeping
// a map from source value ids to rebuilt ones. Untouched nodes are copied with their
// types; new nodes go through inference (GraphBuilder), so a bad rewrite names the node.
#pragma once

#include <optional>
#include <vector>

#include "rlx/compile/passes.h"
#include "rlx/ir/builder.h"

namespace rlx::compile::detail {

class Rewriter {
 public:
  explicit Rewriter(const ir::Graph& src) : src_(src), map_(static_cast<size_t>(src.size()), ir::kNoValue) {}

  const ir::Graph& src() const { return src_; }
  ir::GraphBuilder& b() { return b_; }
  ir::Graph& dst() { return b_.graph(); }

  ir::ValueId map(ir::ValueId old) const { return map_[static_cast<size_t>(old)]; }
  bool mapped(ir::ValueId old) const { return map(old) != ir::kNoValue; }
  void set(ir::ValueId old, ir::ValueId neu) { map_[static_cast<size_t>(old)] = neu; }

  /// Copies source node `old` with its inputs remapped, keeping its type; maps it.
  ir::ValueId copy(ir::ValueId old) {
    ir::Node n = src_.node(old);
    for (ir::ValueId& in : n.inputs) in = map(in);
    const ir::ValueId id = b_.graph().add_unchecked(std::move(n));
    set(old, id);
    return id;
  }
  /// Copies every source node not yet mapped, in order.
  void copy_rest() {
    for (ir::ValueId v = 0; v < src_.size(); ++v)
      if (!mapped(v)) copy(v);
  }

  /// The rebuilt graph with the source outputs remapped, or the first builder error.
  Expected<ir::Graph> finish() {
    if (const auto& e = b_.error()) return *e;
    std::vector<ir::GraphOutput> outs = src_.outputs();
    for (ir::GraphOutput& o : outs) o.value = map(o.value);
    ir::Graph g = std::move(b_.graph());
    g.set_outputs(std::move(outs));
    return g;
  }
  /// finish() for passes whose rewrites cannot fail on verified input (asserts).
  ir::Graph finish_ok() {
    auto g = finish();
    if (!g) abort_with_error(g.error().with_context("internal: pass produced an ill-typed node"));
    return std::move(g).value();
  }

 private:
  const ir::Graph& src_;
  ir::GraphBuilder b_;
  std::vector<ir::ValueId> map_;
};

/// Users of every value, in node order (graph outputs are not listed; see use_counts).
inline std::vector<std::vector<ir::ValueId>> users_of(const ir::Graph& g) {
  std::vector<std::vector<ir::ValueId>> users(static_cast<size_t>(g.size()));
  for (ir::ValueId v = 0; v < g.size(); ++v)
    for (ir::ValueId in : g.node(v).inputs) users[static_cast<size_t>(in)].push_back(v);
  return users;
}

/// The rebuild step of a matching pass: nodes whose slot in `at` is empty are copied;
/// for the others `replace(rw, v, match)` maps v (rw.set with the fused node, or
/// rw.copy to keep it after all); then what became dead is dropped.
template <class Match, class Replace>
ir::MirModule rebuild_with_matches(const ir::Graph& g, const std::vector<std::optional<Match>>& at,
                                   Replace&& replace) {
  Rewriter rw(g);
  for (ir::ValueId v = 0; v < g.size(); ++v) {
    if (at[static_cast<size_t>(v)]) replace(rw, v, *at[static_cast<size_t>(v)]);
    else rw.copy(v);
  }
  return eliminate_dead_code(ir::MirModule{rw.finish_ok()});
}

}  // namespace rlx::compile::detail
