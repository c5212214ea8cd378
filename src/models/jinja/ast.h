// The parsed form of a Jinja template: expressions and statements as plain nodes, made
// by the parser (parser.cpp) and walked by the interpreter (interpreter.cpp).
// Identifiers are interned: a name is an index into Program::names.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rlx/models/jinja.h"

namespace rlx::jinja {

struct Pos {
  int line = 0, column = 0;
};

enum class ExprKind : uint8_t {
  kConst,        ///< value
  kName,         ///< a variable: name
  kList,         ///< [args...]
  kTuple,        ///< (args...)
  kDict,         ///< {args[0]: args[1], args[2]: args[3], ...}
  kGetAttr,      ///< args[0].text
  kGetItem,      ///< args[0][args[1]]
  kSlice,        ///< args[0][args[1]:args[2]:args[3]]; a missing bound is nullptr
  kCall,         ///< args[0](args[1..], kwargs)
  kFilter,       ///< args[0] | text(args[1..], kwargs)
  kTest,         ///< args[0] is text(args[1..], kwargs)
  kNot,          ///< not args[0]
  kNeg,          ///< -args[0]
  kPos,          ///< +args[0]
  kBinary,       ///< args[0] op args[1]
  kConcat,       ///< args[0] ~ args[1] ~ ...
  kAnd,          ///< args[0] and args[1]
  kOr,           ///< args[0] or args[1]
  kCompare,      ///< args[0] cmp[0] args[1] cmp[1] args[2] ... (chained, as in Python)
  kCondExpr,     ///< args[0] if args[1] else args[2] (args[2] nullptr: undefined)
  kPlaceholder,  ///< the captured body that a filter block or a block set filters
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  Pos pos;
  int depth = 1;        ///< 1 + the deepest child (bounded by ParseOptions::max_nesting)
  Value value;          ///< kConst
  int name = -1;        ///< kName
  std::string text;     ///< kGetAttr: attribute; kFilter / kTest: name
  BinOp op = BinOp::kAdd;
  std::vector<CmpOp> cmp;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

enum class StmtKind : uint8_t {
  kText,         ///< literal text
  kOutput,       ///< {{ expr }}
  kIf,           ///< branches, else_body
  kFor,          ///< for target in expr [if cond] body [else else_body]
  kSet,          ///< set target = expr
  kSetBlock,     ///< set target [| filter] body endset
  kMacro,        ///< macro name(params) body endmacro
  kCallBlock,    ///< call(params) expr body endcall
  kFilterBlock,  ///< filter ... body endfilter
  kWith,         ///< with assigns body endwith
  kBreak,
  kContinue,
  kScope,        ///< block / generation: body rendered in place
};

/// What a set / for assigns to: one name, a tuple of names, or namespace.attr.
struct Target {
  std::vector<int> names;
  bool tuple = false;
  std::string attr;  ///< non-empty: `names[0].attr` (a namespace attribute)
};

/// A macro or call-block parameter.
struct Param {
  int name = -1;
  ExprPtr default_value;  ///< nullptr: none
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  Pos pos;
  std::string text;     ///< kText; kMacro: the macro's name (for messages)
  ExprPtr expr;         ///< kOutput, kFor (iterable), kSet, kCallBlock (the call)
  ExprPtr cond;         ///< kFor: the `if` filter
  ExprPtr filter;       ///< kSetBlock / kFilterBlock: filter chain over a kPlaceholder
  Target target;        ///< kFor, kSet, kSetBlock
  std::vector<std::pair<ExprPtr, Body>> branches;  ///< kIf: (condition, body) for if / elif
  Body body, else_body;
  int name = -1;        ///< kMacro
  std::vector<Param> params;                        ///< kMacro, kCallBlock
  bool uses_varargs = false, uses_kwargs = false;   ///< kMacro / kCallBlock body reads them
  std::vector<std::pair<int, ExprPtr>> assigns;     ///< kWith
};

}  // namespace rlx::jinja

namespace rlx::jinja::detail {

/// A parsed template.
struct Program {
  Body body;
  std::vector<std::string> names;  ///< interned identifiers
  std::unordered_map<std::string, int> name_ids;
};

}  // namespace rlx::jinja::detail
