#include "driver/script.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <numbers>

#include <fmt/format.h>

#include "common/error.h"
#include "common/parse.h"
#include "common/printable.h"
#include "common/sql_secrets.h"
#include "common/units.h"

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

int Script::sql_commands() const {
  return static_cast<int>(std::count_if(commands.begin(), commands.end(), [](const auto& c) {
    return c.kind == ScriptCommand::Kind::sql;
  }));
}

struct Expr {
  enum class Op {
    number,
    real,
    var,
    neg,
    add,
    sub,
    mul,
    div,
    mod,
    random,
    random_exp,
    random_gauss
  };
  Op op = Op::number;
  std::int64_t number = 0;
  double real = 0;
  int var = -1;
  std::vector<std::shared_ptr<const Expr>> args;
  int depth = 1;  // nodes on the longest path down to a leaf
};

namespace {

[[noreturn]] void fail(const std::string& file, int line, const std::string& what) {
  throw_usage(fmt::format("cannot parse {}:{}: {}", file, line, what));
}

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// How deep an expression may nest — parentheses, unary signs, operators
// and function calls alike. The parser, evaluate() and the tree's destructor
// all recurse once a level, so without a bound a long enough line
// ("\set x ------…1", "1+1+…+1") overflows the stack. 1024 levels take
// well under 1 MB of stack even in a sanitizer build (4,000 overflowed the
// fuzz target's), and leave room for the long flat sums scripts written
// for pgbench use (a sum of n terms nests n − 1 levels).
constexpr int kMaxExprDepth = 1024;

// Recursive descent over one \set expression.
class ExprParser {
 public:
  ExprParser(std::string_view s, const std::string& file, int line, Variables& vars)
      : s_(s), file_(file), line_(line), vars_(vars) {}

