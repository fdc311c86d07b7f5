// The parser of pgbench's expressions (driver/expr.h): a lexer, then
// precedence climbing over pgbench's grammar.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "common/ascii.h"
#include "common/parse.h"
#include "driver/expr.h"
#include "driver/expr_tree.h"

namespace stallscope::driver {

using common::iequals;

std::optional<Value> constant_value(const Expr& e) {
  if (e.op == Expr::Op::constant) return e.constant;
  return std::nullopt;
}

namespace {

using Node = std::shared_ptr<const Expr>;

// ---- the lexer ----

enum class Tok : std::uint8_t {
  end,
  integer,
  maxint_plus_one,  // 9223372036854775808, valid only after a unary minus
  real,
  variable,
  function,  // an identifier that is not a keyword
  kw_null,
  kw_true,
  kw_false,
  kw_and,
  kw_or,
  kw_not,
  kw_is,
  kw_isnull,
  kw_notnull,
  kw_case,
  kw_when,
  kw_then,
  kw_else,
  kw_end,
  op,  // text: + - * / % < > = <= >= <> != & | # ~ << >>
  lparen,
  rparen,
  comma,
};

struct Token {
  Tok kind = Tok::end;
  std::string text;
  std::size_t offset = 0;
  std::int64_t integer = 0;
  double real = 0;
};

// A number at s[i] (digits, or '.' and a digit) into t; returns its end.
// Past a double, or an integer past 64 bits: pgbench's errors.
std::size_t lex_number(std::string_view s, std::size_t i, Token& t) {
  const auto digit = [&](std::size_t k) {
    return k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]));
  };
  std::size_t k = i;
  while (digit(k)) ++k;
  bool is_real = false;
  if (k < s.size() && s[k] == '.') {
    is_real = true;
    ++k;
    while (digit(k)) ++k;
  }
  if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
    std::size_t e = k + 1;
    if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
    if (digit(e)) {
      is_real = true;
      k = e;
      while (digit(k)) ++k;
    }
  }
  t.text.assign(s.substr(i, k - i));
  if (is_real) {
    t.kind = Tok::real;
    // Past a double, or below its smallest normal: pgbench's error.
    const auto real = common::parse_c_double(t.text);
    if (!real) throw ExprSyntaxError(fmt::format("double constant overflow ({})", t.text), i);
    t.real = *real;
  } else if (t.text == "9223372036854775808") {
    t.kind = Tok::maxint_plus_one;
  } else if (const auto n = common::parse_int64(t.text)) {
    t.kind = Tok::integer;
    t.integer = *n;
  } else {
    throw ExprSyntaxError(fmt::format("bigint constant overflow ({})", t.text), i);
  }
  return k;
}

// A word at s[i] into t: a keyword (case-insensitive), else a function's
// name; returns its end.
std::size_t lex_word(std::string_view s, std::size_t i, Token& t) {
  std::size_t k = i;
  while (k < s.size() && variable_name_char(s[k])) ++k;
  t.text.assign(s.substr(i, k - i));
  static constexpr std::pair<const char*, Tok> kKeywords[] = {
      {"null", Tok::kw_null}, {"true", Tok::kw_true},     {"false", Tok::kw_false},
      {"and", Tok::kw_and},   {"or", Tok::kw_or},         {"not", Tok::kw_not},
      {"is", Tok::kw_is},     {"isnull", Tok::kw_isnull}, {"notnull", Tok::kw_notnull},
      {"case", Tok::kw_case}, {"when", Tok::kw_when},     {"then", Tok::kw_then},
      {"else", Tok::kw_else}, {"end", Tok::kw_end},
  };
  t.kind = Tok::function;
  for (const auto& [word, kind] : kKeywords) {
    if (iequals(t.text, word)) t.kind = kind;
  }
  return k;
}

