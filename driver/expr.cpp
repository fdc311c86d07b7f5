#include "driver/expr.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <span>

#include <fmt/format.h>

#include "common/ascii.h"
#include "common/error.h"
#include "common/parse.h"
#include "driver/expr_tree.h"

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

namespace {

using common::iequals;
using detail::kMaxFunctionArgs;

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
  // An integer (white space before it, a sign) must fit a bigint; white
  // space after it makes it no number, as pgbench reads it.
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  std::string_view digits = t;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
  if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    const std::string_view signless = t[0] == '+' ? t.substr(1) : t;
    if (const auto n = common::parse_int64(signless)) return Value::integer(*n);
    eval_error(fmt::format("value \"{}\" is out of range for type bigint", text));
  }
  const auto d = common::parse_c_double(text);
  if (!d) malformed();
  return Value::real(*d);
}

}  // namespace

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

Value random_value(Expr::Op op, std::span<const Value> a, Prng& rng) {
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

// = <> <= <, on two doubles or two integers.
template <typename T>
Value compare(Expr::Op op, T a, T b) {
  switch (op) {
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
      default:
        return compare(op, a, b);
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
    default:
      return compare(op, a, b);
  }
}

void print_debug(const EvalContext& c, const Value& v) {
  std::string text =
      v.type == Value::Type::null ? "null" : fmt::format("{} {}", type_name(v.type), value_text(v));
  fmt::print(stderr, "debug(script={},command={}): {}\n", c.script, c.command + 1, text);
}

Value eval(const Expr& e, const EvalContext& c);
Value apply(const Expr& e, const EvalContext& c, std::span<const Value> a);

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
  // The arguments, on the stack for up to four (no allocation per call in
  // the common \set aid random(1, 100000 * :scale)).
  constexpr std::size_t kInline = 4;
  std::array<Value, kInline> inline_args;
  std::vector<Value> many;
  Value* a = inline_args.data();
  if (e.args.size() > kInline) {
    many.resize(e.args.size());
    a = many.data();
  }
  bool has_null = false;
  for (std::size_t k = 0; k < e.args.size(); ++k) {
    a[k] = eval(*e.args[k], c);
    has_null |= a[k].type == Value::Type::null;
  }
  if (has_null && e.op != Expr::Op::is && e.op != Expr::Op::debug) return Value::null();
  const std::span<const Value> args(a, e.args.size());
  return apply(e, c, args);
}

Value apply(const Expr& e, const EvalContext& c, std::span<const Value> a) {
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
      const auto extremum = [&](auto convert) {
        auto x = convert(a[0]);
        for (std::size_t k = 1; k < a.size(); ++k) {
          const auto y = convert(a[k]);
          x = least ? std::min(x, y) : std::max(x, y);
        }
        return x;
      };
      return real ? Value::real(extremum(to_real)) : Value::integer(extremum(to_integer));
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
