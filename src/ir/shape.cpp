// Dim and Shape arithmetic, printing and broadcasting; the symbol intern table.
#include "rlx/ir/shape.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "rlx/base/status.h"

namespace rlx::ir {
namespace {

struct SymbolTable {
  std::mutex mu;
  std::vector<std::string> names{"", "BATCH", "SEQ", "PAST_SEQ"};
  std::unordered_map<std::string, SymbolId> ids{{"BATCH", BATCH}, {"SEQ", SEQ}, {"PAST_SEQ", PAST_SEQ}};
};

SymbolTable& symbols() {
  static SymbolTable table;
  return table;
}

bool mul_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

void sort_syms(Dim& d) {
  if (d.syms[0] == 0 && d.syms[1] != 0) std::swap(d.syms[0], d.syms[1]);
  if (d.syms[1] != 0 && d.syms[1] < d.syms[0]) std::swap(d.syms[0], d.syms[1]);
}

}  // namespace

std::optional<SymbolId> try_intern_symbol(std::string_view name) {
  SymbolTable& t = symbols();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(std::string(name));
  if (it != t.ids.end()) return it->second;
  if (t.names.size() >= std::numeric_limits<SymbolId>::max()) return std::nullopt;
  const auto id = static_cast<SymbolId>(t.names.size());
  t.names.emplace_back(name);
  t.ids.emplace(std::string(name), id);
  return id;
}

SymbolId intern_symbol(std::string_view name) {
  const std::optional<SymbolId> id = try_intern_symbol(name);
  RLX_ASSERT(id.has_value());
  return *id;
}

std::string symbol_name(SymbolId id) {
  SymbolTable& t = symbols();
  std::lock_guard<std::mutex> lock(t.mu);
  return id < t.names.size() ? t.names[id] : "?";
}

int64_t Dim::value() const {
  RLX_ASSERT(is_static());
  return coeff;
}

std::optional<Dim> Dim::mul(const Dim& a, const Dim& b) {
  if (a.n_syms() + b.n_syms() > 2) return std::nullopt;
  Dim r;
  if (mul_overflows(a.coeff, b.coeff, &r.coeff)) return std::nullopt;
  int k = 0;
  for (SymbolId s : a.syms) if (s) r.syms[k++] = s;
  for (SymbolId s : b.syms) if (s) r.syms[k++] = s;
  if (r.coeff == 0) r.syms[0] = r.syms[1] = 0;
  sort_syms(r);
  return r;
}

std::optional<Dim> Dim::add(const Dim& a, const Dim& b) {
  if (a.syms[0] != b.syms[0] || a.syms[1] != b.syms[1]) {
    if (a.coeff == 0 && a.is_static()) return b;
    if (b.coeff == 0 && b.is_static()) return a;
    return std::nullopt;
  }
  Dim r = a;
  if (__builtin_add_overflow(a.coeff, b.coeff, &r.coeff)) return std::nullopt;
  return r;
}

std::optional<Dim> Dim::div(int64_t divisor) const {
  if (divisor <= 0 || coeff % divisor != 0) return std::nullopt;
  Dim r = *this;
  r.coeff /= divisor;
  return r;
}

std::string Dim::to_string() const {
  if (is_static()) return std::to_string(coeff);
  std::string s;
  if (coeff != 1) s = std::to_string(coeff) + "*";
  s += symbol_name(syms[0]);
  if (syms[1]) s += "*" + symbol_name(syms[1]);
  return s;
}

Shape Shape::of(const std::vector<int64_t>& dims) {
  Shape s;
  for (int64_t d : dims) s.dims_.emplace_back(d);
  return s;
}

bool Shape::is_static() const {
  return std::all_of(dims_.begin(), dims_.end(), [](const Dim& d) { return d.is_static(); });
}

std::optional<int64_t> Shape::num_elements() const {
  int64_t n = 1;
  for (const Dim& d : dims_) {
    if (!d.is_static() || d.coeff < 0) return std::nullopt;
    if (mul_overflows(n, d.coeff, &n)) return std::nullopt;
  }
  return n;
}

std::vector<int64_t> Shape::static_dims() const {
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const Dim& d : dims_) out.push_back(d.value());
  return out;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims_.size(), 1);
  for (int64_t i = rank() - 2; i >= 0; --i) s[i] = s[i + 1] * dims_[i + 1].value();
  return s;
}

std::optional<Dim> Shape::product() const {
  Dim p(1);
  for (const Dim& d : dims_) {
    auto m = Dim::mul(p, d);
    if (!m) return std::nullopt;
    p = *m;
  }
  return p;
}

std::optional<int64_t> Shape::axis(int64_t a) const {
  const int64_t r = rank();
  if (a < 0) a += r;
  if (a < 0 || a >= r) return std::nullopt;
  return a;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += dims_[i].to_string();
  }
  return s + "]";
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const int64_t r = std::max(a.rank(), b.rank());
  std::vector<Dim> out(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    const int64_t ia = a.rank() - r + i, ib = b.rank() - r + i;
    const Dim da = ia >= 0 ? a[ia] : Dim(1);
    const Dim db = ib >= 0 ? b[ib] : Dim(1);
    if (da == db) out[i] = da;
    else if (da == Dim(1)) out[i] = db;
    else if (db == Dim(1)) out[i] = da;
    else return std::nullopt;
  }
  return Shape(std::move(out));
}

std::optional<Dim> parse_dim(std::string_view text) {
  Dim d(1);
  bool any = false;
  while (!text.empty()) {
    const size_t star = text.find('*');
    std::string_view part = text.substr(0, star);
    if (part.empty()) return std::nullopt;
    Dim factor;
    if (part[0] >= '0' && part[0] <= '9') {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      if (ec != std::errc() || p != part.data() + part.size()) return std::nullopt;
      factor = Dim(v);
    } else {
      for (char c : part)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return std::nullopt;
      factor = Dim::symbol(intern_symbol(part));
    }
    auto m = Dim::mul(d, factor);
    if (!m) return std::nullopt;
    d = *m;
    any = true;
    if (star == std::string_view::npos) break;
    text.remove_prefix(star + 1);
    if (text.empty()) return std::nullopt;
  }
  if (!any) return std::nullopt;
  return d;
}

}  // namespace rlx::ir
