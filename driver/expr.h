// pgbench's expression language (`\set`, `\if`, `\elif`), as pgbench 15–17
// define it: integers (bigint, overflow is an error), doubles, booleans and
// NULL; + - * / % (double when either side is), comparisons (= <> != < <=
// > >=), AND OR NOT (three-valued, short-circuit), IS [NOT] NULL/TRUE/FALSE,
// ISNULL, NOTNULL, bit operators (& | # ~ << >>), CASE WHEN … THEN … [ELSE
// …] END, :variables, and the functions abs, debug, double, exp, greatest,
// hash, hash_fnv1a, hash_murmur2, int, least, ln, mod, permute, pi,
// pow/power, random, random_exponential, random_gaussian, random_zipfian,
// sqrt.
//
//   driver::Variables names;
//   auto e = driver::parse_expr("random(1, 10 * :scale)", names);  // throws ExprSyntaxError
//   driver::VariableValues values(names.names.size());
//   values[*names.find("scale")].set(driver::Value::integer(5));
//   driver::Prng rng(42);
//   driver::Value v = driver::evaluate(*e, {values, names, rng});  // throws Error(usage)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::driver {

// Names of the variables of a script set; a variable is its index here.
struct Variables {
  std::vector<std::string> names;
  int slot(std::string_view name);  // adds it when new
  std::optional<int> find(std::string_view name) const;
};

// pgbench's variable-name characters: ASCII letters, digits and '_', and any
// byte ≥ 0x80; a name does not start with a digit.
bool variable_name_char(char c);
bool valid_variable_name(std::string_view name);

// One value of the language.
struct Value {
  enum class Type : std::uint8_t { null, boolean, integer, real };
  Type type = Type::null;
  bool boolean_value = false;
  std::int64_t integer_value = 0;
  double real_value = 0;

  static Value null() { return {}; }
  static Value boolean(bool b) { return {.type = Type::boolean, .boolean_value = b}; }
  static Value integer(std::int64_t i) { return {.type = Type::integer, .integer_value = i}; }
  static Value real(double d) { return {.type = Type::real, .real_value = d}; }
};

// "null", "boolean", "int" or "double", as pgbench names them in messages.
const char* type_name(Value::Type type);
// The text a value takes in SQL, as pgbench's: 42, 0.333333333333333 (15
// significant digits), true, false, NULL.
std::string value_text(const Value& v);

// One client's value of one variable: unset, a value (\set), or text (-D,
// \gset, \aset, \setshell) that an expression reads as pgbench does — null,
// a boolean word (true/yes/on and prefixes, false/no/off), an integer, else
// a double — and that SQL gets as written.
struct Variable {
  enum class State : std::uint8_t { unset, value, text };
  State state = State::unset;
  Value value;
  std::string text;
  void set(Value v) {
    state = State::value;
    value = v;
  }
  void set_text(std::string_view t) {
    state = State::text;
    text.assign(t);
  }
  bool is_set() const { return state != State::unset; }
};
using VariableValues = std::vector<Variable>;

// pgbench's pseudo-random generator (xoroshiro128**, seeded through
// splitmix64), so that permute() gives pgbench's permutation for a seed.
class Prng {
 public:
  explicit Prng(std::uint64_t seed = 0) { reseed(seed); }
  void reseed(std::uint64_t seed);
  std::uint64_t next();
  std::uint64_t range(std::uint64_t lo, std::uint64_t hi);  // [lo, hi], uniform
  double uniform01();                                       // [0, 1)

 private:
  std::uint64_t s0_ = 0, s1_ = 0;
};

struct Expr;  // an expression tree (expr.cpp)

// A parse error: what pgbench says ("syntax error", "unexpected function
// name (foo)", …) and the byte offset in the expression's text.
class ExprSyntaxError : public std::runtime_error {
 public:
  ExprSyntaxError(const std::string& message, std::size_t offset)
      : std::runtime_error(message), offset_(offset) {}
  std::size_t offset() const { return offset_; }

 private:
  std::size_t offset_;
};

// How deep an expression may nest (parentheses, operators, calls): the
// parser, the evaluator and the tree's destructor recurse once a level.
inline constexpr int kMaxExprDepth = 1024;

// Parses one expression (all of `text`; a backslash before a line break is
// white space, as pgbench's continuation lines). Registers its variables in
// `names`. Throws ExprSyntaxError.
std::shared_ptr<const Expr> parse_expr(std::string_view text, Variables& names);

// Whether `e` is a constant (an integer, double, boolean or NULL literal).
std::optional<Value> constant_value(const Expr& e);

// What evaluation reads and where debug() writes.
struct EvalContext {
  const VariableValues& values;
  const Variables& names;
  Prng& rng;
  // debug(): "debug(script=S,command=C): int 1" on stderr, as pgbench.
  int script = 0;
  int command = 0;
};

// Evaluates `e`. Throws Error(usage) with pgbench's message (division by
// zero, bigint add out of range, undefined variable "x", cannot coerce
// boolean to int, …).
Value evaluate(const Expr& e, const EvalContext& context);

// The value of variable `slot` as an expression reads it (text parsed as
// pgbench does); throws Error(usage) for an unset or malformed one.
Value variable_value(const VariableValues& values, const Variables& names, int slot);

// pgbench's coercions: int rounds a double to the nearest (rint), errors on
// NULL, booleans and doubles past a bigint; bool accepts only booleans.
std::int64_t to_integer(const Value& v);
double to_real(const Value& v);
bool to_boolean(const Value& v);
// \if's truth: NULL and zero are false.
bool truth(const Value& v);

// pgbench's hash functions and permutation, exposed for tests.
std::int64_t hash_fnv1a(std::int64_t value, std::uint64_t seed);
std::int64_t hash_murmur2(std::int64_t value, std::uint64_t seed);
std::int64_t permute(std::int64_t value, std::int64_t size, std::int64_t seed);

}  // namespace stallscope::driver
