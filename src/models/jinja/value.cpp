// jinja::Value and the Python semantics shared by the renderer (see value.h): building
// values (from JSON too), truth, str() / repr(), ==, ordering, dict keys, json.dumps.
#include "models/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/jinja/text.h"

namespace rlx::jinja {

namespace {

Error too_deep() {
  return Error::invalid_file("value nested deeper than {} levels (or holding itself)", Value::kMaxDepth);
}

template <typename Json>
Expected<Value> json_to_value(const Json& j, int depth, std::string& path) {
  if (depth > Value::kMaxDepth)
    return Error::invalid_argument("JSON value at {} is nested deeper than {} levels", path.empty() ? "$" : path,
                                   Value::kMaxDepth);
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      const size_t mark = path.size();
      size_t i = 0;
      for (const auto& e : j) {
        path.push_back('[');
        path.append(std::to_string(i++));
        path.push_back(']');
        ASSIGN_OR_RETURN(Value v, json_to_value(e, depth + 1, path));
        path.resize(mark);
        items.push_back(std::move(v));
      }
      return make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      const size_t mark = path.size();
      for (auto it = j.begin(); it != j.end(); ++it) {
        path.push_back('.');
        path.append(it.key());
        ASSIGN_OR_RETURN(Value v, json_to_value(it.value(), depth + 1, path));
        path.resize(mark);
        items.emplace_back(Value(it.key()), std::move(v));
      }
      return make_dict(std::move(items));
    }
    default: return Error::invalid_argument("JSON value at {}: binary values are not supported", path);
  }
}

int max_depth_of(const std::vector<Value>& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, depth_of(v));
  return d;
}

// Keys of json.dumps: strings as they are, numbers / bools / None spelled as JSON.
Expected<std::string> json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString: return k.as_string();
    case Value::Kind::kBool: return std::string(k.as_bool() ? "true" : "false");
    case Value::Kind::kInt: return std::to_string(k.as_int());
    case Value::Kind::kFloat: {
      const double d = k.as_float();
      if (std::isnan(d)) return std::string("NaN");
      if (std::isinf(d)) return std::string(d < 0 ? "-Infinity" : "Infinity");
      return text::float_repr(d);
    }
    case Value::Kind::kNone: return std::string("null");
    default: return Error::invalid_file("keys must be str, int, float, bool or None, not {}", type_name(k));
  }
}

}  // namespace

WorkMeter& work_meter() {
  thread_local WorkMeter meter;
  return meter;
}

Status spend(int64_t units) {
  WorkMeter& m = work_meter();
  m.used += units;
  if (m.used > m.max_steps)
    return Error::unsupported("step budget of {} exhausted (RenderOptions::max_steps)", m.max_steps);
  return Status::ok_status();
}

Error too_big(size_t n) {
  return Error::unsupported("a string or list grew past {} bytes or items (RenderOptions::max_output_bytes)", n);
}

// ---- Value ---------------------------------------------------------------------------

Value::Value(std::string s) : kind_(Kind::kString), ptr_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

const std::string& Value::as_string() const { return *static_cast<const std::string*>(ptr_.get()); }

Expected<Value> Value::list(std::vector<Value> items) { return make_list_checked(std::move(items)); }

Expected<Value> Value::dict(std::vector<std::pair<std::string, Value>> items) {
  std::vector<std::pair<Value, Value>> kv;
  kv.reserve(items.size());
  for (auto& [k, v] : items) kv.emplace_back(Value(std::move(k)), std::move(v));
  return make_dict(std::move(kv));
}

Expected<Value> Value::from_json(const nlohmann::ordered_json& j) {
  std::string path;
  return json_to_value(j, 1, path);
}

Expected<Value> Value::from_json(const nlohmann::json& j) {
  std::string path;
  return json_to_value(j, 1, path);
}

// ---- construction and access ------------------------------------------------------------

Value make_undefined(std::string message) {
  return Value::from_payload(Value::Kind::kUndefined, std::make_shared<const UndefinedInfo>(UndefinedInfo{std::move(message)}));
}

Value make_list(std::vector<Value> items, bool tuple) {
  auto d = std::make_shared<ListData>();
  d->depth = 1 + max_depth_of(items);
  d->items = std::move(items);
  d->is_tuple = tuple;
  return Value::from_payload(Value::Kind::kList, std::move(d));
}

