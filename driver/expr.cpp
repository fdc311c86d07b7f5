#include "driver/expr.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numbers>

#include <fmt/format.h>

#include "common/error.h"
#include "common/parse.h"

namespace stallscope::driver {

int Variables::slot(std::string_view name) {
  if (auto s = find(name)) return *s;
  names.emplace_back(name);
  return static_cast<int>(names.size()) - 1;
}

std::optional<int> Variables::find(std::string_view name) const {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return std::nullopt;
}

bool variable_name_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

bool valid_variable_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), variable_name_char);
}

const char* type_name(Value::Type type) {
  switch (type) {
    case Value::Type::null:
      return "null";
    case Value::Type::boolean:
      return "boolean";
    case Value::Type::integer:
      return "int";
    case Value::Type::real:
      return "double";
  }
  return "none";
}

namespace {

// A double as pgbench prints one: 15 significant digits, and PostgreSQL's
// spelling of the special values.
std::string real_text(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{:.15g}", d);
}

}  // namespace

std::string value_text(const Value& v) {
  switch (v.type) {
    case Value::Type::null:
      return "NULL";
    case Value::Type::boolean:
      return v.boolean_value ? "true" : "false";
    case Value::Type::integer:
      return fmt::format("{}", v.integer_value);
    case Value::Type::real:
      return real_text(v.real_value);
  }
  return {};
}

// ---- the generator ----

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

int leftmost_one(std::uint64_t x) {
  return 63 - std::countl_zero(x);
}  // x > 0

}  // namespace

void Prng::reseed(std::uint64_t seed) {
  s0_ = splitmix64(seed);
  s1_ = splitmix64(seed);
  if (s0_ == 0 && s1_ == 0) {  // the one state the generator cannot leave
    s0_ = 0x5851F42D4C957F2DULL;
    s1_ = 0x14057B7EF767814FULL;
  }
}

std::uint64_t Prng::next() {
  const std::uint64_t s0 = s0_;
  std::uint64_t s1 = s1_;
  const std::uint64_t result = std::rotl(s0 * 5, 7) * 9;
  s1 ^= s0;
  s0_ = std::rotl(s0, 24) ^ s1 ^ (s1 << 16);
  s1_ = std::rotl(s1, 37);
  return result;
}

std::uint64_t Prng::range(std::uint64_t lo, std::uint64_t hi) {
  if (hi <= lo) return lo;
  // Bitmask rejection: draw as many bits as the width needs, retry past it.
  const std::uint64_t width = hi - lo;
  const int shift = 63 - leftmost_one(width);
  std::uint64_t v = 0;
  do {
    v = next() >> shift;
  } while (v > width);
  return lo + v;
}

double Prng::uniform01() {
  return std::ldexp(static_cast<double>(next() >> 12), -52);
}

// ---- hashes and permute ----

std::int64_t hash_fnv1a(std::int64_t value, std::uint64_t seed) {
  std::uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  auto v = static_cast<std::uint64_t>(value);
  for (int byte = 0; byte < 8; ++byte, v >>= 8) {
    h ^= v & 0xff;
    h *= 0x100000001b3ULL;
  }
  return static_cast<std::int64_t>(h);
}

std::int64_t hash_murmur2(std::int64_t value, std::uint64_t seed) {
  constexpr std::uint64_t m = 0xc6a4a7935bd1e995ULL;
  constexpr int r = 47;
  std::uint64_t h = seed ^ (m * 8);  // 8: the key's length in bytes
  std::uint64_t k = static_cast<std::uint64_t>(value) * m;
  k = (k ^ (k >> r)) * m;
  h = (h ^ k) * m;
  h = (h ^ (h >> r)) * m;
  return static_cast<std::int64_t>(h ^ (h >> r));
}

