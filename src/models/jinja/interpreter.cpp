// The Jinja interpreter (see interpreter.h): statements and expressions, scopes, macro
// calls, attribute lookup with the sandbox's rules, and the render budgets. Template
// errors get the line and column of the innermost node that failed.
#include "models/jinja/interpreter.h"

#include <algorithm>
#include <ctime>

#include "models/jinja/builtins.h"
#include "models/jinja/text.h"

namespace rlx::jinja {

class Renderer::DepthGuard {
 public:
  explicit DepthGuard(Renderer* r) : r_(r) { ++r_->depth_; }
  ~DepthGuard() { --r_->depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
  Status check() const {
    if (r_->depth_ > r_->options_.max_depth)
      return Error::unsupported("nesting deeper than {} levels (RenderOptions::max_depth)", r_->options_.max_depth);
    return Status::ok_status();
  }

 private:
  Renderer* r_;
};

namespace {

int find_name(const detail::Program& p, const char* name) {
  auto it = p.name_ids.find(name);
  return it == p.name_ids.end() ? -1 : it->second;
}

}  // namespace

Renderer::Renderer(const detail::Program& program, const RenderOptions& options)
    : program_(program), options_(options), globals_(program.names.size()) {
  for (size_t i = 0; i < program.names.size(); ++i) {
    if (!is_global_function(program.names[i])) continue;
    auto f = std::make_shared<FunctionObject>();
    f->name = program.names[i];
    globals_[i] = make_object(std::move(f));
  }
  loop_name_ = find_name(program, "loop");
  varargs_name_ = find_name(program, "varargs");
  kwargs_name_ = find_name(program, "kwargs");
  caller_name_ = find_name(program, "caller");
  saved_meter_ = work_meter();
  work_meter() = WorkMeter{0, options.max_steps, options.max_output_bytes};
}

Renderer::~Renderer() {
  // A namespace may hold itself (directly or through other values): empty them all so
  // that every value is freed.
  for (const auto& ns : namespaces_) {
    ns->attrs.clear();
    ns->index.clear();
  }
  for (const auto& state : loop_states_) state->last = Value();
  work_meter() = saved_meter_;
}

Expected<std::string> Renderer::render(const Value& vars) {
  if (vars.kind() == Value::Kind::kDict) {
    for (const auto& [k, v] : dict_of(vars).items) {
      if (!k.is_string()) return Error::invalid_argument("template variables: a key is a {}, not a string", type_name(k));
      auto it = program_.name_ids.find(k.as_string());
      if (it != program_.name_ids.end()) globals_[static_cast<size_t>(it->second)] = v;
    }
  } else if (!vars.is_undefined() && !vars.is_none()) {
    return Error::invalid_argument("template variables must be a dict, got {}", type_name(vars));
  }
  std::string out;
  out_ = &out;
  ASSIGN_OR_RETURN(Flow flow, exec_body(program_.body));
  (void)flow;
  return out;
}

// ---- services ----------------------------------------------------------------------------

Status Renderer::step(int64_t units) { return spend(units); }

Error Renderer::locate(Error e, const Pos& pos) {
  if (located_) return e;
  located_ = true;
  return Error(e.code(), fmt::format("template line {} column {}: {}", pos.line, pos.column, e.message()));
}

Error Renderer::raise(const std::string& message) {
  located_ = true;  // the template's own message, exactly
  return Error(ErrorCode::kInvalidArgument, message);
}

std::tm Renderer::now() const {
  if (options_.clock) return options_.clock();
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

std::shared_ptr<LoopChanged> Renderer::make_loop_state() {
  loop_states_.push_back(std::make_shared<LoopChanged>());
  return loop_states_.back();
}

Value Renderer::make_namespace() {
  auto ns = std::make_shared<NamespaceObject>();
  namespaces_.push_back(ns);
  return make_object(std::move(ns));
}

Status Renderer::write(std::string_view s) {
  out_->append(s);
  charge(static_cast<int64_t>(s.size() / 64));
  if (out_->size() > options_.max_output_bytes)
    return Error::unsupported("output grew past {} bytes (RenderOptions::max_output_bytes)", options_.max_output_bytes);
  return Status::ok_status();
}

Value Renderer::lookup(int name) {
  for (size_t i = frames_.size(); i > base_; --i)
    for (const auto& [n, v] : frames_[i - 1].vars)
      if (n == name) return v;
  const Value& g = globals_[static_cast<size_t>(name)];
  if (g.is_undefined() && !g.payload())
    return make_undefined("'" + program_.names[static_cast<size_t>(name)] + "' is undefined");
  return g;
}

void Renderer::assign(int name, Value v) {
  if (frames_.size() <= base_) {
    globals_[static_cast<size_t>(name)] = std::move(v);
    return;
  }
  auto& vars = frames_.back().vars;
  for (auto& [n, old] : vars) {
    if (n == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

Status Renderer::assign_target(const Target& t, const Value& v) {
  if (!t.attr.empty()) {
    const Value ns = lookup(t.names[0]);
    if (!is_object(ns, ObjectKind::kNamespace)) return Error::invalid_file("cannot assign attribute on non-namespace object");
    static_cast<const NamespaceObject&>(object_of(ns)).set(t.attr, v);
    return Status::ok_status();
  }
  if (!t.tuple) {
    assign(t.names[0], v);
    return Status::ok_status();
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  if (items.size() < t.names.size())
    return Error::invalid_file("not enough values to unpack (expected {}, got {})", t.names.size(), items.size());
  if (items.size() > t.names.size())
    return Error::invalid_file("too many values to unpack (expected {})", t.names.size());
  for (size_t i = 0; i < items.size(); ++i) assign(t.names[i], items[i]);
  return Status::ok_status();
}

Expected<std::vector<Value>> Renderer::iterate(const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::kUndefined: return out;
    case Value::Kind::kList: out = list_of(v).items; break;
    case Value::Kind::kDict:
      out.reserve(dict_of(v).items.size());
      for (const auto& kv : dict_of(v).items) out.push_back(kv.first);
      break;
    case Value::Kind::kString: {
      const std::string& s = v.as_string();
      if (text::is_ascii(s)) {
        out.reserve(s.size());
        for (char c : s) out.emplace_back(std::string(1, c));
      } else {
        for (char32_t c : text::decode(s)) {
          std::string one;
          text::append_utf8(one, c);
          out.emplace_back(std::move(one));
        }
      }
      break;
    }
    default: return Error::invalid_file("'{}' object is not iterable", type_name(v));
  }
  charge(static_cast<int64_t>(out.size()));
  return out;
}

namespace {

// Filters and tests on a string cost its length: charge it before they run.
Status charge_input(const Value& v) {
  return v.is_string() ? spend(static_cast<int64_t>(v.as_string().size() / 64)) : Status::ok_status();
}

}  // namespace

Expected<bool> Renderer::run_test(std::string_view name, const Value& v, CallArgs args) {
  TRY(charge_input(v));
  TestFn fn = find_test(name);
  if (fn == nullptr) return Error::invalid_file("no test named '{}'", name);
  return fn(*this, v, args);
}

Expected<Value> Renderer::run_filter(std::string_view name, const Value& v, CallArgs args) {
  TRY(charge_input(v));
  FilterFn fn = find_filter(name);
  if (fn == nullptr) return Error::invalid_file("no filter named '{}'", name);
  return fn(*this, v, args);
}

namespace {

Value bound_method(const Value& self, std::string_view name) {
  auto m = std::make_shared<MethodObject>();
  m->self = self;
  m->name = std::string(name);
  m->depth = 1 + depth_of(self);
  return make_object(std::move(m));
}

Value no_attribute(const Value& obj, std::string_view name) {
  return make_undefined("'" + object_type_repr(obj) + "' has no attribute '" + std::string(name) + "'");
}

Value unsafe(const Value& obj, std::string_view name) {
  return make_undefined("access to attribute '" + std::string(name) + "' of '" + type_name(obj) +
                        "' object is unsafe.");
}

Value loop_attribute(const LoopObject& l, const Value& self, std::string_view name) {
  if (name == "index") return Value(l.index0 + 1);
  if (name == "index0") return Value(l.index0);
  if (name == "revindex") return Value(l.length - l.index0);
  if (name == "revindex0") return Value(l.length - l.index0 - 1);
  if (name == "first") return Value(l.index0 == 0);
  if (name == "last") return Value(l.index0 + 1 == l.length);
  if (name == "length") return Value(l.length);
  if (name == "depth") return Value(int64_t{1});
  if (name == "depth0") return Value(int64_t{0});
  if (name == "previtem") return l.previtem;
  if (name == "nextitem") return l.nextitem;
  if (name == "cycle" || name == "changed") return bound_method(self, name);
  return no_attribute(self, name);
}

}  // namespace

Expected<Value> Renderer::getattr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return Error::invalid_file("{}", undefined_message(obj));
    case Value::Kind::kDict: {
      if (has_method(obj, name)) return bound_method(obj, name);
      if (is_unsafe_method(obj, name)) return unsafe(obj, name);
      if (const Value* v = dict_of(obj).find(Value(std::string(name)))) return *v;
      return no_attribute(obj, name);
    }
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (has_method(obj, name)) return bound_method(obj, name);
      if (is_unsafe_method(obj, name)) return unsafe(obj, name);
      return no_attribute(obj, name);
    case Value::Kind::kObject: {
      const Object& o = object_of(obj);
      if (o.kind == ObjectKind::kNamespace) {
        if (const Value* v = static_cast<const NamespaceObject&>(o).find(name)) return *v;
        return no_attribute(obj, name);
      }
      if (o.kind == ObjectKind::kLoop) return loop_attribute(static_cast<const LoopObject&>(o), obj, name);
      if (o.kind == ObjectKind::kMacro && name == "name") return Value(static_cast<const MacroObject&>(o).name);
      return no_attribute(obj, name);
    }
    default: return no_attribute(obj, name);
  }
}

Expected<Value> Renderer::getitem(const Value& obj, const Value& key) {
  auto no_element = [&]() -> Value {
    if (key.is_string()) return no_attribute(obj, key.as_string());
    Expected<std::string> k = to_repr(key);
    return make_undefined(object_type_repr(obj) + " has no element " + (k ? *k : std::string("?")));
  };
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return Error::invalid_file("{}", undefined_message(obj));
    case Value::Kind::kDict:
      if (const Value* v = dict_of(obj).find(key)) return *v;
      if (key.is_string()) return getattr(obj, key.as_string());
      return no_element();
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (key.is_string()) return getattr(obj, key.as_string());
      if (is_iterator(obj) || (key.kind() != Value::Kind::kInt && key.kind() != Value::Kind::kBool))
        return no_element();
      int64_t i = key.kind() == Value::Kind::kBool ? int64_t{key.as_bool()} : key.as_int();
      if (obj.kind() == Value::Kind::kList) {
        const auto& items = list_of(obj).items;
        const auto n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return no_element();
        return items[static_cast<size_t>(i)];
      }
      const std::string& s = obj.as_string();
      if (text::is_ascii(s)) {
        const auto n = static_cast<int64_t>(s.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return no_element();
        return Value(std::string(1, s[static_cast<size_t>(i)]));
      }
      TRY(spend(static_cast<int64_t>(s.size() / 64)));
      const std::u32string cs = text::decode(s);
      const auto n = static_cast<int64_t>(cs.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return no_element();
      std::string one;
      text::append_utf8(one, cs[static_cast<size_t>(i)]);
      return Value(std::move(one));
    }
    case Value::Kind::kObject:
      if (key.is_string()) return getattr(obj, key.as_string());
      return no_element();
    default: return no_element();
  }
}

Expected<Value> Renderer::call(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) return Error::invalid_file("{}", undefined_message(callee));
  if (callee.kind() != Value::Kind::kObject) return Error::invalid_file("'{}' object is not callable", type_name(callee));
  const Object& o = object_of(callee);
  switch (o.kind) {
    case ObjectKind::kMacro: return call_macro(callee, std::move(args), nullptr);
    case ObjectKind::kMethod: {
      const auto& m = static_cast<const MethodObject&>(o);
      return call_method(*this, m.self, m.name, args);
    }
    case ObjectKind::kFunction: return call_global(*this, static_cast<const FunctionObject&>(o).name, args);
    default: return Error::invalid_file("'{}' object is not callable", o.type());
  }
}

Expected<Value> Renderer::call_macro(const Value& macro, CallArgs args, const Value* caller) {
  const auto& m = static_cast<const MacroObject&>(object_of(macro));
  const Stmt& def = *m.def;
  const size_t n_params = def.params.size();
  std::vector<Value> bound(n_params);
  std::vector<bool> given(n_params, false);
  std::vector<Value> extra;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n_params) {
      bound[i] = std::move(args.positional[i]);
      given[i] = true;
    } else if (def.uses_varargs) {
      extra.push_back(std::move(args.positional[i]));
    } else {
      return Error::invalid_file("macro '{}' takes not more than {} argument(s)", m.name, n_params);
    }
  }
  std::vector<std::pair<Value, Value>> extra_named;
  for (auto& [key, v] : args.named) {
    auto it = program_.name_ids.find(key);
    size_t p = n_params;
    if (it != program_.name_ids.end())
      for (size_t i = 0; i < n_params; ++i)
        if (def.params[i].name == it->second) p = i;
    if (p < n_params) {
      if (given[p]) return Error::invalid_file("macro '{}' got multiple values for argument '{}'", m.name, key);
      bound[p] = std::move(v);
      given[p] = true;
    } else if (def.uses_kwargs) {
      extra_named.emplace_back(Value(key), std::move(v));
    } else {
      return Error::invalid_file("macro '{}' takes no keyword argument '{}'", m.name, key);
    }
  }

