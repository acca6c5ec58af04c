// Walks the syntax tree and writes the output, with jinja2's scoping: for
// loops and macros open a scope, if does not, namespaces cross scopes.
#include <cmath>
#include <cstdint>
#include <new>
#include <optional>
#include <unordered_map>

#include "runner/data/jinja/builtins.h"
#include "runner/data/jinja/parser.h"
#include "runner/data/jinja/template.h"
#include "runner/data/jinja/text.h"

namespace tailor::jinja {
namespace {

using Scope = std::unordered_map<std::string, Value>;
using ScopeChain = std::vector<std::shared_ptr<Scope>>;

enum class Flow { kNormal, kBreak, kContinue };

std::string describe(const Node& n) {
  switch (n.kind) {
    case NodeKind::kFilter: return "filter '" + n.name + "'";
    case NodeKind::kTest: return "test '" + n.name + "'";
    case NodeKind::kCall:
      if (n.expr && n.expr->kind == NodeKind::kName) return "call to '" + n.expr->name + "'";
      if (n.expr && n.expr->kind == NodeKind::kGetAttr) return "call to method '" + n.expr->name + "'";
      return "call";
    case NodeKind::kGetAttr: return "attribute '" + n.name + "'";
    case NodeKind::kGetItem: return "subscript";
    case NodeKind::kBinary: return "operator '" + n.name + "'";
    case NodeKind::kUnary: return "operator '" + n.name + "'";
    case NodeKind::kCompare: return "comparison";
    case NodeKind::kName: return "name '" + n.name + "'";
    case NodeKind::kFor: return "for loop";
    case NodeKind::kSet:
    case NodeKind::kSetBlock: return "set";
    case NodeKind::kPrint: return "expression";
    case NodeKind::kIf: return "if";
    case NodeKind::kMacro: return "macro '" + n.name + "'";
    case NodeKind::kCallBlock: return "call block";
    case NodeKind::kFilterBlock: return "filter block";
    default: return "";
  }
}

std::int64_t int_of(const Value& v) { return v.is_bool() ? std::int64_t{v.as_bool()} : v.as_int(); }

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "+" && a.is_string()) fail("can only concatenate str (not \"" + type_name(b) + "\") to str");
  if (op == "+" && a.is_list() && !a.as_list()->is_tuple) fail("can only concatenate list (not \"" + type_name(b) + "\") to list");
  fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Value repeat(const Value& seq, std::int64_t n, std::size_t max_bytes) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    const bool markup = seq.is_markup();
    if (!s.empty() && static_cast<std::uint64_t>(n) > max_bytes / s.size()) fail("string repetition too large");
    std::string out;
    out.reserve(s.size() * static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out += s;
    return markup ? Value::markup(std::move(out)) : Value(std::move(out));
  }
  const auto& items = seq.as_list()->items;
  if (!items.empty() && static_cast<std::uint64_t>(n) > (max_bytes / 8) / items.size()) fail("list repetition too large");
  std::vector<Value> out;
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_list()->is_tuple);
}

