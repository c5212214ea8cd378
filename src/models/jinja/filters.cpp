// Jinja's built-in filters (`value|name(args)`) as Jinja2 defines them, plus
// transformers' `tojson` (json.dumps with ensure_ascii=False, indent, separators,
// sort_keys). Every filter charges the render's work meter for what it builds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <cerrno>
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include "models/jinja/builtins.h"
#include "models/jinja/text.h"

namespace rlx::jinja {

namespace {

using Args = std::vector<Value>;

// str(v) for filters that take "anything as a string" (Jinja's soft_str).
Expected<std::string> soft_str(const Value& v) { return str_arg(v); }

bool given(const Value& v) { return !v.is_undefined(); }

Expected<bool> bool_arg(const Value& v, bool dflt) { return given(v) ? truthy(v) : dflt; }

// Python's sorted() over `items` with keys, stable, errors propagated (a merge sort:
// no comparator contract to break when values do not compare).
Status sort_by(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> idx(items.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::vector<size_t> tmp(idx.size());
  auto less = [&](size_t a, size_t b) -> Expected<bool> {
    // reverse=True keeps equal items in their order, as Python does
    ASSIGN_OR_RETURN(int c, reverse ? compare(keys[b], keys[a], "<") : compare(keys[a], keys[b], "<"));
    return c == -1;
  };
  for (size_t width = 1; width < idx.size(); width *= 2) {
    for (size_t lo = 0; lo < idx.size(); lo += 2 * width) {
      const size_t mid = std::min(lo + width, idx.size()), hi = std::min(lo + 2 * width, idx.size());
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        ASSIGN_OR_RETURN(bool right_first, less(idx[j], idx[i]));
        tmp[k++] = right_first ? idx[j++] : idx[i++];
      }
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }
    idx.swap(tmp);
    charge(static_cast<int64_t>(idx.size()));
  }
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : idx) out.push_back(items[i]);
  items = std::move(out);
  return Status::ok_status();
}

// Jinja's make_attrgetter: "a.b.0" looked up part by part with getitem.
Expected<Value> get_path(Renderer& r, const Value& item, const Value& attribute, const Value& dflt = Value()) {
  Value cur = item;
  std::vector<Value> parts;
  if (attribute.is_string()) {
    std::string dot = ".";
    for (const std::string& p : text::split(attribute.as_string(), &dot, -1)) {
      const bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits && p.size() < 18 ? Value(static_cast<int64_t>(std::atoll(p.c_str()))) : Value(p));
    }
  } else if (given(attribute)) {
    parts.push_back(attribute);
  }
  for (const Value& p : parts) {
    ASSIGN_OR_RETURN(cur, r.getitem(cur, p));
    if (given(dflt) && cur.is_undefined()) cur = dflt;
  }
  return cur;
}

Value lower_if_string(const Value& v) { return v.is_string() ? Value(text::lower(v.as_string())) : v; }

// ---- the filters ----

Expected<Value> f_default(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("default", a, {"default_value", "boolean"}, &p));
  ASSIGN_OR_RETURN(bool boolean, bool_arg(p[1], false));
  if (v.is_undefined() || (boolean && !truthy(v))) return given(p[0]) ? p[0] : Value(std::string());
  return v;
}

Expected<Value> f_length(Renderer&, const Value& v, CallArgs& a) {
  TRY(bind_args("length", a, {}, nullptr));
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value(int64_t{0});
    case Value::Kind::kString: return Value(static_cast<int64_t>(text::length(v.as_string())));
    case Value::Kind::kList:
      if (is_iterator(v)) break;
      return Value(static_cast<int64_t>(list_of(v).items.size()));
    case Value::Kind::kDict: return Value(static_cast<int64_t>(dict_of(v).items.size()));
    default: break;
  }
  return Error::invalid_file("object of type '{}' has no len()", type_name(v));
}

Expected<Value> f_first(Renderer& r, const Value& v, CallArgs& a) {
  TRY(bind_args("first", a, {}, nullptr));
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  if (items.empty()) return make_undefined("No first item, sequence was empty.");
  return items.front();
}