std::vector<Token> lex(std::string_view s) {
  std::vector<Token> out;
  std::size_t i = 0;
  const auto digit = [&](std::size_t k) {
    return k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]));
  };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '\n' || s[i + 1] == '\r')) {
      i += 2;  // a continuation line
      continue;
    }
    Token t;
    t.offset = i;
    if (digit(i) || (c == '.' && digit(i + 1))) {
      i = lex_number(s, i, t);
    } else if (c == ':') {
      std::size_t k = i + 1;
      if (k < s.size() && variable_name_char(s[k]) &&
          !std::isdigit(static_cast<unsigned char>(s[k]))) {
        while (k < s.size() && variable_name_char(s[k])) ++k;
        t.kind = Tok::variable;
        t.text.assign(s.substr(i + 1, k - i - 1));
        i = k;
      } else {
        throw ExprSyntaxError("unexpected character (:)", i);
      }
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
               static_cast<unsigned char>(c) >= 0x80) {
      i = lex_word(s, i, t);
    } else if (c == '(') {
      t.kind = Tok::lparen;
      ++i;
    } else if (c == ')') {
      t.kind = Tok::rparen;
      ++i;
    } else if (c == ',') {
      t.kind = Tok::comma;
      ++i;
    } else {
      static constexpr std::string_view kTwo[] = {"<=", ">=", "<>", "!=", "<<", ">>"};
      t.kind = Tok::op;
      for (auto two : kTwo) {
        if (s.substr(i).starts_with(two)) t.text.assign(two);
      }
      if (t.text.empty() && std::string_view("+-*/%<>=&|#~").find(c) != std::string_view::npos) {
        t.text.assign(1, c);
      }
      if (t.text.empty()) {
        throw ExprSyntaxError(fmt::format("unexpected character ({})", c), i);
      }
      i += t.text.size();
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.offset = s.size();
  out.push_back(std::move(end));
  return out;
}

// ---- the parser: precedence climbing over pgbench's grammar ----

// Binding strength, lowest first, as pgbench's (taken from PostgreSQL's).
enum Prec : int {
  kOr = 1,
  kAnd,
  kNot,
  kIs,
  kCompare,
  kBit,
  kAdd,
  kMul,
  kUnary,
};

struct Function {
  const char* name;
  Expr::Op op;
  int min_args, max_args;  // max -1: no limit
};

constexpr Function kFunctions[] = {
    {"abs", Expr::Op::abs, 1, 1},
    {"debug", Expr::Op::debug, 1, 1},
    {"double", Expr::Op::to_double, 1, 1},
    {"exp", Expr::Op::exp, 1, 1},
    {"greatest", Expr::Op::greatest, 1, -1},
    {"hash", Expr::Op::hash_murmur2, 1, 2},
    {"hash_fnv1a", Expr::Op::hash_fnv1a, 1, 2},
    {"hash_murmur2", Expr::Op::hash_murmur2, 1, 2},
    {"int", Expr::Op::to_int, 1, 1},
    {"least", Expr::Op::least, 1, -1},
    {"ln", Expr::Op::ln, 1, 1},
    {"mod", Expr::Op::mod, 2, 2},
    {"permute", Expr::Op::permute, 2, 3},
    {"pi", Expr::Op::pi, 0, 0},
    {"pow", Expr::Op::pow, 2, 2},
    {"power", Expr::Op::pow, 2, 2},
    {"random", Expr::Op::random, 2, 2},
    {"random_exponential", Expr::Op::random_exponential, 3, 3},
    {"random_gaussian", Expr::Op::random_gaussian, 3, 3},
    {"random_zipfian", Expr::Op::random_zipfian, 3, 3},
    {"sqrt", Expr::Op::sqrt, 1, 1},
};

class Parser {
 public:
  Parser(std::string_view text, Variables& names) : tokens_(lex(text)), names_(names) {}

  Node parse() {
    if (peek().kind == Tok::end) error("missing argument");
    Node e = expr(kOr);
    if (peek().kind != Tok::end) error("syntax error: unexpected '" + describe(peek()) + "'");
    return e;
  }

 private:
  const Token& peek() const { return tokens_[pos_]; }
  const Token& take() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool take_if(Tok kind) {
    if (peek().kind != kind) return false;
    ++pos_;
    return true;
  }
  bool peek_op(std::string_view op) const { return peek().kind == Tok::op && peek().text == op; }
  [[noreturn]] void error(const std::string& what) const {
    throw ExprSyntaxError(what, peek().offset);
  }
  static std::string describe(const Token& t) {
    return t.kind == Tok::end        ? "end of expression"
           : t.kind == Tok::variable ? ":" + t.text
           : t.text.empty()          ? std::string(t.kind == Tok::lparen   ? "("
                                                   : t.kind == Tok::rparen ? ")"
                                                                           : ",")
                                     : t.text;
  }
  void expect(Tok kind, const char* what) {
    if (!take_if(kind)) {
      error(fmt::format("syntax error: expected {}, found '{}'", what, describe(peek())));
    }
  }

