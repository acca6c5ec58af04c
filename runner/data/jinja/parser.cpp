#include "runner/data/jinja/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "runner/data/jinja/builtins.h"
#include "runner/data/jinja/lexer.h"

namespace tailor::jinja {
namespace {

constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  NodeList parse() {
    NodeList body = subparse({});
    return body;
  }

 private:
  // ---- token helpers
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(std::size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == TokenKind::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const std::string& msg, const Token& at) const {
    TemplateError e(msg);
    e.line = at.line;
    e.col = at.col;
    throw e;
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEof: return "end of template";
      case TokenKind::kBlockEnd: return "end of statement block";
      case TokenKind::kVarEnd: return "end of print statement";
      case TokenKind::kBlockBegin: return "begin of statement block";
      case TokenKind::kVarBegin: return "begin of print statement";
      case TokenKind::kString: return "string";
      case TokenKind::kData: return "template data";
      default: return "'" + t.text + "'";
    }
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected token '") + op + "', got " + describe(cur()), cur());
  }
  void expect_name(const char* name) {
    if (!skip_name(name)) fail(std::string("expected token '") + name + "', got " + describe(cur()), cur());
  }
  std::string expect_identifier() {
    if (cur().kind != TokenKind::kName) fail("expected token 'name', got " + describe(cur()), cur());
    return next().text;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) fail("expected token 'end of statement block', got " + describe(cur()), cur());
    next();
  }

  NodePtr make(NodeKind kind, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = at.line;
    n->col = at.col;
    return n;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : parser(p) {
      if (++parser->depth_ > kMaxNesting) parser->fail("template nested too deeply (limit " + std::to_string(kMaxNesting) + ")", parser->cur());
    }
    ~DepthGuard() { --parser->depth_; }
    Parser* parser;
  };

  struct SoftGuard {
    SoftGuard(Parser* p, bool soft) : parser(p), saved(p->soft_) { parser->soft_ = soft; }
    ~SoftGuard() { parser->soft_ = saved; }
    Parser* parser;
    bool saved;
  };

  // ---- statements
  NodeList subparse(const std::vector<std::string>& end_names) {
    DepthGuard guard(this);
    NodeList body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::kData) {
        auto n = make(NodeKind::kData, t);
        n->name = t.text;
        body.push_back(std::move(n));
        next();
      } else if (t.kind == TokenKind::kVarBegin) {
        next();
        auto n = make(NodeKind::kPrint, t);
        n->expr = parse_tuple(true, {}, false);
        if (cur().kind != TokenKind::kVarEnd) fail("expected token 'end of print statement', got " + describe(cur()), cur());
        next();
        body.push_back(std::move(n));
      } else if (t.kind == TokenKind::kBlockBegin) {
        next();
        if (cur().kind == TokenKind::kName &&
            std::find(end_names.begin(), end_names.end(), cur().text) != end_names.end()) {
          return body;
        }
        body.push_back(parse_statement());
      } else if (t.kind == TokenKind::kEof) {
        if (!end_names.empty()) {
          std::string names;
          for (const auto& e : end_names) names += (names.empty() ? "'" : " or '") + e + "'";
          fail("Unexpected end of template. Jinja was looking for the following tags: " + names +
                   ". The innermost block that needs to be closed is '" + block_stack_.back() + "'.",
               t);
        }
        return body;
      } else {
        fail("unexpected " + describe(t), t);
      }
    }
  }

  NodePtr parse_statement() {
    const Token& t = cur();
    if (t.kind != TokenKind::kName) fail("tag name expected", t);
    const std::string& name = t.text;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "with") return parse_with();
    if (name == "generation") return parse_generation();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside of a loop", t);
      auto n = make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, t);
      next();
      expect_block_end();
      return n;
    }
    if (!block_stack_.empty()) {
      fail("Encountered unknown tag '" + name + "'. Jinja was looking for the following tags: '" + expected_end_ +
               "'. The innermost block that needs to be closed is '" + block_stack_.back() + "'.",
           t);
    }
    fail("Encountered unknown tag '" + name + "'.", t);
  }

  NodeList parse_body(const std::string& block, const std::vector<std::string>& end_names, bool drop_needle) {
    block_stack_.push_back(block);
    const std::string saved = expected_end_;
    expected_end_ = end_names.front();
    for (std::size_t i = 1; i < end_names.size(); ++i) expected_end_ += "' or '" + end_names[i];
    NodeList body = subparse(end_names);
    expected_end_ = saved;
    block_stack_.pop_back();
    if (drop_needle) {
      next();
      expect_block_end();
    }
    return body;
  }

  NodePtr parse_if() {
    auto n = make(NodeKind::kIf, cur());
    next();
    SoftGuard soft(this, true);
    n->cond = parse_tuple(false, {}, false);
    expect_block_end();
    n->body = parse_body("if", {"elif", "else", "endif"}, false);
    Node* tail = n.get();
    while (true) {
      const Token& t = cur();
      if (t.text == "elif") {
        next();
        auto e = make(NodeKind::kIf, t);
        e->cond = parse_tuple(false, {}, false);
        expect_block_end();
        e->body = parse_body("if", {"elif", "else", "endif"}, false);
        Node* raw = e.get();
        tail->else_body.push_back(std::move(e));
        tail = raw;
      } else if (t.text == "else") {
        next();
        expect_block_end();
        tail->else_body = parse_body("if", {"endif"}, true);
        break;
      } else {
        next();
        expect_block_end();
        break;
      }
    }
    return n;
  }

  NodePtr parse_assign_target(bool with_tuple, bool with_namespace, const std::vector<std::string>& extra_end) {
    const Token& t = cur();
    if (with_namespace && t.kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == ".") {
      auto n = make(NodeKind::kNsRef, t);
      n->name = next().text;
      next();
      n->value = Value(expect_identifier());
      return n;
    }
    NodePtr target;
    if (with_tuple) {
      target = parse_tuple(false, extra_end, false, true);
    } else {
      target = make(NodeKind::kName, t);
      target->name = expect_identifier();
    }
    auto check = [&](const Node& node) {
      if (node.kind != NodeKind::kName) fail("can't assign to " + std::string("expression"), t);
      if (node.name == "true" || node.name == "false" || node.name == "none" || node.name == "True" ||
          node.name == "False" || node.name == "None") {
        fail("Can't assign to special constant '" + node.name + "'", t);
      }
    };
    if (target->kind == NodeKind::kTuple) {
      for (const auto& a : target->args) check(*a);
    } else {
      check(*target);
    }
    return target;
  }

  NodePtr parse_for() {
    auto n = make(NodeKind::kFor, cur());
    next();
    SoftGuard soft(this, false);
    n->target = parse_assign_target(true, false, {"in"});
    expect_name("in");
    n->iter = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) n->cond = parse_expression(true);
    if (skip_name("recursive")) fail("recursive for loops are not supported", cur());
    expect_block_end();
    ++loop_depth_;
    n->body = parse_body("for", {"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else") {
      expect_block_end();
      n->else_body = parse_body("for", {"endfor"}, true);
    } else {
      expect_block_end();
    }
    return n;
  }

  NodePtr parse_set() {
    const Token& at = cur();
    next();
    NodePtr target = parse_assign_target(true, true, {});
    if (skip_op("=")) {
      auto n = make(NodeKind::kSet, at);
      n->target = std::move(target);
      n->expr = parse_tuple(true, {}, false);
      expect_block_end();
      return n;
    }
    auto n = make(NodeKind::kSetBlock, at);
    n->target = std::move(target);
    n->expr = parse_filter_chain(nullptr);
    expect_block_end();
    SoftGuard soft(this, false);
    n->body = parse_body("set", {"endset"}, true);
    return n;
  }

  void parse_signature(Node* n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string arg = expect_identifier();
      NodePtr def;
      if (skip_op("=")) {
        def = parse_expression(true);
      } else if (!n->params.empty() && n->params.back().second != nullptr) {
        fail("non-default argument follows default argument", cur());
      }
      n->params.emplace_back(std::move(arg), std::move(def));
    }
    next();
  }

  static void scan_special_names(const Node& node, Node* macro) {
    if (node.kind == NodeKind::kName) {
      if (node.name == "varargs") macro->uses_varargs = true;
      if (node.name == "kwargs") macro->uses_kwargs = true;
      if (node.name == "caller") macro->uses_caller = true;
    }
    auto visit = [&](const NodePtr& p) {
      if (p) scan_special_names(*p, macro);
    };
    for (const auto& a : node.args) visit(a);
    for (const auto& kv : node.kwargs) visit(kv.second);
    visit(node.dyn_args);
    visit(node.dyn_kwargs);
    visit(node.expr);
    visit(node.cond);
    visit(node.else_expr);
    visit(node.iter);
    for (const auto& b : node.body) visit(b);
    for (const auto& b : node.else_body) visit(b);
    if (node.kind != NodeKind::kMacro) {
      for (const auto& p : node.params) visit(p.second);
    }
  }

  NodePtr parse_macro() {
    auto n = make(NodeKind::kMacro, cur());
    next();
    n->name = expect_identifier();
    parse_signature(n.get());
    expect_block_end();
    SoftGuard soft(this, false);
    const int saved_loop = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_body("macro", {"endmacro"}, true);
    loop_depth_ = saved_loop;
    for (const auto& b : n->body) scan_special_names(*b, n.get());
    return n;
  }

  NodePtr parse_call_block() {
    auto n = make(NodeKind::kCallBlock, cur());
    next();
    if (is_op("(")) parse_signature(n.get());
    n->expr = parse_expression(true);
    if (n->expr->kind != NodeKind::kCall) fail("expected call", cur());
    expect_block_end();
    SoftGuard soft(this, false);
    n->body = parse_body("call", {"endcall"}, true);
    for (const auto& b : n->body) scan_special_names(*b, n.get());
    return n;
  }

  NodePtr parse_filter_block() {
    auto n = make(NodeKind::kFilterBlock, cur());
    next();
    n->expr = parse_filter_chain(nullptr, true);
    expect_block_end();
    SoftGuard soft(this, false);
    n->body = parse_body("filter", {"endfilter"}, true);
    return n;
  }

  NodePtr parse_with() {
    auto n = make(NodeKind::kWith, cur());
    next();
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!n->params.empty()) expect_op(",");
      std::string name = expect_identifier();
      expect_op("=");
      n->params.emplace_back(std::move(name), parse_expression(true));
    }
    next();
    SoftGuard soft(this, false);
    n->body = parse_body("with", {"endwith"}, true);
    return n;
  }

  NodePtr parse_generation() {
    auto n = make(NodeKind::kGeneration, cur());
    next();
    expect_block_end();
    SoftGuard soft(this, false);
    n->body = parse_body("generation", {"endgeneration"}, true);
    return n;
  }

  // ---- expressions
  NodePtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  NodePtr parse_condexpr() {
    NodePtr expr1 = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      SoftGuard soft(this, true);
      auto n = make(NodeKind::kCondExpr, at);
      n->cond = parse_or();
      if (skip_name("else")) n->else_expr = parse_condexpr();
      n->expr = std::move(expr1);
      expr1 = std::move(n);
    }
    return expr1;
  }

  NodePtr parse_or() {
    NodePtr left = parse_and();
    while (is_name("or")) {
      auto n = make(NodeKind::kOr, next());
      n->args.push_back(std::move(left));
      n->args.push_back(parse_and());
      left = std::move(n);
    }
    return left;
  }

  NodePtr parse_and() {
    NodePtr left = parse_not();
    while (is_name("and")) {
      auto n = make(NodeKind::kAnd, next());
      n->args.push_back(std::move(left));
      n->args.push_back(parse_not());
      left = std::move(n);
    }
    return left;
  }

  NodePtr parse_not() {
    if (is_name("not")) {
      auto n = make(NodeKind::kUnary, next());
      n->name = "not";
      DepthGuard guard(this);
      n->expr = parse_not();
      return n;
    }
    return parse_compare();
  }

  NodePtr parse_compare() {
    const Token& at = cur();
    NodePtr expr = parse_math1();
    NodePtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOperator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(NodeKind::kCompare, at);
        cmp->args.push_back(std::move(expr));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  NodePtr binary(const std::string& op, NodePtr left, NodePtr right, const Token& at) {
    auto n = make(NodeKind::kBinary, at);
    n->name = op;
    n->args.push_back(std::move(left));
    n->args.push_back(std::move(right));
    return n;
  }

  NodePtr parse_math1() {
    NodePtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      left = binary(at.text, std::move(left), parse_concat(), at);
    }
    return left;
  }

  NodePtr parse_concat() {
    const Token& at = cur();
    NodePtr first = parse_math2();
    if (!is_op("~")) return first;
    auto n = make(NodeKind::kConcat, at);
    n->args.push_back(std::move(first));
    while (skip_op("~")) n->args.push_back(parse_math2());
    return n;
  }

  NodePtr parse_math2() {
    NodePtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      left = binary(at.text, std::move(left), parse_pow(), at);
    }
    return left;
  }

  NodePtr parse_pow() {
    NodePtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      left = binary("**", std::move(left), parse_unary(true), at);
    }
    return left;
  }

  NodePtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    NodePtr node;
    if (is_op("-") || is_op("+")) {
      auto n = make(NodeKind::kUnary, cur());
      n->name = next().text;
      n->expr = parse_unary(false);
      node = std::move(n);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  NodePtr parse_primary() {
    const Token& t = cur();
    if (t.kind == TokenKind::kName) {
      next();
      auto n = make(NodeKind::kLiteral, t);
      if (t.text == "true" || t.text == "True") {
        n->value = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        n->value = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        n->value = Value(None{});
      } else {
        n->kind = NodeKind::kName;
        n->name = t.text;
      }
      return n;
    }
    if (t.kind == TokenKind::kString) {
      std::string s = next().text;
      while (cur().kind == TokenKind::kString) s += next().text;
      auto n = make(NodeKind::kLiteral, t);
      n->value = Value(std::move(s));
      return n;
    }
    if (t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat) {
      next();
      auto n = make(NodeKind::kLiteral, t);
      if (t.kind == TokenKind::kFloat) {
        n->value = Value(std::strtod(t.text.c_str(), nullptr));
      } else {
        int base = 10;
        std::string digits = t.text;
        if (digits.size() > 2 && digits[0] == '0' && std::isalpha(static_cast<unsigned char>(digits[1]))) {
          const char b = static_cast<char>(std::tolower(digits[1]));
          base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
          digits = digits.substr(2);
        }
        errno = 0;
        const long long v = std::strtoll(digits.c_str(), nullptr, base);
        if (errno == ERANGE) fail("integer literal too large", t);
        n->value = Value(static_cast<std::int64_t>(v));
      }
      return n;
    }
    if (is_op("(")) {
      next();
      NodePtr n = parse_tuple(true, {}, true);
      expect_op(")");
      return n;
    }
    if (is_op("[")) {
      auto n = make(NodeKind::kList, t);
      next();
      while (!is_op("]")) {
        if (!n->args.empty()) expect_op(",");
        if (is_op("]")) break;
        n->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return n;
    }
    if (is_op("{")) {
      auto n = make(NodeKind::kDict, t);
      next();
      while (!is_op("}")) {
        if (!n->args.empty()) expect_op(",");
        if (is_op("}")) break;
        n->args.push_back(parse_expression(true));
        expect_op(":");
        n->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return n;
    }
    fail("unexpected " + describe(t), t);
  }

  // A comma-separated list becomes a tuple; one expression stays itself.
  NodePtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parens,
                      bool names_only = false) {
    const Token& at = cur();
    NodeList items;
    bool is_tuple = false;
    auto at_end = [&] {
      const Token& t = cur();
      if (t.kind == TokenKind::kVarEnd || t.kind == TokenKind::kBlockEnd || t.kind == TokenKind::kEof) return true;
      if (t.kind == TokenKind::kOperator && (t.text == ")" || t.text == "]" || t.text == "}")) return true;
      if (t.kind == TokenKind::kName && std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end()) return true;
      return false;
    };
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_end()) break;
      if (names_only) {
        auto n = make(NodeKind::kName, cur());
        n->name = expect_identifier();
        items.push_back(std::move(n));
      } else {
        items.push_back(parse_expression(with_condexpr));
      }
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items.front());
      if (!explicit_parens) fail("Expected an expression, got " + describe(cur()), cur());
    }
    auto n = make(NodeKind::kTuple, at);
    n->args = std::move(items);
    return n;
  }

  NodePtr parse_postfix(NodePtr node) {
    while (true) {
      if (is_op(".")) {
        const Token& at = next();
        if (cur().kind == TokenKind::kName) {
          auto n = make(NodeKind::kGetAttr, at);
          n->name = next().text;
          n->expr = std::move(node);
          node = std::move(n);
        } else if (cur().kind == TokenKind::kInteger) {
          auto n = make(NodeKind::kGetItem, at);
          auto idx = make(NodeKind::kLiteral, cur());
          idx->value = Value(static_cast<std::int64_t>(std::strtoll(next().text.c_str(), nullptr, 10)));
          n->args.push_back(std::move(idx));
          n->expr = std::move(node);
          node = std::move(n);
        } else {
          fail("expected name or number", cur());
        }
      } else if (is_op("[")) {
        const Token& at = next();
        NodeList subs;
        while (!is_op("]")) {
          if (!subs.empty()) expect_op(",");
          subs.push_back(parse_subscribed());
        }
        expect_op("]");
        auto n = make(NodeKind::kGetItem, at);
        if (subs.size() == 1) {
          n->args.push_back(std::move(subs.front()));
        } else {
          auto tup = make(NodeKind::kTuple, at);
          tup->args = std::move(subs);
          n->args.push_back(std::move(tup));
        }
        n->expr = std::move(node);
        node = std::move(n);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  NodePtr parse_subscribed() {
    const Token& at = cur();
    NodeList parts(3);
    if (is_op(":")) {
      next();
    } else {
      NodePtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      parts[0] = std::move(e);
    }
    if (!is_op("]") && !is_op(",") && !is_op(":")) parts[1] = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) parts[2] = parse_expression(true);
    }
    auto n = make(NodeKind::kSlice, at);
    n->args = std::move(parts);
    return n;
  }

  void parse_call_args(Node* n) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (skip_op("*")) {
        n->dyn_args = parse_expression(true);
      } else if (skip_op("**")) {
        n->dyn_kwargs = parse_expression(true);
      } else if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        std::string key = next().text;
        next();
        n->kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!n->kwargs.empty() || n->dyn_args || n->dyn_kwargs) fail("invalid syntax for function call expression", cur());
        n->args.push_back(parse_expression(true));
      }
    }
    next();
  }

  NodePtr parse_call(NodePtr callee) {
    auto n = make(NodeKind::kCall, cur());
    n->line = callee->line;
    n->col = callee->col;
    parse_call_args(n.get());
    n->expr = std::move(callee);
    return n;
  }

  void check_known(bool filter, const std::string& name, const Token& at) {
    if (soft_) return;
    if (filter ? is_known_filter(name) : is_known_test(name)) return;
    fail(std::string("unknown ") + (filter ? "filter" : "test") + " '" + name + "'", at);
  }

  NodePtr parse_filter_chain(NodePtr node, bool start_inline = false) {
    bool first = start_inline;
    while (first || is_op("|")) {
      if (!first) next();
      first = false;
      const Token& at = cur();
      auto n = make(NodeKind::kFilter, at);
      n->name = expect_identifier();
      while (skip_op(".")) n->name += "." + expect_identifier();
      check_known(true, n->name, at);
      if (is_op("(")) parse_call_args(n.get());
      n->expr = std::move(node);
      node = std::move(n);
    }
    return node;
  }

  NodePtr parse_filter_expr(NodePtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  NodePtr parse_test(NodePtr node) {
    next();
    const bool negated = skip_name("not");
    const Token& at = cur();
    auto n = make(NodeKind::kTest, at);
    n->name = expect_identifier();
    while (skip_op(".")) n->name += "." + expect_identifier();
    check_known(false, n->name, at);
    n->flag = negated;
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(n.get());
    } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
                t.kind == TokenKind::kFloat || (t.kind == TokenKind::kOperator && (t.text == "[" || t.text == "{"))) &&
               !(t.kind == TokenKind::kName && (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (t.kind == TokenKind::kName && t.text == "is") fail("You cannot chain multiple tests with is", t);
      NodePtr arg = parse_primary();
      arg = parse_postfix(std::move(arg));
      n->args.push_back(std::move(arg));
    }
    n->expr = std::move(node);
    return n;
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool soft_ = false;
  std::vector<std::string> block_stack_;
  std::string expected_end_;
};

}  // namespace

NodeList parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace tailor::jinja