std::int64_t permute(std::int64_t value, std::int64_t size_signed, std::int64_t seed) {
  if (size_signed < 2) return 0;
  Prng rng(static_cast<std::uint64_t>(seed));
  const auto size = static_cast<std::uint64_t>(size_signed);
  std::uint64_t v = static_cast<std::uint64_t>(value) % size;
  const int bits = leftmost_one(size);  // 2^bits ≤ size < 2^(bits+1)
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  // A bijection of [0, 2^bits): multiply by an odd number, xor, rotate one bit.
  const auto mix = [&](std::uint64_t x, std::uint64_t mul, std::uint64_t x_or) {
    x = ((x * mul) ^ x_or) & mask;
    return ((x << 1) & mask) | (x >> (bits - 1));
  };
  // Six rounds: the lower 2^bits values, then the upper ones (counted from
  // the top), then a rotation of the whole range.
  for (int round = 0; round < 6; ++round) {
    std::uint64_t mul = (rng.next() & mask) | 1;
    std::uint64_t x_or = rng.next() & mask;
    if (v <= mask) v = mix(v, mul, x_or);
    mul = (rng.next() & mask) | 1;
    x_or = rng.next() & mask;
    if (const std::uint64_t t = size - 1 - v; t <= mask) v = size - 1 - mix(t, mul, x_or);
    v = (v + rng.range(0, size - 1)) % size;
  }
  return static_cast<std::int64_t>(v);
}

// ---- the tree ----

struct Expr {
  enum class Op : std::uint8_t {
    constant,
    variable,
    add,
    sub,
    mul,
    div,
    mod,
    eq,
    ne,
    lt,
    le,
    bit_and,
    bit_or,
    bit_xor,
    shift_left,
    shift_right,
    logical_and,
    logical_or,
    logical_not,
    is,         // args[0] IS args[1] (a NULL or boolean constant)
    case_when,  // when, then, when, then, …, else
    abs,
    least,
    greatest,
    debug,
    pi,
    sqrt,
    ln,
    exp,
    to_int,
    to_double,
    random,
    random_exponential,
    random_gaussian,
    random_zipfian,
    pow,
    hash_murmur2,
    hash_fnv1a,
    permute,
  };
  Op op = Op::constant;
  Value constant;
  int variable = -1;
  std::vector<std::shared_ptr<const Expr>> args;
  int depth = 1;  // nodes on the longest path down to a leaf
};

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

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
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
        errno = 0;
        char* end = nullptr;
        t.real = std::strtod(t.text.c_str(), &end);
        if (errno == ERANGE && std::isinf(t.real)) {
          throw ExprSyntaxError(fmt::format("double constant overflow ({})", t.text), i);
        }
      } else if (t.text == "9223372036854775808") {
        t.kind = Tok::maxint_plus_one;
      } else if (const auto n = common::parse_int64(t.text)) {
        t.kind = Tok::integer;
        t.integer = *n;
      } else {
        throw ExprSyntaxError(fmt::format("bigint constant overflow ({})", t.text), i);
      }
      i = k;
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
      std::size_t k = i;
      while (k < s.size() && variable_name_char(s[k])) ++k;
      t.text.assign(s.substr(i, k - i));
      i = k;
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

// pgbench's limit on a function's arguments.
constexpr std::size_t kMaxFunctionArgs = 16;

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
        error("bigint constant overflow (9223372036854775808)");
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

// ---- evaluation ----

[[noreturn]] void eval_error(const std::string& message) {
  throw_usage(message);
}

Value read_text(std::string_view text, std::string_view name) {
  const auto malformed = [&] {
    eval_error(fmt::format("malformed variable \"{}\" value: \"{}\"", name, text));
  };
  if (text.empty()) malformed();
  const auto prefix_of = [&](std::string_view word) {
    return text.size() <= word.size() && iequals(text, word.substr(0, text.size()));
  };
  if (iequals(text, "null")) return Value::null();
  if (prefix_of("true") || prefix_of("yes") || iequals(text, "on")) return Value::boolean(true);
  if (prefix_of("false") || prefix_of("no") || iequals(text, "off") || iequals(text, "of")) {
    return Value::boolean(false);
  }
  // An integer (spaces around, a sign) must fit a bigint.
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  std::string_view digits = t;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
  if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    const std::string_view signless = t[0] == '+' ? t.substr(1) : t;
    if (const auto n = common::parse_int64(signless)) return Value::integer(*n);
    eval_error(fmt::format("value \"{}\" is out of range for type bigint", text));
  }
  const std::string copy(text);
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(copy.c_str(), &end);
  if (errno != 0 || end == copy.c_str() || *end != '\0') malformed();
  return Value::real(d);
}

}  // namespace

std::shared_ptr<const Expr> parse_expr(std::string_view text, Variables& names) {
  return Parser(text, names).parse();
}