  Node node(Expr::Op op, std::vector<Node> args) const {
    auto e = std::make_shared<Expr>();
    e->op = op;
    for (const auto& a : args) e->depth = std::max(e->depth, a->depth + 1);
    if (e->depth > kMaxExprDepth) too_deep();
    e->args = std::move(args);
    return e;
  }
  static Node constant(Value v) {
    auto e = std::make_shared<Expr>();
    e->constant = v;
    return e;
  }
  Node variable(const std::string& name) {
    auto e = std::make_shared<Expr>();
    e->op = Expr::Op::variable;
    e->variable = names_.slot(name);
    return e;
  }
  [[noreturn]] void too_deep() const {
    error(fmt::format("the expression nests deeper than {} levels", kMaxExprDepth));
  }

  // The binary operator at the cursor and its strength, if any.
  std::optional<std::pair<Prec, Expr::Op>> binary() const {
    const Token& t = peek();
    if (t.kind == Tok::kw_or) return std::pair{kOr, Expr::Op::logical_or};
    if (t.kind == Tok::kw_and) return std::pair{kAnd, Expr::Op::logical_and};
    if (t.kind != Tok::op) return std::nullopt;
    static constexpr std::tuple<std::string_view, Prec, Expr::Op> kOps[] = {
        {"+", kAdd, Expr::Op::add},          {"-", kAdd, Expr::Op::sub},
        {"*", kMul, Expr::Op::mul},          {"/", kMul, Expr::Op::div},
        {"%", kMul, Expr::Op::mod},          {"<", kCompare, Expr::Op::lt},
        {">", kCompare, Expr::Op::lt},       {"<=", kCompare, Expr::Op::le},
        {">=", kCompare, Expr::Op::le},      {"=", kCompare, Expr::Op::eq},
        {"<>", kCompare, Expr::Op::ne},      {"!=", kCompare, Expr::Op::ne},
        {"&", kBit, Expr::Op::bit_and},      {"|", kBit, Expr::Op::bit_or},
        {"#", kBit, Expr::Op::bit_xor},      {"<<", kBit, Expr::Op::shift_left},
        {">>", kBit, Expr::Op::shift_right},
    };
    for (const auto& [text, prec, op] : kOps) {
      if (t.text == text) return std::pair{prec, op};
    }
    return std::nullopt;  // "~" is only a prefix
  }

  Node expr(int min_prec) {
    if (++nesting_ > kMaxExprDepth) too_deep();
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{nesting_};
    Node left = prefix();
    for (;;) {
      // Postfix IS, ISNULL, NOTNULL (non-associative).
      if (kIs >= min_prec && (peek().kind == Tok::kw_is || peek().kind == Tok::kw_isnull ||
                              peek().kind == Tok::kw_notnull)) {
        left = postfix_is(left);
        if (peek().kind == Tok::kw_is || peek().kind == Tok::kw_isnull ||
            peek().kind == Tok::kw_notnull) {
          error("syntax error: IS cannot follow IS");
        }
        continue;
      }
      const auto op = binary();
      if (!op || op->first < min_prec) return left;
      const std::string text = take().text;
      Node right = expr(op->first + 1);
      // a > b is b < a, a >= b is b <= a, as pgbench builds them.
      if (text == ">" || text == ">=") {
        left = node(op->second, {right, left});
      } else {
        left = node(op->second, {left, right});
      }
      if (op->first == kCompare && binary() && binary()->first == kCompare) {
        error("syntax error: comparisons do not chain (a < b < c)");
      }
    }
  }

  Node postfix_is(Node left) {
    const Tok kind = take().kind;
    const auto is = [&](Value v) { return node(Expr::Op::is, {left, constant(v)}); };
    if (kind == Tok::kw_isnull) return is(Value::null());
    if (kind == Tok::kw_notnull) return node(Expr::Op::logical_not, {is(Value::null())});
    const bool negated = take_if(Tok::kw_not);
    Node test;
    if (take_if(Tok::kw_null)) {
      test = is(Value::null());
    } else if (take_if(Tok::kw_true)) {
      test = is(Value::boolean(true));
    } else if (take_if(Tok::kw_false)) {
      test = is(Value::boolean(false));
    } else {
      error(fmt::format("syntax error: expected NULL, TRUE or FALSE after IS, found '{}'",
                        describe(peek())));
    }
    return negated ? node(Expr::Op::logical_not, {test}) : test;
  }

