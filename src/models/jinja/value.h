// Inside of jinja::Value: the container payloads (lists, dicts, objects made while
// rendering) and the Python semantics every part of the renderer shares: truth, str(),
// repr(), ==, <, hashing of dict keys, json.dumps. Used by the interpreter and filters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rlx/models/jinja.h"

namespace rlx::jinja {

/// A list or a tuple (immutable once built), or the iterator a Jinja filter returns
/// (map, select, items, unique ...: a Python generator, here computed at once). An
/// iterator is always true, has no len() and no index, prints as "<generator object>".
struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  const char* iterator = nullptr;  ///< non-null: an iterator of this Python type
  int depth = 1;                   ///< 1 + the deepest item
};

/// A dict: insertion-ordered items plus an index by key (immutable once built).
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, size_t> index;  ///< dict_key(key) -> position in items
  int depth = 1;
  /// The value stored under `key`, or nullptr.
  const Value* find(const Value& key) const;
};

/// Objects made while rendering; see interpreter.h for the kinds.
enum class ObjectKind : uint8_t { kNamespace, kMacro, kLoop, kMethod, kFunction };

struct Object {
  explicit Object(ObjectKind k) : kind(k) {}
  virtual ~Object() = default;
  /// What str() prints ("<Macro 'name'>"); namespaces print their attributes instead.
  virtual std::string describe() const = 0;
  /// Python's type name, for error messages ("Macro", "LoopContext", ...).
  virtual std::string type() const = 0;
  ObjectKind kind;
  int depth = 1;
};

/// namespace(...): the one mutable object (`{% set ns.x = ... %}`). Owned by the
/// render that made it, which clears every namespace at its end so that a namespace
/// holding itself cannot leak.
struct NamespaceObject : Object {
  NamespaceObject() : Object(ObjectKind::kNamespace) {}
  std::string describe() const override { return "<Namespace>"; }
  std::string type() const override { return "Namespace"; }
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value v) const;
  mutable std::vector<std::pair<std::string, Value>> attrs;
  mutable std::unordered_map<std::string, size_t> index;  ///< name -> position in attrs
};

/// Undefined carries why it is undefined, for the error when it is used.
struct UndefinedInfo {
  std::string message;  ///< e.g. "'x' is undefined", "'dict object' has no attribute 'y'"
};

// ---- the work meter ------------------------------------------------------------------
/// The budget of the render running on this thread. Long operations (comparing,
/// printing, copying containers) charge it per item; the interpreter checks it at every
/// step, so an over-budget render stops at its next step. Strings and lists built by
/// one operation may not exceed max_bytes bytes / items.
struct WorkMeter {
  int64_t used = 0;
  int64_t max_steps = INT64_MAX;
  size_t max_bytes = SIZE_MAX;
};
WorkMeter& work_meter();
inline void charge(int64_t units) { work_meter().used += units; }
/// Charges `units` and fails at once when the budget is spent: for work that must not
/// start over budget (a substring search may cost haystack x needle).
Status spend(int64_t units);
/// spend() for searching a needle of `needle` bytes in `haystack` bytes.
inline Status spend_search(size_t haystack, size_t needle) {
  return spend(static_cast<int64_t>(haystack / 64 + (haystack / 64) * (needle / 32)));
}
/// The error for a string or list grown past WorkMeter::max_bytes.
Error too_big(size_t n);

// ---- construction --------------------------------------------------------------------
Value make_undefined(std::string message);
/// A list or tuple; the caller has checked depth (see Value::kMaxDepth) or uses make_list_checked.
Value make_list(std::vector<Value> items, bool tuple = false);
Expected<Value> make_list_checked(std::vector<Value> items, bool tuple = false);
/// An iterator ("generator") over `items`.
Expected<Value> make_iterator(std::vector<Value> items, const char* type = "generator");
/// A dict from (key, value) pairs; keys must be hashable (checked: string, number, bool,
/// none, tuple of those). A repeated key keeps its first position and its last value.
Expected<Value> make_dict(std::vector<std::pair<Value, Value>> items);
Value make_object(std::shared_ptr<Object> obj);

// ---- access --------------------------------------------------------------------------
const ListData& list_of(const Value& v);      ///< kind() == kList
const DictData& dict_of(const Value& v);      ///< kind() == kDict
const Object& object_of(const Value& v);      ///< kind() == kObject
bool is_object(const Value& v, ObjectKind k);
/// A list or tuple, not an iterator.
bool is_sequence_list(const Value& v);
bool is_iterator(const Value& v);
int depth_of(const Value& v);
/// The message an undefined value was made with ("'x' is undefined" by default).
std::string undefined_message(const Value& v);

// ---- Python semantics ----------------------------------------------------------------
/// The Python type name: "str", "int", "list", "dict", "NoneType", "Undefined", ...
std::string type_name(const Value& v);
/// Jinja's object_type_repr: "None", "dict object", "str object", ...
std::string object_type_repr(const Value& v);
bool truthy(const Value& v);
bool is_number(const Value& v);  ///< bool, int or float
/// A number as double (bool and int convert); the caller has checked is_number.
double to_double(const Value& v);

/// str(v) into `out`. Errors only for values nested too deep or containing themselves.
Status append_str(std::string& out, const Value& v, int depth = 0);
/// repr(v) into `out`.
Status append_repr(std::string& out, const Value& v, int depth = 0);
Expected<std::string> to_str(const Value& v);
Expected<std::string> to_repr(const Value& v);

/// Python ==. Numbers compare by value (True == 1 == 1.0).
Expected<bool> equals(const Value& a, const Value& b, int depth = 0);
/// Python <, <=, >, >= via a three-way result (-1, 0, 1); errors for unorderable types
/// ("'<' not supported between instances of 'str' and 'int'").
Expected<int> compare(const Value& a, const Value& b, const char* op, int depth = 0);

/// The index key of a hashable value (equal values give equal keys); errors name an
/// unhashable type.
Expected<std::string> dict_key(const Value& v);

/// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python writes it.
struct JsonStyle {
  bool ensure_ascii = false;
  bool pretty = false;          ///< indent given: one item per line
  std::string indent_unit;      ///< the indent of one level (indent=N: N spaces)
  std::string item_sep = ", ";  ///< Python's defaults: ", " on one line, "," with indent
  std::string key_sep = ": ";
  bool sort_keys = false;
};
Status append_json(std::string& out, const Value& v, const JsonStyle& style, int level = 0);

}  // namespace rlx::jinja
