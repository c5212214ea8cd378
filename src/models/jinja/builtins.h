// What templates can call: filters (`x|trim`), tests (`x is defined`), the methods of
// str / dict / list (`s.split(',')`), the global functions (range, dict, namespace,
// raise_exception, strftime_now), and the objects the interpreter makes (macros, loop
// contexts, bound methods). filters.cpp holds filters and tests, methods.cpp the rest.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "models/jinja/interpreter.h"

namespace rlx::jinja {

using FilterFn = Expected<Value> (*)(Renderer& r, const Value& input, CallArgs& args);
using TestFn = Expected<bool> (*)(Renderer& r, const Value& input, CallArgs& args);

/// nullptr for an unknown name.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

/// Binds `args` to `params` as Python binds a call: positions first, then names;
/// out[i] is undefined where nothing was passed. Errors name `fn` and the argument.
Status bind_args(std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> params,
                 std::vector<Value>* out);

/// Global functions: range, dict, namespace, raise_exception, strftime_now.
bool is_global_function(std::string_view name);
Expected<Value> call_global(Renderer& r, std::string_view name, CallArgs& args);

/// Methods of a str, dict or list that the immutable sandbox allows.
bool has_method(const Value& self, std::string_view name);
/// Methods that would change a dict or list (append, update, pop, ...): the sandbox
/// refuses them.
bool is_unsafe_method(const Value& self, std::string_view name);
Expected<Value> call_method(Renderer& r, const Value& self, std::string_view name, CallArgs& args);

// ---- operators (operators.cpp) ----

/// a op b with Python's rules (int / float / str / list); errors name the operand types.
Expected<Value> binary_op(BinOp op, const Value& a, const Value& b);
/// -v and +v.
Expected<Value> unary_op(bool negate, const Value& v);
/// item in container (substring, list item, dict key; false for undefined).
Expected<bool> contains(const Value& container, const Value& item);
/// a op b for ==, !=, <, <=, >, >=, in, not in (NaN compares false).
Expected<bool> compare_op(CmpOp op, const Value& a, const Value& b);
/// obj[start:stop:step] of a list, tuple or str; missing bounds are none.
Expected<Value> slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
/// fmt % args, printf-style (%s %r %d %i %f %e %g %x %o %c %%, flags, width, precision).
Expected<Value> percent_format(const std::string& fmt, const Value& args);

/// An integer argument (bool and int; a float that is a whole number is refused, as in
/// Python); `what` names it in the error.
Expected<int64_t> int_arg(const Value& v, std::string_view what);
/// str(v), with the render's size limit.
Expected<std::string> str_arg(const Value& v);

// ---- objects made while rendering ----

/// A macro (or the body of a call block, passed as `caller`), with the local variables
/// it could see where it was defined.
struct MacroObject : Object {
  MacroObject() : Object(ObjectKind::kMacro) {}
  std::string describe() const override { return "<Macro '" + name + "'>"; }
  std::string type() const override { return "Macro"; }
  const Stmt* def = nullptr;  // kMacro or kCallBlock statement of the Program
  std::string name;
  std::vector<std::pair<int, Value>> closure;
};

/// The `loop` variable of one turn of a for loop.
struct LoopObject : Object {
  LoopObject() : Object(ObjectKind::kLoop) {}
  std::string describe() const override {
    return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(length) + ">";
  }
  std::string type() const override { return "LoopContext"; }
  int64_t index0 = 0, length = 0;
  Value previtem, nextitem;  // undefined at the ends
  std::shared_ptr<LoopChanged> changed;  // shared by the turns of one loop
};

/// A method bound to its object (`s.split`), called later.
struct MethodObject : Object {
  MethodObject() : Object(ObjectKind::kMethod) {}
  std::string describe() const override { return "<built-in method " + name + " of " + type_name(self) + " object>"; }
  std::string type() const override { return "builtin_function_or_method"; }
  Value self;
  std::string name;
};

/// A global function (range, dict, namespace, raise_exception, strftime_now).
struct FunctionObject : Object {
  FunctionObject() : Object(ObjectKind::kFunction) {}
  std::string describe() const override { return "<function " + name + ">"; }
  std::string type() const override { return "function"; }
  std::string name;
};

}  // namespace rlx::jinja
