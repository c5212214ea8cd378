// Shapes whose dimensions are numbers or symbols. A symbolic dim is a monomial
// `coeff * s1 * s2` over named symbols (BATCH, SEQ, PAST_SEQ or user-named ones),
// enough for reshapes like [BATCH, SEQ, d] -> [BATCH*SEQ, d] and concat 2*SEQ.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlx::ir {

/// Interned symbol id; 0 means "no symbol".
using SymbolId = uint16_t;

/// Well-known symbols (pre-interned, stable ids).
inline constexpr SymbolId BATCH = 1;
inline constexpr SymbolId SEQ = 2;
inline constexpr SymbolId PAST_SEQ = 3;

/// Returns the id of `name`, interning it on first use (thread-safe). Asserts
/// when the table is full (65535 symbols); see try_intern_symbol.
SymbolId intern_symbol(std::string_view name);
/// Like intern_symbol, but nullopt instead of asserting when the table is full
/// (for parsers of untrusted text).
std::optional<SymbolId> try_intern_symbol(std::string_view name);
/// The name of an interned symbol.
std::string symbol_name(SymbolId id);

/// One dimension: `coeff` alone when static, else coeff * syms[0] (* syms[1]).
struct Dim {
  int64_t coeff = 0;
  SymbolId syms[2] = {0, 0};  // sorted ascending, zeros last

  Dim() = default;
  Dim(int64_t value) : coeff(value) {}  // NOLINT: a number is a static dim
  static Dim symbol(SymbolId s, int64_t coeff = 1) {
    Dim d(coeff);
    d.syms[0] = s;
    return d;
  }
  static Dim symbol(std::string_view name) { return symbol(intern_symbol(name)); }

  bool is_static() const { return syms[0] == 0; }
  int n_syms() const { return (syms[0] != 0) + (syms[1] != 0); }
  /// The value of a static dim (asserts static).
  int64_t value() const;

  /// Product of two dims; nullopt when the result needs more than two symbols.
  static std::optional<Dim> mul(const Dim& a, const Dim& b);
  /// Sum; only defined when both are static or both have the same symbols.
  static std::optional<Dim> add(const Dim& a, const Dim& b);
  /// Exact division by a static divisor; nullopt if not exact.
  std::optional<Dim> div(int64_t divisor) const;

  friend bool operator==(const Dim& a, const Dim& b) {
    return a.coeff == b.coeff && a.syms[0] == b.syms[0] && a.syms[1] == b.syms[1];
  }
  friend bool operator!=(const Dim& a, const Dim& b) { return !(a == b); }

  /// "64", "SEQ", "2*SEQ", "BATCH*SEQ".
  std::string to_string() const;
};

/// A tensor shape: an ordered list of dims (rank 0 = scalar).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<Dim> dims) : dims_(dims) {}
  explicit Shape(std::vector<Dim> dims) : dims_(std::move(dims)) {}
  static Shape of(const std::vector<int64_t>& dims);

  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  const Dim& operator[](int64_t i) const { return dims_[static_cast<size_t>(i)]; }
  Dim& operator[](int64_t i) { return dims_[static_cast<size_t>(i)]; }
  const Dim& back() const { return dims_.back(); }
  const std::vector<Dim>& dims() const { return dims_; }
  std::vector<Dim>& dims() { return dims_; }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }

  bool is_static() const;
  /// Element count when static (nullopt if symbolic or on overflow).
  std::optional<int64_t> num_elements() const;
  /// Static dims as numbers (asserts static).
  std::vector<int64_t> static_dims() const;
  /// Row-major element strides (asserts static).
  std::vector<int64_t> strides() const;
  /// Product of the dims (symbolic allowed); nullopt if it needs > 2 symbols.
  std::optional<Dim> product() const;
  /// Normalises a possibly negative axis; nullopt if out of range.
  std::optional<int64_t> axis(int64_t a) const;

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

  /// "[SEQ, 64]".
  std::string to_string() const;

 private:
  std::vector<Dim> dims_;
};

/// Numpy-style broadcast of two shapes (right-aligned; a dim of 1 stretches).
/// nullopt when incompatible.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

/// Parses "64", "SEQ", "2*SEQ", "BATCH*SEQ" into a Dim (nullopt if malformed).
std::optional<Dim> parse_dim(std::string_view text);

}  // namespace rlx::ir