  const size_t saved_base = base_;
  const size_t closure_index = frames_.size();
  frames_.push_back(Frame{m.closure});
  frames_.push_back(Frame{});
  base_ = closure_index;
  auto restore = [&] {
    frames_.resize(closure_index);
    base_ = saved_base;
  };
  if (def.kind == StmtKind::kMacro) assign(def.name, macro);  // the macro can call itself
  if (caller != nullptr && caller_name_ >= 0) assign(caller_name_, *caller);
  if (def.uses_varargs && varargs_name_ >= 0) assign(varargs_name_, make_list(std::move(extra), true));
  if (def.uses_kwargs && kwargs_name_ >= 0) {
    Expected<Value> kw = make_dict(std::move(extra_named));
    if (!kw) {
      restore();
      return kw.error();
    }
    assign(kwargs_name_, std::move(*kw));
  }
  for (size_t i = 0; i < n_params; ++i) {
    const Param& p = def.params[i];
    if (!given[i]) {
      if (p.default_value) {
        Expected<Value> d = eval(*p.default_value);
        if (!d) {
          restore();
          return d.error();
        }
        bound[i] = std::move(*d);
      } else {
        bound[i] = make_undefined("parameter '" + program_.names[static_cast<size_t>(p.name)] + "' was not provided");
      }
    }
    assign(p.name, bound[i]);
  }
  Expected<std::string> out = capture(def.body);
  restore();
  if (!out) return out.error();
  return Value(std::move(*out));
}

// ---- statements --------------------------------------------------------------------------

Expected<std::string> Renderer::capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  Expected<Flow> flow = exec_body(body);
  out_ = saved;
  if (!flow) return flow.error();
  return buf;
}

