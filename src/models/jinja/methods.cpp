// Methods of str / dict / list that templates call (`content.split('</think>')`,
// `message.get('content')`), `loop.cycle`, and the global functions: range (capped as
// the sandbox caps it), dict, namespace, raise_exception, strftime_now.
#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>

#include "models/jinja/builtins.h"
#include "models/jinja/text.h"

namespace rlx::jinja {

namespace {

using Args = std::vector<Value>;

constexpr std::array<std::string_view, 37> kStrMethods = {
    "strip",     "lstrip",     "rstrip",  "split",   "rsplit",     "splitlines", "startswith", "endswith",
    "replace",   "upper",      "lower",   "title",   "capitalize", "find",       "rfind",      "index",
    "rindex",    "count",      "join",    "isdigit", "isalpha",    "isalnum",    "isspace",    "isupper",
    "islower",   "zfill",      "ljust",   "rjust",   "center",     "format",     "partition",  "rpartition",
    "casefold",  "removeprefix", "removesuffix", "isnumeric", "isdecimal"};
constexpr std::array<std::string_view, 5> kDictMethods = {"items", "keys", "values", "get", "copy"};
constexpr std::array<std::string_view, 3> kListMethods = {"index", "count", "copy"};
constexpr std::array<std::string_view, 5> kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::array<std::string_view, 8> kListUnsafe = {"append", "clear", "pop", "reverse",
                                                        "sort",   "remove", "extend", "insert"};

template <size_t N>
bool in(const std::array<std::string_view, N>& names, std::string_view n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

Expected<std::string> string_arg(const Value& v, std::string_view what) {
  if (!v.is_string()) return Error::invalid_file("{} must be str, not {}", what, type_name(v));
  return v.as_string();
}

// Code-point view of start/end arguments (Python's str[start:end] bounds).
void clamp_range(const Value& start, const Value& end, int64_t n, int64_t* b, int64_t* e) {
  auto fix = [n](const Value& v, int64_t dflt) {
    if (v.kind() != Value::Kind::kInt) return dflt;
    int64_t x = v.as_int();
    if (x < 0) x = std::max<int64_t>(0, x + n);
    return std::min(x, n);
  };
  *b = fix(start, 0);
  *e = fix(end, n);
}

// str.find / rfind / index / rindex / count over code points.
Expected<Value> search(const std::string& s, const Args& p, std::string_view method) {
  ASSIGN_OR_RETURN(std::string sub, string_arg(p[0], std::string(method) + "() argument"));
  TRY(spend_search(s.size(), sub.size()));
  const std::u32string cs = text::decode(s), cn = text::decode(sub);
  int64_t b = 0, e = 0;
  clamp_range(p[1], p[2], static_cast<int64_t>(cs.size()), &b, &e);
  const std::u32string_view hay = b <= e ? std::u32string_view(cs).substr(static_cast<size_t>(b), static_cast<size_t>(e - b))
                                         : std::u32string_view();
  if (method == "count") {
    if (b > e) return Value(int64_t{0});
    if (cn.empty()) return Value(static_cast<int64_t>(hay.size()) + 1);
    int64_t n = 0;
    for (size_t pos = hay.find(cn); pos != std::u32string_view::npos; pos = hay.find(cn, pos + cn.size())) ++n;
    return Value(n);
  }
  const bool reverse = method == "rfind" || method == "rindex";
  const size_t pos = b > e ? std::u32string_view::npos : reverse ? hay.rfind(cn) : hay.find(cn);
  if (pos == std::u32string_view::npos) {
    if (method == "index" || method == "rindex") return Error::invalid_file("substring not found");
    return Value(int64_t{-1});
  }
  return Value(b + static_cast<int64_t>(pos));
}

Expected<Value> affix_test(const std::string& s, const Args& p, bool prefix) {
  const std::u32string cs = text::decode(s);
  int64_t b = 0, e = 0;
  clamp_range(p[1], p[2], static_cast<int64_t>(cs.size()), &b, &e);
  const std::string part = b <= e ? text::encode(std::u32string_view(cs).substr(static_cast<size_t>(b), static_cast<size_t>(e - b)))
                                  : std::string();
  std::vector<Value> options;
  if (p[0].kind() == Value::Kind::kList && list_of(p[0]).is_tuple) {
    options = list_of(p[0]).items;
  } else {
    options.push_back(p[0]);
  }
  for (const Value& o : options) {
    ASSIGN_OR_RETURN(std::string a, string_arg(o, prefix ? "startswith first arg" : "endswith first arg"));
    if (b > e) continue;
    if (prefix ? part.compare(0, a.size(), a) == 0 && part.size() >= a.size()
               : part.size() >= a.size() && part.compare(part.size() - a.size(), a.size(), a) == 0)
      return Value(true);
  }
  return Value(false);
}

// str.title(): a cased character after a cased one goes lower, else upper.
std::string py_title(const std::string& s) {
  std::u32string cs = text::decode(s);
  bool prev_cased = false;
  for (char32_t& c : cs) {
    const bool cased = text::is_upper(c) || text::is_lower(c);
    if (cased) c = prev_cased ? text::to_lower(c) : text::to_upper(c);
    prev_cased = cased;
  }
  return text::encode(cs);
}

template <typename Pred>
Value all_chars(const std::string& s, Pred pred) {
  const std::u32string cs = text::decode(s);
  if (cs.empty()) return Value(false);
  for (char32_t c : cs)
    if (!pred(c)) return Value(false);
  return Value(true);
}

Expected<Value> pad(const std::string& s, const Args& p, char how) {
  ASSIGN_OR_RETURN(int64_t width, int_arg(p[0], "width"));
  std::string fill = " ";
  if (!p[1].is_undefined()) {
    ASSIGN_OR_RETURN(fill, string_arg(p[1], "fill character"));
    if (text::length(fill) != 1) return Error::invalid_file("The fill character must be exactly one character long");
  }
  if (width > static_cast<int64_t>(work_meter().max_bytes)) return too_big(work_meter().max_bytes);
  const auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return Value(s);
  const int64_t total = width - len;
  int64_t left = how == 'l' ? 0 : how == 'r' ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return Value(std::move(out));
}

// str.format with {} / {0} / {name} fields and {{ }} escapes; a field may use !r / !s
// and no format spec.
Expected<Value> py_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return Error::invalid_file("Single '}}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) return Error::invalid_file("Single '{{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conv = 's';
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 'r' && field[bang + 1] != 's'))
        return Error::invalid_file("format field '{}': only !r and !s conversions are supported", field);
      conv = field[bang + 1];
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos)
      return Error::invalid_file("format field '{}': format specs are not supported", field);
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      const size_t k = field.empty() ? auto_index++ : static_cast<size_t>(std::atoll(field.c_str()));
      if (field.size() > 9 || k >= a.positional.size())
        return Error::invalid_file("Replacement index {} out of range for positional args tuple", field.empty() ? std::to_string(k) : field);
      v = &a.positional[k];
    } else {
      for (const auto& [name, val] : a.named)
        if (name == field) v = &val;
      if (v == nullptr) return Error::invalid_file("format: no argument named '{}'", field);
    }
    ASSIGN_OR_RETURN(std::string piece, conv == 'r' ? to_repr(*v) : to_str(*v));
    out += piece;
    if (out.size() > work_meter().max_bytes) return too_big(work_meter().max_bytes);
  }
  return Value(std::move(out));
}

