// Symbolic dims: binding symbols to sizes, re-inferring a graph, manifests.
#include <algorithm>
#include <set>

#include "rlx/base/hash.h"
#include "rlx/ir/module.h"

namespace rlx::ir {
namespace {

// Evaluates `d` under `b` in place; false (d unchanged) when a coefficient overflows.
bool apply_checked(const DimBinding& b, Dim& d) {
  Dim r(d.coeff);
  for (SymbolId s : d.syms) {
    if (!s) continue;
    auto m = Dim::mul(r, b.has(s) ? Dim(b.get(s)) : Dim::symbol(s));
    if (!m) return false;
    r = *m;
  }
  d = r;
  return true;
}

bool apply_checked(const DimBinding& b, Shape& s) {
  for (Dim& d : s.dims())
    if (!apply_checked(b, d)) return false;
  return true;
}

// Applies a binding to every Dim/Shape field inside attrs (reshape/expand targets,
// narrow lengths). Other field types are left alone. `ok` turns false on overflow.
struct AttrBinder {
  const DimBinding& b;
  bool& ok;
  void operator()(const char*, Dim& d) { ok = apply_checked(b, d) && ok; }
  void operator()(const char*, Shape& s) { ok = apply_checked(b, s) && ok; }
  template <typename T>
  void operator()(const char*, T&) {}
};

void collect(const Dim& d, std::set<SymbolId>& out) {
  for (SymbolId s : d.syms)
    if (s) out.insert(s);
}

struct AttrSymbols {
  std::set<SymbolId>& out;
  void operator()(const char*, const Dim& d) { collect(d, out); }
  void operator()(const char*, const Shape& s) {
    for (const Dim& d : s) collect(d, out);
  }
  template <typename T>
  void operator()(const char*, const T&) {}
};

std::string entry_name(const Node& n) {
  if (auto* a = std::get_if<InputAttrs>(&n.attrs)) return a->name;
  if (auto* p = std::get_if<ParamAttrs>(&n.attrs)) return p->name;
  if (auto* h = std::get_if<HandleAttrs>(&n.attrs)) return h->name;
  return n.label;
}

}  // namespace

Dim DimBinding::apply(const Dim& d) const {
  Dim r = d;
  const bool ok = apply_checked(*this, r);
  RLX_ASSERT(ok);  // bind() reports overflow as an error before getting here
  return r;
}

Shape DimBinding::apply(const Shape& s) const {
  std::vector<Dim> out;
  out.reserve(static_cast<size_t>(s.rank()));
  for (const Dim& d : s) out.push_back(apply(d));
  return Shape(std::move(out));
}

std::string DimBinding::to_string() const {
  std::vector<std::pair<std::string, int64_t>> named;
  for (const auto& [s, v] : values_) named.emplace_back(symbol_name(s), v);
  std::sort(named.begin(), named.end());
  std::string out;
  for (const auto& [n, v] : named) {
    if (!out.empty()) out += ",";
    out += n + "=" + std::to_string(v);
  }
  return out;
}

uint64_t DimBinding::stable_hash() const { return rlx::stable_hash(to_string()); }

Expected<Graph> bind(const Graph& g, const DimBinding& binding) {
  for (const auto& [s, v] : binding.values())
    if (v < 0) return Error::invalid_argument("binding {}={} is negative", symbol_name(s), v);
  Graph out;
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    Attrs attrs = n.attrs;
    bool ok = true;
    std::visit([&](auto& a) { a.fields(AttrBinder{binding, ok}); }, attrs);
    TensorType declared{n.dtype, n.shape};
    if (!ok || !apply_checked(binding, declared.shape))
      return Error::verify("binding {}: {}: a dim overflows int64", binding.to_string(), g.describe(v));
    auto id = out.add(n.op, n.inputs, std::move(attrs), declared, n.label);
    if (!id) return Error::verify("binding {}: {}", binding.to_string(), id.error().message());
  }
  out.set_outputs(g.outputs());
  return out;
}

std::vector<SymbolId> free_symbols(const Graph& g) {
  std::set<SymbolId> syms;
  for (const Node& n : g.nodes()) {
    for (const Dim& d : n.shape) collect(d, syms);
    std::visit([&](const auto& a) { const_cast<std::decay_t<decltype(a)>&>(a).fields(AttrSymbols{syms}); }, n.attrs);
  }
  std::vector<SymbolId> out(syms.begin(), syms.end());
  std::sort(out.begin(), out.end(), [](SymbolId a, SymbolId b) { return symbol_name(a) < symbol_name(b); });
  return out;
}

Expected<BindingManifest> binding_manifest(const Graph& g, const DimBinding& binding) {
  ASSIGN_OR_RETURN(Graph bound, bind(g, binding));
  BindingManifest m;
  auto entry = [&](ValueId v, std::string name) {
    const Node& n = bound.node(v);
    ManifestEntry e;
    e.name = std::move(name);
    e.value = v;
    e.type = n.type();
    const auto count = n.shape.num_elements();
    e.bytes = count ? dtype_bytes(n.dtype, *count).value_or(-1) : -1;
    return e;
  };
  for (ValueId v : bound.inputs()) m.inputs.push_back(entry(v, entry_name(bound.node(v))));
  for (ValueId v : bound.params()) m.params.push_back(entry(v, entry_name(bound.node(v))));
  for (ValueId v : bound.handles()) m.handles.push_back(entry(v, entry_name(bound.node(v))));
  for (const GraphOutput& o : bound.outputs()) m.outputs.push_back(entry(o.value, o.name));
  return m;
}

std::string BindingManifest::to_string() const {
  std::string s;
  auto section = [&](const char* title, const std::vector<ManifestEntry>& es) {
    for (const ManifestEntry& e : es)
      s += fmt::format("{} {} {} ({} bytes)\n", title, e.name, e.type.to_string(), e.bytes);
  };
  section("input", inputs);
  section("param", params);
  section("handle", handles);
  section("output", outputs);
  return s;
}

}  // namespace rlx::ir