Expected<Value> make_list_checked(std::vector<Value> items, bool tuple) {
  if (1 + max_depth_of(items) > Value::kMaxDepth) return too_deep();
  return make_list(std::move(items), tuple);
}

Expected<Value> make_dict(std::vector<std::pair<Value, Value>> items) {
  auto d = std::make_shared<DictData>();
  d->items.reserve(items.size());
  int depth = 0;
  for (auto& [k, v] : items) {
    ASSIGN_OR_RETURN(std::string key, dict_key(k));
    depth = std::max({depth, depth_of(k), depth_of(v)});
    auto [it, inserted] = d->index.emplace(std::move(key), d->items.size());
    if (inserted) {
      d->items.emplace_back(std::move(k), std::move(v));
    } else {
      d->items[it->second].second = std::move(v);
    }
  }
  if (1 + depth > Value::kMaxDepth) return too_deep();
  d->depth = 1 + depth;
  return Value::from_payload(Value::Kind::kDict, std::move(d));
}

Expected<Value> make_iterator(std::vector<Value> items, const char* type) {
  if (1 + max_depth_of(items) > Value::kMaxDepth) return too_deep();
  auto d = std::make_shared<ListData>();
  d->depth = 1 + max_depth_of(items);
  d->items = std::move(items);
  d->iterator = type;
  return Value::from_payload(Value::Kind::kList, std::move(d));
}

Value make_object(std::shared_ptr<Object> obj) { return Value::from_payload(Value::Kind::kObject, std::move(obj)); }

const ListData& list_of(const Value& v) { return *static_cast<const ListData*>(v.payload().get()); }
const DictData& dict_of(const Value& v) { return *static_cast<const DictData*>(v.payload().get()); }
const Object& object_of(const Value& v) { return *static_cast<const Object*>(v.payload().get()); }

bool is_object(const Value& v, ObjectKind k) {
  return v.kind() == Value::Kind::kObject && object_of(v).kind == k;
}

bool is_sequence_list(const Value& v) { return v.kind() == Value::Kind::kList && list_of(v).iterator == nullptr; }
bool is_iterator(const Value& v) { return v.kind() == Value::Kind::kList && list_of(v).iterator != nullptr; }

int depth_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList: return list_of(v).depth;
    case Value::Kind::kDict: return dict_of(v).depth;
    case Value::Kind::kObject: return object_of(v).depth;
    default: return 0;
  }
}

std::string undefined_message(const Value& v) {
  if (v.is_undefined() && v.payload()) return static_cast<const UndefinedInfo*>(v.payload().get())->message;
  return "value is undefined";
}

const Value* DictData::find(const Value& key) const {
  Expected<std::string> k = dict_key(key);
  if (!k) return nullptr;
  auto it = index.find(*k);
  return it == index.end() ? nullptr : &items[it->second].second;
}

const Value* NamespaceObject::find(std::string_view name) const {
  auto it = index.find(std::string(name));
  return it == index.end() ? nullptr : &attrs[it->second].second;
}

void NamespaceObject::set(std::string_view name, Value v) const {
  auto [it, inserted] = index.emplace(std::string(name), attrs.size());
  if (inserted) {
    attrs.emplace_back(std::string(name), std::move(v));
  } else {
    attrs[it->second].second = std::move(v);
  }
}

// ---- Python semantics ----------------------------------------------------------------

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList:
      if (list_of(v).iterator != nullptr) return list_of(v).iterator;
      return list_of(v).is_tuple ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kObject: return object_of(v).type();
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_float() != 0.0;
    case Value::Kind::kString: return !v.as_string().empty();
    case Value::Kind::kList: return list_of(v).iterator != nullptr || !list_of(v).items.empty();
    case Value::Kind::kDict: return !dict_of(v).items.empty();
    case Value::Kind::kObject: return true;
  }
  return false;
}

bool is_number(const Value& v) {
  return v.kind() == Value::Kind::kBool || v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kFloat;
}

double to_double(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kBool: return v.as_bool() ? 1.0 : 0.0;
    case Value::Kind::kInt: return static_cast<double>(v.as_int());
    case Value::Kind::kFloat: return v.as_float();
    default: return 0.0;
  }
}