Expected<Value> f_last(Renderer& r, const Value& v, CallArgs& a) {
  TRY(bind_args("last", a, {}, nullptr));
  if (is_iterator(v)) return Error::invalid_file("'{}' object is not reversible", type_name(v));
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  if (items.empty()) return make_undefined("No last item, sequence was empty.");
  return items.back();
}

Expected<Value> f_join(Renderer& r, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("join", a, {"d", "attribute"}, &p));
  std::string sep;
  if (given(p[0])) {
    ASSIGN_OR_RETURN(sep, soft_str(p[0]));
  }
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  const size_t max = work_meter().max_bytes;
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (given(p[1])) {
      ASSIGN_OR_RETURN(item, get_path(r, item, p[1]));
    }
    if (i) out += sep;
    TRY(append_str(out, item));
    if (out.size() > max) return too_big(max);
  }
  charge(static_cast<int64_t>(out.size() / 64));
  return Value(std::move(out));
}

Expected<Value> string_filter(const Value& v, CallArgs& a, const char* name, std::string (*fn)(std::string_view)) {
  TRY(bind_args(name, a, {}, nullptr));
  ASSIGN_OR_RETURN(std::string s, soft_str(v));
  return Value(fn(s));
}

Expected<Value> f_upper(Renderer&, const Value& v, CallArgs& a) { return string_filter(v, a, "upper", text::upper); }
Expected<Value> f_lower(Renderer&, const Value& v, CallArgs& a) { return string_filter(v, a, "lower", text::lower); }

std::string capitalize(std::string_view s) {
  std::u32string cs = text::decode(s);
  for (size_t i = 0; i < cs.size(); ++i) cs[i] = i == 0 ? text::to_upper(cs[i]) : text::to_lower(cs[i]);
  return text::encode(cs);
}

Expected<Value> f_capitalize(Renderer&, const Value& v, CallArgs& a) {
  return string_filter(v, a, "capitalize", capitalize);
}

// Jinja's title: words start after whitespace, '-', '(', '{', '[' or '<'.
std::string jinja_title(std::string_view s) {
  std::u32string cs = text::decode(s);
  bool start = true;
  for (char32_t& c : cs) {
    const bool sep = text::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      start = true;
      continue;
    }
    c = start ? text::to_upper(c) : text::to_lower(c);
    start = false;
  }
  return text::encode(cs);
}

Expected<Value> f_title(Renderer&, const Value& v, CallArgs& a) { return string_filter(v, a, "title", jinja_title); }

Expected<Value> f_trim(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("trim", a, {"chars"}, &p));
  ASSIGN_OR_RETURN(std::string s, soft_str(v));
  if (given(p[0]) && !p[0].is_none()) {
    ASSIGN_OR_RETURN(std::string chars, soft_str(p[0]));
    return Value(text::strip(s, &chars, true, true));
  }
  return Value(text::strip(s, nullptr, true, true));
}

Expected<Value> f_replace(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("replace", a, {"old", "new", "count"}, &p));
  ASSIGN_OR_RETURN(std::string s, soft_str(v));
  ASSIGN_OR_RETURN(std::string from, soft_str(p[0]));
  ASSIGN_OR_RETURN(std::string to, soft_str(p[1]));
  int64_t count = -1;
  if (given(p[2]) && !p[2].is_none()) {
    ASSIGN_OR_RETURN(count, int_arg(p[2], "replace count"));
  }
  const size_t max = work_meter().max_bytes;
  TRY(spend_search(s.size(), from.size()));
  // The result's size before building it: occurrences x growth.
  const size_t n = from.empty() ? text::length(s) + 1 : [&] {
    size_t k = 0;
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + from.size())) ++k;
    return k;
  }();
  const size_t used = count < 0 ? n : std::min(n, static_cast<size_t>(count));
  if (to.size() > from.size() && used > 0 && (to.size() - from.size()) > (max - std::min(max, s.size())) / used)
    return too_big(max);
  charge(static_cast<int64_t>(s.size() / 64 + used));
  return Value(text::replace(s, from, to, count));
}

