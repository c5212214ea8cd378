// The graph shared by all three tiers: an append-only SSA list of nodes in
// topological order (a node's inputs always come before it). HIR, MIR and LIR
// modules wrap a Graph (see module.h). Shapes and dtypes are inferred when a node
// is added, so an ill-typed graph cannot be built without an error naming the node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/op.h"

namespace rlx::ir {

/// Index of a node (= its single output value) in a Graph.
using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
  friend bool operator==(const TensorType&, const TensorType&) = default;
  std::string to_string() const;  ///< "f32[SEQ, 64]"
};

struct Node {
  OpKind op = OpKind::Input;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<ValueId> inputs;
  Attrs attrs;
  std::string label;  ///< optional human name (e.g. "blk.0.attn_q"), carried into reports

  TensorType type() const { return {dtype, shape}; }
  template <typename A>
  const A& attr() const { return std::get<A>(attrs); }
};

struct GraphOutput {
  ValueId value = kNoValue;
  std::string name;
};

/// The input whose storage node `n` writes in place and returns as its own result:
/// update_slice's destination and a cache-writing fused_linear's cache (written rows of
/// a handle); -1 for every other node. Such nodes are writes: never removed or merged.
int in_place_input(const Node& n);

/// Shape/dtype inference for one op: the result type given input types and attrs.
/// For ops whose result type is not determined by their inputs (Input, Param,
/// Constant, Handle, Cast, Custom) `declared` supplies it.
Expected<TensorType> infer_type(OpKind op, const Attrs& attrs, const std::vector<TensorType>& inputs,
                                const TensorType& declared);

class Graph {
 public:
  /// Appends a node after inferring its type; the error names the op and label.
  /// `declared` is the result type for Input/Param/Constant/Handle/Cast/Custom.
  Expected<ValueId> add(OpKind op, std::vector<ValueId> inputs, Attrs attrs, const TensorType& declared = {},
                        std::string label = {});
  /// Appends a node whose dtype/shape are already known (used by passes and the
  /// parser, which then verify). No inference.
  ValueId add_unchecked(Node node);

  void add_output(ValueId v, std::string name = {});
  void set_outputs(std::vector<GraphOutput> outputs) { outputs_ = std::move(outputs); }

  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }
  const Node& node(ValueId v) const { return nodes_[static_cast<size_t>(v)]; }
  Node& mutable_node(ValueId v) { return nodes_[static_cast<size_t>(v)]; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }

  /// Value ids of nodes of a given boundary kind, in order.
  std::vector<ValueId> inputs() const { return of_kind(OpKind::Input); }
  std::vector<ValueId> params() const { return of_kind(OpKind::Param); }
  std::vector<ValueId> handles() const { return of_kind(OpKind::Handle); }
  std::vector<ValueId> of_kind(OpKind k) const;
  /// Number of users of each value (graph outputs count as users).
  std::vector<int32_t> use_counts() const;

  /// "%12 (matmul 'blk.0.attn_q')" for error messages.
  std::string describe(ValueId v) const;

 private:
  std::vector<Node> nodes_;
  std::vector<GraphOutput> outputs_;
};

/// Checks every invariant: inputs precede their users, arity, attrs type per op,
/// re-inferred types equal the stored ones, outputs set and valid, boundary names
/// unique. `allow_hir` admits HIR ops. Errors name the node.
Status verify(const Graph& g, bool allow_hir = false);

/// Stable 64-bit fingerprint of the graph structure (ops, attrs, types, edges,
/// outputs, constant bytes; not labels). Same graph => same value in every process.
uint64_t fingerprint(const Graph& g);

}  // namespace rlx::ir