  Node prefix() {
    if (peek_op("-")) {
      take();
      if (peek().kind == Tok::maxint_plus_one) {
        take();
        return constant(Value::integer(std::numeric_limits<std::int64_t>::min()));
      }
      // -x is 0 - x, as pgbench's.
      return node(Expr::Op::sub, {constant(Value::integer(0)), expr(kUnary)});
    }
    if (peek_op("+")) {
      take();
      return expr(kUnary);
    }
    if (peek_op("~")) {  // ~x is x # -1, binding as the bit operators
      take();
      return node(Expr::Op::bit_xor, {constant(Value::integer(-1)), expr(kBit + 1)});
    }
    if (take_if(Tok::kw_not)) return node(Expr::Op::logical_not, {expr(kNot)});
    return primary();
  }

  Node primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::lparen: {
        take();
        Node e = expr(kOr);
        expect(Tok::rparen, "')'");
        return e;
      }
      case Tok::integer:
        return constant(Value::integer(take().integer));
      case Tok::real:
        return constant(Value::real(take().real));
      case Tok::kw_null:
        take();
        return constant(Value::null());
      case Tok::kw_true:
      case Tok::kw_false:
        return constant(Value::boolean(take().kind == Tok::kw_true));
      case Tok::variable:
        return variable(take().text);
      case Tok::kw_case:
        return case_when();
      case Tok::function:
        return call();
      case Tok::maxint_plus_one:
        error("syntax error: bigint constant overflow (9223372036854775808)");
      case Tok::end:
        error("syntax error: the expression ends too early");
      default:
        error(fmt::format("syntax error: unexpected '{}'", describe(t)));
    }
  }

  Node case_when() {
    take();
    std::vector<Node> args;
    if (peek().kind != Tok::kw_when) error("syntax error: expected WHEN after CASE");
    while (take_if(Tok::kw_when)) {
      args.push_back(expr(kOr));
      expect(Tok::kw_then, "THEN");
      args.push_back(expr(kOr));
    }
    args.push_back(take_if(Tok::kw_else) ? expr(kOr) : constant(Value::null()));
    expect(Tok::kw_end, "END");
    return node(Expr::Op::case_when, std::move(args));
  }

  Node call() {
    const std::size_t at = peek().offset;
    const std::string name = take().text;
    const Function* f = nullptr;
    for (const auto& candidate : kFunctions) {
      if (iequals(name, candidate.name)) f = &candidate;
    }
    if (!f) throw ExprSyntaxError(fmt::format("unexpected function name ({})", name), at);
    expect(Tok::lparen, fmt::format("'(' after {}", f->name).c_str());
    std::vector<Node> args;
    if (!take_if(Tok::rparen)) {
      do {
        args.push_back(expr(kOr));
      } while (take_if(Tok::comma));
      expect(Tok::rparen, "',' or ')'");
    }
    const auto n = static_cast<int>(args.size());
    if (f->max_args < 0 && n == 0) {
      throw ExprSyntaxError(fmt::format("at least one argument expected ({})", f->name), at);
    }
    if (n < f->min_args || (f->max_args >= 0 && n > f->max_args)) {
      throw ExprSyntaxError(fmt::format("unexpected number of arguments ({})", f->name), at);
    }
    // hash(x), permute(x, n): the seed is :default_seed, as pgbench's.
    if ((f->op == Expr::Op::hash_murmur2 || f->op == Expr::Op::hash_fnv1a) && n == 1) {
      args.push_back(variable("default_seed"));
    }
    if (f->op == Expr::Op::permute && n == 2) args.push_back(variable("default_seed"));
    return node(f->op, std::move(args));
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  int nesting_ = 0;
  Variables& names_;
};

}  // namespace

std::shared_ptr<const Expr> parse_expr(std::string_view text, Variables& names) {
  return Parser(text, names).parse();
}

}  // namespace stallscope::driver