Expected<Value> f_string(Renderer&, const Value& v, CallArgs& a) {
  TRY(bind_args("string", a, {}, nullptr));
  ASSIGN_OR_RETURN(std::string s, soft_str(v));
  return Value(std::move(s));
}

Expected<Value> f_list(Renderer& r, const Value& v, CallArgs& a) {
  TRY(bind_args("list", a, {}, nullptr));
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  return make_list(std::move(items));
}

Expected<Value> f_items(Renderer&, const Value& v, CallArgs& a) {
  TRY(bind_args("items", a, {}, nullptr));
  if (v.is_undefined()) return make_iterator({});
  if (v.kind() != Value::Kind::kDict) return Error::invalid_file("Can only get item pairs from a mapping.");
  Args out;
  for (const auto& [k, val] : dict_of(v).items) out.push_back(make_list({k, val}, true));
  charge(static_cast<int64_t>(out.size()));
  return make_iterator(std::move(out));
}

// int("42"), int(" -7 "), int("1_000"); nullopt when Python's int() would refuse.
std::optional<int64_t> parse_int(const std::string& s, int base) {
  std::string t = text::strip(s, nullptr, true, true);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_' && i > 0 && i + 1 < t.size() && std::isxdigit(static_cast<unsigned char>(t[i - 1])) &&
        std::isxdigit(static_cast<unsigned char>(t[i + 1])))
      continue;
    clean.push_back(t[i]);
  }
  if (clean.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(clean.c_str(), &end, base);
  if (errno != 0 || *end != '\0' || std::isspace(static_cast<unsigned char>(clean[0]))) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_float(const std::string& s) {
  const std::string t = text::strip(s, nullptr, true, true);
  if (t.empty()) return std::nullopt;
  const std::string low = text::lower(t);
  for (const char* word : {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"})
    if (low == word) return std::strtod(low.c_str(), nullptr);
  for (char c : t)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' || c == '_'))
      return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return d;
}

Expected<Value> f_int(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("int", a, {"default", "base"}, &p));
  const Value dflt = given(p[0]) ? p[0] : Value(int64_t{0});
  int64_t base = 10;
  if (given(p[1])) {
    ASSIGN_OR_RETURN(base, int_arg(p[1], "int base"));
  }
  if (base != 0 && (base < 2 || base > 36)) return Error::invalid_file("int() base must be >= 2 and <= 36, or 0");
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Error::invalid_file("{}", undefined_message(v));
    case Value::Kind::kBool: return Value(int64_t{v.as_bool()});
    case Value::Kind::kInt: return v;
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d) || std::isinf(d)) return Error::invalid_file("cannot convert float {} to integer", text::float_repr(d));
      if (std::fabs(d) >= 9.2e18) return Error::invalid_file("float {} does not fit 64 bits", text::float_repr(d));
      return Value(static_cast<int64_t>(d));
    }
    case Value::Kind::kString: {
      if (auto i = parse_int(v.as_string(), static_cast<int>(base))) return Value(*i);
      if (auto d = parse_float(v.as_string())) {
        if (std::isnan(*d) || std::isinf(*d)) return Error::invalid_file("cannot convert float {} to integer", text::float_repr(*d));
        if (std::fabs(*d) < 9.2e18) return Value(static_cast<int64_t>(*d));
      }
      return dflt;
    }
    default: return dflt;
  }
}

Expected<Value> f_float(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("float", a, {"default"}, &p));
  const Value dflt = given(p[0]) ? p[0] : Value(0.0);
  if (v.is_undefined()) return Error::invalid_file("{}", undefined_message(v));
  if (is_number(v)) return Value(to_double(v));
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value(*d);
  return dflt;
}