Value binary_op(const std::string& op, const Value& a, const Value& b, std::size_t max_bytes) {
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  if (op == "+") {
    if (nums) {
      if (floats) return Value(a.as_number() + b.as_number());
      std::int64_t r = 0;
      if (__builtin_add_overflow(int_of(a), int_of(b), &r)) fail("integer overflow");
      return Value(r);
    }
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_bytes) fail("string too large");
      // Markup + str escapes the str (markupsafe's __add__ / __radd__).
      if (a.is_markup() && !b.is_markup()) return Value::markup(a.as_string() + html_escape(b.as_string()));
      if (b.is_markup() && !a.is_markup()) return Value::markup(html_escape(a.as_string()) + b.as_string());
      if (a.is_markup()) return Value::markup(a.as_string() + b.as_string());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list()->is_tuple == b.as_list()->is_tuple) {
      std::vector<Value> out = a.as_list()->items;
      out.insert(out.end(), b.as_list()->items.begin(), b.as_list()->items.end());
      return Value::list(std::move(out), a.as_list()->is_tuple);
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (!nums) unsupported(op, a, b);
    if (floats) return Value(a.as_number() - b.as_number());
    std::int64_t r = 0;
    if (__builtin_sub_overflow(int_of(a), int_of(b), &r)) fail("integer overflow");
    return Value(r);
  }
  if (op == "*") {
    if (nums) {
      if (floats) return Value(a.as_number() * b.as_number());
      std::int64_t r = 0;
      if (__builtin_mul_overflow(int_of(a), int_of(b), &r)) fail("integer overflow");
      return Value(r);
    }
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, int_of(b), max_bytes);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, int_of(a), max_bytes);
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported(op, a, b);
    if (b.as_number() == 0) fail(floats ? "float division by zero" : "division by zero");
    return Value(a.as_number() / b.as_number());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) {
      CallArgs args;
      if (b.is_list() && b.as_list()->is_tuple) {
        args.positional = b.as_list()->items;
      } else {
        args.positional.push_back(b);
      }
      return apply_filter("format", a, args);
    }
    if (!nums) unsupported(op, a, b);
    if (b.as_number() == 0) {
      fail(floats ? (op == "%" ? "float modulo" : "float floor division by zero") : "integer division or modulo by zero");
    }
    if (floats) {
      const double x = a.as_number();
      const double y = b.as_number();
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      if (op == "%") return Value(m);
      const double div = (x - m) / y;
      double fl = std::floor(div);
      if (div - fl > 0.5) fl += 1.0;
      return Value(fl);
    }
    const std::int64_t x = int_of(a);
    const std::int64_t y = int_of(b);
    if (x == INT64_MIN && y == -1) fail("integer overflow");
    std::int64_t q = x / y;
    std::int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return Value(op == "%" ? r : q);
  }
  if (op == "**") {
    if (!nums) unsupported(op, a, b);
    if (!floats && int_of(b) >= 0) {
      std::int64_t base = int_of(a);
      std::int64_t e = int_of(b);
      std::int64_t r = 1;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) fail("integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
      }
      return Value(r);
    }
    if (a.as_number() == 0 && b.as_number() < 0) fail("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.as_number(), b.as_number()));
  }
  fail("unknown operator " + op);
}

class Interpreter {
 public:
  Interpreter(const DictObj& variables, const RenderLimits& limits) : limits_(limits) {
    auto globals = std::make_shared<Scope>();
    DictObj g;
    install_globals(g);
    for (const auto& [k, v] : g.items) (*globals)[k.as_string()] = v;
    // Namespaces are the only mutable containers, so the only way to build
    // a reference cycle; remember them to break cycles when the render ends.
    Value make_namespace = (*globals)["namespace"];
    (*globals)["namespace"] = Value::function("namespace", [this, make_namespace](CallArgs& a) {
      Value ns = make_namespace.as_function()->call(a);
      namespaces_.push_back(ns.as_dict());
      return ns;
    });
    for (const auto& [k, v] : variables.items) {
      if (k.is_string()) (*globals)[k.as_string()] = v;
    }
    scopes_.push_back(globals);
    scopes_.push_back(std::make_shared<Scope>());
    buffers_.emplace_back();
  }

  ~Interpreter() {
    for (const auto& weak : namespaces_) {
      if (auto ns = weak.lock()) ns->items.clear();
    }
  }
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  RenderOutput run(const NodeList& body) {
    exec_body(body);
    RenderOutput out;
    out.text = std::move(buffers_.front());
    out.generation_spans = std::move(spans_);
    return out;
  }

 private:
  std::string& out() { return buffers_.back(); }

  void write(std::string_view s) {
    std::string& o = out();
    if (o.size() + s.size() > limits_.max_output_bytes) {
      fail("output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
    }
    o.append(s);
  }

  std::size_t root_chars() {
    const std::string& root = buffers_.front();
    root_chars_ += count_code_points(std::string_view(root).substr(root_chars_counted_));
    root_chars_counted_ = root.size();
    return root_chars_;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    return Value(Undefined{"'" + name + "' is undefined"});
  }

  void assign(const Node& target, const Value& v) {
    if (target.kind == NodeKind::kName) {
      (*scopes_.back())[target.name] = v;
      return;
    }
    if (target.kind == NodeKind::kNsRef) {
      const Value ns = lookup(target.name);
      if (!ns.is_dict() || !ns.as_dict()->is_namespace) fail("cannot assign attribute on non-namespace object");
      const std::string& attr = target.value.as_string();
      if (!attr.empty() && attr[0] == '_') {
        fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + attr +
             "'. Please rename the attribute.");
      }
      ns.as_dict()->set(Value(attr), v);
      return;
    }
    // Tuple unpacking.
    const std::vector<Value> items = iterate(v);
    const std::size_t n = target.args.size();
    if (items.size() > n) fail("too many values to unpack (expected " + std::to_string(n) + ")");
    if (items.size() < n) {
      fail("not enough values to unpack (expected " + std::to_string(n) + ", got " + std::to_string(items.size()) + ")");
    }
    for (std::size_t i = 0; i < n; ++i) assign(*target.args[i], items[i]);
  }

