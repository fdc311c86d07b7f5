// pgbench-compatible custom scripts, the common subset: SQL commands (each
// ends at an unquoted ';' or the end of the file), `\set name expression`
// (integer + - * / %, parentheses, unary minus, :variables, random(lo, hi),
// random_exponential(lo, hi, param), random_gaussian(lo, hi, param)),
// `\sleep N [us|ms|s]` (N a number or :variable), and `:name` substitution in
// SQL for variables the scripts \set (plus `scale`). One script run is one
// transaction. Any other meta-command is Error(usage) "FILE:LINE: …".
//
//   driver::Variables variables;  // shared by every script of a run
//   driver::Script script = driver::parse_script(text, "bench.sql", variables);
//   script.weight = 2;            // -f bench.sql@2
//   options.scripts.push_back(std::move(script));  // DriverOptions (driver/driver.h)
//   options.variables = variables;
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/units.h"

namespace stallscope::driver {

// Names of the variables of a script set; a variable is its index here.
struct Variables {
  std::vector<std::string> names;
  int slot(std::string_view name);  // adds it when new
  std::optional<int> find(std::string_view name) const;
};

struct Expr;  // an expression tree (script.cpp)

struct ScriptCommand {
  enum class Kind { sql, set, sleep };
  Kind kind = Kind::sql;
  int line = 0;  // 1-based line in its file, for messages
  // sql: the text split at the variable references: text[0] var[0] text[1] …
  // (text.size() == vars.size() + 1); `numbered` is the same with $1, $2 …
  // in place of the variables (extended and prepared protocols).
  std::vector<std::string> text;
  std::vector<int> vars;
  std::string numbered;
  // set: variable `target` = `expr`; sleep: `expr` × `unit_ns`.
  int target = -1;
  std::shared_ptr<const Expr> expr;
  std::int64_t unit_ns = common::kNsPerS;
};

struct Script {
  std::string name;  // file name or "builtin: select-only"
  int weight = 1;
  std::vector<ScriptCommand> commands;
  int sql_commands() const;
};

// An SQL command's text as written, with `:name` for each variable reference
// (names from `variables`) and the passwords it carries masked
// (common/sql_secrets.h: ALTER ROLE … PASSWORD '***'), e.g. for -r's
// statement table, the run file's statement rows and the report.
std::string source_text(const ScriptCommand& cmd, const Variables& variables);

// Parses `text` (named `file` in errors). Throws Error(usage)
// "cannot parse FILE:LINE: …" on anything outside the subset.
Script parse_script(std::string_view text, const std::string& file, Variables& variables);

// pgbench's built-in scripts: "select-only" (-S), "tpcb-like" (-b tpcb-like),
// "simple-update" (-N); as with pgbench -b, a unique prefix names one
// ("select"). Their SQL uses :scale. Throws Error(usage) for others and for
// an ambiguous prefix.
Script builtin_script(const std::string& name, Variables& variables);

// Evaluates `e` with `values` (indexed by variable); throws Error(usage) for
// division by zero, an unset variable, or a bad random() range.
std::int64_t evaluate(const Expr& e, const std::vector<std::optional<std::int64_t>>& values,
                      std::mt19937_64& rng);

// A \sleep's length: `value` (its expression's value) × `unit_ns`; 0 for a
// value ≤ 0 (as pgbench). Throws Error(usage) "cannot evaluate \sleep: …"
// naming the value and unit when it passes kMaxSleepNs (which also keeps
// "now + sleep" from overflowing).
inline constexpr std::int64_t kMaxSleepNs = 100'000'000 * common::kNsPerS;  // 10^8 s, as -T
std::int64_t sleep_ns(std::int64_t value, std::int64_t unit_ns);

// `spec` "FILE" or "FILE@WEIGHT" → (FILE, WEIGHT ≥ 0); Error(usage) otherwise.
std::pair<std::string, int> split_weight(const std::string& spec);

}  // namespace stallscope::driver