Expected<Value> f_abs(Renderer&, const Value& v, CallArgs& a) {
  TRY(bind_args("abs", a, {}, nullptr));
  if (v.kind() == Value::Kind::kFloat) return Value(std::fabs(v.as_float()));
  if (v.kind() == Value::Kind::kBool) return Value(int64_t{v.as_bool()});
  if (v.kind() == Value::Kind::kInt) {
    if (v.as_int() == INT64_MIN) return Error::invalid_file("integer result of abs({}) does not fit 64 bits", v.as_int());
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  return Error::invalid_file("bad operand type for abs(): '{}'", type_name(v));
}

Expected<Value> f_round(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("round", a, {"precision", "method"}, &p));
  int64_t precision = 0;
  if (given(p[0])) {
    ASSIGN_OR_RETURN(precision, int_arg(p[0], "round precision"));
  }
  std::string method = "common";
  if (given(p[1])) {
    ASSIGN_OR_RETURN(method, soft_str(p[1]));
  }
  if (method != "common" && method != "ceil" && method != "floor")
    return Error::invalid_file("method must be common, ceil or floor");
  if (!is_number(v)) return Error::invalid_file("type {} doesn't define __round__ method", type_name(v));
  if (precision < -300 || precision > 300) return Error::invalid_file("round precision {} out of range", precision);
  if (method == "common" && v.kind() != Value::Kind::kFloat && precision >= 0)
    return Value(v.kind() == Value::Kind::kBool ? int64_t{v.as_bool()} : v.as_int());
  const double d = to_double(v);
  if (method != "common") {
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return Value((method == "ceil" ? std::ceil(d * scale) : std::floor(d * scale)) / scale);
  }
  if (std::isnan(d) || std::isinf(d) || precision < 0) {
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(d / scale) * scale);
  }
  // Correctly rounded, ties to even, like Python's round(x, n).
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), d);
  return Value(std::strtod(buf, nullptr));
}

Expected<Value> f_unique(Renderer& r, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("unique", a, {"case_sensitive", "attribute"}, &p));
  ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(p[0], false));
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  std::unordered_set<std::string> seen;
  Args out;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value key, get_path(r, item, p[1]));
    if (!case_sensitive) key = lower_if_string(key);
    ASSIGN_OR_RETURN(std::string k, dict_key(key));
    if (seen.insert(std::move(k)).second) out.push_back(item);
  }
  return make_iterator(std::move(out));
}

Expected<Value> f_reverse(Renderer& r, const Value& v, CallArgs& a) {
  TRY(bind_args("reverse", a, {}, nullptr));
  if (v.is_string()) {
    std::u32string cs = text::decode(v.as_string());
    std::reverse(cs.begin(), cs.end());
    return Value(text::encode(cs));
  }
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  std::reverse(items.begin(), items.end());
  // reversed(list) is an iterator; what reversed() refuses (a generator) becomes a list
  if (is_sequence_list(v)) return make_iterator(std::move(items), list_of(v).is_tuple ? "reversed" : "list_reverseiterator");
  if (v.kind() == Value::Kind::kDict) return make_iterator(std::move(items), "dict_reversekeyiterator");
  return make_list(std::move(items));
}

Expected<Value> f_sort(Renderer& r, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("sort", a, {"reverse", "case_sensitive", "attribute"}, &p));
  ASSIGN_OR_RETURN(bool reverse, bool_arg(p[0], false));
  ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(p[1], false));
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  Args keys;
  std::vector<std::string> attrs;
  if (p[2].is_string()) {
    std::string comma = ",";
    attrs = text::split(p[2].as_string(), &comma, -1);
  }
  for (const Value& item : items) {
    std::vector<Value> parts;
    if (attrs.size() > 1) {
      for (const std::string& at : attrs) {
        ASSIGN_OR_RETURN(Value k, get_path(r, item, Value(text::strip(at, nullptr, true, true))));
        parts.push_back(case_sensitive ? k : lower_if_string(k));
      }
      keys.push_back(make_list(std::move(parts)));
    } else {
      ASSIGN_OR_RETURN(Value k, get_path(r, item, p[2]));
      keys.push_back(case_sensitive ? k : lower_if_string(k));
    }
  }
  TRY(sort_by(items, keys, reverse));
  return make_list(std::move(items));
}

