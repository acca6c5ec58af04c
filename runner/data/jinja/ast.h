// The syntax tree of a template: one node type with a kind, because the
// interpreter dispatches on kind anyway and templates are small.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runner/data/jinja/value.h"

namespace tailor::jinja {

enum class NodeKind {
  // expressions
  kLiteral,    // value
  kName,       // name
  kList,       // args
  kTuple,      // args
  kDict,       // args: key, value, key, value...
  kGetAttr,    // expr.name
  kGetItem,    // expr[args[0]]
  kSlice,      // args: start, stop, step (each may be null)
  kCall,       // expr(args, kwargs, dyn_args, dyn_kwargs)
  kFilter,     // expr | name(args...); expr null inside {% filter %}
  kTest,       // expr is [not] name(args...); flag: negated
  kUnary,      // name: "-", "+", "not"; expr
  kBinary,     // name: operator; args[0], args[1]
  kAnd,
  kOr,
  kCompare,    // args[0] ops[0] args[1] ops[1] args[2]...
  kConcat,     // args joined with ~
  kCondExpr,   // expr if cond else else_expr (else_expr may be null)
  kNsRef,      // name.attr as an assignment target
  // statements
  kData,       // name: text
  kPrint,      // expr
  kIf,         // cond, body, else_body
  kFor,        // target, iter, cond (filter), body, else_body
  kSet,        // target, expr
  kSetBlock,   // target, body, expr: a filter chain applied to the body (may be null)
  kMacro,      // name, params, body
  kCallBlock,  // expr: the call, params: caller's parameters, body
  kFilterBlock,// expr: filter chain with null innermost, body
  kWith,       // params: assignments, body
  kBreak,
  kContinue,
  kGeneration, // body
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  NodeKind kind;
  int line = 0;
  int col = 0;
  std::string name;
  Value value;
  NodeList args;
  std::vector<std::string> ops;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  NodePtr dyn_args;
  NodePtr dyn_kwargs;
  NodePtr expr;
  NodePtr cond;
  NodePtr else_expr;
  NodePtr target;
  NodePtr iter;
  NodeList body;
  NodeList else_body;
  std::vector<std::pair<std::string, NodePtr>> params;  // macro parameters with defaults (null: none)
  bool flag = false;
  bool uses_varargs = false;  // macros: body reads varargs / kwargs / caller
  bool uses_kwargs = false;
  bool uses_caller = false;
};

}  // namespace tailor::jinja
