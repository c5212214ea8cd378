// Jinja parser: tokens (lexer.h) -> Program (ast.h), with Jinja2's grammar and operator
// precedence (filters and tests bind tighter than arithmetic, `**` is left-associative,
// comparisons chain). Unknown filters / tests / tags fail here with line and column.
#include <algorithm>
#include <initializer_list>

#include "models/jinja/ast.h"
#include "models/jinja/builtins.h"
#include "models/jinja/lexer.h"

namespace rlx::jinja {

namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseOptions& options, detail::Program& program)
      : toks_(std::move(tokens)), options_(options), program_(program) {}

  Expected<Body> parse_template() { return parse_body({}); }

 private:
  // ---- token stream ----
  const Token& cur() const { return toks_[i_]; }
  const Token& peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::kName && cur().text == n; }
  bool is_op(std::string_view o) const { return cur().kind == TokenKind::kOp && cur().text == o; }
  bool skip_op(std::string_view o) {
    if (!is_op(o)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  template <typename... Args>
  Error fail(const Token& t, fmt::format_string<Args...> f, Args&&... args) const {
    return Error::parse("line {} column {}: {}", t.line, t.column, fmt::format(f, std::forward<Args>(args)...));
  }

  Status expect_op(std::string_view o) {
    if (!skip_op(o)) return fail(cur(), "expected '{}', got {}", o, describe(cur()));
    return Status::ok_status();
  }
  Expected<std::string> expect_name() {
    if (cur().kind != TokenKind::kName) return fail(cur(), "expected a name, got {}", describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  Status expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) return fail(cur(), "expected end of statement block, got {}", describe(cur()));
    next();
    return Status::ok_status();
  }

  int intern(const std::string& name) {
    auto [it, inserted] = program_.name_ids.emplace(name, static_cast<int>(program_.names.size()));
    if (inserted) program_.names.push_back(name);
    return it->second;
  }

  // Nesting guard for the parser's own recursion.
  struct Nest {
    explicit Nest(Parser* p) : p(p) { ++p->nesting_; }
    ~Nest() { --p->nesting_; }
    Parser* p;
  };
  Status check_nesting() const {
    if (nesting_ > options_.max_nesting)
      return fail(cur(), "template nested deeper than {} levels (ParseOptions::max_nesting)", options_.max_nesting);
    return Status::ok_status();
  }

  ExprPtr node(ExprKind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = {at.line, at.column};
    return e;
  }
  // Sets e's depth from its children; fails past max_nesting.
  Expected<ExprPtr> finish(ExprPtr e) {
    int d = 0;
    for (const ExprPtr& a : e->args)
      if (a) d = std::max(d, a->depth);
    for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > options_.max_nesting)
      return Error::parse("line {} column {}: expression nested deeper than {} levels (ParseOptions::max_nesting)",
                          e->pos.line, e->pos.column, options_.max_nesting);
    return e;
  }

  // ---- statements ----
  struct OpenBlock {
    std::string tag;
    std::vector<std::string> ends;
    Token at;
  };

  // Statements up to a `{% name %}` with `name` in `ends` (the stream is left at that
  // name), or to the end of the template when `ends` is empty.
  Expected<Body> parse_body(std::initializer_list<std::string_view> ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::kEof: {
          if (ends.size() == 0) return body;
          const OpenBlock& b = open_.back();
          return fail(t, "unexpected end of template: '{}' opened at line {} column {} needs {}", b.tag, b.at.line,
                      b.at.column, end_list(b.ends));
        }
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->pos = {t.line, t.column};
          s->text = t.text;
          body.push_back(std::move(s));
          next();
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->pos = {t.line, t.column};
          next();
          ASSIGN_OR_RETURN(s->expr, parse_tuple(true, {}, false));
          if (cur().kind != TokenKind::kVarEnd) return fail(cur(), "expected '}}}}', got {}", describe(cur()));
          next();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          next();
          if (cur().kind == TokenKind::kName &&
              std::find(ends.begin(), ends.end(), std::string_view(cur().text)) != ends.end())
            return body;
          ASSIGN_OR_RETURN(auto s, parse_statement());
          body.push_back(std::move(s));
          break;
        }
        default: return fail(t, "unexpected {}", describe(t));
      }
    }
  }

  static std::string end_list(const std::vector<std::string>& ends) {
    std::string s;
    for (size_t i = 0; i < ends.size(); ++i) s += (i ? (i + 1 == ends.size() ? " or " : ", ") : "") + ("'" + ends[i] + "'");
    return s;
  }

  // A block's body up to one of `ends`, with the block on the stack for messages.
  Expected<Body> block_body(const std::string& tag, std::initializer_list<std::string_view> ends, const Token& at) {
    OpenBlock b{tag, {}, at};
    for (std::string_view e : ends) b.ends.emplace_back(e);
    open_.push_back(std::move(b));
    Expected<Body> body = parse_body(ends);
    open_.pop_back();
    return body;
  }

  // The body of a macro, call block, filter block or block set: a `break` in it cannot
  // reach a loop around it.
  Expected<Body> body_outside_loops(const std::string& tag, std::initializer_list<std::string_view> ends,
                                    const Token& at) {
    const int saved = loop_depth_;
    loop_depth_ = 0;
    Expected<Body> body = block_body(tag, ends, at);
    loop_depth_ = saved;
    return body;
  }

  // Consumes `{% end... %}` (the stream is at the end name; `{% endblock name %}` may
  // repeat the block's name).
  Status close_block() {
    const bool named = cur().text == "endblock";
    next();
    if (named && cur().kind == TokenKind::kName) next();
    return expect_block_end();
  }

  Expected<std::unique_ptr<Stmt>> parse_statement() {
    Nest nest(this);
    TRY(check_nesting());
    const Token at = cur();
    if (at.kind != TokenKind::kName) return fail(at, "expected a tag name, got {}", describe(at));
    auto s = std::make_unique<Stmt>();
    s->pos = {at.line, at.column};
    const std::string& tag = at.text;
    if (tag == "for") {
      TRY(parse_for(*s, at));
    } else if (tag == "if") {
      TRY(parse_if(*s, at));
    } else if (tag == "set") {
      TRY(parse_set(*s, at));
    } else if (tag == "macro") {
      TRY(parse_macro(*s, at));
    } else if (tag == "call") {
      TRY(parse_call_block(*s, at));
    } else if (tag == "filter") {
      next();
      s->kind = StmtKind::kFilterBlock;
      ASSIGN_OR_RETURN(s->filter, parse_filters(node(ExprKind::kPlaceholder, at), true));
      TRY(expect_block_end());
      ASSIGN_OR_RETURN(s->body, body_outside_loops("filter", {"endfilter"}, at));
      TRY(close_block());
    } else if (tag == "with") {
      TRY(parse_with(*s, at));
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return fail(at, "'{}' outside a for loop", tag);
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      next();
      TRY(expect_block_end());
    } else if (tag == "block" || tag == "generation") {
      // A named block (no inheritance here) or transformers' {% generation %} marker:
      // the body renders in place.
      next();
      if (tag == "block") {
        ASSIGN_OR_RETURN(std::string ignored, expect_name());
        (void)ignored;
        while (skip_name("scoped") || skip_name("required")) {
        }
      }
      s->kind = StmtKind::kScope;
      TRY(expect_block_end());
      const std::string end = "end" + tag;
      ASSIGN_OR_RETURN(s->body, block_body(tag, {end}, at));
      TRY(close_block());
    } else if (tag == "include" || tag == "import" || tag == "extends" || tag == "from") {
      return fail(at, "'{}' is not supported: a chat template renders on its own, without a loader", tag);
    } else if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif") {
      if (open_.empty()) return fail(at, "unexpected '{}': no block is open", tag);
      const OpenBlock& b = open_.back();
      return fail(at, "unexpected '{}': the innermost open block is '{}' (line {} column {}), which needs {}", tag,
                  b.tag, b.at.line, b.at.column, end_list(b.ends));
    } else {
      return fail(at, "unknown tag '{}'", tag);
    }
    return s;
  }

  Status parse_for(Stmt& s, const Token& at) {
    next();
    s.kind = StmtKind::kFor;
    ASSIGN_OR_RETURN(s.target, parse_target(false));
    if (!skip_name("in")) return fail(cur(), "expected 'in' in a for loop, got {}", describe(cur()));
    ASSIGN_OR_RETURN(s.expr, parse_tuple(false, {"recursive"}, false));
    if (skip_name("if")) {
      ASSIGN_OR_RETURN(s.cond, parse_expression(true));
    }
    if (is_name("recursive")) return fail(cur(), "recursive for loops are not supported");
    TRY(expect_block_end());
    ++loop_depth_;
    Expected<Body> body = block_body("for", {"endfor", "else"}, at);
    --loop_depth_;
    if (!body) return body.error();
    s.body = std::move(*body);
    if (is_name("else")) {
      next();
      TRY(expect_block_end());
      ASSIGN_OR_RETURN(s.else_body, block_body("for", {"endfor"}, at));
    }
    return close_block();
  }

  Status parse_if(Stmt& s, const Token& at) {
    s.kind = StmtKind::kIf;
    while (true) {  // at 'if' or 'elif'
      next();
      ASSIGN_OR_RETURN(ExprPtr cond, parse_tuple(false, {}, false));
      TRY(expect_block_end());
      ASSIGN_OR_RETURN(Body body, block_body("if", {"elif", "else", "endif"}, at));
      s.branches.emplace_back(std::move(cond), std::move(body));
      if (is_name("elif")) continue;
      break;
    }
    if (is_name("else")) {
      next();
      TRY(expect_block_end());
      ASSIGN_OR_RETURN(s.else_body, block_body("if", {"endif"}, at));
    }
    return close_block();
  }

  Status parse_set(Stmt& s, const Token& at) {
    next();
    ASSIGN_OR_RETURN(s.target, parse_target(true));
    if (skip_op("=")) {
      s.kind = StmtKind::kSet;
      ASSIGN_OR_RETURN(s.expr, parse_tuple(true, {}, false));
      return expect_block_end();
    }
    s.kind = StmtKind::kSetBlock;
    if (is_op("|")) {
      ASSIGN_OR_RETURN(s.filter, parse_filters(node(ExprKind::kPlaceholder, at), false));
    }
    TRY(expect_block_end());
    ASSIGN_OR_RETURN(s.body, body_outside_loops("set", {"endset"}, at));
    return close_block();
  }

  // An assignment target: a name, names separated by commas (optionally in
  // parentheses), or (for set) namespace.attr.
  Expected<Target> parse_target(bool allow_attr) {
    Target t;
    if (allow_attr && cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == ".") {
      t.names.push_back(intern(cur().text));
      next();
      next();
      ASSIGN_OR_RETURN(t.attr, expect_name());
      return t;
    }
    const bool paren = skip_op("(");
    while (true) {
      if (cur().kind != TokenKind::kName) return fail(cur(), "expected a name to assign to, got {}", describe(cur()));
      const std::string& n = cur().text;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        return fail(cur(), "can't assign to the constant '{}'", n);
      t.names.push_back(intern(n));
      next();
      if (!skip_op(",")) break;
      t.tuple = true;
      if (paren && is_op(")")) break;
      if (!paren && (is_name("in") || is_op("="))) break;
    }
    if (paren) {
      TRY(expect_op(")"));
      t.tuple = true;
    }
    return t;
  }

  Expected<std::vector<Param>> parse_params() {
    std::vector<Param> params;
    TRY(expect_op("("));
    while (!is_op(")")) {
      if (!params.empty()) TRY(expect_op(","));
      if (is_op(")")) break;
      Param p;
      ASSIGN_OR_RETURN(std::string name, expect_name());
      p.name = intern(name);
      if (skip_op("=")) {
        ASSIGN_OR_RETURN(p.default_value, parse_expression(true));
      } else if (!params.empty() && params.back().default_value) {
        return fail(cur(), "non-default argument '{}' follows default argument", name);
      }
      params.push_back(std::move(p));
    }
    next();
    return params;
  }

  Status parse_macro(Stmt& s, const Token& at) {
    next();
    s.kind = StmtKind::kMacro;
    ASSIGN_OR_RETURN(s.text, expect_name());
    s.name = intern(s.text);
    ASSIGN_OR_RETURN(s.params, parse_params());
    TRY(expect_block_end());
    ASSIGN_OR_RETURN(s.body, body_outside_loops("macro", {"endmacro"}, at));
    note_special_names(s);
    return close_block();
  }

  Status parse_call_block(Stmt& s, const Token& at) {
    next();
    s.kind = StmtKind::kCallBlock;
    s.text = "caller";
    if (is_op("(")) {
      ASSIGN_OR_RETURN(s.params, parse_params());
    }
    ASSIGN_OR_RETURN(s.expr, parse_expression(true));
    if (s.expr->kind != ExprKind::kCall) return fail(at, "a call block needs a call, e.g. {{% call m() %}}");
    TRY(expect_block_end());
    ASSIGN_OR_RETURN(s.body, body_outside_loops("call", {"endcall"}, at));
    note_special_names(s);
    return close_block();
  }

  Status parse_with(Stmt& s, const Token& at) {
    next();
    s.kind = StmtKind::kWith;
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s.assigns.empty()) TRY(expect_op(","));
      ASSIGN_OR_RETURN(std::string name, expect_name());
      TRY(expect_op("="));
      ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      s.assigns.emplace_back(intern(name), std::move(value));
    }
    TRY(expect_block_end());
    ASSIGN_OR_RETURN(s.body, block_body("with", {"endwith"}, at));
    return close_block();
  }

  // Whether a macro body reads `varargs` / `kwargs` (then extra arguments land there
  // instead of being an error, as in Jinja).
  void note_special_names(Stmt& s) {
    const auto va = program_.name_ids.find("varargs");
    const auto kw = program_.name_ids.find("kwargs");
    s.uses_varargs = va != program_.name_ids.end() && body_reads(s.body, va->second);
    s.uses_kwargs = kw != program_.name_ids.end() && body_reads(s.body, kw->second);
  }
  static bool expr_reads(const Expr* e, int name) {
    if (e == nullptr) return false;
    if (e->kind == ExprKind::kName && e->name == name) return true;
    for (const ExprPtr& a : e->args)
      if (expr_reads(a.get(), name)) return true;
    for (const auto& kv : e->kwargs)
      if (expr_reads(kv.second.get(), name)) return true;
    return false;
  }
  static bool body_reads(const Body& body, int name) {
    for (const auto& s : body) {
      if (expr_reads(s->expr.get(), name) || expr_reads(s->cond.get(), name) || expr_reads(s->filter.get(), name) ||
          body_reads(s->body, name) || body_reads(s->else_body, name))
        return true;
      for (const auto& [c, b] : s->branches)
        if (expr_reads(c.get(), name) || body_reads(b, name)) return true;
      for (const auto& [n, e] : s->assigns)
        if (expr_reads(e.get(), name)) return true;
      for (const Param& p : s->params)
        if (expr_reads(p.default_value.get(), name)) return true;
    }
    return false;
  }

  // ---- expressions ----

  // Expressions separated by commas (a tuple when there is a comma, or with explicit
  // parentheses when empty).
  Expected<ExprPtr> parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> end_names,
                                bool explicit_parens) {
    const Token at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) TRY(expect_op(","));
      const bool end = cur().kind == TokenKind::kBlockEnd || cur().kind == TokenKind::kVarEnd || is_op(")") ||
                       (cur().kind == TokenKind::kName &&
                        std::find(end_names.begin(), end_names.end(), std::string_view(cur().text)) != end_names.end());
      if (end) break;
      ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
      items.push_back(std::move(e));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return fail(cur(), "expected an expression, got {}", describe(cur()));
    }
    ExprPtr t = node(ExprKind::kTuple, at);
    t->args = std::move(items);
    return finish(std::move(t));
  }

  Expected<ExprPtr> parse_expression(bool with_condexpr) {
    Nest nest(this);
    TRY(check_nesting());
    if (!with_condexpr) return parse_or();
    ASSIGN_OR_RETURN(ExprPtr e, parse_or());
    while (is_name("if")) {
      const Token at = cur();
      next();
      ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
      ExprPtr otherwise;
      if (skip_name("else")) {
        ASSIGN_OR_RETURN(otherwise, parse_expression(true));
      }
      ExprPtr c = node(ExprKind::kCondExpr, at);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(otherwise));
      ASSIGN_OR_RETURN(e, finish(std::move(c)));
    }
    return e;
  }

  Expected<ExprPtr> binary(ExprKind k, ExprPtr l, ExprPtr r, const Token& at, BinOp op = BinOp::kAdd) {
    ExprPtr e = node(k, at);
    e->op = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return finish(std::move(e));
  }

  Expected<ExprPtr> parse_or() {
    ASSIGN_OR_RETURN(ExprPtr e, parse_and());
    while (is_name("or")) {
      const Token at = cur();
      next();
      ASSIGN_OR_RETURN(ExprPtr r, parse_and());
      ASSIGN_OR_RETURN(e, binary(ExprKind::kOr, std::move(e), std::move(r), at));
    }
    return e;
  }

  Expected<ExprPtr> parse_and() {
    ASSIGN_OR_RETURN(ExprPtr e, parse_not());
    while (is_name("and")) {
      const Token at = cur();
      next();
      ASSIGN_OR_RETURN(ExprPtr r, parse_not());
      ASSIGN_OR_RETURN(e, binary(ExprKind::kAnd, std::move(e), std::move(r), at));
    }
    return e;
  }

  Expected<ExprPtr> parse_not() {
    if (is_name("not")) {
      Nest nest(this);
      TRY(check_nesting());
      const Token at = cur();
      next();
      ASSIGN_OR_RETURN(ExprPtr inner, parse_not());
      ExprPtr e = node(ExprKind::kNot, at);
      e->args.push_back(std::move(inner));
      return finish(std::move(e));
    }
    return parse_compare();
  }

  Expected<ExprPtr> parse_compare() {
    const Token at = cur();
    ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    ExprPtr e;
    while (true) {
      CmpOp op;
      if (is_op("==")) {
        op = CmpOp::kEq;
      } else if (is_op("!=")) {
        op = CmpOp::kNe;
      } else if (is_op("<")) {
        op = CmpOp::kLt;
      } else if (is_op("<=")) {
        op = CmpOp::kLe;
      } else if (is_op(">")) {
        op = CmpOp::kGt;
      } else if (is_op(">=")) {
        op = CmpOp::kGe;
      } else if (is_name("in")) {
        op = CmpOp::kIn;
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        next();
        op = CmpOp::kNotIn;
      } else {
        break;
      }
      next();
      if (!e) {
        e = node(ExprKind::kCompare, at);
        e->args.push_back(std::move(first));
      }
      e->cmp.push_back(op);
      ASSIGN_OR_RETURN(ExprPtr r, parse_math1());
      e->args.push_back(std::move(r));
    }
    if (!e) return first;
    return finish(std::move(e));
  }

  Expected<ExprPtr> parse_math1() {
    ASSIGN_OR_RETURN(ExprPtr e, parse_concat());
    while (is_op("+") || is_op("-")) {
      const Token at = cur();
      const BinOp op = at.text == "+" ? BinOp::kAdd : BinOp::kSub;
      next();
      ASSIGN_OR_RETURN(ExprPtr r, parse_concat());
      ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, std::move(e), std::move(r), at, op));
    }
    return e;
  }

  Expected<ExprPtr> parse_concat() {
    const Token at = cur();
    ASSIGN_OR_RETURN(ExprPtr first, parse_math2());
    if (!is_op("~")) return first;
    ExprPtr e = node(ExprKind::kConcat, at);
    e->args.push_back(std::move(first));
    while (skip_op("~")) {
      ASSIGN_OR_RETURN(ExprPtr r, parse_math2());
      e->args.push_back(std::move(r));
    }
    return finish(std::move(e));
  }

  Expected<ExprPtr> parse_math2() {
    ASSIGN_OR_RETURN(ExprPtr e, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = cur();
      const BinOp op = at.text == "*" ? BinOp::kMul : at.text == "/" ? BinOp::kDiv : at.text == "//" ? BinOp::kFloorDiv
                                                                                                      : BinOp::kMod;
      next();
      ASSIGN_OR_RETURN(ExprPtr r, parse_pow());
      ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, std::move(e), std::move(r), at, op));
    }
    return e;
  }

  Expected<ExprPtr> parse_pow() {
    ASSIGN_OR_RETURN(ExprPtr e, parse_unary(true));
    while (is_op("**")) {
      const Token at = cur();
      next();
      ASSIGN_OR_RETURN(ExprPtr r, parse_unary(true));
      ASSIGN_OR_RETURN(e, binary(ExprKind::kBinary, std::move(e), std::move(r), at, BinOp::kPow));
    }
    return e;
  }

  Expected<ExprPtr> parse_unary(bool with_filter) {
    Nest nest(this);
    TRY(check_nesting());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token at = cur();
      next();
      ASSIGN_OR_RETURN(ExprPtr inner, parse_unary(false));
      e = node(at.text == "-" ? ExprKind::kNeg : ExprKind::kPos, at);
      e->args.push_back(std::move(inner));
      ASSIGN_OR_RETURN(e, finish(std::move(e)));
    } else {
      ASSIGN_OR_RETURN(e, parse_primary());
    }
    ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    if (with_filter) {
      ASSIGN_OR_RETURN(e, parse_filter_expr(std::move(e)));
    }
    return e;
  }

  Expected<ExprPtr> parse_primary() {
    Nest nest(this);
    TRY(check_nesting());
    const Token at = cur();
    switch (at.kind) {
      case TokenKind::kName: {
        ExprPtr e = node(ExprKind::kConst, at);
        if (at.text == "true" || at.text == "True") {
          e->value = Value(true);
        } else if (at.text == "false" || at.text == "False") {
          e->value = Value(false);
        } else if (at.text == "none" || at.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = intern(at.text);
        }
        next();
        return e;
      }
      case TokenKind::kString: {
        std::string s = at.text;
        next();
        while (cur().kind == TokenKind::kString) {  // adjacent literals join
          s += cur().text;
          next();
        }
        ExprPtr e = node(ExprKind::kConst, at);
        e->value = Value(std::move(s));
        return e;
      }
      case TokenKind::kInt:
      case TokenKind::kFloat: {
        ExprPtr e = node(ExprKind::kConst, at);
        e->value = at.kind == TokenKind::kInt ? Value(at.i) : Value(at.f);
        next();
        return e;
      }
      case TokenKind::kOp:
        if (at.text == "(") {
          next();
          ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(true, {}, true));
          TRY(expect_op(")"));
          return e;
        }
        if (at.text == "[") return parse_list();
        if (at.text == "{") return parse_dict();
        break;
      default: break;
    }
    return fail(at, "unexpected {}", describe(at));
  }

  Expected<ExprPtr> parse_list() {
    ExprPtr e = node(ExprKind::kList, cur());
    next();
    while (!is_op("]")) {
      if (!e->args.empty()) TRY(expect_op(","));
      if (is_op("]")) break;
      ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
      e->args.push_back(std::move(item));
    }
    next();
    return finish(std::move(e));
  }

  Expected<ExprPtr> parse_dict() {
    ExprPtr e = node(ExprKind::kDict, cur());
    next();
    while (!is_op("}")) {
      if (!e->args.empty()) TRY(expect_op(","));
      if (is_op("}")) break;
      ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
      TRY(expect_op(":"));
      ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e->args.push_back(std::move(key));
      e->args.push_back(std::move(value));
    }
    next();
    return finish(std::move(e));
  }

  Expected<ExprPtr> parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
      } else if (is_op("(")) {
        ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Expected<ExprPtr> parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        ASSIGN_OR_RETURN(e, parse_filters(std::move(e), false));
      } else if (is_name("is")) {
        ASSIGN_OR_RETURN(e, parse_test(std::move(e)));
      } else if (is_op("(")) {
        ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Expected<ExprPtr> parse_subscript(ExprPtr obj) {
    const Token at = cur();
    if (skip_op(".")) {
      if (cur().kind == TokenKind::kName) {
        ExprPtr e = node(ExprKind::kGetAttr, at);
        e->text = cur().text;
        e->args.push_back(std::move(obj));
        next();
        return finish(std::move(e));
      }
      if (cur().kind != TokenKind::kInt) return fail(cur(), "expected a name or a number after '.', got {}", describe(cur()));
      ExprPtr key = node(ExprKind::kConst, cur());
      key->value = Value(cur().i);
      next();
      ExprPtr e = node(ExprKind::kGetItem, at);
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(key));
      return finish(std::move(e));
    }
    next();  // [
    std::vector<ExprPtr> keys;
    ExprPtr slice;
    while (!is_op("]")) {
      if (!keys.empty() || slice) TRY(expect_op(","));
      ASSIGN_OR_RETURN(ExprPtr k, parse_subscribed(&slice));
      if (slice) {
        if (!keys.empty() || !is_op("]")) return fail(cur(), "a slice cannot be part of a tuple index");
        break;
      }
      keys.push_back(std::move(k));
    }
    TRY(expect_op("]"));
    if (slice) {
      slice->args[0] = std::move(obj);
      slice->pos = {at.line, at.column};
      return finish(std::move(slice));
    }
    ExprPtr key;
    if (keys.size() == 1) {  // `x[]` is x[()], as in Jinja
      key = std::move(keys[0]);
    } else {
      key = node(ExprKind::kTuple, at);
      key->args = std::move(keys);
      ASSIGN_OR_RETURN(key, finish(std::move(key)));
    }
    ExprPtr e = node(ExprKind::kGetItem, at);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(key));
    return finish(std::move(e));
  }

  // One item inside []: an expression, or a slice start:stop:step (then *slice is set
  // with args [placeholder for the object, start, stop, step]).
  Expected<ExprPtr> parse_subscribed(ExprPtr* slice) {
    const Token at = cur();
    ExprPtr start;
    if (!is_op(":")) {
      ASSIGN_OR_RETURN(start, parse_expression(true));
      if (!is_op(":")) return start;
    }
    next();  // :
    ExprPtr stop, step;
    if (!is_op("]") && !is_op(",") && !is_op(":")) {
      ASSIGN_OR_RETURN(stop, parse_expression(true));
    }
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) {
        ASSIGN_OR_RETURN(step, parse_expression(true));
      }
    }
    ExprPtr s = node(ExprKind::kSlice, at);
    s->args.push_back(nullptr);
    s->args.push_back(std::move(start));
    s->args.push_back(std::move(stop));
    s->args.push_back(std::move(step));
    *slice = std::move(s);
    return ExprPtr();
  }

  // ( args, name=value ) appended to e's args / kwargs.
  Status parse_call_args(Expr& e) {
    TRY(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        TRY(expect_op(","));
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) return fail(cur(), "*args and **kwargs in calls are not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        e.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e.kwargs.empty()) return fail(cur(), "positional argument follows keyword argument");
        ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        e.args.push_back(std::move(v));
      }
    }
    next();
    return Status::ok_status();
  }

  Expected<ExprPtr> parse_call(ExprPtr callee) {
    ExprPtr e = node(ExprKind::kCall, cur());
    e->args.push_back(std::move(callee));
    TRY(parse_call_args(*e));
    return finish(std::move(e));
  }

  // `| name(args) | name ...`; with `inline_first` the first filter has no `|`.
  Expected<ExprPtr> parse_filters(ExprPtr e, bool inline_first) {
    while (is_op("|") || inline_first) {
      if (!inline_first) next();
      inline_first = false;
      const Token at = cur();
      ASSIGN_OR_RETURN(std::string name, expect_name());
      while (skip_op(".")) {
        ASSIGN_OR_RETURN(std::string part, expect_name());
        name += "." + part;
      }
      if (find_filter(name) == nullptr) return fail(at, "no filter named '{}'", name);
      ExprPtr f = node(ExprKind::kFilter, at);
      f->text = name;
      f->args.push_back(std::move(e));
      if (is_op("(")) TRY(parse_call_args(*f));
      ASSIGN_OR_RETURN(e, finish(std::move(f)));
    }
    return e;
  }

  Expected<ExprPtr> parse_test(ExprPtr e) {
    const Token at = cur();
    next();  // is
    const bool negated = skip_name("not");
    const Token name_at = cur();
    ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_op(".")) {
      ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    if (find_test(name) == nullptr) return fail(name_at, "no test named '{}'", name);
    ExprPtr t = node(ExprKind::kTest, at);
    t->text = name;
    t->args.push_back(std::move(e));
    if (is_op("(")) {
      TRY(parse_call_args(*t));
    } else if ((cur().kind == TokenKind::kName || cur().kind == TokenKind::kString || cur().kind == TokenKind::kInt ||
                cur().kind == TokenKind::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) return fail(cur(), "you cannot chain multiple tests with 'is'");
      ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
      ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
      t->args.push_back(std::move(arg));
    }
    ASSIGN_OR_RETURN(t, finish(std::move(t)));
    if (!negated) return t;
    ExprPtr n = node(ExprKind::kNot, at);
    n->args.push_back(std::move(t));
    return finish(std::move(n));
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  const ParseOptions& options_;
  detail::Program& program_;
  std::vector<OpenBlock> open_;
  int nesting_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Expected<Template> parse(std::string_view source, const ParseOptions& options) {
  if (source.size() > options.max_source_bytes)
    return Error::parse("template of {} bytes is larger than {} (ParseOptions::max_source_bytes)", source.size(),
                        options.max_source_bytes);
  ASSIGN_OR_RETURN(std::vector<Token> tokens, lex(source, options.max_nesting));
  auto program = std::make_shared<detail::Program>();
  Parser p(std::move(tokens), options, *program);
  ASSIGN_OR_RETURN(program->body, p.parse_template());
  return Template(std::move(program));
}

}  // namespace rlx::jinja