Expected<Value> Renderer::apply_filter_chain(const Expr& chain, std::string captured) {
  const Value v(std::move(captured));
  const Value* saved = placeholder_;
  placeholder_ = &v;
  Expected<Value> r = eval(chain);
  placeholder_ = saved;
  return r;
}

Expected<Renderer::Flow> Renderer::exec_body(const Body& body) {
  for (const auto& s : body) {
    ASSIGN_OR_RETURN(Flow f, exec(*s));
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Expected<Renderer::Flow> Renderer::exec(const Stmt& s) {
  DepthGuard guard(this);
  Status st = guard.check();
  if (st.ok()) st = step();
  if (!st.ok()) return locate(st.error(), s.pos);
  Status done = Status::ok_status();
  switch (s.kind) {
    case StmtKind::kText: done = write(s.text); break;
    case StmtKind::kOutput: {
      ASSIGN_OR_RETURN(Value v, eval(*s.expr));
      if (v.is_string()) {
        done = write(v.as_string());
      } else {
        Expected<std::string> text = to_str(v);
        done = text ? write(*text) : Status(text.error());
      }
      break;
    }
    case StmtKind::kIf: {
      for (const auto& [cond, body] : s.branches) {
        ASSIGN_OR_RETURN(Value c, eval(*cond));
        if (truthy(c)) return exec_body(body);
      }
      return exec_body(s.else_body);
    }
    case StmtKind::kFor: {
      Expected<Flow> f = exec_for(s);
      if (!f) return locate(f.error(), s.pos);
      return Flow::kNormal;
    }
    case StmtKind::kSet: done = exec_set(s); break;
    case StmtKind::kSetBlock: {
      ASSIGN_OR_RETURN(std::string captured, capture(s.body));
      Value v(std::move(captured));
      if (s.filter) {
        ASSIGN_OR_RETURN(v, apply_filter_chain(*s.filter, v.as_string()));
      }
      done = assign_target(s.target, v);
      break;
    }
    case StmtKind::kMacro: done = exec_macro_def(s); break;
    case StmtKind::kCallBlock: done = exec_call_block(s); break;
    case StmtKind::kFilterBlock: {
      ASSIGN_OR_RETURN(std::string captured, capture(s.body));
      ASSIGN_OR_RETURN(Value v, apply_filter_chain(*s.filter, std::move(captured)));
      Expected<std::string> text = to_str(v);
      done = text ? write(*text) : Status(text.error());
      break;
    }
    case StmtKind::kWith: {
      Frame f;
      for (const auto& [name, e] : s.assigns) {
        ASSIGN_OR_RETURN(Value v, eval(*e));
        f.vars.emplace_back(name, std::move(v));
      }
      const size_t index = frames_.size();
      frames_.push_back(std::move(f));
      Expected<Flow> flow = exec_body(s.body);
      frames_.resize(index);
      return flow;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kScope: return exec_body(s.body);
  }
  if (!done.ok()) return locate(done.error(), s.pos);
  return Flow::kNormal;
}

Expected<Renderer::Flow> Renderer::exec_for(const Stmt& s) {
  ASSIGN_OR_RETURN(Value iterable, eval(*s.expr));
  ASSIGN_OR_RETURN(std::vector<Value> items, iterate(iterable));
  const size_t index = frames_.size();
  frames_.push_back(Frame{});
  auto pop = [&] { frames_.resize(index); };
  if (s.cond) {  // `for x in xs if cond`: the condition sees the target, not `loop`
    std::vector<Value> kept;
    for (const Value& item : items) {
      frames_[index].vars.clear();
      Status st = assign_target(s.target, item);
      if (!st.ok()) {
        pop();
        return st.error();
      }
      Expected<Value> c = eval(*s.cond);
      if (!c) {
        pop();
        return c.error();
      }
      if (truthy(*c)) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    pop();
    return exec_body(s.else_body);
  }
  const auto n = static_cast<int64_t>(items.size());
  const std::shared_ptr<LoopChanged> changed = loop_name_ >= 0 ? make_loop_state() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    Status st = step();
    if (st.ok()) {
      frames_[index].vars.clear();
      st = assign_target(s.target, items[static_cast<size_t>(i)]);
    }
    if (!st.ok()) {
      pop();
      return st.error();
    }
    if (loop_name_ >= 0) {
      auto l = std::make_shared<LoopObject>();
      l->index0 = i;
      l->length = n;
      l->previtem = i > 0 ? items[static_cast<size_t>(i - 1)] : make_undefined("there is no previous item");
      l->nextitem = i + 1 < n ? items[static_cast<size_t>(i + 1)] : make_undefined("there is no next item");
      l->changed = changed;
      l->depth = 1 + std::max(depth_of(l->previtem), depth_of(l->nextitem));
      frames_[index].vars.emplace_back(loop_name_, make_object(std::move(l)));
    }
    Expected<Flow> f = exec_body(s.body);
    if (!f) {
      pop();
      return f.error();
    }
    if (*f == Flow::kBreak) break;
  }
  pop();
  return Flow::kNormal;
}

Status Renderer::exec_set(const Stmt& s) {
  ASSIGN_OR_RETURN(Value v, eval(*s.expr));
  return assign_target(s.target, v);
}

Status Renderer::exec_macro_def(const Stmt& s) {
  auto m = std::make_shared<MacroObject>();
  m->def = &s;
  m->name = s.text;
  // Locals visible here (a loop variable, a with binding) stay visible in the body.
  for (size_t i = base_; i < frames_.size(); ++i) {
    charge(static_cast<int64_t>(frames_[i].vars.size()));
    for (const auto& [name, v] : frames_[i].vars) {
      auto it = std::find_if(m->closure.begin(), m->closure.end(), [n = name](const auto& kv) { return kv.first == n; });
      if (it != m->closure.end()) {
        it->second = v;
      } else {
        m->closure.emplace_back(name, v);
      }
      m->depth = std::max(m->depth, 1 + depth_of(v));
    }
  }
  if (m->depth > Value::kMaxDepth)
    return Error::invalid_file("value nested deeper than {} levels (or holding itself)", Value::kMaxDepth);
  if (s.kind == StmtKind::kMacro) assign(s.name, make_object(std::move(m)));
  return Status::ok_status();
}

Status Renderer::exec_call_block(const Stmt& s) {
  const Expr& call_expr = *s.expr;
  ASSIGN_OR_RETURN(Value callee, eval(*call_expr.args[0]));
  ASSIGN_OR_RETURN(CallArgs args, eval_args(call_expr, 1));
  if (!is_object(callee, ObjectKind::kMacro)) return Error::invalid_file("a call block needs a macro to call");
  auto caller = std::make_shared<MacroObject>();
  caller->def = &s;
  caller->name = "caller";
  for (size_t i = base_; i < frames_.size(); ++i)
    for (const auto& [name, v] : frames_[i].vars) {
      caller->closure.emplace_back(name, v);
      caller->depth = std::max(caller->depth, 1 + depth_of(v));
    }
  if (caller->depth > Value::kMaxDepth)
    return Error::invalid_file("value nested deeper than {} levels (or holding itself)", Value::kMaxDepth);
  const Value caller_value = make_object(std::move(caller));
  ASSIGN_OR_RETURN(Value out, call_macro(callee, std::move(args), &caller_value));
  return write(out.as_string());
}

// ---- expressions ---------------------------------------------------------------------

Expected<Value> Renderer::eval(const Expr& e) {
  DepthGuard guard(this);
  Status st = guard.check();
  if (st.ok()) st = step();
  if (!st.ok()) return locate(st.error(), e.pos);
  Expected<Value> r = eval_inner(e);
  if (!r) return locate(std::move(r).error(), e.pos);
  return r;
}

Expected<CallArgs> Renderer::eval_args(const Expr& e, size_t first) {
  CallArgs a;
  for (size_t i = first; i < e.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, eval(*e.args[i]));
    a.positional.push_back(std::move(v));
  }
  for (const auto& [name, arg] : e.kwargs) {
    ASSIGN_OR_RETURN(Value v, eval(*arg));
    a.named.emplace_back(name, std::move(v));
  }
  return a;
}

Expected<Value> Renderer::eval_call(const Expr& e) {
  const Expr& callee = *e.args[0];
  Value target;
  if (callee.kind == ExprKind::kGetAttr) {  // obj.method(...) without a bound-method object
    ASSIGN_OR_RETURN(Value obj, eval(*callee.args[0]));
    if ((obj.is_string() || obj.kind() == Value::Kind::kList || obj.kind() == Value::Kind::kDict) &&
        has_method(obj, callee.text)) {
      ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
      return call_method(*this, obj, callee.text, args);
    }
    ASSIGN_OR_RETURN(target, getattr(obj, callee.text));
  } else {
    ASSIGN_OR_RETURN(target, eval(callee));
  }
  ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
  return call(target, std::move(args));
}

Expected<Value> Renderer::eval_slice(const Expr& e) {
  ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
  Value bounds[3] = {Value::none(), Value::none(), Value::none()};
  for (size_t i = 0; i < 3; ++i)
    if (e.args[i + 1]) {
      ASSIGN_OR_RETURN(bounds[i], eval(*e.args[i + 1]));
    }
  return slice(obj, bounds[0], bounds[1], bounds[2]);
}

Expected<Value> Renderer::eval_compare(const Expr& e) {
  ASSIGN_OR_RETURN(Value left, eval(*e.args[0]));
  for (size_t i = 0; i < e.cmp.size(); ++i) {  // a < b < c: (a < b) and (b < c)
    ASSIGN_OR_RETURN(Value right, eval(*e.args[i + 1]));
    ASSIGN_OR_RETURN(bool ok, compare_op(e.cmp[i], left, right));
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Expected<Value> Renderer::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) {
        ASSIGN_OR_RETURN(Value v, eval(*a));
        items.push_back(std::move(v));
      }
      return make_list_checked(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      std::vector<std::pair<Value, Value>> items;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, eval(*e.args[i]));
        ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
        items.emplace_back(std::move(k), std::move(v));
      }
      return make_dict(std::move(items));
    }
    case ExprKind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
      return getattr(obj, e.text);
    }
    case ExprKind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value key, eval(*e.args[1]));
      return getitem(obj, key);
    }
    case ExprKind::kSlice: return eval_slice(e);
    case ExprKind::kCall: return eval_call(e);
    case ExprKind::kFilter: {
      ASSIGN_OR_RETURN(Value input, eval(*e.args[0]));
      ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
      return run_filter(e.text, input, std::move(args));
    }
    case ExprKind::kTest: {
      ASSIGN_OR_RETURN(Value input, eval(*e.args[0]));
      ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1));
      ASSIGN_OR_RETURN(bool r, run_test(e.text, input, std::move(args)));
      return Value(r);
    }
    case ExprKind::kNot: {
      ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      return Value(!truthy(v));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      return unary_op(e.kind == ExprKind::kNeg, v);
    }
    case ExprKind::kBinary: {
      ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value b, eval(*e.args[1]));
      return binary_op(e.op, a, b);
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const ExprPtr& a : e.args) {
        ASSIGN_OR_RETURN(Value v, eval(*a));
        TRY(append_str(s, v));
        charge(static_cast<int64_t>(s.size() / 64));
        if (s.size() > options_.max_output_bytes) return too_big(options_.max_output_bytes);
      }
      return Value(std::move(s));
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
      if (truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return eval(*e.args[1]);
    }
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kCondExpr: {
      ASSIGN_OR_RETURN(Value c, eval(*e.args[1]));
      if (truthy(c)) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return make_undefined("the inline if-expression on line " + std::to_string(e.pos.line) +
                            " evaluated to false and no else section was defined.");
    }
    case ExprKind::kPlaceholder: return placeholder_ != nullptr ? *placeholder_ : Value();
  }
  return Error::internal("unknown expression kind");
}

// ---- the public entry points ---------------------------------------------------------------

Expected<std::string> Template::render(const Value& vars, const RenderOptions& options) const {
  if (!program_) return Error::invalid_argument("render: the template is empty (not parsed)");
  Renderer r(*program_, options);
  return r.render(vars);
}

Expected<std::string> render_chat(const Template& t, const ChatInputs& inputs, const RenderOptions& options) {
  ASSIGN_OR_RETURN(Value vars, Value::dict({{"messages", inputs.messages},
                                            {"tools", inputs.tools.is_undefined() ? Value::none() : inputs.tools},
                                            {"add_generation_prompt", Value(inputs.add_generation_prompt)},
                                            {"bos_token", Value(inputs.bos_token)},
                                            {"eos_token", Value(inputs.eos_token)}}));
  return t.render(vars, options);
}

}  // namespace rlx::jinja