Expected<Value> f_dictsort(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("dictsort", a, {"case_sensitive", "by", "reverse"}, &p));
  ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(p[0], false));
  ASSIGN_OR_RETURN(bool reverse, bool_arg(p[2], false));
  std::string by = "key";
  if (given(p[1])) {
    ASSIGN_OR_RETURN(by, soft_str(p[1]));
  }
  if (by != "key" && by != "value") return Error::invalid_file("You can only sort by either 'key' or 'value'");
  if (v.kind() != Value::Kind::kDict) return Error::invalid_file("dictsort needs a mapping, got {}", type_name(v));
  Args items, keys;
  for (const auto& [k, val] : dict_of(v).items) {
    items.push_back(make_list({k, val}, true));
    const Value& key = by == "key" ? k : val;
    keys.push_back(case_sensitive ? key : lower_if_string(key));
  }
  TRY(sort_by(items, keys, reverse));
  return make_list_checked(std::move(items));
}

// select / reject / selectattr / rejectattr.
Expected<Value> select_common(Renderer& r, const Value& v, CallArgs& a, bool by_attr, bool keep, const char* name) {
  if (!a.named.empty()) return Error::invalid_file("filter '{}' takes no keyword arguments", name);
  size_t first = 0;
  Value attr;
  if (by_attr) {
    if (a.positional.empty()) return Error::invalid_file("filter '{}' needs an attribute name", name);
    attr = a.positional[0];
    first = 1;
  }
  std::string test;
  CallArgs test_args;
  if (a.positional.size() > first) {
    ASSIGN_OR_RETURN(test, soft_str(a.positional[first]));
    if (find_test(test) == nullptr) return Error::invalid_file("no test named '{}'", test);
    test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1, a.positional.end());
  }
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  Args out;
  for (const Value& item : items) {
    TRY(r.step());
    Value subject = item;
    if (by_attr) {
      ASSIGN_OR_RETURN(subject, get_path(r, item, attr));
    }
    bool ok = false;
    if (test.empty()) {
      ok = truthy(subject);
    } else {
      ASSIGN_OR_RETURN(ok, r.run_test(test, subject, test_args));
    }
    if (ok == keep) out.push_back(item);
  }
  return make_iterator(std::move(out));
}

Expected<Value> f_select(Renderer& r, const Value& v, CallArgs& a) { return select_common(r, v, a, false, true, "select"); }
Expected<Value> f_reject(Renderer& r, const Value& v, CallArgs& a) { return select_common(r, v, a, false, false, "reject"); }
Expected<Value> f_selectattr(Renderer& r, const Value& v, CallArgs& a) {
  return select_common(r, v, a, true, true, "selectattr");
}
Expected<Value> f_rejectattr(Renderer& r, const Value& v, CallArgs& a) {
  return select_common(r, v, a, true, false, "rejectattr");
}

Expected<Value> f_map(Renderer& r, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  Args out;
  const Value* attribute = nullptr;
  Value dflt;
  for (const auto& [k, val] : a.named) {
    if (k == "attribute") {
      attribute = &val;
    } else if (k == "default") {
      dflt = val;
    } else if (attribute == nullptr) {
      return Error::invalid_file("filter 'map': unexpected keyword argument '{}'", k);
    }
  }
  if (attribute != nullptr) {
    if (!a.positional.empty()) return Error::invalid_file("filter 'map' takes an attribute or a filter name, not both");
    for (const Value& item : items) {
      TRY(r.step());
      ASSIGN_OR_RETURN(Value x, get_path(r, item, *attribute, dflt));
      out.push_back(std::move(x));
    }
    return make_iterator(std::move(out));
  }
  if (a.positional.empty()) return Error::invalid_file("filter 'map' needs a filter name or attribute=");
  ASSIGN_OR_RETURN(std::string name, soft_str(a.positional[0]));
  if (find_filter(name) == nullptr) return Error::invalid_file("no filter named '{}'", name);
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.named = a.named;
  for (const Value& item : items) {
    TRY(r.step());
    ASSIGN_OR_RETURN(Value x, r.run_filter(name, item, rest));
    out.push_back(std::move(x));
  }
  return make_iterator(std::move(out));
}