  std::shared_ptr<const Expr> parse() {
    auto e = sum();
    skip();
    if (i_ != s_.size()) error(fmt::format("unexpected '{}' in expression", s_.substr(i_)));
    return e;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { fail(file_, line_, what); }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  std::shared_ptr<Expr> node(Expr::Op op, std::vector<std::shared_ptr<const Expr>> args) const {
    auto e = std::make_shared<Expr>();
    e->op = op;
    for (const auto& a : args) e->depth = std::max(e->depth, a->depth + 1);
    if (e->depth > kMaxExprDepth) too_deep();
    e->args = std::move(args);
    return e;
  }
  [[noreturn]] void too_deep() const {
    error(fmt::format("the expression nests deeper than {} levels", kMaxExprDepth));
  }
  std::shared_ptr<const Expr> sum() {
    auto left = product();
    for (;;) {
      if (eat('+')) {
        left = node(Expr::Op::add, {left, product()});
      } else if (eat('-')) {
        left = node(Expr::Op::sub, {left, product()});
      } else {
        return left;
      }
    }
  }
  std::shared_ptr<const Expr> product() {
    auto left = unary();
    for (;;) {
      if (eat('*')) {
        left = node(Expr::Op::mul, {left, unary()});
      } else if (eat('/')) {
        left = node(Expr::Op::div, {left, unary()});
      } else if (eat('%')) {
        left = node(Expr::Op::mod, {left, unary()});
      } else {
        return left;
      }
    }
  }
  // Every level of the parser's recursion passes here once.
  std::shared_ptr<const Expr> unary() {
    if (++nesting_ > kMaxExprDepth) too_deep();
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{nesting_};
    if (eat('-')) return node(Expr::Op::neg, {unary()});
    if (eat('+')) return unary();
    return primary();
  }
  std::shared_ptr<const Expr> primary() {
    skip();
    if (i_ >= s_.size()) error("expression ends too early");
    if (eat('(')) {
      auto e = sum();
      if (!eat(')')) error("missing ')'");
      return e;
    }
    char c = s_[i_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      std::size_t start = i_;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.'))
        ++i_;
      std::string text(s_.substr(start, i_ - start));
      auto e = std::make_shared<Expr>();
      if (text.find('.') != std::string::npos) {
        e->op = Expr::Op::real;
        const auto real = common::parse_double(text);
        if (!real) error(fmt::format("bad number '{}'", text));
        e->real = *real;
      } else {
        const auto number = common::parse_int64(text);
        if (!number) error(fmt::format("bad number '{}'", text));
        e->number = *number;
      }
      return e;
    }
    if (c == ':') {
      ++i_;
      std::size_t start = i_;
      while (i_ < s_.size() && ident_char(s_[i_])) ++i_;
      if (i_ == start) error("':' without a variable name");
      auto e = std::make_shared<Expr>();
      e->op = Expr::Op::var;
      e->var = vars_.slot(s_.substr(start, i_ - start));
      return e;
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      std::size_t start = i_;
      while (i_ < s_.size() && ident_char(s_[i_])) ++i_;
      std::string name(s_.substr(start, i_ - start));
      Expr::Op op;
      std::size_t arity;
      if (name == "random") {
        op = Expr::Op::random;
        arity = 2;
      } else if (name == "random_exponential") {
        op = Expr::Op::random_exp;
        arity = 3;
      } else if (name == "random_gaussian") {
        op = Expr::Op::random_gauss;
        arity = 3;
      } else {
        error(
            fmt::format("unsupported function '{}' (supported: random, random_exponential, "
                        "random_gaussian)",
                        name));
      }
      if (!eat('(')) error(fmt::format("'(' expected after {}", name));
      std::vector<std::shared_ptr<const Expr>> args;
      if (!eat(')')) {
        do {
          args.push_back(sum());
        } while (eat(','));
        if (!eat(')')) error(fmt::format("')' expected to close {}(", name));
      }
      if (args.size() != arity) {
        error(fmt::format("{}() takes {} arguments, not {}", name, arity, args.size()));
      }
      return node(op, std::move(args));
    }
    error(fmt::format("unexpected '{}' in expression", c));
  }

  std::string_view s_;
  std::size_t i_ = 0;
  int nesting_ = 0;  // unary() calls under way
  const std::string& file_;
  int line_;
  Variables& vars_;
};

double uniform01(std::mt19937_64& rng) {
  return std::generate_canonical<double, 53>(rng);  // [0, 1)
}

double eval_real(const Expr& e, const std::vector<std::optional<std::int64_t>>& values,
                 std::mt19937_64& rng) {
  if (e.op == Expr::Op::real) return e.real;
  return static_cast<double>(evaluate(e, values, rng));
}

// Appends one SQL command (with `:var` references of known variables) to
// `script`. `sql` has no trailing ';'.
void add_sql(Script& script, std::string_view sql, int line, const Variables& vars) {
  ScriptCommand c;
  c.kind = ScriptCommand::Kind::sql;
  c.line = line;
  std::string text;
  char quote = 0;
  for (std::size_t i = 0; i < sql.size(); ++i) {
    char ch = sql[i];
    if (quote) {
      if (ch == quote) quote = 0;
      text += ch;
      continue;
    }
    if (ch == '\'' || ch == '"') {
      quote = ch;
      text += ch;
      continue;
    }
    if (ch == ':' && i + 1 < sql.size() && sql[i + 1] == ':') {  // a cast
      text += "::";
      ++i;
      continue;
    }
    if (ch == ':' && i + 1 < sql.size() && ident_char(sql[i + 1])) {
      std::size_t end = i + 1;
      while (end < sql.size() && ident_char(sql[end])) ++end;
      if (auto slot = vars.find(sql.substr(i + 1, end - i - 1))) {
        c.text.push_back(std::move(text));
        text.clear();
        c.vars.push_back(*slot);
        i = end - 1;
        continue;
      }
    }
    text += ch;
  }
  c.text.push_back(std::move(text));
  c.numbered.clear();
  for (std::size_t k = 0; k < c.text.size(); ++k) {
    c.numbered += c.text[k];
    if (k < c.vars.size()) c.numbered += fmt::format("${}", k + 1);
  }
  script.commands.push_back(std::move(c));
}

}  // namespace

namespace {

[[noreturn]] void out_of_range(const char* operation) {
  throw_usage(fmt::format("cannot evaluate a \\set expression: bigint {} out of range", operation));
}

}  // namespace

std::int64_t evaluate(const Expr& e, const std::vector<std::optional<std::int64_t>>& values,
                      std::mt19937_64& rng) {
  auto arg = [&](std::size_t k) { return evaluate(*e.args[k], values, rng); };
  switch (e.op) {
    case Expr::Op::number:
      return e.number;
    case Expr::Op::real:
      // As pgbench: a number past a bigint is an error, not a wrapped value.
      if (!(e.real >= -0x1p63 && e.real < 0x1p63)) {
        throw_usage(fmt::format(
            "cannot evaluate a \\set expression: double to bigint overflow for {}", e.real));
      }
      return static_cast<std::int64_t>(e.real);
    case Expr::Op::var: {
      const auto& v = values.at(static_cast<std::size_t>(e.var));
      if (!v) throw_usage("cannot evaluate a \\set expression: it uses a variable not set yet");
      return *v;
    }
    // Integer overflow is an error, as pgbench's "bigint add out of range".
    case Expr::Op::neg: {
      const std::int64_t a = arg(0);
      if (a == std::numeric_limits<std::int64_t>::min()) out_of_range("negation");
      return -a;
    }
    case Expr::Op::add: {
      std::int64_t r = 0;
      if (__builtin_add_overflow(arg(0), arg(1), &r)) out_of_range("add");
      return r;
    }
    case Expr::Op::sub: {
      std::int64_t r = 0;
      if (__builtin_sub_overflow(arg(0), arg(1), &r)) out_of_range("subtract");
      return r;
    }
    case Expr::Op::mul: {
      std::int64_t r = 0;
      if (__builtin_mul_overflow(arg(0), arg(1), &r)) out_of_range("multiply");
      return r;
    }
    case Expr::Op::div:
    case Expr::Op::mod: {
      std::int64_t a = arg(0), b = arg(1);
      if (b == 0) throw_usage("cannot evaluate a \\set expression: division by zero");
      if (b == -1) {
        // INT64_MIN / -1 does not fit; INT64_MIN % -1 is 0 (as pgbench).
        if (e.op == Expr::Op::mod) return 0;
        if (a == std::numeric_limits<std::int64_t>::min()) out_of_range("divide");
        return -a;
      }
      return e.op == Expr::Op::div ? a / b : a % b;
    }
    case Expr::Op::random:
    case Expr::Op::random_exp:
    case Expr::Op::random_gauss: {
      std::int64_t lo = arg(0), hi = arg(1);
      if (hi < lo) throw_usage(fmt::format("cannot evaluate random({}, {}): empty range", lo, hi));
      // As pgbench: hi - lo + 1 must fit a bigint ("random range is too large").
      std::int64_t width = 0;
      if (__builtin_sub_overflow(hi, lo, &width) ||
          width == std::numeric_limits<std::int64_t>::max()) {
        throw_usage(fmt::format("cannot evaluate random({}, {}): range is too large", lo, hi));
      }
      const double span = static_cast<double>(width) + 1;
      if (e.op == Expr::Op::random) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
      }
      double param = eval_real(*e.args[2], values, rng);
      double r;
      if (e.op == Expr::Op::random_exp) {  // as pgbench getExponentialRand
        if (!(param > 0)) throw_usage("cannot evaluate random_exponential: parameter must be > 0");
        double cut = std::exp(-param);
        double u = 1.0 - uniform01(rng);
        r = -std::log(cut + (1.0 - cut) * u) / param;
      } else {  // as pgbench getGaussianRand
        if (!(param >= 2.0)) throw_usage("cannot evaluate random_gaussian: parameter must be >= 2");
        double stdev;
        do {
          double r1 = 1.0 - uniform01(rng);
          double r2 = uniform01(rng);
          stdev = std::sqrt(-2.0 * std::log(r1)) * std::sin(2.0 * std::numbers::pi * r2);
        } while (stdev < -param || stdev >= param);
        r = (stdev + param) / (param * 2.0);
      }
      // r is in [0, 1], but span × r may round up to span: kept within hi.
      const double x = span * r;
      return lo + (x < static_cast<double>(width) ? static_cast<std::int64_t>(x) : width);
    }
  }
  return 0;
}