Expected<Value> partition(const std::string& s, const Args& p, bool from_right) {
  ASSIGN_OR_RETURN(std::string sep, string_arg(p[0], "separator"));
  if (sep.empty()) return Error::invalid_file("empty separator");
  TRY(spend_search(s.size(), sep.size()));
  const size_t pos = from_right ? s.rfind(sep) : s.find(sep);
  if (pos == std::string::npos)
    return from_right ? make_list({Value(std::string()), Value(std::string()), Value(s)}, true)
                      : make_list({Value(s), Value(std::string()), Value(std::string())}, true);
  return make_list({Value(s.substr(0, pos)), Value(sep), Value(s.substr(pos + sep.size()))}, true);
}

Expected<Value> str_method(Renderer& r, const std::string& s, std::string_view m, CallArgs& a) {
  Args p;
  auto bind = [&](std::initializer_list<std::string_view> params) { return bind_args(m, a, params, &p); };
  auto list_of_strings = [](std::vector<std::string> parts) {
    Args items;
    items.reserve(parts.size());
    for (auto& part : parts) items.emplace_back(std::move(part));
    return make_list(std::move(items));
  };
  charge(static_cast<int64_t>(s.size() / 64));
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    TRY(bind({"chars"}));
    std::string chars;
    const bool has = !p[0].is_undefined() && !p[0].is_none();
    if (has) {
      ASSIGN_OR_RETURN(chars, string_arg(p[0], "strip arg"));
    }
    return Value(text::strip(s, has ? &chars : nullptr, m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    TRY(bind({"sep", "maxsplit"}));
    int64_t maxsplit = -1;
    if (!p[1].is_undefined()) {
      ASSIGN_OR_RETURN(maxsplit, int_arg(p[1], "maxsplit"));
    }
    std::string sep;
    const bool has = !p[0].is_undefined() && !p[0].is_none();
    if (has) {
      ASSIGN_OR_RETURN(sep, string_arg(p[0], "separator"));
      if (sep.empty()) return Error::invalid_file("empty separator");
      TRY(spend_search(s.size(), sep.size()));
    }
    return list_of_strings(m == "split" ? text::split(s, has ? &sep : nullptr, maxsplit)
                                        : text::rsplit(s, has ? &sep : nullptr, maxsplit));
  }
  if (m == "splitlines") {
    TRY(bind({"keepends"}));
    if (truthy(p[0])) return Error::invalid_file("splitlines(keepends=True) is not supported");
    return list_of_strings(text::splitlines(s));
  }
  if (m == "startswith" || m == "endswith") {
    TRY(bind({"prefix", "start", "end"}));
    return affix_test(s, p, m == "startswith");
  }
  if (m == "replace") {
    TRY(bind({"old", "new", "count"}));
    std::string from, to;
    ASSIGN_OR_RETURN(from, string_arg(p[0], "replace() argument 1"));
    ASSIGN_OR_RETURN(to, string_arg(p[1], "replace() argument 2"));
    CallArgs fa;
    fa.positional = {p[0], p[1]};
    if (!p[2].is_undefined()) fa.positional.push_back(p[2]);
    return r.run_filter("replace", Value(s), fa);
  }
  if (m == "upper" || m == "lower" || m == "casefold" || m == "title" || m == "capitalize") {
    TRY(bind({}));
    if (m == "upper") return Value(text::upper(s));
    if (m == "title") return Value(py_title(s));
    if (m == "capitalize") return r.run_filter("capitalize", Value(s), {});
    return Value(text::lower(s));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    TRY(bind({"sub", "start", "end"}));
    return search(s, p, m);
  }
  if (m == "join") {
    TRY(bind({"iterable"}));
    ASSIGN_OR_RETURN(Args items, r.iterate(p[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        return Error::invalid_file("sequence item {}: expected str instance, {} found", i, type_name(items[i]));
      if (i) out += s;
      out += items[i].as_string();
      if (out.size() > work_meter().max_bytes) return too_big(work_meter().max_bytes);
    }
    return Value(std::move(out));
  }
  if (m == "isdigit" || m == "isnumeric" || m == "isdecimal") {
    TRY(bind({}));
    return all_chars(s, text::is_digit);
  }
  if (m == "isalpha" || m == "isalnum" || m == "isspace" || m == "isupper" || m == "islower") {
    TRY(bind({}));
    if (m == "isalpha") return all_chars(s, text::is_alpha);
    if (m == "isalnum") return all_chars(s, [](char32_t c) { return text::is_alpha(c) || text::is_digit(c); });
    if (m == "isspace") return all_chars(s, text::is_space);
    CallArgs none;
    ASSIGN_OR_RETURN(bool ok, r.run_test(m == "isupper" ? "upper" : "lower", Value(s), none));
    return Value(ok);
  }
  if (m == "zfill") {
    TRY(bind({"width"}));
    ASSIGN_OR_RETURN(int64_t width, int_arg(p[0], "width"));
    if (width > static_cast<int64_t>(work_meter().max_bytes)) return too_big(work_meter().max_bytes);
    const auto len = static_cast<int64_t>(text::length(s));
    if (width <= len) return Value(s);
    const bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    return Value((sign ? s.substr(0, 1) : "") + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign ? 1 : 0));
  }
  if (m == "ljust" || m == "rjust" || m == "center") {
    TRY(bind({"width", "fillchar"}));
    return pad(s, p, m == "ljust" ? 'l' : m == "rjust" ? 'r' : 'c');
  }
  if (m == "format") return py_format(s, a);
  if (m == "partition" || m == "rpartition") {
    TRY(bind({"sep"}));
    return partition(s, p, m == "rpartition");
  }
  if (m == "removeprefix" || m == "removesuffix") {
    TRY(bind({"affix"}));
    ASSIGN_OR_RETURN(std::string x, string_arg(p[0], std::string(m) + "() argument"));
    if (m == "removeprefix") return Value(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    const bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    return Value(ends ? s.substr(0, s.size() - x.size()) : s);
  }
  return Error::invalid_file("'str' object has no attribute '{}'", m);
}

Expected<Value> dict_method(const Value& self, std::string_view m, CallArgs& a) {
  const DictData& d = dict_of(self);
  Args p;
  if (m == "get") {
    TRY(bind_args(m, a, {"key", "default"}, &p));
    if (const Value* v = d.find(p[0])) return *v;
    TRY(dict_key(p[0]));  // an unhashable key is an error, as in Python
    return p[1].is_undefined() ? Value::none() : p[1];
  }
  TRY(bind_args(m, a, {}, nullptr));
  if (m == "copy") return self;
  Args out;
  out.reserve(d.items.size());
  charge(static_cast<int64_t>(d.items.size()));
  for (const auto& [k, v] : d.items) {
    if (m == "keys") {
      out.push_back(k);
    } else if (m == "values") {
      out.push_back(v);
    } else {
      out.push_back(make_list({k, v}, true));
    }
  }
  return make_list_checked(std::move(out));
}

Expected<Value> list_method(const Value& self, std::string_view m, CallArgs& a) {
  const auto& items = list_of(self).items;
  if (m == "copy") {
    TRY(bind_args(m, a, {}, nullptr));
    return self;
  }
  Args p;
  TRY(bind_args(m, a, {"value"}, &p));
  int64_t n = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(bool eq, equals(items[i], p[0]));
    if (!eq) continue;
    if (m == "index") return Value(static_cast<int64_t>(i));
    ++n;
  }
  if (m == "index") return Error::invalid_file("value is not in list");
  return Value(n);
}

Expected<Value> loop_cycle(const LoopObject& l, CallArgs& a) {
  if (!a.named.empty()) return Error::invalid_file("loop.cycle takes no keyword arguments");
  if (a.positional.empty()) return Error::invalid_file("no items for cycling given");
  return a.positional[static_cast<size_t>(l.index0) % a.positional.size()];
}

// loop.changed(*values): true when the values differ from the previous call's.
Expected<Value> loop_changed(const LoopObject& l, CallArgs& a) {
  if (!a.named.empty()) return Error::invalid_file("loop.changed takes no keyword arguments");
  ASSIGN_OR_RETURN(Value now, make_list_checked(a.positional, true));
  if (l.changed->seen) {
    ASSIGN_OR_RETURN(bool same, equals(now, l.changed->last));
    if (same) return Value(false);
  }
  l.changed->last = std::move(now);
  l.changed->seen = true;
  return Value(true);
}

}  // namespace

bool has_method(const Value& self, std::string_view name) {
  switch (self.kind()) {
    case Value::Kind::kString: return in(kStrMethods, name);
    case Value::Kind::kDict: return in(kDictMethods, name);
    case Value::Kind::kList: return is_sequence_list(self) && in(kListMethods, name);
    default: return false;
  }
}

bool is_unsafe_method(const Value& self, std::string_view name) {
  if (self.kind() == Value::Kind::kDict) return in(kDictUnsafe, name);
  if (is_sequence_list(self)) return in(kListUnsafe, name);
  return false;
}

Expected<Value> call_method(Renderer& r, const Value& self, std::string_view name, CallArgs& args) {
  TRY(r.step());
  switch (self.kind()) {
    case Value::Kind::kString: return str_method(r, self.as_string(), name, args);
    case Value::Kind::kDict: return dict_method(self, name, args);
    case Value::Kind::kList: return list_method(self, name, args);
    case Value::Kind::kObject:
      if (is_object(self, ObjectKind::kLoop) && name == "cycle")
        return loop_cycle(static_cast<const LoopObject&>(object_of(self)), args);
      if (is_object(self, ObjectKind::kLoop) && name == "changed")
        return loop_changed(static_cast<const LoopObject&>(object_of(self)), args);
      break;
    default: break;
  }
  return Error::invalid_file("'{}' object has no method '{}'", type_name(self), name);
}

bool is_global_function(std::string_view name) {
  return name == "range" || name == "dict" || name == "namespace" || name == "raise_exception" ||
         name == "strftime_now";
}

namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox MAX_RANGE

Expected<Value> g_range(const CallArgs& a) {
  if (!a.named.empty()) return Error::invalid_file("range() takes no keyword arguments");
  if (a.positional.empty() || a.positional.size() > 3)
    return Error::invalid_file("range expected 1 to 3 arguments, got {}", a.positional.size());
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < a.positional.size(); ++i) {
    if (a.positional[i].kind() == Value::Kind::kFloat)
      return Error::invalid_file("'float' object cannot be interpreted as an integer");
    ASSIGN_OR_RETURN(v[i], int_arg(a.positional[i], "range() argument"));
  }
  int64_t start = 0, stop = v[0], step = 1;
  if (a.positional.size() >= 2) {
    start = v[0];
    stop = v[1];
  }
  if (a.positional.size() == 3) step = v[2];
  if (step == 0) return Error::invalid_file("range() arg 3 must not be zero");
  // The count without overflow: the distance in unsigned arithmetic.
  uint64_t count = 0;
  if (step > 0 && start < stop) {
    count = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) / static_cast<uint64_t>(step) + 1;
  } else if (step < 0 && start > stop) {
    count = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) / (0 - static_cast<uint64_t>(step)) + 1;
  }
  if (count > static_cast<uint64_t>(kMaxRange))
    return Error::unsupported("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  Args out;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) out.emplace_back(start + static_cast<int64_t>(i) * step);
  charge(static_cast<int64_t>(count));
  return make_list(std::move(out));
}