Value variable_value(const VariableValues& values, const Variables& names, int slot) {
  const Variable& v = values[static_cast<std::size_t>(slot)];
  switch (v.state) {
    case Variable::State::value:
      return v.value;
    case Variable::State::text:
      return read_text(v.text, names.names[static_cast<std::size_t>(slot)]);
    case Variable::State::unset:
      break;
  }
  eval_error(fmt::format("undefined variable \"{}\"", names.names[static_cast<std::size_t>(slot)]));
}

std::int64_t to_integer(const Value& v) {
  if (v.type == Value::Type::integer) return v.integer_value;
  if (v.type == Value::Type::real) {
    const double r = std::rint(v.real_value);
    if (std::isnan(r) || !(r >= -0x1p63 && r < 0x1p63)) {
      eval_error(fmt::format("double to int overflow for {:f}", r));
    }
    return static_cast<std::int64_t>(r);
  }
  eval_error(fmt::format("cannot coerce {} to int", type_name(v.type)));
}

double to_real(const Value& v) {
  if (v.type == Value::Type::real) return v.real_value;
  if (v.type == Value::Type::integer) return static_cast<double>(v.integer_value);
  eval_error(fmt::format("cannot coerce {} to double", type_name(v.type)));
}

bool to_boolean(const Value& v) {
  if (v.type == Value::Type::boolean) return v.boolean_value;
  eval_error(fmt::format("cannot coerce {} to boolean", type_name(v.type)));
}

bool truth(const Value& v) {
  switch (v.type) {
    case Value::Type::null:
      return false;
    case Value::Type::boolean:
      return v.boolean_value;
    case Value::Type::integer:
      return v.integer_value != 0;
    case Value::Type::real:
      return v.real_value != 0.0;
  }
  return false;
}

namespace {

constexpr double kMinGaussianParam = 2.0;
constexpr double kMinZipfianParam = 1.001;
constexpr double kMaxZipfianParam = 1000.0;

// Devroye's rejection method for the Zipf distribution over [1, n] (s > 1).
std::int64_t zipfian(Prng& rng, std::int64_t n, double s) {
  if (n <= 1) return 1;
  const double b = std::pow(2.0, s - 1.0);
  for (;;) {
    const double u = rng.uniform01();
    const double v = rng.uniform01();
    const double x = std::floor(std::pow(u, -1.0 / (s - 1.0)));
    const double t = std::pow(1.0 + 1.0 / x, s - 1.0);
    if (v * x * (t - 1.0) / (b - 1.0) <= t / b && x <= static_cast<double>(n)) {
      return static_cast<std::int64_t>(x);
    }
  }
}

Value random_value(Expr::Op op, const std::vector<Value>& a, Prng& rng) {
  const std::int64_t lo = to_integer(a[0]);
  const std::int64_t hi = to_integer(a[1]);
  std::int64_t width = 0;
  if (lo > hi) eval_error("empty range given to random");
  if (__builtin_sub_overflow(hi, lo, &width) || __builtin_add_overflow(width, 1, &width)) {
    eval_error("random range is too large");
  }
  if (op == Expr::Op::random) {
    const std::uint64_t offset =
        rng.range(0, static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo));
    return Value::integer(static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + offset));
  }
  const double param = to_real(a[2]);
  const double span = static_cast<double>(width);
  double r = 0;
  if (op == Expr::Op::random_gaussian) {
    if (param < kMinGaussianParam) {
      eval_error(fmt::format("gaussian parameter must be at least {:f} (not {:f})",
                             kMinGaussianParam, param));
    }
    double stdev = 0;
    do {  // Box–Muller, kept within ±param
      const double u1 = 1.0 - rng.uniform01();
      const double u2 = rng.uniform01();
      stdev = std::sqrt(-2.0 * std::log(u1)) * std::sin(2.0 * std::numbers::pi * u2);
    } while (stdev < -param || stdev >= param);
    r = (stdev + param) / (param * 2.0);
  } else if (op == Expr::Op::random_exponential) {
    if (param <= 0.0) {
      eval_error(fmt::format("exponential parameter must be greater than zero (not {:f})", param));
    }
    const double cut = std::exp(-param);
    const double u = 1.0 - rng.uniform01();
    r = -std::log(cut + (1.0 - cut) * u) / param;
  } else {
    if (param < kMinZipfianParam || param > kMaxZipfianParam) {
      eval_error(fmt::format("zipfian parameter must be in range [{:.3f}, {:.0f}] (not {:f})",
                             kMinZipfianParam, kMaxZipfianParam, param));
    }
    return Value::integer(lo - 1 + zipfian(rng, width, param));
  }
  // r is in [0, 1); span × r may still round up to span: kept within hi.
  const double x = span * r;
  return Value::integer(lo + (x < span - 1 ? static_cast<std::int64_t>(x) : width - 1));
}

