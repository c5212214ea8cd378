// The binary LIR codec (see rlx/ir/binary.h): a writer and a bounds-checked reader of
// varints, strings, dims and shapes, and one attrs visitor each way driven by the attrs
// types' `fields()` lists.
#include "rlx/ir/binary.h"

#include <cstring>
#include <type_traits>

#include "rlx/base/hash.h"
#include "rlx/ir/op.h"

namespace rlx::ir {
namespace {

constexpr std::string_view kMagic = "RLXLIR";

// [A-Za-z_][A-Za-z0-9_]{0,63}: what the IR's symbol names look like; anything else in a
// blob is corruption (and must not grow the process-wide symbol table).
bool symbol_name_ok(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

class Writer {
 public:
  std::string out;

  void u8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void uv(uint64_t v) {
    while (v >= 0x80) {
      u8(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    u8(static_cast<uint8_t>(v));
  }
  void iv(int64_t v) { uv((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void f64(double v) {
    char b[8];
    std::memcpy(b, &v, 8);
    out.append(b, 8);
  }
  void str(std::string_view s) {
    uv(s.size());
    out.append(s);
  }
  void dim(const Dim& d) {
    iv(d.coeff);
    u8(static_cast<uint8_t>(d.n_syms()));
    for (int i = 0; i < d.n_syms(); ++i) str(symbol_name(d.syms[i]));
  }
  void shape(const Shape& s) {
    uv(static_cast<uint64_t>(s.rank()));
    for (const Dim& d : s) dim(d);
  }
  void slot(const BufferSlot& s) {
    u8(static_cast<uint8_t>(s.kind));
    iv(s.offset);
    iv(s.size);
    iv(s.root);
  }
};

// Attribute fields, by type.
struct AttrWriter {
  Writer& w;
  void operator()(const char*, const std::string& v) { w.str(v); }
  void operator()(const char*, const bool& v) { w.u8(v ? 1 : 0); }
  void operator()(const char*, const int64_t& v) { w.iv(v); }
  void operator()(const char*, const double& v) { w.f64(v); }
  void operator()(const char*, const DType& v) { w.u8(static_cast<uint8_t>(v)); }
  void operator()(const char*, const Dim& v) { w.dim(v); }
  void operator()(const char*, const Shape& v) { w.shape(v); }
  void operator()(const char*, const std::vector<int64_t>& v) {
    w.uv(v.size());
    for (int64_t x : v) w.iv(x);
  }
  void operator()(const char*, const std::vector<double>& v) {
    w.uv(v.size());
    for (double x : v) w.f64(x);
  }
  void operator()(const char*, const ConstantData& v) {
    const size_t n = v.bytes ? v.bytes->size() : 0;
    w.uv(n);
    if (n) w.out.append(reinterpret_cast<const char*>(v.bytes->data()), n);
  }
  void operator()(const char*, const std::vector<RegionStep>& steps) {
    w.uv(steps.size());
    for (const RegionStep& s : steps) {
      w.u8(static_cast<uint8_t>(s.op));
      w.u8(s.kind);
      w.u8(static_cast<uint8_t>(s.dtype));
      w.uv(s.args.size());
      for (int32_t a : s.args) w.iv(a);
    }
  }
  template <typename E>
  std::enable_if_t<std::is_enum_v<E>> operator()(const char*, const E& v) {
    w.u8(static_cast<uint8_t>(v));
  }
};

// Bounds-checked reads with a sticky error: after the first failure every read returns
// a zero value and `err` names the offset and what was being read.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  std::optional<Error> err;
  bool ok() const { return !err; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }

  void fail(std::string_view what) {
    if (!err) err = Error::invalid_file("LIR binary: {} at byte {}", what, pos_);
  }
  uint8_t u8(std::string_view what) {
    if (!ok() || pos_ >= in_.size()) {
      fail(fmt::format("truncated reading {}", what));
      return 0;
    }
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint64_t uv(std::string_view what) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = u8(what);
      if (!ok()) return 0;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail(fmt::format("overlong varint in {}", what));
    return 0;
  }
  int64_t iv(std::string_view what) {
    const uint64_t u = uv(what);
    return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
  }
  double f64(std::string_view what) {
    if (!ok() || remaining() < 8) {
      fail(fmt::format("truncated reading {}", what));
      return 0;
    }
    double v;
    std::memcpy(&v, in_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  /// A count of items of at least `min_item_bytes` each; never more than fit.
  size_t count(std::string_view what, size_t min_item_bytes = 1) {
    const uint64_t n = uv(what);
    if (ok() && n > remaining() / min_item_bytes) {
      fail(fmt::format("{} count {} exceeds the remaining {} bytes", what, n, remaining()));
      return 0;
    }
    return ok() ? static_cast<size_t>(n) : 0;
  }
  std::string_view bytes(std::string_view what) {
    const size_t n = count(what);
    if (!ok()) return {};
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string str(std::string_view what) { return std::string(bytes(what)); }
  template <typename E>
  E enum_value(std::string_view what, size_t n_values) {
    const uint8_t v = u8(what);
    if (ok() && v >= n_values) fail(fmt::format("{} value {} out of range", what, v));
    return ok() ? static_cast<E>(v) : E{};
  }
  DType dtype(std::string_view what) { return enum_value<DType>(what, kNumDTypes); }
  Dim dim(std::string_view what) {
    Dim d(iv(what));
    const uint8_t n = u8(what);
    if (n > 2) fail(fmt::format("{} has {} symbols", what, n));
    for (uint8_t i = 0; i < n && ok(); ++i) {
      const std::string name = str(what);
      const std::optional<SymbolId> s = symbol_name_ok(name) ? try_intern_symbol(name) : std::nullopt;
      if (!s) {
        fail(fmt::format("{}: bad symbol", what));
        break;
      }
      if (i == 0) {
        d = Dim::symbol(*s, d.coeff);
      } else {
        const std::optional<Dim> m = Dim::mul(d, Dim::symbol(*s));
        if (!m) fail(fmt::format("{}: bad symbol product", what));
        else d = *m;
      }
    }
    return ok() ? d : Dim(0);
  }
  Shape shape(std::string_view what) {
    const size_t rank = count(what, 2);
    std::vector<Dim> dims;
    dims.reserve(rank);
    for (size_t i = 0; i < rank && ok(); ++i) dims.push_back(dim(what));
    return Shape(std::move(dims));
  }
  BufferSlot slot(std::string_view what) {
    BufferSlot s;
    s.kind = enum_value<SlotKind>(what, static_cast<size_t>(SlotKind::kConstant) + 1);
    s.offset = iv(what);
    s.size = iv(what);
    const int64_t root = iv(what);
    if (root < kNoValue || root > INT32_MAX) fail(fmt::format("{}: root out of range", what));
    s.root = static_cast<ValueId>(root);
    return s;
  }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

struct AttrReader {
  Reader& r;
  void operator()(const char* name, std::string& v) { v = r.str(name); }
  void operator()(const char* name, bool& v) {
    const uint8_t b = r.u8(name);
    if (b > 1) r.fail(fmt::format("attr {} is not a bool", name));
    v = b == 1;
  }
  void operator()(const char* name, int64_t& v) { v = r.iv(name); }
  void operator()(const char* name, double& v) { v = r.f64(name); }
  void operator()(const char* name, DType& v) { v = r.dtype(name); }
  void operator()(const char* name, Dim& v) { v = r.dim(name); }
  void operator()(const char* name, Shape& v) { v = r.shape(name); }
  void operator()(const char* name, std::vector<int64_t>& v) {
    const size_t n = r.count(name);
    v.clear();
    for (size_t i = 0; i < n && r.ok(); ++i) v.push_back(r.iv(name));
  }
  void operator()(const char* name, std::vector<double>& v) {
    const size_t n = r.count(name, 8);
    v.clear();
    for (size_t i = 0; i < n && r.ok(); ++i) v.push_back(r.f64(name));
  }
  void operator()(const char* name, ConstantData& v) {
    const std::string_view b = r.bytes(name);
    v.bytes = std::make_shared<const std::vector<uint8_t>>(b.begin(), b.end());
  }
  void operator()(const char* name, std::vector<RegionStep>& steps) {
    const size_t n = r.count(name, 4);
    steps.clear();
    for (size_t i = 0; i < n && r.ok(); ++i) {
      RegionStep s;
      s.op = r.enum_value<OpKind>(name, kNumOpKinds);
      s.kind = r.u8(name);
      s.dtype = r.dtype(name);
      const size_t na = r.count(name);
      for (size_t a = 0; a < na && r.ok(); ++a) {
        const int64_t x = r.iv(name);
        if (x < INT32_MIN || x > INT32_MAX) r.fail(fmt::format("{}: step argument out of range", name));
        s.args.push_back(static_cast<int32_t>(x));
      }
      steps.push_back(std::move(s));
    }
  }
  template <typename E>
  std::enable_if_t<std::is_enum_v<E>> operator()(const char* name, E& v) {
    v = r.enum_value<E>(name, enum_names(E{}).size());
  }
};

void write_entries(Writer& w, const std::vector<ManifestEntry>& es) {
  w.uv(es.size());
  for (const ManifestEntry& e : es) {
    w.str(e.name);
    w.iv(e.value);
    w.u8(static_cast<uint8_t>(e.type.dtype));
    w.shape(e.type.shape);
    w.iv(e.bytes);
    w.slot(e.slot);
  }
}

std::vector<ManifestEntry> read_entries(Reader& r, int32_t n_values) {
  std::vector<ManifestEntry> es(r.count("manifest entries", 8));
  for (ManifestEntry& e : es) {
    if (!r.ok()) break;
    e.name = r.str("manifest name");
    const int64_t v = r.iv("manifest value");
    if (v < 0 || v >= n_values) r.fail("manifest value out of range");
    e.value = static_cast<ValueId>(v);
    e.type.dtype = r.dtype("manifest dtype");
    e.type.shape = r.shape("manifest shape");
    e.bytes = r.iv("manifest bytes");
    e.slot = r.slot("manifest slot");
  }
  return es;
}

}  // namespace

uint64_t lir_schema_fingerprint() {
  static const uint64_t fingerprint = [] {
    StableHasher h;
    for (int k = 0; k < kNumOpKinds; ++k) {
      const auto op = static_cast<OpKind>(k);
      h.str(op_name(op));
      Attrs attrs = default_attrs(op);
      std::visit([&](auto& a) {
        a.fields([&](const char* name, auto& member) {
          h.str(name);
          h.u64(sizeof(member));
        });
      }, attrs);
    }
    for (int d = 0; d < kNumDTypes; ++d) h.str(dtype_name(static_cast<DType>(d)));
    auto table = [&](const std::vector<std::string_view>& names) {
      h.u64(names.size());
      for (std::string_view n : names) h.str(n);
    };
    table(enum_names(ActKind{}));
    table(enum_names(BinaryKind{}));
    table(enum_names(CompareKind{}));
    table(enum_names(ReduceKind{}));
    table(enum_names(MaskKind{}));
    table(enum_names(RopeLayout{}));
    table(enum_names(RopeScaling{}));
    table(enum_names(MoeGating{}));
    table(enum_names(InterpMode{}));
    return h.digest();
  }();
  return fingerprint;
}

std::string encode_lir_binary(const LirModule& m) {
  Writer w;
  w.out.reserve(static_cast<size_t>(m.graph.size()) * 48 + 256);
  w.out.append(kMagic);
  w.uv(kLirBinaryVersion);
  w.uv(lir_schema_fingerprint());
  const Graph& g = m.graph;
  w.uv(static_cast<uint64_t>(g.size()));
  for (const Node& n : g.nodes()) {
    w.u8(static_cast<uint8_t>(n.op));
    w.u8(static_cast<uint8_t>(n.dtype));
    w.shape(n.shape);
    w.uv(n.inputs.size());
    for (ValueId v : n.inputs) w.iv(v);
    w.str(n.label);
    AttrWriter aw{w};
    std::visit([&](const auto& a) { const_cast<std::decay_t<decltype(a)>&>(a).fields(aw); }, n.attrs);
  }
  w.uv(g.outputs().size());
  for (const GraphOutput& o : g.outputs()) {
    w.iv(o.value);
    w.str(o.name);
  }
  const BufferPlan& p = m.plan;
  w.iv(p.alignment);
  w.iv(p.arena_size);
  w.iv(p.unshared_bytes);
  w.uv(p.slots.size());
  for (const BufferSlot& s : p.slots) w.slot(s);
  w.uv(p.schedule.size());
  for (ValueId v : p.schedule) w.iv(v);
  write_entries(w, m.manifest.inputs);
  write_entries(w, m.manifest.params);
  write_entries(w, m.manifest.handles);
  write_entries(w, m.manifest.outputs);
  w.uv(m.dynamic_symbols.size());
  for (SymbolId s : m.dynamic_symbols) w.str(symbol_name(s));
  return std::move(w.out);
}

Expected<LirModule> decode_lir_binary(std::string_view bytes) {
  if (bytes.substr(0, kMagic.size()) != kMagic) return Error::invalid_file("LIR binary: bad magic");
  Reader r(bytes.substr(kMagic.size()));
  const uint64_t version = r.uv("version");
  if (r.ok() && version != kLirBinaryVersion)
    return Error::invalid_file("LIR binary: version {} (this build reads {})", version, kLirBinaryVersion);
  const uint64_t schema = r.uv("schema fingerprint");
  if (r.ok() && schema != lir_schema_fingerprint())
    return Error::invalid_file("LIR binary: written by a build with other op / attribute tables (schema {:016x}, "
                               "this build {:016x})", schema, lir_schema_fingerprint());
  LirModule m;
  Graph& g = m.graph;
  const size_t n_nodes = r.count("node count", 5);
  g.mutable_nodes().reserve(n_nodes);
  for (size_t i = 0; i < n_nodes && r.ok(); ++i) {
    Node n;
    n.op = r.enum_value<OpKind>("op", kNumOpKinds);
    n.dtype = r.dtype("dtype");
    n.shape = r.shape("shape");
    const size_t n_in = r.count("inputs");
    n.inputs.reserve(n_in);
    for (size_t k = 0; k < n_in && r.ok(); ++k) {
      const int64_t v = r.iv("input");
      if (v < 0 || v >= static_cast<int64_t>(i)) r.fail(fmt::format("input %{} of %{} is not defined before it", v, i));
      n.inputs.push_back(static_cast<ValueId>(v));
    }
    n.label = r.str("label");
    if (!r.ok()) break;
    n.attrs = default_attrs(n.op);
    AttrReader ar{r};
    std::visit([&](auto& a) { a.fields(ar); }, n.attrs);
    g.add_unchecked(std::move(n));
  }
  std::vector<GraphOutput> outs(r.count("output count", 2));
  for (GraphOutput& o : outs) {
    const int64_t v = r.iv("output value");
    if (v < 0 || v >= g.size()) r.fail("output value out of range");
    o.value = static_cast<ValueId>(v);
    o.name = r.str("output name");
  }
  g.set_outputs(std::move(outs));
  BufferPlan& p = m.plan;
  p.alignment = r.iv("alignment");
  p.arena_size = r.iv("arena size");
  p.unshared_bytes = r.iv("unshared bytes");
  p.slots.resize(r.count("slot count", 4));
  for (BufferSlot& s : p.slots) s = r.slot("slot");
  p.schedule.resize(r.count("schedule length"));
  for (ValueId& v : p.schedule) {
    const int64_t x = r.iv("schedule entry");
    if (x < 0 || x >= g.size()) r.fail("schedule entry out of range");
    v = static_cast<ValueId>(x);
  }
  m.manifest.inputs = read_entries(r, g.size());
  m.manifest.params = read_entries(r, g.size());
  m.manifest.handles = read_entries(r, g.size());
  m.manifest.outputs = read_entries(r, g.size());
  const size_t n_dyn = r.count("dynamic symbols");
  for (size_t i = 0; i < n_dyn && r.ok(); ++i) {
    const std::string name = r.str("dynamic symbol");
    const std::optional<SymbolId> s = symbol_name_ok(name) ? try_intern_symbol(name) : std::nullopt;
    if (!s) r.fail("bad dynamic symbol");
    else m.dynamic_symbols.push_back(*s);
  }
  if (r.ok() && r.remaining() != 0) r.fail(fmt::format("{} trailing bytes", r.remaining()));
  if (r.err) return *r.err;
  Status v = verify(g);
  if (!v.ok()) return Error::invalid_file("LIR binary: {}", v.error().message());
  return m;
}

}  // namespace rlx::ir