Expected<Value> g_dict(Renderer& r, const CallArgs& a) {
  if (a.positional.size() > 1) return Error::invalid_file("dict expected at most 1 argument, got {}", a.positional.size());
  std::vector<std::pair<Value, Value>> kv;
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.kind() == Value::Kind::kDict) {
      kv = dict_of(src).items;
    } else {
      ASSIGN_OR_RETURN(Args items, r.iterate(src));
      for (const Value& item : items) {
        ASSIGN_OR_RETURN(Args pair, r.iterate(item));
        if (pair.size() != 2)
          return Error::invalid_file("dictionary update sequence element has length {}; 2 is required", pair.size());
        kv.emplace_back(pair[0], pair[1]);
      }
    }
  }
  for (const auto& [k, v] : a.named) kv.emplace_back(Value(k), v);
  charge(static_cast<int64_t>(kv.size()));
  return make_dict(std::move(kv));
}

Expected<Value> g_namespace(Renderer& r, const CallArgs& a) {
  ASSIGN_OR_RETURN(Value init, g_dict(r, a));
  Value ns = r.make_namespace();
  const auto& obj = static_cast<const NamespaceObject&>(object_of(ns));
  for (const auto& [k, v] : dict_of(init).items) {
    if (!k.is_string()) return Error::invalid_file("namespace() keys must be strings, not {}", type_name(k));
    obj.set(k.as_string(), v);
  }
  return ns;
}