  // ---- statements
  Flow exec_body(const NodeList& body) {
    for (const auto& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Node& n) {
    try {
      return exec_inner(n);
    } catch (TemplateError& e) {
      locate(e, n);
      throw;
    }
  }

  std::string capture(const NodeList& body) {
    buffers_.emplace_back();
    try {
      exec_body(body);
    } catch (...) {
      buffers_.pop_back();
      throw;
    }
    std::string s = std::move(buffers_.back());
    buffers_.pop_back();
    return s;
  }

  // An error raised below a node is placed at the innermost node that knows
  // its position.
  static void locate(TemplateError& e, const Node& n) {
    if (e.line != 0) return;
    e.line = n.line;
    e.col = n.col;
    e.construct = describe(n);
  }

  Value apply_filter_chain(const Node& f, Value subject) {
    if (f.expr) subject = apply_filter_chain(*f.expr, std::move(subject));
    try {
      CallArgs args = eval_args(f);
      return apply_filter(f.name, subject, args);
    } catch (TemplateError& e) {
      locate(e, f);
      throw;
    }
  }

  Flow exec_inner(const Node& n) {
    switch (n.kind) {
      case NodeKind::kData: write(n.name); return Flow::kNormal;
      case NodeKind::kPrint: write(to_str(eval(*n.expr))); return Flow::kNormal;
      case NodeKind::kIf: {
        if (truthy(eval(*n.cond))) return exec_body(n.body);
        return exec_body(n.else_body);
      }
      case NodeKind::kFor: return exec_for(n);
      case NodeKind::kSet: assign(*n.target, eval(*n.expr)); return Flow::kNormal;
      case NodeKind::kSetBlock: {
        Value v(capture(n.body));
        if (n.expr) v = apply_filter_chain(*n.expr, std::move(v));
        assign(*n.target, v);
        return Flow::kNormal;
      }
      case NodeKind::kMacro: {
        (*scopes_.back())[n.name] = make_macro(n);
        return Flow::kNormal;
      }
      case NodeKind::kCallBlock: {
        const Node& call = *n.expr;
        Value callee = eval(*call.expr);
        CallArgs args = eval_args(call);
        args.keyword.emplace_back("caller", make_caller(n));
        write(to_str(invoke(callee, args)));
        return Flow::kNormal;
      }
      case NodeKind::kFilterBlock: write(to_str(apply_filter_chain(*n.expr, Value(capture(n.body))))); return Flow::kNormal;
      case NodeKind::kWith: {
        auto scope = std::make_shared<Scope>();
        for (const auto& [name, expr] : n.params) (*scope)[name] = eval(*expr);
        scopes_.push_back(scope);
        Flow f = Flow::kNormal;
        try {
          f = exec_body(n.body);
        } catch (...) {
          scopes_.pop_back();
          throw;
        }
        scopes_.pop_back();
        return f;
      }
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      case NodeKind::kGeneration: {
        // transformers records start = length of the top-level output so
        // far, end = start + length of what the block rendered.
        const std::size_t begin_chars = root_chars();
        const std::size_t begin_bytes = buffers_.front().size();
        const std::string rv = capture(n.body);
        spans_.push_back(GenerationSpan{begin_chars, begin_chars + count_code_points(rv), begin_bytes, begin_bytes + rv.size()});
        write(rv);
        return Flow::kNormal;
      }
      default: write(to_str(eval(n))); return Flow::kNormal;
    }
  }

  Flow exec_for(const Node& n) {
    const Value iterable = eval(*n.iter);
    std::vector<Value> items = iterate(iterable);
    // jinja2 starts every iteration from the enclosing scope: what one
    // iteration sets is gone in the next.
    scopes_.push_back(std::make_shared<Scope>());
    struct Pop {
      ScopeChain* chain;
      ~Pop() { chain->pop_back(); }
    } pop{&scopes_};
    if (n.cond) {
      std::vector<Value> kept;
      for (auto& item : items) {
        count_iteration();
        assign(*n.target, item);
        if (truthy(eval(*n.cond))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_body(n.else_body);
      return Flow::kNormal;
    }
    const auto length = static_cast<std::int64_t>(items.size());
    // loop.changed(*values) compares with the values of its previous call.
    auto last_changed = std::make_shared<std::optional<Value>>();
    Value changed = Value::function("changed", [last_changed](CallArgs& a) {
      Value now = Value::list(a.positional, true);
      if (last_changed->has_value() && py_equal(**last_changed, now)) return Value(false);
      *last_changed = std::move(now);
      return Value(true);
    });
    for (std::int64_t i = 0; i < length; ++i) {
      count_iteration();
      const auto idx = static_cast<std::size_t>(i);
      auto scope = std::make_shared<Scope>();
      scopes_.back() = scope;
      assign(*n.target, items[idx]);
      auto loop = std::make_shared<DictObj>();
      loop->items.reserve(14);
      loop->append(Value("index0"), Value(i));
      loop->append(Value("index"), Value(i + 1));
      loop->append(Value("revindex0"), Value(length - i - 1));
      loop->append(Value("revindex"), Value(length - i));
      loop->append(Value("first"), Value(i == 0));
      loop->append(Value("last"), Value(i == length - 1));
      loop->append(Value("length"), Value(length));
      loop->append(Value("depth"), Value(std::int64_t{1}));
      loop->append(Value("depth0"), Value(std::int64_t{0}));
      loop->append(Value("previtem"), i > 0 ? items[idx - 1] : Value(Undefined{"there is no previous item"}));
      loop->append(Value("nextitem"), i + 1 < length ? items[idx + 1] : Value(Undefined{"there is no next item"}));
      loop->append(Value("cycle"), Value::function("cycle", [i](CallArgs& a) {
                  if (a.positional.empty()) fail("no items for cycling given");
                  return a.positional[static_cast<std::size_t>(i) % a.positional.size()];
                }));
      loop->append(Value("changed"), changed);
      (*scope)["loop"] = Value(loop);
      const Flow f = exec_body(n.body);
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void count_iteration() {
    if (++iterations_ > limits_.max_loop_iterations) {
      fail("loop iterations exceed the limit of " + std::to_string(limits_.max_loop_iterations));
    }
  }

  struct DepthGuard {
    DepthGuard(Interpreter* in, const std::string& what) : interp(in) {
      if (++interp->call_depth_ > interp->limits_.max_call_depth) {
        --interp->call_depth_;
        fail(what + ": call depth exceeds the limit of " + std::to_string(interp->limits_.max_call_depth));
      }
    }
    ~DepthGuard() { --interp->call_depth_; }
    Interpreter* interp;
  };

  // Runs body with the given scope chain and returns what it printed.
  std::string run_in(const ScopeChain& chain, const NodeList& body) {
    ScopeChain saved = std::move(scopes_);
    scopes_ = chain;
    std::string s;
    try {
      s = capture(body);
    } catch (...) {
      scopes_ = std::move(saved);
      throw;
    }
    scopes_ = std::move(saved);
    return s;
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value::function(n.name, [this, node](CallArgs& args) -> Value {
      DepthGuard guard(this, "macro '" + node->name + "'");
      auto scope = std::make_shared<Scope>();
      ScopeChain chain{scopes_[0], scopes_[1], scope};
      const std::size_t nparams = node->params.size();
      std::vector<Value> extra;
      for (std::size_t i = 0; i < args.positional.size(); ++i) {
        if (i < nparams) {
          (*scope)[node->params[i].first] = args.positional[i];
        } else {
          extra.push_back(args.positional[i]);
        }
      }
      if (!extra.empty() && !node->uses_varargs) {
        fail("macro '" + node->name + "' takes not more than " + std::to_string(nparams) + " argument(s)");
      }
      auto kwargs = std::make_shared<DictObj>();
      for (const auto& [k, v] : args.keyword) {
        bool is_param = false;
        for (std::size_t i = 0; i < nparams; ++i) {
          if (node->params[i].first != k) continue;
          if (i < args.positional.size()) fail("macro '" + node->name + "' got multiple values for argument '" + k + "'");
          (*scope)[k] = v;
          is_param = true;
        }
        if (is_param) continue;
        if (k == "caller" && node->uses_caller) {
          (*scope)["caller"] = v;
        } else if (node->uses_kwargs) {
          kwargs->set(Value(k), v);
        } else {
          fail("macro '" + node->name + "' takes no keyword argument '" + k + "'");
        }
      }
      if (node->uses_varargs) (*scope)["varargs"] = Value::list(extra, true);
      if (node->uses_kwargs) (*scope)["kwargs"] = Value(kwargs);
      // Defaults are evaluated at call time inside the macro's scope.
      ScopeChain saved = std::move(scopes_);
      scopes_ = chain;
      try {
        for (std::size_t i = 0; i < nparams; ++i) {
          const auto& [pname, def] = node->params[i];
          if (scope->count(pname) != 0) continue;
          (*scope)[pname] = def ? eval(*def) : Value(Undefined{"parameter '" + pname + "' was not provided"});
        }
      } catch (...) {
        scopes_ = std::move(saved);
        throw;
      }
      scopes_ = std::move(saved);
      return Value(run_in(chain, node->body));
    });
  }

  Value make_caller(const Node& n) {
    const Node* node = &n;
    ScopeChain captured = scopes_;
    return Value::function("caller", [this, node, captured](CallArgs& args) -> Value {
      DepthGuard guard(this, "caller");
      auto scope = std::make_shared<Scope>();
      for (std::size_t i = 0; i < node->params.size(); ++i) {
        const auto& [pname, def] = node->params[i];
        Value v = arg_at(args, i, pname.c_str(), Value());
        if (v.is_undefined() && def) v = eval(*def);
        (*scope)[pname] = v;
      }
      ScopeChain chain = captured;
      chain.push_back(scope);
      return Value(run_in(chain, node->body));
    });
  }

  // ---- expressions
  Value eval(const Node& n) {
    try {
      return eval_inner(n);
    } catch (TemplateError& e) {
      locate(e, n);
      throw;
    }
  }

  CallArgs eval_args(const Node& n) {
    CallArgs args;
    for (const auto& a : n.args) args.positional.push_back(eval(*a));
    if (n.dyn_args) {
      for (auto& v : iterate(eval(*n.dyn_args))) args.positional.push_back(std::move(v));
    }
    for (const auto& [k, v] : n.kwargs) args.keyword.emplace_back(k, eval(*v));
    if (n.dyn_kwargs) {
      const Value d = eval(*n.dyn_kwargs);
      if (!d.is_dict()) fail("argument after ** must be a mapping, not " + type_name(d));
      for (const auto& [k, v] : d.as_dict()->items) args.keyword.emplace_back(to_str(k), v);
    }
    return args;
  }

  Value invoke(const Value& callee, CallArgs& args) {
    if (callee.is_function()) return callee.as_function()->call(args);
    if (callee.is_undefined()) fail_undefined(callee);
    fail("'" + type_name(callee) + "' object is not callable");
  }

  Value eval_inner(const Node& n) {
    switch (n.kind) {
      case NodeKind::kLiteral: return n.value;
      case NodeKind::kName: return lookup(n.name);
      case NodeKind::kList:
      case NodeKind::kTuple: {
        std::vector<Value> items;
        items.reserve(n.args.size());
        for (const auto& a : n.args) items.push_back(eval(*a));
        return Value::list(std::move(items), n.kind == NodeKind::kTuple);
      }
      case NodeKind::kDict: {
        auto d = std::make_shared<DictObj>();
        for (std::size_t i = 0; i + 1 < n.args.size(); i += 2) {
          Value k = eval(*n.args[i]);
          if (k.is_list() && !k.as_list()->is_tuple) fail("unhashable type: 'list'");
          if (k.is_dict()) fail("unhashable type: 'dict'");
          d->set(k, eval(*n.args[i + 1]));
        }
        return Value(d);
      }
      case NodeKind::kGetAttr: return get_attr(eval(*n.expr), n.name);
      case NodeKind::kGetItem: {
        const Value obj = eval(*n.expr);
        const Node& key = *n.args[0];
        if (key.kind == NodeKind::kSlice) {
          auto part = [&](std::size_t i) { return key.args[i] ? eval(*key.args[i]) : Value(None{}); };
          return slice(obj, part(0), part(1), part(2));
        }
        return get_item(obj, eval(key));
      }
      case NodeKind::kCall: {
        const Value callee = eval(*n.expr);
        CallArgs args = eval_args(n);
        return invoke(callee, args);
      }
      case NodeKind::kFilter: {
        Value subject = eval(*n.expr);
        CallArgs args = eval_args(n);
        return apply_filter(n.name, subject, args);
      }
      case NodeKind::kTest: {
        const Value subject = eval(*n.expr);
        CallArgs args = eval_args(n);
        const bool r = apply_test(n.name, subject, args);
        return Value(n.flag ? !r : r);
      }
      case NodeKind::kUnary: {
        const Value v = eval(*n.expr);
        if (n.name == "not") return Value(!truthy(v));
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) fail("bad operand type for unary " + n.name + ": '" + type_name(v) + "'");
        if (n.name == "+") return v.is_bool() ? Value(int_of(v)) : v;
        if (v.is_float()) return Value(-v.as_float());
        if (int_of(v) == INT64_MIN) fail("integer overflow");
        return Value(-int_of(v));
      }
      case NodeKind::kBinary: {
        const Value a = eval(*n.args[0]);
        const Value b = eval(*n.args[1]);
        return binary_op(n.name, a, b, limits_.max_output_bytes);
      }
      case NodeKind::kAnd: {
        Value a = eval(*n.args[0]);
        if (!truthy(a)) return a;
        return eval(*n.args[1]);
      }
      case NodeKind::kOr: {
        Value a = eval(*n.args[0]);
        if (truthy(a)) return a;
        return eval(*n.args[1]);
      }
      case NodeKind::kCompare: {
        Value left = eval(*n.args[0]);
        for (std::size_t i = 0; i < n.ops.size(); ++i) {
          Value right = eval(*n.args[i + 1]);
          const std::string& op = n.ops[i];
          bool r = false;
          if (op == "==") {
            r = py_equal(left, right);
          } else if (op == "!=") {
            r = !py_equal(left, right);
          } else if (op == "in" || op == "not in") {
            r = contains(right, left) == (op == "in");
          } else {
            if (left.is_undefined()) fail_undefined(left);
            if (right.is_undefined()) fail_undefined(right);
            if (op == "<") r = py_less(left, right);
            if (op == ">") r = py_less(right, left);
            if (op == "<=") r = !py_less(right, left);
            if (op == ">=") r = !py_less(left, right);
          }
          if (!r) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case NodeKind::kConcat: {
        std::string s;
        for (const auto& a : n.args) {
          s += to_str(eval(*a));
          if (s.size() > limits_.max_output_bytes) fail("string too large");
        }
        return Value(s);
      }
      case NodeKind::kCondExpr: {
        if (truthy(eval(*n.cond))) return eval(*n.expr);
        if (n.else_expr) return eval(*n.else_expr);
        return Value(Undefined{"the inline if-expression on line " + std::to_string(n.line) +
                               " evaluated to false and no else section was defined."});
      }
      default: fail("unsupported expression");
    }
  }

  RenderLimits limits_;
  ScopeChain scopes_;
  std::vector<std::string> buffers_;
  std::vector<GenerationSpan> spans_;
  std::size_t root_chars_ = 0;
  std::size_t root_chars_counted_ = 0;
  std::int64_t iterations_ = 0;
  int call_depth_ = 0;
  std::vector<std::weak_ptr<DictObj>> namespaces_;
};

Status to_status(const TemplateError& e, const std::string& name) {
  std::string msg = name;
  if (e.line > 0) msg += " " + std::to_string(e.line) + ":" + std::to_string(e.col);
  msg += ": ";
  if (e.from_raise()) {
    msg += "raise_exception: ";
  } else if (!e.construct.empty()) {
    msg += e.construct + ": ";
  }
  msg += e.message();
  return Status::invalid_argument(std::move(msg));
}

}  // namespace

Result<Template> Template::parse(std::string_view source, std::string name) {
  if (!is_valid_utf8(source)) return Status::invalid_argument(name + ": the template is not valid UTF-8");
  try {
    auto body = std::make_shared<NodeList>(parse_template(source));
    return Template(std::move(body), std::move(name));
  } catch (const TemplateError& e) {
    return to_status(e, name);
  } catch (const std::bad_alloc&) {
    return Status::resource_exhausted(name + ": out of memory while parsing");
  } catch (const std::exception& e) {
    return Status::internal(name + ": " + e.what());
  }
}

Result<RenderOutput> Template::render(const DictObj& variables, const RenderLimits& limits) const {
  try {
    Interpreter interp(variables, limits);
    return interp.run(*body_);
  } catch (const TemplateError& e) {
    return to_status(e, name_);
  } catch (const std::bad_alloc&) {
    return Status::resource_exhausted(name_ + ": out of memory while rendering");
  } catch (const std::exception& e) {
    return Status::internal(name_ + ": " + e.what());
  }
}

}  // namespace tailor::jinja