std::int64_t sleep_ns(std::int64_t value, std::int64_t unit_ns) {
  if (value <= 0) return 0;
  if (value > kMaxSleepNs / unit_ns) {
    const char* unit = unit_ns == common::kNsPerUs   ? "us"
                       : unit_ns == common::kNsPerMs ? "ms"
                                                     : "s";
    throw_usage(fmt::format("cannot evaluate \\sleep: {} {} is out of range (at most {} {})", value,
                            unit, kMaxSleepNs / unit_ns, unit));
  }
  return value * unit_ns;
}

std::string source_text(const ScriptCommand& cmd, const Variables& variables) {
  std::string sql;
  for (std::size_t t = 0; t < cmd.text.size(); ++t) {
    sql += cmd.text[t];
    if (t < cmd.vars.size()) sql += ":" + variables.names[static_cast<std::size_t>(cmd.vars[t])];
  }
  return mask_sql_secrets(sql);
}

namespace {

// First pass: the variables the script sets (so SQL before a \set in a
// later line still substitutes them, as pgbench does at run time).
void register_set_targets(std::string_view text, Variables& variables) {
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    std::size_t b = line.find_first_not_of(" \t");
    if (b != std::string_view::npos && line.substr(b).starts_with("\\set")) {
      std::string_view rest = line.substr(b + 4);
      std::size_t n0 = rest.find_first_not_of(" \t");
      if (n0 != std::string_view::npos) {
        std::size_t n1 = n0;
        while (n1 < rest.size() && ident_char(rest[n1])) ++n1;
        if (n1 > n0) variables.slot(rest.substr(n0, n1 - n0));
      }
    }
    pos = end + 1;
  }
}