Expected<Value> f_sum(Renderer& r, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("sum", a, {"attribute", "start"}, &p));
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  Value total = given(p[1]) ? p[1] : Value(int64_t{0});
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value x, get_path(r, item, p[0]));
    ASSIGN_OR_RETURN(total, binary_op(BinOp::kAdd, total, x));
  }
  return total;
}

Expected<Value> min_max(Renderer& r, const Value& v, CallArgs& a, bool want_max) {
  Args p;
  TRY(bind_args(want_max ? "max" : "min", a, {"case_sensitive", "attribute"}, &p));
  ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(p[0], false));
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  if (items.empty()) return make_undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value k, get_path(r, items[i], p[1]));
    if (!case_sensitive) k = lower_if_string(k);
    if (i == 0) {
      best_key = k;
      continue;
    }
    ASSIGN_OR_RETURN(int c, compare(k, best_key, want_max ? ">" : "<"));
    if (c != 2 && (want_max ? c > 0 : c < 0)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Expected<Value> f_min(Renderer& r, const Value& v, CallArgs& a) { return min_max(r, v, a, false); }
Expected<Value> f_max(Renderer& r, const Value& v, CallArgs& a) { return min_max(r, v, a, true); }

Expected<Value> f_attr(Renderer& r, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("attr", a, {"name"}, &p));
  ASSIGN_OR_RETURN(std::string name, soft_str(p[0]));
  // Python's getattr only: methods of str / dict / list, attributes of objects, never
  // dict keys.
  if (v.is_string() || v.kind() == Value::Kind::kDict || v.kind() == Value::Kind::kList) {
    if (has_method(v, name)) return r.getattr(v, name);
    return make_undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
  }
  if (v.is_undefined()) return make_undefined(undefined_message(v));
  return r.getattr(v, name);
}

Expected<Value> f_indent(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("indent", a, {"width", "first", "blank"}, &p));
  std::string indention = "    ";
  if (p[0].is_string()) {
    indention = p[0].as_string();
  } else if (given(p[0])) {
    ASSIGN_OR_RETURN(int64_t w, int_arg(p[0], "indent width"));
    if (w > 1000) return Error::invalid_file("indent width {} is larger than 1000", w);
    indention.assign(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
  }
  ASSIGN_OR_RETURN(bool first, bool_arg(p[1], false));
  ASSIGN_OR_RETURN(bool blank, bool_arg(p[2], false));
  // Jinja's indent starts with `s += "\n"`, which only a string survives.
  if (v.is_undefined()) return Error::invalid_file("{}", undefined_message(v));
  if (!v.is_string()) return Error::invalid_file("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v));
  const std::string& s = v.as_string();
  const std::vector<std::string> lines = text::splitlines(s + "\n");
  const size_t max = work_meter().max_bytes;
  if (lines.size() > 0 && indention.size() > 0 && lines.size() > (max - std::min(max, s.size())) / indention.size())
    return too_big(max);
  charge(static_cast<int64_t>(lines.size()));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += indention;
    }
    out += lines[i];
  }
  if (first) out = indention + out;
  return Value(std::move(out));
}

