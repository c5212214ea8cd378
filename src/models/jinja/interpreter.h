// The Jinja interpreter: walks a Program with a context of variables and writes the
// output, keeping Jinja's scoping (a frame per loop turn, macro call and with block)
// and the budgets of RenderOptions. Filters, tests and methods (builtins.h) call back
// into it for attribute lookup, iteration and calls.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/jinja/ast.h"
#include "models/jinja/value.h"

namespace rlx::jinja {

/// Arguments of a call: positional, then keyword, as written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

/// What loop.changed(...) last saw, shared by the turns of one loop. The render owns it
/// too and empties it at its end (it may hold the loop object itself).
struct LoopChanged {
  Value last;
  bool seen = false;
};

class Renderer {
 public:
  Renderer(const detail::Program& program, const RenderOptions& options);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  Expected<std::string> render(const Value& vars);

  // ---- services for builtins ----
  /// Charges `units` of work; an error once RenderOptions::max_steps is spent.
  Status step(int64_t units = 1);
  /// obj.name with the sandbox's rules: methods of str / dict / list, dict keys,
  /// namespace attributes, loop attributes; missing -> undefined; obj undefined -> error.
  Expected<Value> getattr(const Value& obj, std::string_view name);
  /// obj[key]: dict keys, list and str indices (negative too), else as getattr.
  Expected<Value> getitem(const Value& obj, const Value& key);
  /// Calls a macro, a bound method or a global function.
  Expected<Value> call(const Value& callee, CallArgs args);
  /// The items a for loop visits: list items, dict keys, the characters of a string,
  /// nothing for undefined; errors for other types.
  Expected<std::vector<Value>> iterate(const Value& v);
  /// Runs the test or filter `name` (used by select / map / selectattr ...).
  Expected<bool> run_test(std::string_view name, const Value& v, CallArgs args);
  Expected<Value> run_filter(std::string_view name, const Value& v, CallArgs args);
  /// The state of loop.changed for a new loop, owned by this render.
  std::shared_ptr<LoopChanged> make_loop_state();
  /// namespace(): a new namespace owned by this render.
  Value make_namespace();
  /// raise_exception(msg): the error that ends the render with exactly msg.
  Error raise(const std::string& message);
  std::tm now() const;
  const RenderOptions& options() const { return options_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Frame {
    std::vector<std::pair<int, Value>> vars;
  };
  class DepthGuard;

  Expected<Flow> exec_body(const Body& body);
  Expected<Flow> exec(const Stmt& s);
  Expected<Flow> exec_for(const Stmt& s);
  Status exec_set(const Stmt& s);
  Status exec_macro_def(const Stmt& s);
  Status exec_call_block(const Stmt& s);
  Expected<std::string> capture(const Body& body);
  Expected<Value> apply_filter_chain(const Expr& chain, std::string captured);

  Expected<Value> eval(const Expr& e);
  Expected<Value> eval_inner(const Expr& e);
  Expected<Value> eval_call(const Expr& e);
  Expected<Value> eval_slice(const Expr& e);
  Expected<Value> eval_compare(const Expr& e);
  Expected<CallArgs> eval_args(const Expr& e, size_t first);

  Value lookup(int name);
  void assign(int name, Value v);
  Status assign_target(const Target& t, const Value& v);
  Expected<Value> call_macro(const Value& macro, CallArgs args, const Value* caller);
  Status write(std::string_view text);
  Error locate(Error e, const Pos& pos);

  const detail::Program& program_;
  const RenderOptions& options_;
  std::vector<Value> globals_;  // by name id
  std::vector<Frame> frames_;
  size_t base_ = 0;  // the first frame the running macro sees
  std::vector<std::shared_ptr<NamespaceObject>> namespaces_;
  std::vector<std::shared_ptr<LoopChanged>> loop_states_;
  std::string* out_ = nullptr;
  int depth_ = 0;
  bool located_ = false;
  const Value* placeholder_ = nullptr;  // the captured text of a filter block
  int loop_name_ = -1, varargs_name_ = -1, kwargs_name_ = -1, caller_name_ = -1;
  WorkMeter saved_meter_;
};

}  // namespace rlx::jinja