// A meta-command line; `rest` is the text after its backslash.
ScriptCommand parse_meta_command(std::string_view rest, const std::string& file, int line_no,
                                 Variables& variables) {
  std::size_t w = 0;
  while (w < rest.size() && ident_char(rest[w])) ++w;
  std::string cmd(rest.substr(0, w));
  std::string_view args = rest.substr(w);
  ScriptCommand c;
  c.line = line_no;
  if (cmd == "set") {
    std::size_t n0 = args.find_first_not_of(" \t");
    std::size_t n1 = n0 == std::string_view::npos ? n0 : n0;
    while (n1 != std::string_view::npos && n1 < args.size() && ident_char(args[n1])) ++n1;
    if (n0 == std::string_view::npos || n1 == n0) fail(file, line_no, "\\set needs a name");
    c.kind = ScriptCommand::Kind::set;
    c.target = variables.slot(args.substr(n0, n1 - n0));
    c.expr = ExprParser(args.substr(n1), file, line_no, variables).parse();
  } else if (cmd == "sleep") {
    c.kind = ScriptCommand::Kind::sleep;
    std::string a(args);
    while (!a.empty() && std::isspace(static_cast<unsigned char>(a.back()))) a.pop_back();
    std::size_t sp = a.find_last_of(" \t");
    std::string unit = sp == std::string::npos ? "" : a.substr(sp + 1);
    if (unit == "us" || unit == "ms" || unit == "s") {
      c.unit_ns = unit == "us"   ? common::kNsPerUs
                  : unit == "ms" ? common::kNsPerMs
                                 : common::kNsPerS;
      a.resize(sp);
    }
    c.expr = ExprParser(a, file, line_no, variables).parse();
    // A constant length is checked now, as pgbench checks its numbers
    // before running; one from variables when the transaction runs.
    if (c.expr->op == Expr::Op::number || c.expr->op == Expr::Op::real) {
      try {
        std::mt19937_64 unused;
        sleep_ns(evaluate(*c.expr, {}, unused), c.unit_ns);
      } catch (const Error& e) {
        fail(file, line_no, e.what());
      }
    }
  } else {
    fail(file, line_no,
         fmt::format("unsupported meta-command \\{} (supported: \\set, \\sleep)", cmd));
  }
  return c;
}

// White space as std::isspace has it (form feed and vertical tab too), so a
// command's first line is the line of its first other character.
constexpr const char* kSpace = " \t\r\n\f\v";

bool blank(const std::string& s) {
  return s.find_first_not_of(kSpace) == std::string::npos;
}

// SQL commands, collected line by line up to an unquoted ';'.
struct SqlCollector {
  std::string pending;  // SQL text of the command being collected
  int pending_line = 0;
  char quote = 0;

  // "--" comments outside quotes end the line.
  void add_line(std::string_view line, int line_no, Script& script, Variables& variables) {
    for (std::size_t i = 0; i < line.size(); ++i) {
      char ch = line[i];
      if (quote) {
        pending += ch;
        if (ch == quote) quote = 0;
        continue;
      }
      if (ch == '-' && i + 1 < line.size() && line[i + 1] == '-') break;
      if (ch == '\'' || ch == '"') quote = ch;
      if (ch == ';') {
        if (!blank(pending)) {
          std::string sql = pending;
          sql.erase(0, sql.find_first_not_of(kSpace));
          add_sql(script, sql, pending_line, variables);
        }
        pending.clear();
        continue;
      }
      if (blank(pending) && !std::isspace(static_cast<unsigned char>(ch))) pending_line = line_no;
      pending += ch;
    }
    pending += '\n';
  }

