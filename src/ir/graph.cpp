// Graph construction (with inference), the verifier and the stable fingerprint.
#include "rlx/ir/graph.h"

#include <set>

#include "rlx/base/hash.h"

namespace rlx::ir {

Expected<ValueId> Graph::add(OpKind op, std::vector<ValueId> inputs, Attrs attrs, const TensorType& declared,
                             std::string label) {
  std::vector<TensorType> types;
  types.reserve(inputs.size());
  for (ValueId v : inputs) {
    if (v < 0 || v >= size())
      return Error::verify("{}{}: input %{} does not exist", op_name(op), label.empty() ? "" : " '" + label + "'", v);
    types.push_back(node(v).type());
  }
  auto t = infer_type(op, attrs, types, declared);
  if (!t) {
    return Error::verify("node %{} ({}{}): {}", size(), op_name(op), label.empty() ? "" : " '" + label + "'",
                         t.error().message());
  }
  Node n;
  n.op = op;
  n.dtype = t->dtype;
  n.shape = std::move(t->shape);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.label = std::move(label);
  nodes_.push_back(std::move(n));
  return size() - 1;
}

ValueId Graph::add_unchecked(Node node) {
  nodes_.push_back(std::move(node));
  return size() - 1;
}

void Graph::add_output(ValueId v, std::string name) {
  if (name.empty()) name = "out" + std::to_string(outputs_.size());
  outputs_.push_back({v, std::move(name)});
}

std::vector<ValueId> Graph::of_kind(OpKind k) const {
  std::vector<ValueId> out;
  for (ValueId i = 0; i < size(); ++i)
    if (nodes_[i].op == k) out.push_back(i);
  return out;
}

std::vector<int32_t> Graph::use_counts() const {
  std::vector<int32_t> uses(nodes_.size(), 0);
  for (const Node& n : nodes_)
    for (ValueId v : n.inputs)
      if (v >= 0 && v < size()) ++uses[v];
  for (const GraphOutput& o : outputs_)
    if (o.value >= 0 && o.value < size()) ++uses[o.value];
  return uses;
}

std::string Graph::describe(ValueId v) const {
  if (v < 0 || v >= size()) return fmt::format("%{} (out of range)", v);
  const Node& n = node(v);
  std::string name = n.label;
  if (name.empty()) {
    if (auto* a = std::get_if<InputAttrs>(&n.attrs)) name = a->name;
    else if (auto* p = std::get_if<ParamAttrs>(&n.attrs)) name = p->name;
    else if (auto* h = std::get_if<HandleAttrs>(&n.attrs)) name = h->name;
  }
  if (name.empty()) return fmt::format("%{} ({})", v, op_name(n.op));
  return fmt::format("%{} ({} '{}')", v, op_name(n.op), name);
}

int in_place_input(const Node& n) {
  if (n.op == OpKind::UpdateSlice) return 0;
  if (n.op == OpKind::FusedLinear && n.attr<FusedLinearAttrs>().cache_write)
    return n.attr<FusedLinearAttrs>().cache_input();
  return -1;
}

Status verify(const Graph& g, bool allow_hir) {
  std::set<std::pair<int, std::string>> boundary_names;
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    if (!allow_hir && is_hir_op(n.op))
      return Error::verify("{}: HIR op in a MIR graph (lower it first)", g.describe(v));
    std::vector<TensorType> types;
    for (ValueId in : n.inputs) {
      if (in < 0 || in >= v)
        return Error::verify("{}: input %{} is not defined before its use", g.describe(v), in);
      types.push_back(g.node(in).type());
    }
    auto t = infer_type(n.op, n.attrs, types, n.type());
    if (!t) return Error::verify("{}: {}", g.describe(v), t.error().message());
    if (t->dtype != n.dtype || t->shape != n.shape)
      return Error::verify("{}: stored type {} but inputs give {}", g.describe(v), n.type().to_string(),
                           t->to_string());
    if (n.op == OpKind::FusedLinear && in_place_input(n) >= 0 &&
        g.node(n.inputs[static_cast<size_t>(in_place_input(n))]).op != OpKind::Handle)
      return Error::verify("{}: the cache it writes must be a handle, got {}", g.describe(v),
                           g.describe(n.inputs[static_cast<size_t>(in_place_input(n))]));
    if (updates_state(n.op) && g.node(n.inputs[0]).op != OpKind::Handle)
      return Error::verify("{}: its state input must be a handle (it is updated in place), got {}", g.describe(v),
                           g.describe(n.inputs[0]));
    std::string bname;
    if (auto* a = std::get_if<InputAttrs>(&n.attrs)) bname = a->name;
    else if (auto* p = std::get_if<ParamAttrs>(&n.attrs)) {
      bname = p->name;
      const bool whole = p->shard_parts == 1 && p->shard_axis == -1;
      const bool part = p->shard_parts > 1 && p->shard_axis >= 0 && p->shard_axis < n.shape.rank();
      if (!whole && !part)
        return Error::verify("{}: shard_axis={} shard_parts={} is no split of a rank-{} weight", g.describe(v),
                             p->shard_axis, p->shard_parts, n.shape.rank());
    }
    else if (auto* h = std::get_if<HandleAttrs>(&n.attrs)) bname = h->name;
    if (n.op == OpKind::Input || n.op == OpKind::Param || n.op == OpKind::Handle) {
      if (bname.empty()) return Error::verify("{}: boundary node needs a name", g.describe(v));
      if (!boundary_names.insert({static_cast<int>(n.op), bname}).second)
        return Error::verify("{}: duplicate {} name '{}'", g.describe(v), op_name(n.op), bname);
    }
  }
  if (g.outputs().empty()) return Error::verify("graph has no outputs");
  std::set<std::string> out_names;
  for (const GraphOutput& o : g.outputs()) {
    if (o.value < 0 || o.value >= g.size())
      return Error::verify("output '{}' refers to missing value %{}", o.name, o.value);
    if (!out_names.insert(o.name).second) return Error::verify("duplicate output name '{}'", o.name);
  }
  return {};
}