// + - * / % and the comparisons: doubles when either side is one (% always
// works on integers), else integers with overflow checks.
Value arithmetic(Expr::Op op, const Value& l, const Value& r) {
  if ((l.type == Value::Type::real || r.type == Value::Type::real) && op != Expr::Op::mod) {
    const double a = to_real(l), b = to_real(r);
    switch (op) {
      case Expr::Op::add:
        return Value::real(a + b);
      case Expr::Op::sub:
        return Value::real(a - b);
      case Expr::Op::mul:
        return Value::real(a * b);
      case Expr::Op::div:
        return Value::real(a / b);
      case Expr::Op::eq:
        return Value::boolean(a == b);
      case Expr::Op::ne:
        return Value::boolean(a != b);
      case Expr::Op::le:
        return Value::boolean(a <= b);
      default:
        return Value::boolean(a < b);
    }
  }
  const std::int64_t a = to_integer(l), b = to_integer(r);
  std::int64_t out = 0;
  switch (op) {
    case Expr::Op::add:
      if (__builtin_add_overflow(a, b, &out)) eval_error("bigint add out of range");
      return Value::integer(out);
    case Expr::Op::sub:
      if (__builtin_sub_overflow(a, b, &out)) eval_error("bigint sub out of range");
      return Value::integer(out);
    case Expr::Op::mul:
      if (__builtin_mul_overflow(a, b, &out)) eval_error("bigint mul out of range");
      return Value::integer(out);
    case Expr::Op::div:
    case Expr::Op::mod:
      if (b == 0) eval_error("division by zero");
      if (b == -1) {  // INT64_MIN / -1 does not fit; INT64_MIN % -1 is 0
        if (op == Expr::Op::mod) return Value::integer(0);
        if (a == std::numeric_limits<std::int64_t>::min()) eval_error("bigint div out of range");
        return Value::integer(-a);
      }
      return Value::integer(op == Expr::Op::div ? a / b : a % b);
    case Expr::Op::eq:
      return Value::boolean(a == b);
    case Expr::Op::ne:
      return Value::boolean(a != b);
    case Expr::Op::le:
      return Value::boolean(a <= b);
    default:
      return Value::boolean(a < b);
  }
}

void print_debug(const EvalContext& c, const Value& v) {
  std::string text =
      v.type == Value::Type::null ? "null" : fmt::format("{} {}", type_name(v.type), value_text(v));
  fmt::print(stderr, "debug(script={},command={}): {}\n", c.script, c.command + 1, text);
}

Value eval(const Expr& e, const EvalContext& c);

// AND, OR and CASE evaluate their arguments only as far as needed.
Value eval_lazy(const Expr& e, const EvalContext& c) {
  if (e.op == Expr::Op::case_when) {
    for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
      if (truth(eval(*e.args[k], c))) return eval(*e.args[k + 1], c);
    }
    return eval(*e.args.back(), c);
  }
  const Value a = eval(*e.args[0], c);
  if (a.type == Value::Type::null) return Value::null();
  const bool first = to_boolean(a);
  if (e.op == Expr::Op::logical_and ? !first : first) return Value::boolean(first);
  const Value b = eval(*e.args[1], c);
  if (b.type == Value::Type::null) return Value::null();
  return Value::boolean(to_boolean(b));
}