namespace {

Status append_items(std::string& out, const Value& v, int depth) {
  if (depth > Value::kMaxDepth) return too_deep();
  const size_t max = work_meter().max_bytes;
  if (v.kind() == Value::Kind::kList) {
    const ListData& l = list_of(v);
    if (l.iterator != nullptr) {
      out += std::string("<") + l.iterator + " object>";
      return Status::ok_status();
    }
    out.push_back(l.is_tuple ? '(' : '[');
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      TRY(append_repr(out, l.items[i], depth + 1));
      charge(1);
      if (out.size() > max) return too_big(max);
    }
    if (l.is_tuple && l.items.size() == 1) out.push_back(',');
    out.push_back(l.is_tuple ? ')' : ']');
    return Status::ok_status();
  }
  const DictData& d = dict_of(v);
  out.push_back('{');
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    TRY(append_repr(out, d.items[i].first, depth + 1));
    out += ": ";
    TRY(append_repr(out, d.items[i].second, depth + 1));
    charge(1);
    if (out.size() > max) return too_big(max);
  }
  out.push_back('}');
  return Status::ok_status();
}

Status append_object(std::string& out, const Value& v, int depth) {
  if (depth > Value::kMaxDepth) return too_deep();
  if (!is_object(v, ObjectKind::kNamespace)) {
    out += object_of(v).describe();
    return Status::ok_status();
  }
  const auto& ns = static_cast<const NamespaceObject&>(object_of(v));
  out += "<Namespace {";
  for (size_t i = 0; i < ns.attrs.size(); ++i) {
    if (i) out += ", ";
    text::append_repr(out, ns.attrs[i].first);
    out += ": ";
    TRY(append_repr(out, ns.attrs[i].second, depth + 1));
  }
  out += "}>";
  return Status::ok_status();
}

}  // namespace

Status append_str(std::string& out, const Value& v, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Status::ok_status();
    case Value::Kind::kString: out += v.as_string(); return Status::ok_status();
    default: return append_repr(out, v, depth);
  }
}

Status append_repr(std::string& out, const Value& v, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: out += "Undefined"; break;
    case Value::Kind::kNone: out += "None"; break;
    case Value::Kind::kBool: out += v.as_bool() ? "True" : "False"; break;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); break;
    case Value::Kind::kFloat: out += text::float_repr(v.as_float()); break;
    case Value::Kind::kString: text::append_repr(out, v.as_string()); break;
    case Value::Kind::kList:
    case Value::Kind::kDict: return append_items(out, v, depth);
    case Value::Kind::kObject: return append_object(out, v, depth);
  }
  return Status::ok_status();
}

Expected<std::string> to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string s;
  TRY(append_str(s, v));
  return s;
}

Expected<std::string> to_repr(const Value& v) {
  std::string s;
  TRY(append_repr(s, v));
  return s;
}

Expected<bool> equals(const Value& a, const Value& b, int depth) {
  if (depth > Value::kMaxDepth) return too_deep();
  charge(1);
  if (is_number(a) && is_number(b)) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      const int64_t x = a.kind() == Value::Kind::kBool ? int64_t{a.as_bool()} : a.as_int();
      const int64_t y = b.kind() == Value::Kind::kBool ? int64_t{b.as_bool()} : b.as_int();
      return x == y;
    }
    return to_double(a) == to_double(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString:
      charge(static_cast<int64_t>(a.as_string().size() / 64));
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListData& x = list_of(a);
      const ListData& y = list_of(b);
      if (x.iterator != nullptr || y.iterator != nullptr) return a.payload() == b.payload();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        ASSIGN_OR_RETURN(bool eq, equals(x.items[i], y.items[i], depth + 1));
        if (!eq) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = dict_of(a);
      const DictData& y = dict_of(b);
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr) return false;
        ASSIGN_OR_RETURN(bool eq, equals(v, *other, depth + 1));
        if (!eq) return false;
      }
      return true;
    }
    case Value::Kind::kObject: return a.payload() == b.payload();
    default: return false;
  }
}

