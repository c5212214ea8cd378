// Jinja's built-in tests (`value is name(args)`, e.g. `x is defined`,
// `x is equalto 'user'`), with Jinja2's rules for undefined values (an undefined value
// is iterable and a sequence, as Jinja's Undefined is).
#include <unordered_map>

#include "models/jinja/builtins.h"
#include "models/jinja/text.h"

namespace rlx::jinja {

namespace {

// The one optional argument of a test (`is divisibleby 3`, `is eq(x)`).
Expected<Value> one_arg(const char* name, const CallArgs& a, bool required) {
  std::vector<Value> p;
  TRY(bind_args(name, a, {"other"}, &p));
  if (required && p[0].is_undefined() && a.positional.empty() && a.named.empty())
    return Error::invalid_file("test '{}' needs an argument", name);
  return p[0];
}

Status no_args(const char* name, const CallArgs& a) { return bind_args(name, a, {}, nullptr); }

#define RLX_SIMPLE_TEST(fn, name, expr)                        \
  Expected<bool> fn(Renderer&, const Value& v, CallArgs& a) { \
    TRY(no_args(name, a));                                     \
    return (expr);                                             \
  }

using K = Value::Kind;
RLX_SIMPLE_TEST(t_defined, "defined", !v.is_undefined())
RLX_SIMPLE_TEST(t_undefined, "undefined", v.is_undefined())
RLX_SIMPLE_TEST(t_none, "none", v.is_none())
RLX_SIMPLE_TEST(t_boolean, "boolean", v.kind() == K::kBool)
RLX_SIMPLE_TEST(t_true, "true", v.kind() == K::kBool && v.as_bool())
RLX_SIMPLE_TEST(t_false, "false", v.kind() == K::kBool && !v.as_bool())
RLX_SIMPLE_TEST(t_integer, "integer", v.kind() == K::kInt)
RLX_SIMPLE_TEST(t_float, "float", v.kind() == K::kFloat)
RLX_SIMPLE_TEST(t_number, "number", is_number(v))
RLX_SIMPLE_TEST(t_string, "string", v.is_string())
RLX_SIMPLE_TEST(t_mapping, "mapping", v.kind() == K::kDict)
RLX_SIMPLE_TEST(t_iterable, "iterable",
                v.is_undefined() || v.is_string() || v.kind() == K::kList || v.kind() == K::kDict)
RLX_SIMPLE_TEST(t_sequence, "sequence",
                v.is_undefined() || v.is_string() || is_sequence_list(v) || v.kind() == K::kDict)
RLX_SIMPLE_TEST(t_callable, "callable",
                v.is_undefined() || is_object(v, ObjectKind::kMacro) || is_object(v, ObjectKind::kMethod) ||
                    is_object(v, ObjectKind::kFunction))
#undef RLX_SIMPLE_TEST

// Only markup strings (never made here: autoescape is off) count as escaped.
Expected<bool> t_escaped(Renderer&, const Value&, CallArgs& a) {
  TRY(no_args("escaped", a));
  return false;
}

Expected<bool> parity(const Value& v, int64_t want) {
  ASSIGN_OR_RETURN(Value m, binary_op(BinOp::kMod, v, Value(int64_t{2})));
  return equals(m, Value(want));
}

Expected<bool> t_odd(Renderer&, const Value& v, CallArgs& a) {
  TRY(no_args("odd", a));
  return parity(v, 1);
}

Expected<bool> t_even(Renderer&, const Value& v, CallArgs& a) {
  TRY(no_args("even", a));
  return parity(v, 0);
}

Expected<bool> t_divisibleby(Renderer&, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(Value n, one_arg("divisibleby", a, true));
  ASSIGN_OR_RETURN(Value m, binary_op(BinOp::kMod, v, n));
  return equals(m, Value(int64_t{0}));
}

template <CmpOp op>
Expected<bool> t_compare(Renderer&, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(Value other, one_arg("comparison", a, true));
  return compare_op(op, v, other);
}

Expected<bool> t_in(Renderer&, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(Value seq, one_arg("in", a, true));
  return contains(seq, v);
}

// `is sameas`: Python's identity, which for the values a template holds means the same
// constant or the same container.
Expected<bool> t_sameas(Renderer&, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(Value other, one_arg("sameas", a, true));
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case K::kUndefined: return v.payload() == other.payload();
    case K::kNone: return true;
    case K::kBool: return v.as_bool() == other.as_bool();
    case K::kInt: return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    default: return v.payload() == other.payload();
  }
}

Expected<bool> case_test(const Value& v, const CallArgs& a, bool want_lower) {
  TRY(no_args(want_lower ? "lower" : "upper", a));
  ASSIGN_OR_RETURN(std::string s, str_arg(v));
  bool cased = false;
  for (char32_t c : text::decode(s)) {
    if (want_lower ? text::is_upper(c) : text::is_lower(c)) return false;
    cased = cased || (want_lower ? text::is_lower(c) : text::is_upper(c));
  }
  return cased;
}

Expected<bool> t_lower(Renderer&, const Value& v, CallArgs& a) { return case_test(v, a, true); }
Expected<bool> t_upper(Renderer&, const Value& v, CallArgs& a) { return case_test(v, a, false); }

Expected<bool> t_filter(Renderer&, const Value& v, CallArgs& a) {
  TRY(no_args("filter", a));
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}

Expected<bool> t_test(Renderer&, const Value& v, CallArgs& a) {
  TRY(no_args("test", a));
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

const std::unordered_map<std::string_view, TestFn>& test_table() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined},   {"undefined", t_undefined},
      {"none", t_none},         {"boolean", t_boolean},
      {"true", t_true},         {"false", t_false},
      {"integer", t_integer},   {"float", t_float},
      {"number", t_number},     {"string", t_string},
      {"mapping", t_mapping},   {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},
      {"escaped", t_escaped},   {"odd", t_odd},
      {"even", t_even},         {"divisibleby", t_divisibleby},
      {"eq", t_compare<CmpOp::kEq>}, {"equalto", t_compare<CmpOp::kEq>}, {"==", t_compare<CmpOp::kEq>},
      {"ne", t_compare<CmpOp::kNe>}, {"!=", t_compare<CmpOp::kNe>},
      {"lt", t_compare<CmpOp::kLt>}, {"lessthan", t_compare<CmpOp::kLt>}, {"<", t_compare<CmpOp::kLt>},
      {"le", t_compare<CmpOp::kLe>}, {"<=", t_compare<CmpOp::kLe>},
      {"gt", t_compare<CmpOp::kGt>}, {"greaterthan", t_compare<CmpOp::kGt>}, {">", t_compare<CmpOp::kGt>},
      {"ge", t_compare<CmpOp::kGe>}, {">=", t_compare<CmpOp::kGe>},
      {"in", t_in},             {"sameas", t_sameas},
      {"lower", t_lower},       {"upper", t_upper},
      {"filter", t_filter},     {"test", t_test},
  };
  return table;
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& t = test_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace rlx::jinja