Expected<Value> g_strftime_now(Renderer& r, const CallArgs& a) {
  std::vector<Value> p;
  TRY(bind_args("strftime_now", a, {"format"}, &p));
  ASSIGN_OR_RETURN(std::string fmt, string_arg(p[0], "strftime_now() format"));
  if (fmt.size() > 4096) return Error::invalid_file("strftime_now() format of {} bytes is longer than 4096", fmt.size());
  const std::tm tm = r.now();
  // strftime returns 0 both for "too small" and for an empty result: grow a bounded
  // number of times, with a marker so that an empty result is told apart.
  const std::string marked = fmt + "\x01";
  for (size_t size = 256; size <= 256 * 1024; size *= 4) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), marked.c_str(), &tm);
    if (n > 0) {
      buf.resize(n - 1);
      return Value(std::move(buf));
    }
  }
  return Error::invalid_file("strftime_now() result is too long");
}

}  // namespace

Expected<Value> call_global(Renderer& r, std::string_view name, CallArgs& args) {
  TRY(r.step());
  if (name == "range") return g_range(args);
  if (name == "dict") return g_dict(r, args);
  if (name == "namespace") return g_namespace(r, args);
  if (name == "strftime_now") return g_strftime_now(r, args);
  if (name == "raise_exception") {
    std::vector<Value> p;
    TRY(bind_args("raise_exception", args, {"message"}, &p));
    // (Python's raise_exception(message) has no default; and a raise must say something.)
    if (p[0].is_undefined()) return Error::invalid_file("raise_exception() needs its message argument");
    ASSIGN_OR_RETURN(std::string msg, str_arg(p[0]));
    if (msg.empty()) return Error::invalid_file("raise_exception() was called with an empty message");
    return r.raise(msg);
  }
  return Error::invalid_file("unknown function '{}'", name);
}

}  // namespace rlx::jinja