  // The end of the file: a last command may lack its ';'.
  void finish(const std::string& file, int line_no, Script& script, Variables& variables) {
    if (quote) fail(file, line_no, "unterminated quoted string");
    if (blank(pending)) return;
    std::string sql = pending;
    sql.erase(0, sql.find_first_not_of(kSpace));
    while (!sql.empty() && std::isspace(static_cast<unsigned char>(sql.back()))) sql.pop_back();
    add_sql(script, sql, pending_line, variables);
  }
};

// Refuses a NUL byte and bytes that are not UTF-8, naming the line and
// column: libpq sends SQL as C strings, so a NUL byte would end the text
// there (select 1;\0select 2; ran only the first, a file of NUL bytes ran
// empty queries), and a UTF-8 database refuses invalid UTF-8 anyway.
void check_script_bytes(std::string_view text, const std::string& file) {
  int line_no = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\n') {
      ++line_no;
      line_start = ++i;
    } else if (byte == 0) {
      fail(file, line_no,
           fmt::format(
               "a NUL byte at byte {} of the line: a script is text, and SQL cannot hold one",
               i - line_start + 1));
    } else if (byte < 0x80) {
      ++i;
    } else if (const auto n = common::utf8_sequence_bytes(text.substr(i)); n > 0) {
      i += n;
    } else {
      fail(file, line_no,
           fmt::format(
               "invalid UTF-8 (byte \\x{:02x}) at byte {} of the line: a script must be UTF-8",
               byte, i - line_start + 1));
    }
  }
}

}  // namespace

Script parse_script(std::string_view text, const std::string& file, Variables& variables) {
  check_script_bytes(text, file);
  Script script;
  script.name = file;
  register_set_targets(text, variables);
  SqlCollector sql;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t b = line.find_first_not_of(" \t");
    if (!sql.quote && b != std::string_view::npos && line[b] == '\\') {
      if (!blank(sql.pending)) {
        fail(file, line_no, "meta-command inside an unfinished SQL command (missing ';'?)");
      }
      sql.pending.clear();
      script.commands.push_back(parse_meta_command(line.substr(b + 1), file, line_no, variables));
      continue;
    }
    sql.add_line(line, line_no, script, variables);
  }
  sql.finish(file, line_no, script, variables);
  if (script.sql_commands() == 0) fail(file, line_no, "the script has no SQL command");
  return script;
}

Script builtin_script(const std::string& given, Variables& variables) {
  // As pgbench: a unique prefix names a built-in ("-b select", "-b tpcb").
  std::string name = given;
  int matches = 0;
  for (const char* b : {"tpcb-like", "simple-update", "select-only"}) {
    if (std::string_view(b).starts_with(given) && !given.empty()) {
      name = b;
      ++matches;
    }
  }
  if (matches > 1) {
    throw_usage(fmt::format(
        "cannot use built-in script '{}': ambiguous, say tpcb-like, simple-update or select-only",
        given));
  }
  variables.slot("scale");
  const char* text = nullptr;
  if (name == "select-only") {
    text =
        "\\set aid random(1, 100000 * :scale)\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n";
  } else if (name == "tpcb-like") {
    text =
        "\\set aid random(1, 100000 * :scale)\n"
        "\\set bid random(1, 1 * :scale)\n"
        "\\set tid random(1, 10 * :scale)\n"
        "\\set delta random(-5000, 5000)\n"
        "BEGIN;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;\n"
        "UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;\n"
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, "
        ":delta, CURRENT_TIMESTAMP);\n"
        "END;\n";
  } else if (name == "simple-update") {
    text =
        "\\set aid random(1, 100000 * :scale)\n"
        "\\set bid random(1, 1 * :scale)\n"
        "\\set tid random(1, 10 * :scale)\n"
        "\\set delta random(-5000, 5000)\n"
        "BEGIN;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, "
        ":delta, CURRENT_TIMESTAMP);\n"
        "END;\n";
  } else {
    throw_usage(fmt::format(
        "cannot use built-in script '{}': expected tpcb-like, simple-update or select-only (-b)",
        given));
  }
  return parse_script(text, "builtin: " + name, variables);
}

std::pair<std::string, int> split_weight(const std::string& spec) {
  auto at = spec.rfind('@');
  if (at == std::string::npos) return {spec, 1};
  std::string w = spec.substr(at + 1);
  if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos || w.size() > 9) {
    throw_usage(
        fmt::format("cannot use script weight '{}' in '{}': expected an integer ≥ 0", w, spec));
  }
  // At most nine digits: always an int.
  return {spec.substr(0, at), *common::parse_int(w)};
}

}  // namespace stallscope::driver
