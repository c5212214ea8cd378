// The IR parser: the text form of text.h back to Graph / HIR / MIR / LIR modules.
// The lexer (text_lex.cpp) turns the text into tokens with line/column; the parser re-infers every
// node through Graph::add and checks each written type against inference. Errors
// are Error::parse values naming line and column; no input makes it abort.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <charconv>
#include <climits>
#include <limits>
#include <cstring>
#include <map>
#include <set>
#include <type_traits>

#include "rlx/base/half.h"
#include "rlx/ir/text.h"
#include "text_internal.h"

namespace rlx::ir {
namespace text_detail {

namespace {

template <typename T>
bool parse_int_text(std::string_view s, T* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Floats: from_chars, plus strtod for values it reports out of range (subnormals).
template <typename T>
bool parse_float_text(std::string_view s, T* out) {
  if (s.empty() || s.front() == '+') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  if (p != s.data() + s.size()) return false;
  if (ec == std::errc()) return true;
  if (ec != std::errc::result_out_of_range) return false;
  const std::string z(s);
  char* end = nullptr;
  const double d = std::strtod(z.c_str(), &end);
  if (end != z.c_str() + z.size() || !std::isfinite(d) || std::fabs(d) > std::numeric_limits<T>::max()) return false;
  *out = static_cast<T>(d);
  return true;
}

}  // namespace

bool parse_element(DType t, std::string_view text, uint8_t* out) {
  switch (t) {
    case DType::F32: {
      float f;
      if (!parse_float_text(text, &f)) return false;
      std::memcpy(out, &f, 4);
      return true;
    }
    case DType::F64: {
      double d;
      if (!parse_float_text(text, &d)) return false;
      std::memcpy(out, &d, 8);
      return true;
    }
    case DType::F16:
    case DType::BF16: {
      float f;
      if (!parse_float_text(text, &f)) return false;
      const uint16_t h = t == DType::F16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
      std::memcpy(out, &h, 2);
      return true;
    }
    case DType::I8: {
      int8_t v;
      if (!parse_int_text(text, &v)) return false;
      std::memcpy(out, &v, 1);
      return true;
    }
    case DType::U8:
      return parse_int_text(text, out);
    case DType::Bool: {
      uint8_t v;
      if (text == "true") v = 1;
      else if (text == "false") v = 0;
      else if (!parse_int_text(text, &v) || v > 1) return false;
      *out = v;
      return true;
    }
    case DType::I32: {
      int32_t v;
      if (!parse_int_text(text, &v)) return false;
      std::memcpy(out, &v, 4);
      return true;
    }
    case DType::I64: {
      int64_t v;
      if (!parse_int_text(text, &v)) return false;
      std::memcpy(out, &v, 8);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace text_detail

namespace {

using text_detail::quote;
using text_detail::Tok;
using text_detail::Token;
using text_detail::describe;
using text_detail::error_at;
using text_detail::hex_digit;
using text_detail::lex;

// ---- parser -----------------------------------------------------------------------

enum class Tier { kGraph, kHir, kMir, kLir };

// Ops whose result type comes from the written type rather than from inference.
bool needs_declared_type(OpKind op) {
  return op == OpKind::Input || op == OpKind::Param || op == OpKind::Handle || op == OpKind::Constant ||
         op == OpKind::Cast;
}
bool is_boundary_named(OpKind op) { return op == OpKind::Input || op == OpKind::Param || op == OpKind::Handle; }

std::string join_names(const std::vector<std::string_view>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + std::string(names[i]);
  return s;
}

// Names of the fields of `attrs`, for "has no attribute" messages.
std::string field_names(const Attrs& attrs) {
  std::string s;
  std::visit(
      [&](const auto& a) {
        const_cast<std::decay_t<decltype(a)>&>(a).fields([&](const char* name, auto&) {
          s += (s.empty() ? "" : ", ") + std::string(name);
        });
      },
      attrs);
  return s.empty() ? "none" : s;
}

// Constant data as written, converted to bytes once the node's dtype is known.
struct DataLiteral {
  Token at;
  bool none = false;
  bool hex = false;
  std::vector<uint8_t> bytes;  // hex form
  std::vector<Token> elems;    // decimal form
};

struct ParsedModule {
  Graph graph;
  FusionPolicy policy = FusionPolicy::Direct;
  BufferPlan plan;
  IoManifest manifest;
  std::vector<SymbolId> dynamic_symbols;
};

class Parser {
 public:
  Parser(std::vector<Token> toks, Tier tier) : toks_(std::move(toks)), tier_(tier) {}

  Expected<ParsedModule> parse_module() {
    const Token& h = peek();
    const bool keyword = h.kind == Tok::kIdent &&
                         (h.text == "graph" || h.text == "hir" || h.text == "mir" || h.text == "lir");
    if (keyword) {
      TRY(parse_header());
      while (!is_punct(peek(), '}')) {
        if (peek().kind == Tok::kEnd) return error_at(peek(), "expected '}' to close the module, got end of input");
        TRY(parse_statement());
      }
      const Token close = next();
      if (peek().kind != Tok::kEnd)
        return error_at(peek(), fmt::format("unexpected {} after the closing '}}'", describe(peek())));
      TRY(finish(close));
    } else {
      if (tier_ == Tier::kLir) return got(h, "'lir {'");
      while (peek().kind != Tok::kEnd) TRY(parse_statement());
      TRY(finish(peek()));
    }
    return std::move(out_);
  }

 private:
  // ---- token helpers
  const Token& peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    prev_line_ = last_line_;
    prev_end_col_ = last_end_col_;
    last_line_ = t.line;
    last_end_col_ = t.end_col;
    return t;
  }
  // "expected <what>, got <t>". `t` is either the next token (peek()) or the one just
  // consumed; when it sits on a later line than the token before it, the error points
  // at the end of that earlier line and says "end of line".
  Error got(const Token& t, const std::string& what) const {
    const bool pending = &t == &peek();
    const int line = pending ? last_line_ : prev_line_;
    const int col = pending ? last_end_col_ : prev_end_col_;
    if (t.kind != Tok::kEnd && line > 0 && t.line > line)
      return error_at(line, col, fmt::format("expected {}, got end of line", what));
    return error_at(t, fmt::format("expected {}, got {}", what, describe(t)));
  }
  static bool is_punct(const Token& t, char c) { return t.kind == Tok::kPunct && t.text[0] == c; }
  static bool is_ident(const Token& t, std::string_view s) { return t.kind == Tok::kIdent && t.text == s; }
  bool accept(char c) {
    if (!is_punct(peek(), c)) return false;
    next();
    return true;
  }
  Status expect(char c, std::string_view where) {
    if (accept(c)) return {};
    return got(peek(), fmt::format("'{}' {}", c, where));
  }
  // A statement ends at the end of its line (or before a closing brace).
  Status end_statement() {
    const Token& t = peek();
    if (t.kind == Tok::kEnd || is_punct(t, '}') || t.line > last_line_) return {};
    return error_at(t, fmt::format("unexpected {} after the end of the statement", describe(t)));
  }

  // ---- module structure
  Status parse_header() {
    const Token h = next();
    const bool ok = (tier_ == Tier::kGraph && h.text != "lir") || (tier_ == Tier::kHir && h.text == "hir") ||
                    (tier_ == Tier::kMir && h.text == "mir") || (tier_ == Tier::kLir && h.text == "lir");
    if (!ok) {
      static constexpr const char* kWant[] = {"graph", "hir", "mir", "lir"};
      return error_at(h, fmt::format("expected a '{}' module, got '{}'", kWant[static_cast<int>(tier_)], h.text));
    }
    if (h.text == "hir" && is_ident(peek(), "policy")) {
      next();
      TRY(expect('=', "after 'policy'"));
      const Token p = next();
      if (is_ident(p, "direct")) out_.policy = FusionPolicy::Direct;
      else if (is_ident(p, "fusable")) out_.policy = FusionPolicy::Fusable;
      else return got(p, "a fusion policy (direct or fusable)");
    }
    return expect('{', fmt::format("after '{}'", h.text));
  }

  Status finish(const Token& close) {
    out_.graph.set_outputs(std::move(outputs_));
    const bool allow_hir = tier_ == Tier::kGraph || tier_ == Tier::kHir;
    Status st = verify(out_.graph, allow_hir);
    if (!st.ok()) return error_at(close, st.error().message());
    return {};
  }

  Status parse_statement() {
    const Token& t = peek();
    if (t.kind == Tok::kValue) return parse_node();
    if (is_ident(t, "output")) return parse_output();
    if (tier_ == Tier::kLir && t.kind == Tok::kIdent) {
      if (t.text == "plan") return parse_plan();
      if (t.text == "schedule") return parse_schedule();
      if (t.text == "manifest") return parse_manifest();
      if (t.text == "dynamic") return parse_dynamic();
    }
    return got(t, "a statement ('%name = op ...' or 'output %name')");
  }

  Expected<ValueId> parse_ref(bool allow_none) {
    const Token& t = next();
    if (allow_none && is_ident(t, "none")) return kNoValue;
    if (t.kind != Tok::kValue) return got(t, "a value like %0");
    auto it = names_.find(t.text);
    if (it == names_.end()) return error_at(t, fmt::format("unknown value %{}", t.text));
    return it->second;
  }

  // ---- nodes
  Status parse_node() {
    const Token def = next();
    if (names_.count(def.text)) return error_at(def, fmt::format("value %{} is already defined", def.text));
    TRY(expect('=', fmt::format("after %{}", def.text)));
    const Token op_tok = next();
    if (op_tok.kind != Tok::kIdent) return got(op_tok, "an op name");

    // Op name, possibly with a `.kind` suffix (binary.mul, reduce.sum).
    std::optional<OpKind> op = parse_op_kind(op_tok.text);
    std::string suffix;
    if (!op) {
      const size_t dot = op_tok.text.rfind('.');
      if (dot != std::string::npos) {
        op = parse_op_kind(std::string_view(op_tok.text).substr(0, dot));
        suffix = op_tok.text.substr(dot + 1);
      }
    }
    if (!op) return error_at(op_tok, fmt::format("unknown op '{}'", op_tok.text));
    if (tier_ != Tier::kGraph && tier_ != Tier::kHir && is_hir_op(*op))
      return error_at(op_tok, fmt::format("HIR op '{}' in a {} module (lower it first)", op_name(*op),
                                          tier_ == Tier::kMir ? "MIR" : "LIR"));
    Attrs attrs = default_attrs(*op);
    std::set<std::string> seen;
    if (!suffix.empty()) {
      TRY(set_kind_suffix(attrs, *op, suffix, op_tok));
      seen.insert("kind");
    }
    if (is_boundary_named(*op) && peek().kind == Tok::kString) {
      set_name(attrs, next().text);
      seen.insert("name");
    }

    std::vector<ValueId> inputs;
    if (peek().kind == Tok::kValue) {
      for (;;) {
        ASSIGN_OR_RETURN(ValueId in, parse_ref(false));
        inputs.push_back(in);
        if (accept(',')) continue;
        if (peek().kind == Tok::kValue && peek().line == last_line_)
          return got(peek(), "',' between operands");
        break;
      }
    }
    pending_data_.reset();
    if (is_punct(peek(), '{')) TRY(parse_attrs(attrs, *op, seen));

    std::optional<TensorType> type;
    Token type_tok = peek();
    if (accept(':')) {
      type_tok = peek();
      ASSIGN_OR_RETURN(type, parse_type());
    } else if (needs_declared_type(*op) && peek().kind == Tok::kIdent && parse_dtype(peek().text) &&
               is_punct(peek(1), '[')) {
      ASSIGN_OR_RETURN(type, parse_type());  // `input f32[8, 64]` (no colon) is accepted too
    }
    if (needs_declared_type(*op) && !type)
      return got(peek(), fmt::format("a type (': f32[SEQ, 64]') for {}", op_name(*op)));
    std::string label;
    if (accept('@')) {
      const Token& l = next();
      if (l.kind != Tok::kString) return got(l, "a quoted label after '@'");
      label = l.text;
    }
    TRY(end_statement());

    if (is_boundary_named(*op) && !seen.count("name")) set_name(attrs, def.text);
    if (pending_data_) TRY(fill_constant(attrs, type->dtype));
    if (is_boundary_named(*op)) {
      const std::string name = boundary_name(attrs);
      auto [it, fresh] = boundary_names_.insert({{static_cast<int>(*op), name}, def.line});
      if (!fresh)
        return error_at(def, fmt::format("duplicate {} name '{}' (first on line {})", op_name(*op), name, it->second));
    }

    auto id = out_.graph.add(*op, std::move(inputs), std::move(attrs), type.value_or(TensorType{}), std::move(label));
    if (!id) return error_at(op_tok, fmt::format("%{}: {}", def.text, id.error().message()));
    const TensorType inferred = out_.graph.node(*id).type();
    if (type && inferred != *type)
      return error_at(type_tok, fmt::format("%{} is written as {} but its inputs give {}", def.text,
                                            type->to_string(), inferred.to_string()));
    names_[def.text] = *id;
    return {};
  }

  Status set_kind_suffix(Attrs& attrs, OpKind op, const std::string& suffix, const Token& at) {
    bool first = true, done = false;
    std::string expected;
    std::visit(
        [&](auto& a) {
          a.fields([&](const char* name, auto& f) {
            using F = std::decay_t<decltype(f)>;
            const bool is_first = first;
            first = false;
            if constexpr (std::is_enum_v<F> && !std::is_same_v<F, DType>) {
              if (is_first && std::strcmp(name, "kind") == 0) {
                if (auto e = parse_enum<F>(suffix)) {
                  f = *e;
                  done = true;
                } else {
                  expected = join_names(enum_names(F{}));
                }
              }
            }
          });
        },
        attrs);
    if (done) return {};
    if (!expected.empty())
      return error_at(at, fmt::format("unknown {} kind '{}' (one of: {})", op_name(op), suffix, expected));
    return error_at(at, fmt::format("unknown op '{}'", at.text));
  }

  static void set_name(Attrs& attrs, const std::string& name) {
    std::visit(
        [&](auto& a) {
          a.fields([&](const char* field, auto& f) {
            if constexpr (std::is_same_v<std::decay_t<decltype(f)>, std::string>)
              if (std::strcmp(field, "name") == 0) f = name;
          });
        },
        attrs);
  }
  static std::string boundary_name(const Attrs& attrs) {
    std::string name;
    std::visit(
        [&](const auto& a) {
          const_cast<std::decay_t<decltype(a)>&>(a).fields([&](const char* field, const auto& f) {
            if constexpr (std::is_same_v<std::decay_t<decltype(f)>, std::string>)
              if (std::strcmp(field, "name") == 0) name = f;
          });
        },
        attrs);
    return name;
  }

  Status parse_attrs(Attrs& attrs, OpKind op, std::set<std::string>& seen) {
    next();  // '{'
    if (accept('}')) return {};
    for (;;) {
      const Token key = next();
      if (key.kind != Tok::kIdent)
        return got(key, "an attribute name");
      if (seen.count(key.text)) return error_at(key, fmt::format("attribute '{}' given twice", key.text));
      TRY(expect('=', fmt::format("after attribute '{}'", key.text)));
      bool found = false;
      Status st;
      std::visit(
          [&](auto& a) {
            a.fields([&](const char* name, auto& f) {
              if (!found && key.text == name) {
                found = true;
                st = parse_value(f);
              }
            });
          },
          attrs);
      if (!found)
        return error_at(key, fmt::format("{} has no attribute '{}' (it has: {})", op_name(op), key.text,
                                         field_names(attrs)));
      TRY(st);
      seen.insert(key.text);
      if (accept('}')) return {};
      TRY(expect(',', fmt::format("or '}}' after attribute '{}'", key.text)));
    }
  }

  // ---- attribute values, by field type
  Status parse_value(std::string& v) {
    const Token& t = next();
    if (t.kind != Tok::kString) return got(t, "a quoted string");
    v = t.text;
    return {};
  }
  Status parse_value(bool& v) {
    const Token& t = next();
    if (is_ident(t, "true")) v = true;
    else if (is_ident(t, "false")) v = false;
    else return got(t, "true or false");
    return {};
  }
  Status parse_value(int64_t& v) {
    ASSIGN_OR_RETURN(v, parse_int());
    return {};
  }
  Status parse_value(double& v) {
    const Token& t = next();
    double d = 0;
    if (t.kind != Tok::kNumber && t.kind != Tok::kIdent) return got(t, "a number");
    uint8_t bytes[8];
    if (!text_detail::parse_element(DType::F64, t.text, bytes))
      return got(t, "a number");
    std::memcpy(&d, bytes, 8);
    v = d;
    return {};
  }
  Status parse_value(DType& v) {
    const Token& t = next();
    auto d = t.kind == Tok::kIdent ? parse_dtype(t.text) : std::nullopt;
    if (!d) return got(t, "a dtype (f32, f16, q4_k, ...)");
    v = *d;
    return {};
  }
  Status parse_value(Dim& v) {
    ASSIGN_OR_RETURN(v, parse_dim());
    return {};
  }
  Status parse_value(Shape& v) {
    ASSIGN_OR_RETURN(v, parse_shape());
    return {};
  }
  Status parse_value(std::vector<int64_t>& v) {
    TRY(expect('[', "to open a list of integers"));
    v.clear();
    if (accept(']')) return {};
    for (;;) {
      ASSIGN_OR_RETURN(int64_t x, parse_int());
      v.push_back(x);
      if (accept(']')) return {};
      TRY(expect(',', "or ']' in a list of integers"));
    }
  }
  Status parse_value(std::vector<double>& v) {
    TRY(expect('[', "to open a list of numbers"));
    v.clear();
    if (accept(']')) return {};
    for (;;) {
      double x = 0;
      TRY(parse_value(x));
      v.push_back(x);
      if (accept(']')) return {};
      TRY(expect(',', "or ']' in a list of numbers"));
    }
  }
  template <typename E>
  std::enable_if_t<std::is_enum_v<E>, Status> parse_value(E& v) {
    const Token& t = next();
    auto e = t.kind == Tok::kIdent ? parse_enum<E>(t.text) : std::nullopt;
    if (!e) return got(t, fmt::format("one of {}", join_names(enum_names(E{}))));
    v = *e;
    return {};
  }
  Status parse_value(ConstantData&) {
    DataLiteral lit;
    lit.at = peek();
    const Token& t = peek();
    if (is_ident(t, "none")) {
      next();
      lit.none = true;
    } else if (t.kind == Tok::kNumber && t.text.size() >= 2 && t.text[0] == '0' && (t.text[1] == 'x' || t.text[1] == 'X')) {
      next();
      const std::string_view digits = std::string_view(t.text).substr(2);
      if (digits.size() % 2 != 0) return error_at(t, "hex constant data needs an even number of digits");
      lit.hex = true;
      lit.bytes.reserve(digits.size() / 2);
      for (size_t i = 0; i < digits.size(); i += 2) {
        const int hi = hex_digit(digits[i]), lo = hex_digit(digits[i + 1]);
        if (hi < 0 || lo < 0) return error_at(t, "bad hex digit in constant data");
        lit.bytes.push_back(static_cast<uint8_t>(hi * 16 + lo));
      }
    } else if (accept('[')) {
      if (!accept(']')) {
        for (;;) {
          const Token& e = next();
          if (e.kind != Tok::kNumber && e.kind != Tok::kIdent)
            return got(e, "a number in constant data");
          lit.elems.push_back(e);
          if (accept(']')) break;
          TRY(expect(',', "or ']' in constant data"));
        }
      }
    } else {
      return got(t, "constant data ('[1, 2.5]', '0x0000803f' or 'none')");
    }
    pending_data_ = std::move(lit);
    return {};
  }
  Status parse_value(std::vector<RegionStep>& steps) {
    TRY(expect('[', "to open the region steps"));
    steps.clear();
    if (accept(']')) return {};
    for (;;) {
      RegionStep st;
      TRY(parse_region_op(st));
      TRY(expect('(', "after the region step op"));
      if (!accept(')')) {
        for (;;) {
          const Token& a = next();
          int64_t idx = -1;
          const bool shaped = a.kind == Tok::kIdent && a.text.size() >= 2 && (a.text[0] == 'i' || a.text[0] == 's');
          if (!shaped || !text_detail::parse_element(DType::I64, std::string_view(a.text).substr(1),
                                                     reinterpret_cast<uint8_t*>(&idx)) ||
              idx < 0 || idx > INT32_MAX)
            return got(a, "a region arg (iN = input N, sN = step N)");
          st.args.push_back(a.text[0] == 'i' ? static_cast<int32_t>(-1 - idx) : static_cast<int32_t>(idx));
          if (accept(')')) break;
          TRY(expect(',', "or ')' between region step args"));
        }
      }
      TRY(expect(':', "before the region step dtype"));
      TRY(parse_value(st.dtype));
      steps.push_back(std::move(st));
      if (accept(']')) return {};
      TRY(expect(',', "or ']' between region steps"));
    }
  }
  Status parse_region_op(RegionStep& st) {
    const Token& t = next();
    if (t.kind != Tok::kIdent) return got(t, "a region step op");
    std::optional<OpKind> op = parse_op_kind(t.text);
    std::string_view kind;
    if (!op) {
      const size_t dot = t.text.rfind('.');
      if (dot != std::string::npos) {
        op = parse_op_kind(std::string_view(t.text).substr(0, dot));
        kind = std::string_view(t.text).substr(dot + 1);
      }
    }
    if (!op) return error_at(t, fmt::format("unknown region step op '{}'", t.text));
    st.op = *op;
    if (kind.empty()) return {};
    uint8_t k = 0;
    bool ok = text_detail::parse_element(DType::U8, kind, &k);
    if (!ok) {
      auto find = [&](const std::vector<std::string_view>& names) {
        for (size_t i = 0; i < names.size(); ++i)
          if (names[i] == kind) {
            k = static_cast<uint8_t>(i);
            ok = true;
          }
      };
      if (*op == OpKind::Activation) find(enum_names(ActKind{}));
      else if (*op == OpKind::Binary) find(enum_names(BinaryKind{}));
      else if (*op == OpKind::Compare) find(enum_names(CompareKind{}));
    }
    if (!ok) return error_at(t, fmt::format("unknown {} kind '{}' in a region step", op_name(*op), kind));
    st.kind = k;
    return {};
  }

  Status fill_constant(Attrs& attrs, DType dt) {
    const DataLiteral& lit = *pending_data_;
    ConstantData data;
    if (lit.hex) {
      data.bytes = std::make_shared<const std::vector<uint8_t>>(lit.bytes);
    } else if (!lit.none) {
      if (!lit.elems.empty() && !text_detail::has_decimal_form(dt))
        return error_at(lit.at, fmt::format("{} constant data must be hex bytes (0x...)", dtype_name(dt)));
      const auto elem = static_cast<size_t>(dtype_info(dt).bytes_per_block);
      std::vector<uint8_t> bytes(lit.elems.size() * elem);
      for (size_t i = 0; i < lit.elems.size(); ++i)
        if (!text_detail::parse_element(dt, lit.elems[i].text, bytes.data() + i * elem))
          return error_at(lit.elems[i], fmt::format("'{}' is not a valid {} value", lit.elems[i].text, dtype_name(dt)));
      data.bytes = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    }
    std::visit(
        [&](auto& a) {
          a.fields([&](const char*, auto& f) {
            if constexpr (std::is_same_v<std::decay_t<decltype(f)>, ConstantData>) f = data;
          });
        },
        attrs);
    return {};
  }

  // ---- numbers, dims, types
  Expected<int64_t> parse_int() {
    const Token& t = next();
    int64_t v = 0;
    if (t.kind != Tok::kNumber || !text_detail::parse_element(DType::I64, t.text, reinterpret_cast<uint8_t*>(&v)))
      return got(t, "an integer");
    return v;
  }
  Expected<Dim> parse_dim() {
    const Token first = peek();
    Dim d(1);
    for (;;) {
      const Token& t = peek();
      Dim factor;
      if (t.kind == Tok::kNumber) {
        ASSIGN_OR_RETURN(int64_t v, parse_int());
        factor = Dim(v);
      } else if (t.kind == Tok::kIdent) {
        ASSIGN_OR_RETURN(SymbolId s, symbol(next()));
        factor = Dim::symbol(s);
      } else {
        return got(t, "a dim (a number or a symbol like SEQ)");
      }
      auto m = Dim::mul(d, factor);
      if (!m) return error_at(first, "dim needs more than two symbols or overflows");
      d = *m;
      if (!accept('*')) return d;
    }
  }
  static Expected<SymbolId> symbol(const Token& t) {
    auto id = try_intern_symbol(t.text);
    if (!id) return error_at(t, fmt::format("cannot intern symbol '{}': the symbol table is full", t.text));
    return *id;
  }
  Expected<Shape> parse_shape() {
    TRY(expect('[', "to open a shape"));
    std::vector<Dim> dims;
    if (accept(']')) return Shape(std::move(dims));
    for (;;) {
      ASSIGN_OR_RETURN(Dim d, parse_dim());
      dims.push_back(d);
      if (accept(']')) return Shape(std::move(dims));
      TRY(expect(',', "or ']' between dims"));
    }
  }
  Expected<TensorType> parse_type() {
    const Token& t = next();
    auto dt = t.kind == Tok::kIdent ? parse_dtype(t.text) : std::nullopt;
    if (!dt) return got(t, "a type like f32[SEQ, 64]");
    ASSIGN_OR_RETURN(Shape s, parse_shape());
    return TensorType{*dt, std::move(s)};
  }

  // ---- outputs and LIR sections
  Status parse_output() {
    next();  // 'output'
    const Token at = peek();
    ASSIGN_OR_RETURN(ValueId v, parse_ref(false));
    std::string name = "out" + std::to_string(outputs_.size());
    if (peek().kind == Tok::kString) name = next().text;
    TRY(end_statement());
    for (const GraphOutput& o : outputs_)
      if (o.name == name) return error_at(at, fmt::format("duplicate output name '{}'", name));
    outputs_.push_back({v, std::move(name)});
    return {};
  }

  Status once(const Token& kw) {
    if (!sections_.insert(kw.text).second) return error_at(kw, fmt::format("'{}' section given twice", kw.text));
    return {};
  }

  Expected<BufferSlot> parse_slot() {
    BufferSlot s;
    const Token& k = next();
    static constexpr SlotKind kKinds[] = {SlotKind::kArena, SlotKind::kView, SlotKind::kParam, SlotKind::kHandle,
                                          SlotKind::kConstant};
    bool known = false;
    for (SlotKind sk : kKinds)
      if (k.kind == Tok::kIdent && k.text == slot_kind_name(sk)) {
        s.kind = sk;
        known = true;
      }
    if (!known)
      return got(k, "a slot kind (arena, view, param, handle, constant)");
    std::set<std::string> seen;
    while (peek().kind == Tok::kIdent && is_punct(peek(1), '=')) {
      const Token key = next();
      next();  // '='
      if (!seen.insert(key.text).second) return error_at(key, fmt::format("slot field '{}' given twice", key.text));
      if (key.text == "offset") {
        ASSIGN_OR_RETURN(s.offset, parse_int());
      } else if (key.text == "size") {
        ASSIGN_OR_RETURN(s.size, parse_int());
      } else if (key.text == "root") {
        ASSIGN_OR_RETURN(s.root, parse_ref(true));
      } else {
        return error_at(key, fmt::format("unknown slot field '{}' (offset, size, root)", key.text));
      }
    }
    return s;
  }

  Status parse_plan() {
    const Token kw = next();
    TRY(once(kw));
    BufferPlan& p = out_.plan;
    std::set<std::string> seen;
    while (peek().kind == Tok::kIdent) {
      const Token key = next();
      if (!seen.insert(key.text).second) return error_at(key, fmt::format("plan field '{}' given twice", key.text));
      TRY(expect('=', fmt::format("after '{}'", key.text)));
      if (key.text == "align") {
        ASSIGN_OR_RETURN(p.alignment, parse_int());
      } else if (key.text == "arena") {
        ASSIGN_OR_RETURN(p.arena_size, parse_int());
      } else if (key.text == "unshared") {
        ASSIGN_OR_RETURN(p.unshared_bytes, parse_int());
      } else {
        return error_at(key, fmt::format("unknown plan field '{}' (align, arena, unshared)", key.text));
      }
    }
    TRY(expect('{', "to open the plan's slots"));
    while (!accept('}')) {
      const Token at = peek();
      ASSIGN_OR_RETURN(ValueId v, parse_ref(false));
      if (v != static_cast<ValueId>(p.slots.size()))
        return error_at(at, fmt::format("slot for %{} out of order (slots list %0, %1, ... in value order)", at.text));
      ASSIGN_OR_RETURN(BufferSlot s, parse_slot());
      TRY(end_statement());
      p.slots.push_back(s);
    }
    return end_statement();
  }

  Status parse_schedule() {
    const Token kw = next();
    TRY(once(kw));
    TRY(expect('[', "after 'schedule'"));
    if (!accept(']')) {
      for (;;) {
        ASSIGN_OR_RETURN(ValueId v, parse_ref(true));
        out_.plan.schedule.push_back(v);
        if (accept(']')) break;
        TRY(expect(',', "or ']' in the schedule"));
      }
    }
    return end_statement();
  }

  Status parse_manifest() {
    const Token kw = next();
    TRY(once(kw));
    TRY(expect('{', "after 'manifest'"));
    while (!accept('}')) {
      const Token& which = next();
      std::vector<ManifestEntry>* list = nullptr;
      if (is_ident(which, "input")) list = &out_.manifest.inputs;
      else if (is_ident(which, "param")) list = &out_.manifest.params;
      else if (is_ident(which, "handle")) list = &out_.manifest.handles;
      else if (is_ident(which, "output")) list = &out_.manifest.outputs;
      else return got(which, "input, param, handle or output");
      ManifestEntry e;
      TRY(parse_value(e.name));
      ASSIGN_OR_RETURN(e.value, parse_ref(true));
      TRY(expect(':', "before the manifest entry's type"));
      ASSIGN_OR_RETURN(e.type, parse_type());
      const Token& b = next();
      if (!is_ident(b, "bytes")) return got(b, "'bytes='");
      TRY(expect('=', "after 'bytes'"));
      ASSIGN_OR_RETURN(e.bytes, parse_int());
      ASSIGN_OR_RETURN(e.slot, parse_slot());
      TRY(end_statement());
      list->push_back(std::move(e));
    }
    return end_statement();
  }

  Status parse_dynamic() {
    const Token kw = next();
    TRY(once(kw));
    TRY(expect('[', "after 'dynamic'"));
    if (!accept(']')) {
      for (;;) {
        const Token& s = next();
        if (s.kind != Tok::kIdent) return got(s, "a symbol name");
        ASSIGN_OR_RETURN(SymbolId id, symbol(s));
        out_.dynamic_symbols.push_back(id);
        if (accept(']')) break;
        TRY(expect(',', "or ']' between symbols"));
      }
    }
    return end_statement();
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int last_line_ = 0, last_end_col_ = 0;  // the last consumed token
  int prev_line_ = 0, prev_end_col_ = 0;  // the one before it
  Tier tier_;
  ParsedModule out_;
  std::vector<GraphOutput> outputs_;
  std::map<std::string, ValueId> names_;
  std::map<std::pair<int, std::string>, int> boundary_names_;  // (op, name) -> line
  std::set<std::string> sections_;
  std::optional<DataLiteral> pending_data_;
};

Expected<ParsedModule> parse_text(std::string_view text, Tier tier) {
  ASSIGN_OR_RETURN(std::vector<Token> toks, lex(text));
  Parser p(std::move(toks), tier);
  return p.parse_module();
}

}  // namespace

Expected<Graph> parse_graph(std::string_view text) {
  ASSIGN_OR_RETURN(ParsedModule m, parse_text(text, Tier::kGraph));
  return std::move(m.graph);
}

Expected<HirModule> parse_hir(std::string_view text) {
  ASSIGN_OR_RETURN(ParsedModule m, parse_text(text, Tier::kHir));
  return HirModule{std::move(m.graph), m.policy};
}

Expected<MirModule> parse_mir(std::string_view text) {
  ASSIGN_OR_RETURN(ParsedModule m, parse_text(text, Tier::kMir));
  return MirModule{std::move(m.graph)};
}

Expected<LirModule> parse_lir(std::string_view text) {
  ASSIGN_OR_RETURN(ParsedModule m, parse_text(text, Tier::kLir));
  LirModule lir;
  lir.graph = std::move(m.graph);
  lir.plan = std::move(m.plan);
  lir.manifest = std::move(m.manifest);
  lir.dynamic_symbols = std::move(m.dynamic_symbols);
  return lir;
}

}  // namespace rlx::ir
