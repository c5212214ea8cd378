// Jinja2 templates rendered the way Hugging Face's `apply_chat_template` renders chat
// templates (trim_blocks + lstrip_blocks, loop controls, an immutable sandbox,
// `raise_exception`, `tojson`, `strftime_now`). Parse once, render many times; budgets
// (output size, nesting depth, work steps) bound what a hostile template can cost.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::jinja {

namespace detail {
struct Program;  // the parsed template (src/models/jinja/ast.h)
}  // namespace detail

/// A template value, as Jinja sees Python objects: undefined, none, bool, int, float,
/// string, list (or tuple), dict (insertion-ordered), or an object made while rendering
/// (namespace, macro, loop, bound method). Copies are cheap: containers are shared and
/// immutable, as in Jinja's immutable sandbox. Strings are UTF-8.
class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject };

  Value() = default;  ///< undefined
  Value(bool b) : kind_(Kind::kBool) { scalar_.b = b; }                        // NOLINT: implicit by design
  /// Any integer type; held as int64_t (an unsigned value above INT64_MAX wraps).
  template <std::integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, char>)
  Value(T i) : kind_(Kind::kInt) {  // NOLINT
    scalar_.i = static_cast<int64_t>(i);
  }
  Value(double f) : kind_(Kind::kFloat) { scalar_.f = f; }                     // NOLINT
  Value(std::string s);                                                        // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}                         // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                              // NOLINT

  static Value none();
  /// A list of items. Fails when an item is nested deeper than kMaxDepth levels.
  static Expected<Value> list(std::vector<Value> items);
  /// A dict with string keys, in the given order (a repeated key keeps its first place
  /// and its last value, as in Python).
  static Expected<Value> dict(std::vector<std::pair<std::string, Value>> items);
  /// JSON to values: objects become dicts in document order (use ordered_json to keep
  /// the order a file has; nlohmann::json sorts keys), arrays become lists. Errors name
  /// the path of a value nested deeper than kMaxDepth levels.
  static Expected<Value> from_json(const nlohmann::ordered_json& j);
  static Expected<Value> from_json(const nlohmann::json& j);

  /// Deepest nesting of lists / dicts / objects a value may have.
  static constexpr int kMaxDepth = 512;

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool as_bool() const { return scalar_.b; }    ///< kind() == kBool
  int64_t as_int() const { return scalar_.i; }  ///< kind() == kInt
  double as_float() const { return scalar_.f; } ///< kind() == kFloat
  const std::string& as_string() const;         ///< kind() == kString

  /// The shared payload (string, ListData, DictData, Object, undefined hint); for the
  /// renderer's own use.
  const std::shared_ptr<const void>& payload() const { return ptr_; }
  static Value from_payload(Kind kind, std::shared_ptr<const void> p) {
    Value v;
    v.kind_ = kind;
    v.ptr_ = std::move(p);
    return v;
  }

 private:
  Kind kind_ = Kind::kUndefined;
  union Scalar {
    bool b;
    int64_t i;
    double f;
  } scalar_{.i = 0};
  std::shared_ptr<const void> ptr_;
};

/// Limits for parsing one template.
struct ParseOptions {
  size_t max_source_bytes = size_t{4} << 20;  ///< longer sources are refused
  int max_nesting = 200;                      ///< blocks, brackets and operator chains inside each other
};

/// Limits and inputs for one render. Every limit ends the render with an error naming
/// the option that ran out and the template line and column reached.
struct RenderOptions {
  /// Output bytes, and also the largest string or list (in bytes / items) one
  /// operation may build.
  size_t max_output_bytes = size_t{16} << 20;
  /// Nesting of statements, expressions and macro calls at run time.
  int max_depth = 256;
  /// Work units: one per statement, expression, loop turn and call, plus one per 64
  /// bytes or 8 items that a filter or operator builds.
  int64_t max_steps = 20'000'000;
  /// The clock of `strftime_now(fmt)`: the local time to format. Unset: the system clock.
  std::function<std::tm()> clock;
};

/// A parsed template. Cheap to copy; one Template may render in several threads at once.
class Template {
 public:
  Template() = default;
  explicit Template(std::shared_ptr<const detail::Program> program) : program_(std::move(program)) {}

  /// Renders with `vars` (a dict: variable name -> value) as the template's variables.
  /// Errors:
  ///  * the template called raise_exception(msg): ErrorCode::kInvalidArgument, message
  ///    exactly msg;
  ///  * a run-time error (wrong types, undefined attribute of an undefined value, a
  ///    missing macro argument...): ErrorCode::kInvalidFile, "template line L column C: ...";
  ///  * a budget of RenderOptions ran out: ErrorCode::kUnsupported, naming the option.
  Expected<std::string> render(const Value& vars, const RenderOptions& options = {}) const;

  const detail::Program* program() const { return program_.get(); }

 private:
  std::shared_ptr<const detail::Program> program_;
};

/// Parses template source. Errors (ErrorCode::kParse) name the line and column.
Expected<Template> parse(std::string_view source, const ParseOptions& options = {});

/// The variables of a chat rendering, as transformers passes them: `messages`,
/// `add_generation_prompt`, `bos_token`, `eos_token`, and `tools` (none when absent).
struct ChatInputs {
  Value messages;  ///< a list of dicts ({"role": ..., "content": ...}, tool_calls, ...)
  Value tools;     ///< a list of tool schemas, or undefined for none
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
};

/// Renders a chat template with `inputs`.
Expected<std::string> render_chat(const Template& t, const ChatInputs& inputs, const RenderOptions& options = {});

}  // namespace rlx::jinja
