// pgbench custom scripts, in the language of pgbench 15–17: SQL commands
// split by psql's lexing rules (driver/script_lex.h), `:name` references,
// and the meta-commands \set (driver/expr.h's expressions), \sleep,
// \setshell, \shell, \if/\elif/\else/\endif, \gset and \aset (with a
// prefix), \startpipeline/\syncpipeline/\endpipeline. One script run is one
// transaction. A script that pgbench refuses is Error(usage) "cannot parse
// FILE:LINE: …" with pgbench's reason.
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
#include <string>
#include <string_view>
#include <vector>

#include "common/units.h"
#include "driver/expr.h"

namespace stallscope::driver {

struct ScriptCommand {
  enum class Kind {
    sql,
    set,             // \set target expr
    sleep,           // \sleep N|:var [us|ms|s]
    setshell,        // \setshell target command words…
    shell,           // \shell command words…
    if_,             // \if expr
    elif,            // \elif expr
    else_,           // \else
    endif,           // \endif
    start_pipeline,  // \startpipeline
    sync_pipeline,   // \syncpipeline
    end_pipeline,    // \endpipeline
  };
  Kind kind = Kind::sql;
  int line = 0;  // 1-based line in its file, for messages

  // sql: the text split at its `:name` references: text[0] var[0] text[1] …
  // (text.size() == vars.size() + 1), each reference's variable; `quoted[k]`:
  // reference k is inside quotes or a comment. The simple protocol puts every
  // reference's value in place, as pgbench does (an unset one stays
  // `:name`); `numbered` is the text with $1, $2 … for the references
  // outside quotes (`params` their variables) for the extended and prepared
  // protocols (an unset one is NULL, as pgbench's).
  std::vector<std::string> text;
  std::vector<int> vars;
  std::vector<bool> quoted;
  std::string numbered;
  std::vector<int> params;
  // sql: \gset or \aset after it stores its result's columns into variables
  // named `store_prefix` + column name.
  enum class Store { none, gset, aset };
  Store store = Store::none;
  std::string store_prefix;

  // set, setshell: the variable set.
  int target = -1;
  // set, if, elif: the expression.
  std::shared_ptr<const Expr> expr;
  // sleep: `sleep_var` (≥ 0) or the constant `sleep_count`, × `unit_ns`.
  int sleep_var = -1;
  std::int64_t sleep_count = 0;
  std::int64_t unit_ns = common::kNsPerS;
  // setshell, shell: the command's words; `word_vars[k]` ≥ 0 when word k is
  // `:name` (its value goes in its place).
  std::vector<std::string> words;
  std::vector<int> word_vars;
  // if, elif: the command to go to when the condition is false (the next
  // \elif, \else or the \endif); elif, else: the matching \endif (where a
  // taken branch goes on from).
  std::size_t next_branch = 0;
  std::size_t endif = 0;
};

struct Script {
  std::string name;  // file name or "builtin: select-only"
  int weight = 1;
  std::vector<ScriptCommand> commands;
  int sql_commands() const;
  bool has(ScriptCommand::Kind kind) const;
};

// An SQL command's text as written, with `:name` for each variable reference
// (names from `variables`) and the passwords it carries masked
// (common/sql_secrets.h: ALTER ROLE … PASSWORD '***'), e.g. for -r's
// statement table, the run file's statement rows and the report.
std::string source_text(const ScriptCommand& cmd, const Variables& variables);

// Parses `text` (named `file` in errors). Throws Error(usage)
// "cannot parse FILE:LINE: …" for what pgbench refuses.
Script parse_script(std::string_view text, const std::string& file, Variables& variables);

// pgbench's built-in scripts: "select-only" (-S), "tpcb-like" (-b tpcb-like),
// "simple-update" (-N); as with pgbench -b, a unique prefix names one
// ("select"). Their SQL uses :scale. Throws Error(usage) for others and for
// an ambiguous prefix.
Script builtin_script(const std::string& name, Variables& variables);

// A \sleep's length: `count` × `unit_ns`; 0 for a count ≤ 0 (as pgbench).
// Throws Error(usage) "cannot evaluate \sleep: …" naming the count and unit
// when it passes kMaxSleepNs (which also keeps "now + sleep" from
// overflowing).
inline constexpr std::int64_t kMaxSleepNs = 100'000'000 * common::kNsPerS;  // 10^8 s, as -T
std::int64_t sleep_ns(std::int64_t count, std::int64_t unit_ns);

// `spec` "FILE" or "FILE@WEIGHT" → (FILE, WEIGHT ≥ 0); Error(usage) otherwise.
std::pair<std::string, int> split_weight(const std::string& spec);

}  // namespace stallscope::driver