Value eval(const Expr& e, const EvalContext& c) {
  switch (e.op) {
    case Expr::Op::constant:
      return e.constant;
    case Expr::Op::variable:
      return variable_value(c.values, c.names, e.variable);
    case Expr::Op::logical_and:
    case Expr::Op::logical_or:
    case Expr::Op::case_when:
      return eval_lazy(e, c);
    default:
      break;
  }
  if (e.args.size() > kMaxFunctionArgs) {
    eval_error(fmt::format("too many function arguments, maximum is {}", kMaxFunctionArgs));
  }
  std::vector<Value> a;
  a.reserve(e.args.size());
  bool has_null = false;
  for (const auto& arg : e.args) {
    a.push_back(eval(*arg, c));
    has_null |= a.back().type == Value::Type::null;
  }
  if (has_null && e.op != Expr::Op::is && e.op != Expr::Op::debug) return Value::null();
  switch (e.op) {
    case Expr::Op::add:
    case Expr::Op::sub:
    case Expr::Op::mul:
    case Expr::Op::div:
    case Expr::Op::mod:
    case Expr::Op::eq:
    case Expr::Op::ne:
    case Expr::Op::lt:
    case Expr::Op::le:
      return arithmetic(e.op, a[0], a[1]);
    case Expr::Op::bit_and:
      return Value::integer(to_integer(a[0]) & to_integer(a[1]));
    case Expr::Op::bit_or:
      return Value::integer(to_integer(a[0]) | to_integer(a[1]));
    case Expr::Op::bit_xor:
      return Value::integer(to_integer(a[0]) ^ to_integer(a[1]));
    case Expr::Op::shift_left:
    case Expr::Op::shift_right: {
      // As in C on the machines pgbench runs on: the count taken modulo 64.
      const std::int64_t x = to_integer(a[0]);
      const auto n = static_cast<unsigned>(to_integer(a[1])) & 63U;
      return Value::integer(e.op == Expr::Op::shift_left
                                ? static_cast<std::int64_t>(static_cast<std::uint64_t>(x) << n)
                                : x >> n);
    }
    case Expr::Op::logical_not:
      return Value::boolean(!to_boolean(a[0]));
    case Expr::Op::is:
      return Value::boolean(a[0].type == a[1].type && (a[0].type != Value::Type::boolean ||
                                                       a[0].boolean_value == a[1].boolean_value));
    case Expr::Op::pi:
      return Value::real(std::numbers::pi);
    case Expr::Op::abs:
      if (a[0].type == Value::Type::integer) {
        const std::int64_t i = a[0].integer_value;
        return Value::integer(i < 0 ? static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(i))
                                    : i);
      }
      return Value::real(std::fabs(to_real(a[0])));
    case Expr::Op::debug:
      print_debug(c, a[0]);
      return a[0];
    case Expr::Op::to_double:
      return Value::real(to_real(a[0]));
    case Expr::Op::sqrt:
      return Value::real(std::sqrt(to_real(a[0])));
    case Expr::Op::ln:
      return Value::real(std::log(to_real(a[0])));
    case Expr::Op::exp:
      return Value::real(std::exp(to_real(a[0])));
    case Expr::Op::to_int:
      return Value::integer(to_integer(a[0]));
    case Expr::Op::least:
    case Expr::Op::greatest: {
      const bool real = std::any_of(a.begin(), a.end(),
                                    [](const Value& v) { return v.type == Value::Type::real; });
      const bool least = e.op == Expr::Op::least;
      if (real) {
        double x = to_real(a[0]);
        for (std::size_t k = 1; k < a.size(); ++k) {
          const double y = to_real(a[k]);
          x = least ? std::min(x, y) : std::max(x, y);
        }
        return Value::real(x);
      }
      std::int64_t x = to_integer(a[0]);
      for (std::size_t k = 1; k < a.size(); ++k) {
        const std::int64_t y = to_integer(a[k]);
        x = least ? std::min(x, y) : std::max(x, y);
      }
      return Value::integer(x);
    }
    case Expr::Op::random:
    case Expr::Op::random_exponential:
    case Expr::Op::random_gaussian:
    case Expr::Op::random_zipfian:
      return random_value(e.op, a, c.rng);
    case Expr::Op::pow:
      return Value::real(std::pow(to_real(a[0]), to_real(a[1])));
    case Expr::Op::hash_murmur2:
      return Value::integer(
          hash_murmur2(to_integer(a[0]), static_cast<std::uint64_t>(to_integer(a[1]))));
    case Expr::Op::hash_fnv1a:
      return Value::integer(
          hash_fnv1a(to_integer(a[0]), static_cast<std::uint64_t>(to_integer(a[1]))));
    case Expr::Op::permute: {
      const std::int64_t value = to_integer(a[0]), size = to_integer(a[1]);
      const std::int64_t seed = to_integer(a[2]);
      if (size <= 0) eval_error("permute size parameter must be greater than zero");
      return Value::integer(permute(value, size, seed));
    }
    default:
      break;
  }
  eval_error("internal error: unknown expression node");
}

}  // namespace

Value evaluate(const Expr& e, const EvalContext& context) {
  return eval(e, context);
}

}  // namespace stallscope::driver