Expected<int> compare(const Value& a, const Value& b, const char* op, int depth) {
  if (depth > Value::kMaxDepth) return too_deep();
  charge(1);
  if (a.is_undefined()) return Error::invalid_file("{}", undefined_message(a));
  if (b.is_undefined()) return Error::invalid_file("{}", undefined_message(b));
  if (is_number(a) && is_number(b)) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      const int64_t x = a.kind() == Value::Kind::kBool ? int64_t{a.as_bool()} : a.as_int();
      const int64_t y = b.kind() == Value::Kind::kBool ? int64_t{b.as_bool()} : b.as_int();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = to_double(a), y = to_double(b);
    if (std::isnan(x) || std::isnan(y)) return 2;  // unordered: every comparison is false
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    charge(static_cast<int64_t>(std::min(a.as_string().size(), b.as_string().size()) / 64));
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (is_sequence_list(a) && is_sequence_list(b) && list_of(a).is_tuple == list_of(b).is_tuple) {
    const auto& x = list_of(a).items;
    const auto& y = list_of(b).items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      ASSIGN_OR_RETURN(bool eq, equals(x[i], y[i], depth + 1));
      if (!eq) return compare(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return Error::invalid_file("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b));
}

namespace {

std::string tagged(char tag, std::string_view rest) {
  std::string key;
  key.reserve(rest.size() + 1);
  key.push_back(tag);
  key.append(rest);
  return key;
}

}  // namespace

Expected<std::string> dict_key(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      charge(static_cast<int64_t>(v.as_string().size() / 64));
      return tagged('s', v.as_string());
    case Value::Kind::kBool: return std::string(v.as_bool() ? "n1" : "n0");
    case Value::Kind::kInt: return tagged('n', std::to_string(v.as_int()));
    case Value::Kind::kFloat: {  // 1.0 is the same key as 1, as in Python
      const double d = v.as_float();
      if (d == std::floor(d) && std::fabs(d) < 9.2e18) return tagged('n', std::to_string(static_cast<int64_t>(d)));
      return tagged('f', text::float_repr(d));
    }
    case Value::Kind::kNone: return std::string("N");
    case Value::Kind::kUndefined: return std::string("U");
    case Value::Kind::kList: {
      if (list_of(v).iterator != nullptr) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "o%p", v.payload().get());
        return std::string(buf);
      }
      if (!list_of(v).is_tuple) return Error::invalid_file("unhashable type: 'list'");
      std::string key = "t";
      for (const Value& item : list_of(v).items) {
        ASSIGN_OR_RETURN(std::string k, dict_key(item));
        key += std::to_string(k.size()) + ":" + k;
      }
      return key;
    }
    case Value::Kind::kDict: return Error::invalid_file("unhashable type: 'dict'");
    case Value::Kind::kObject: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "o%p", v.payload().get());
      return std::string(buf);
    }
  }
  return Error::invalid_file("unhashable type: '{}'", type_name(v));
}

Status append_json(std::string& out, const Value& v, const JsonStyle& style, int level) {
  if (level > Value::kMaxDepth) return too_deep();
  charge(1);
  if (out.size() > work_meter().max_bytes) return too_big(work_meter().max_bytes);
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += style.indent_unit;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return Status::ok_status();
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return Status::ok_status();
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return Status::ok_status();
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d < 0 ? "-Infinity" : "Infinity";
      } else {
        out += text::float_repr(d);
      }
      return Status::ok_status();
    }
    case Value::Kind::kString: text::append_json_string(out, v.as_string(), style.ensure_ascii); return Status::ok_status();
    case Value::Kind::kList: {
      if (list_of(v).iterator != nullptr)
        return Error::invalid_file("Object of type {} is not JSON serializable", list_of(v).iterator);
      const auto& items = list_of(v).items;
      if (items.empty()) {
        out += "[]";
        return Status::ok_status();
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += style.item_sep;
        if (style.pretty) newline(level + 1);
        TRY(append_json(out, items[i], style, level + 1));
      }
      if (style.pretty) newline(level);
      out.push_back(']');
      return Status::ok_status();
    }
    case Value::Kind::kDict: {
      const auto& items = dict_of(v).items;
      if (items.empty()) {
        out += "{}";
        return Status::ok_status();
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      entries.reserve(items.size());
      for (const auto& [k, val] : items) {
        ASSIGN_OR_RETURN(std::string key, json_key(k));
        entries.emplace_back(std::move(key), &val);
      }
      if (style.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += style.item_sep;
        if (style.pretty) newline(level + 1);
        text::append_json_string(out, entries[i].first, style.ensure_ascii);
        out += style.key_sep;
        TRY(append_json(out, *entries[i].second, style, level + 1));
      }
      if (style.pretty) newline(level);
      out.push_back('}');
      return Status::ok_status();
    }
    default: return Error::invalid_file("Object of type {} is not JSON serializable", type_name(v));
  }
}

}  // namespace rlx::jinja