Expected<Value> f_tojson(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"}, &p));
  JsonStyle style;
  ASSIGN_OR_RETURN(style.ensure_ascii, bool_arg(p[0], false));
  ASSIGN_OR_RETURN(style.sort_keys, bool_arg(p[3], false));
  if (given(p[1]) && !p[1].is_none()) {
    style.pretty = true;
    style.item_sep = ",";
    if (p[1].is_string()) {
      style.indent_unit = p[1].as_string();
    } else {
      ASSIGN_OR_RETURN(int64_t n, int_arg(p[1], "tojson indent"));
      if (n > 1000) return Error::invalid_file("tojson indent {} is larger than 1000", n);
      style.indent_unit.assign(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
    }
  }
  if (given(p[2]) && !p[2].is_none()) {
    if (p[2].kind() != Value::Kind::kList || list_of(p[2]).items.size() != 2 || !list_of(p[2]).items[0].is_string() ||
        !list_of(p[2]).items[1].is_string())
      return Error::invalid_file("tojson separators must be a pair of strings, e.g. (',', ':')");
    style.item_sep = list_of(p[2]).items[0].as_string();
    style.key_sep = list_of(p[2]).items[1].as_string();
  }
  std::string out;
  TRY(append_json(out, v, style));
  return Value(std::move(out));
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Expected<Value> f_escape(Renderer&, const Value& v, CallArgs& a) { return string_filter(v, a, "escape", html_escape); }

Expected<Value> f_safe(Renderer&, const Value& v, CallArgs& a) {
  TRY(bind_args("safe", a, {}, nullptr));
  if (v.is_string()) return v;
  ASSIGN_OR_RETURN(std::string s, soft_str(v));
  return Value(std::move(s));
}

Expected<Value> f_pprint(Renderer&, const Value& v, CallArgs& a) {
  TRY(bind_args("pprint", a, {}, nullptr));
  ASSIGN_OR_RETURN(std::string s, to_repr(v));
  return Value(std::move(s));
}

Expected<Value> f_center(Renderer&, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("center", a, {"width"}, &p));
  int64_t width = 80;
  if (given(p[0])) {
    ASSIGN_OR_RETURN(width, int_arg(p[0], "center width"));
  }
  if (width > 100000) return Error::invalid_file("center width {} is larger than 100000", width);
  ASSIGN_OR_RETURN(std::string s, soft_str(v));
  const auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return Value(std::move(s));
  const int64_t pad = width - len;
  const int64_t left = pad / 2 + (pad & width & 1);  // CPython's str.center
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
}

Expected<Value> f_wordcount(Renderer&, const Value& v, CallArgs& a) {
  TRY(bind_args("wordcount", a, {}, nullptr));
  ASSIGN_OR_RETURN(std::string s, soft_str(v));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : text::decode(s)) {
    const bool w = text::is_alpha(c) || text::is_digit(c) || c == '_' || (c >= 0x80 && !text::is_space(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Expected<Value> f_truncate(Renderer& r, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("truncate", a, {"length", "killwords", "end", "leeway"}, &p));
  int64_t length = 255, leeway = 5;
  if (given(p[0])) {
    ASSIGN_OR_RETURN(length, int_arg(p[0], "truncate length"));
  }
  ASSIGN_OR_RETURN(bool killwords, bool_arg(p[1], false));
  std::string end = "...";
  if (given(p[2])) {
    ASSIGN_OR_RETURN(end, soft_str(p[2]));
  }
  if (given(p[3]) && !p[3].is_none()) {
    ASSIGN_OR_RETURN(leeway, int_arg(p[3], "truncate leeway"));
  }
  const auto end_len = static_cast<int64_t>(text::length(end));
  if (length < end_len) return Error::invalid_file("expected length >= {}, got {}", end_len, length);
  if (leeway < 0) return Error::invalid_file("expected leeway >= 0, got {}", leeway);
  if (!v.is_string()) {  // Jinja measures len(value) and returns a short value as it is
    CallArgs none;
    ASSIGN_OR_RETURN(Value n, f_length(r, v, none));
    if (n.as_int() <= length + leeway) return v;
    return Error::invalid_file("truncate needs a string, got {}", type_name(v));
  }
  const std::u32string s = text::decode(v.as_string());
  if (static_cast<int64_t>(s.size()) <= length + leeway) return v;
  std::u32string head = s.substr(0, static_cast<size_t>(length - end_len));
  if (!killwords) {
    const size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head.resize(sp);
  }
  return Value(text::encode(head) + end);
}

Expected<Value> f_batch(Renderer& r, const Value& v, CallArgs& a) {
  Args p;
  TRY(bind_args("batch", a, {"linecount", "fill_with"}, &p));
  ASSIGN_OR_RETURN(int64_t n, int_arg(p[0], "batch linecount"));
  if (n <= 0) return Error::invalid_file("batch linecount must be positive, got {}", n);
  ASSIGN_OR_RETURN(Args items, r.iterate(v));
  Args out, row;
  for (const Value& item : items) {
    row.push_back(item);
    if (static_cast<int64_t>(row.size()) == n) {
      out.push_back(make_list(std::move(row)));
      row.clear();
    }
  }
  if (!row.empty()) {
    if (given(p[1]))
      while (static_cast<int64_t>(row.size()) < n) row.push_back(p[1]);
    out.push_back(make_list(std::move(row)));
  }
  return make_iterator(std::move(out));
}

Expected<Value> f_format(Renderer&, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(std::string fmt, soft_str(v));
  if (!a.named.empty()) {
    if (!a.positional.empty()) return Error::invalid_file("can't handle positional and keyword arguments at the same time");
    std::vector<std::pair<Value, Value>> kv;
    for (const auto& [k, val] : a.named) kv.emplace_back(Value(k), val);
    ASSIGN_OR_RETURN(Value mapping, make_dict(std::move(kv)));
    return percent_format(fmt, mapping);
  }
  return percent_format(fmt, make_list(a.positional, true));
}

Expected<Value> f_striptags(Renderer&, const Value& v, CallArgs& a) {
  TRY(bind_args("striptags", a, {}, nullptr));
  ASSIGN_OR_RETURN(std::string s, soft_str(v));
  std::string no_tags;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') {
      const size_t close = s.find('>', i);
      if (close != std::string::npos) {
        i = close;
        continue;
      }
    }
    no_tags.push_back(s[i]);
  }
  std::string out;
  for (const std::string& w : text::split(no_tags, nullptr, -1)) out += (out.empty() ? "" : " ") + w;
  return Value(std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},   {"count", f_length},        {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},     {"first", f_first},
      {"float", f_float},     {"forceescape", f_escape},  {"format", f_format},     {"indent", f_indent},
      {"int", f_int},         {"items", f_items},         {"join", f_join},         {"last", f_last},
      {"length", f_length},   {"list", f_list},           {"lower", f_lower},       {"map", f_map},
      {"max", f_max},         {"min", f_min},             {"pprint", f_pprint},     {"reject", f_reject},
      {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round},
      {"safe", f_safe},       {"select", f_select},       {"selectattr", f_selectattr}, {"sort", f_sort},
      {"string", f_string},   {"striptags", f_striptags}, {"sum", f_sum},           {"title", f_title},
      {"tojson", f_tojson},   {"trim", f_trim},           {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},     {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& t = filter_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

Status bind_args(std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> params,
                 std::vector<Value>* out) {
  if (args.positional.size() > params.size())
    return Error::invalid_file("'{}' takes at most {} argument(s), got {}", fn, params.size(), args.positional.size());
  if (out == nullptr) {
    if (!args.named.empty()) return Error::invalid_file("'{}' takes no keyword argument '{}'", fn, args.named[0].first);
    return Status::ok_status();
  }
  out->assign(params.size(), Value());
  for (size_t i = 0; i < args.positional.size(); ++i) (*out)[i] = args.positional[i];
  for (const auto& [name, v] : args.named) {
    auto it = std::find(params.begin(), params.end(), name);
    if (it == params.end()) return Error::invalid_file("'{}' got an unexpected keyword argument '{}'", fn, name);
    const auto i = static_cast<size_t>(it - params.begin());
    if (i < args.positional.size()) return Error::invalid_file("'{}' got multiple values for argument '{}'", fn, name);
    (*out)[i] = v;
  }
  return Status::ok_status();
}

Expected<int64_t> int_arg(const Value& v, std::string_view what) {
  if (v.kind() == Value::Kind::kInt) return v.as_int();
  if (v.kind() == Value::Kind::kBool) return int64_t{v.as_bool()};
  if (v.is_undefined()) return Error::invalid_file("{}: {}", what, undefined_message(v));
  return Error::invalid_file("{} must be an integer, not {}", what, type_name(v));
}

Expected<std::string> str_arg(const Value& v) { return to_str(v); }

}  // namespace rlx::jinja