namespace {

// Feeds every attribute field into the hasher, by type.
struct AttrHasher {
  StableHasher& h;
  void operator()(const char* name, const std::string& v) { h.str(name); h.str(v); }
  void operator()(const char* name, const bool& v) { h.str(name); h.u64(v); }
  void operator()(const char* name, const int64_t& v) { h.str(name); h.i64(v); }
  void operator()(const char* name, const double& v) { h.str(name); h.f64(v); }
  void operator()(const char* name, const DType& v) { h.str(name); h.str(dtype_name(v)); }
  void operator()(const char* name, const std::vector<int64_t>& v) {
    h.str(name);
    h.u64(v.size());
    for (int64_t x : v) h.i64(x);
  }
  void operator()(const char* name, const std::vector<double>& v) {
    h.str(name);
    h.u64(v.size());
    for (double x : v) h.f64(x);
  }
  void dim(const Dim& d) {
    h.i64(d.coeff);
    for (SymbolId s : d.syms) h.str(s ? symbol_name(s) : "");
  }
  void operator()(const char* name, const Dim& v) { h.str(name); dim(v); }
  void operator()(const char* name, const Shape& v) {
    h.str(name);
    h.u64(static_cast<uint64_t>(v.rank()));
    for (const Dim& d : v) dim(d);
  }
  void operator()(const char* name, const ConstantData& v) {
    h.str(name);
    if (v.bytes) h.bytes(v.bytes->data(), v.bytes->size());
  }
  void operator()(const char* name, const std::vector<RegionStep>& steps) {
    h.str(name);
    for (const RegionStep& s : steps) {
      h.str(op_name(s.op));
      h.u64(s.kind);
      h.str(dtype_name(s.dtype));
      for (int32_t a : s.args) h.i64(a);
      h.str(";");
    }
  }
  template <typename E>
  std::enable_if_t<std::is_enum_v<E>> operator()(const char* name, const E& v) {
    h.str(name);
    h.str(enum_name(v));
  }
};

}  // namespace

uint64_t fingerprint(const Graph& g) {
  StableHasher h;
  h.str("rlx.graph.v1");
  for (const Node& n : g.nodes()) {
    h.str(op_name(n.op));
    AttrHasher ah{h};
    ah("type", n.shape);
    h.str(dtype_name(n.dtype));
    h.u64(n.inputs.size());
    for (ValueId v : n.inputs) h.i64(v);
    std::visit([&](const auto& a) { const_cast<std::decay_t<decltype(a)>&>(a).fields(ah); }, n.attrs);
  }
  for (const GraphOutput& o : g.outputs()) {
    h.i64(o.value);
    h.str(o.name);
  }
  return h.digest();
}

}  // namespace rlx::ir
