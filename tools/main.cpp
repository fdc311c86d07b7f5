// stallscope — where did the time go when the queries are slow and the CPUs idle?
//
// This file parses the command line (CLI11) and maps errors to exit status:
// 0 success, 1 the run or analysis failed, 2 bad usage or bad input — always
// with a one-line message naming the offending thing.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "common/conninfo.h"
#include "common/error.h"
#include "common/parse.h"
#include "driver/script.h"
#include "tools/commands.h"

namespace {

using stallscope::Error;
using stallscope::ErrorKind;

std::string read_sql_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(ErrorKind::usage, fmt::format("cannot read SQL file {}: is a directory", path));
  }
  std::ifstream in(path);
  if (!in) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read SQL file {}: {}", path, std::strerror(errno)), errno);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string sql = ss.str();
  if (sql.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw Error(ErrorKind::usage, fmt::format("SQL file {} is empty", path));
  }
  return sql;
}

// A positive number; CLI11's own PositiveNumber prints DBL_MAX in full. A
// leading '+' is allowed (CLI11 converts the value itself, and reads "+5" as
// 5), as it was when this check used std::stod.
const CLI::Validator kPositive(
    [](std::string& value) -> std::string {
      std::string_view text(value);
      if (text.starts_with('+')) text.remove_prefix(1);
      if (const auto v = stallscope::common::parse_double(text); v && *v > 0) return {};
      return "'" + value + "' is not a positive number";
    },
    "POSITIVE");

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "stallscope: record host state and PostgreSQL wait events beside a benchmark, drive "
      "queries, and explain where the time went.",
      "stallscope"};
  app.set_version_flag("--version", std::string("stallscope ") + STALLSCOPE_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Exit status: 0 success, 1 the run or analysis failed, 2 bad usage or bad input.\n"
      "Run 'stallscope COMMAND --help' for a command's options.");

  stallscope::tools::RunOptions run;
  std::string sql_text, every_text;
  std::vector<std::string> sql_files;
  auto* run_cmd = app.add_subcommand(
      "run",
      "Drive PostgreSQL with a closed-loop libpq client while sampling the host and "
      "pg_stat_activity; store both streams in one SQLite file.");
  // -h is pgbench's --host here; help is --help only.
  run_cmd->set_help_flag("--help", "Print this help message and exit");
  run_cmd->add_option("-o,--output", run.output_path, "Run file to create (SQLite; must not exist)")
      ->required();
  run_cmd->add_option("conninfo", run.conninfo,
                      "Where to connect: anything libpq accepts (key=value or URI), or a bare "
                      "database name as pgbench takes it; PG* environment variables apply");
  std::optional<std::string> run_host, run_port, run_user;
  run_cmd->add_option("-h,--host", run_host, "Server host or socket directory (as pgbench -h)");
  run_cmd->add_option("-p,--port", run_port, "Server port (as pgbench -p)");
  run_cmd->add_option("-U,--username", run_user, "User name (as pgbench -U)");
  bool no_vacuum = false;
  run_cmd->add_flag("-n,--no-vacuum", no_vacuum,
                    "Accepted for pgbench command lines: stallscope never vacuums before a run");
  run_cmd->add_option("-c,--client", run.clients, "Number of clients (connections)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  run_cmd->add_option("-j,--jobs", run.threads, "Number of driver threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  auto* opt_T = run_cmd
                    ->add_option("-T,--time", run.duration_s,
                                 "Duration in seconds (default 10 when -t is not given)")
                    ->check(kPositive);
  auto* opt_t =
      run_cmd->add_option("-t,--transactions", run.queries_per_client, "Transactions per client")
          ->check(kPositive);
  opt_T->excludes(opt_t);
  auto* opt_sql = run_cmd->add_option("--sql", sql_text, "SQL of one transaction");
  auto* opt_f = run_cmd->add_option(
      "-f,--file", sql_files, "Script file (SQL, pgbench \\set/\\sleep), FILE@WEIGHT; repeatable");
  bool select_only = false;
  auto* opt_S =
      run_cmd->add_flag("-S,--select-only", select_only, "pgbench's built-in select-only script");
  auto* opt_b = run_cmd->add_option("-b,--builtin", run.builtin,
                                    "pgbench built-in script: tpcb-like, simple-update, "
                                    "select-only (tables from 'pgbench -i')");
  bool simple_update = false;
  auto* opt_N = run_cmd->add_flag("-N,--skip-some-updates", simple_update,
                                  "pgbench's built-in simple-update script");
  opt_S->excludes(opt_b);
  opt_N->excludes(opt_b);
  opt_N->excludes(opt_S);
  std::vector<std::string> defines;
  run_cmd->add_option("-D,--define", defines,
                      "NAME=VALUE: set script variable :NAME (an integer) before the first "
                      "transaction, as pgbench -D; repeatable");
  run_cmd->add_option("-s,--scale", run.scale, "Value of :scale (default: from pgbench_branches)")
      ->check(CLI::PositiveNumber);
  opt_sql->excludes(opt_f);
  run_cmd->add_option("-M,--protocol", run.protocol, "Query protocol: simple, extended or prepared")
      ->capture_default_str()
      ->check(CLI::IsMember({"simple", "extended", "prepared"}));
  run_cmd->add_flag("-C,--connect", run.connect_per_transaction,
                    "New connection for each transaction (its connect time counts in its latency)");
  run_cmd
      ->add_option("-R,--rate", run.rate_tps,
                   "Fixed rate: transactions per second over all clients, Poisson schedule; "
                   "latency counts from the scheduled start")
      ->check(kPositive);
  auto* opt_L = run_cmd
                    ->add_option("-L,--latency-limit", run.latency_limit_ms,
                                 "Count transactions slower than this many ms as late")
                    ->check(kPositive);
  run_cmd
      ->add_flag("--skip-late", run.skip_late,
                 "With -R and -L: skip (record as skipped) transactions already later than -L")
      ->needs(opt_L);
  run_cmd
      ->add_option("--pipeline", run.pipeline,
                   "libpq pipeline mode: N transactions in flight per connection (one SQL "
                   "statement each, no \\sleep; not with -C, -R, -r)")
      ->check(CLI::Range(1, 256));
  run_cmd->add_flag("-r,--report-per-command", run.per_statement,
                    "Store per-statement latencies and print their averages at the end");
  run_cmd
      ->add_option("--clock-offset-period", run.clock_offset_period_s,
                   "Seconds between server clock-offset estimates (also at start and end)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  run_cmd->add_option("--pooler-admin", run.pooler_admin,
                      "Conninfo of pgbouncer's admin console (dbname=pgbouncer): poll SHOW "
                      "STATS / SHOW POOLS into pooler_sample");
  run_cmd->add_option("--pooler-period", run.pooler_period_s, "Seconds between pooler polls")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0));
  run_cmd->add_option("--hz", run.hz, "Host and ASH samples per second")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 100.0));
  run_cmd->add_flag("--delayacct", run.delayacct,
                    "Turn kernel.task_delayacct on while running (restored at exit)");
  run_cmd->add_option("-P,--progress", run.progress_s, "Progress line every N seconds (0 = none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));

  stallscope::tools::RecordOptions record;
  std::string record_pg;
  auto* record_cmd = app.add_subcommand(
      "record",
      "Sample the host (and pg_stat_activity with --pg) beside any benchmark: for -T seconds, "
      "for the life of a command given after --, or until SIGINT/SIGTERM.");
  record_cmd->add_option("-o,--output", record.output_path, "Run file to create (must not exist)")
      ->required();
  record_cmd->add_option("--pg", record_pg, "Conninfo of a PostgreSQL to sample (ASH)");
  record_cmd->add_option("--hz", record.hz, "Samples per second")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 100.0));
  auto* rec_T = record_cmd->add_option("-T,--time", record.duration_s, "Duration in seconds")
                    ->check(kPositive);
  record_cmd
      ->add_option("-P,--progress", record.progress_s, "Progress line every N seconds (0 = none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  record_cmd->add_option("--ash-hz", record.ash_hz, "ASH polls per second (default: --hz)")
      ->check(CLI::Range(0.1, 100.0));
  record_cmd->add_option("--pooler-admin", record.pooler_admin,
                         "Conninfo of pgbouncer's admin console (dbname=pgbouncer): poll SHOW "
                         "STATS / SHOW POOLS into pooler_sample");
  record_cmd->add_option("--pooler-period", record.pooler_period_s, "Seconds between pooler polls")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0));
  record_cmd->add_flag("--threads", record.all_threads,
                       "Sample every thread (default: only processes using >= half a core)");
  record_cmd->add_flag("--stacks", record.kernel_stacks,
                       "Record the kernel stack of D-state tasks (root only)");
  record_cmd->add_flag("--delayacct", record.delayacct,
                       "Turn kernel.task_delayacct on while recording (restored at exit)");
  auto* rec_cmd = record_cmd->add_option("command", record.command,
                                         "Command to start and sample until it exits (after --)");
  rec_T->excludes(rec_cmd);

  stallscope::tools::ExplainCommandOptions explain;
  std::string window_text;
  stallscope::tools::ImportPgbenchOptions import_pgbench;
  auto* import_cmd = app.add_subcommand(
      "import-pgbench",
      "Import pgbench logs (-l per-transaction, or --aggregate-interval) into a new run file.");
  import_cmd->add_option("-o,--output", import_pgbench.output_path, "Run file to create")
      ->required();
  import_cmd->add_option("logs", import_pgbench.files, "pgbench log files")->required();

  auto* explain_cmd = app.add_subcommand(
      "explain", "Explain a run file: windows, time accounting and findings ranked by score.");
  explain_cmd
      ->add_option("run.db", explain.paths,
                   "Run file written by 'stallscope run', optionally followed by the "
                   "server host's 'stallscope record' file")
      ->required();
  explain_cmd->add_flag("--json", explain.json, "Print one JSON object instead of text");
  auto* opt_window = explain_cmd->add_option("--window", window_text,
                                             "Window length, e.g. 1s, 500ms (default 1s)");
  auto* opt_every =
      explain_cmd
          ->add_option("--every", explain.every_queries,
                       "Windows of N consecutive queries (min/max/mean/stddev latency per window)")
          ->check(kPositive);
  opt_window->excludes(opt_every);
  explain_cmd->add_option("--path-process", explain.path_processes,
                          "A pooler or proxy between driver and server, by process name (comm); "
                          "its CPU gets its own line in the accounting (repeatable)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string where = app.get_subcommands().empty()
                                  ? std::string("stallscope")
                                  : "stallscope " + app.get_subcommands().front()->get_name();
    fmt::print(stderr, "{}: {} (see '{} --help')\n", where, stallscope::fold_lines(e.what()),
               where);
    return 2;
  }

  try {
    if (run_cmd->parsed()) {
      run.argv.assign(argv, argv + argc);
      run.conninfo = stallscope::with_connection_flags(run.conninfo, run_host, run_port, run_user);
      if (select_only) run.builtin = "select-only";
      if (simple_update) run.builtin = "simple-update";
      for (const auto& d : defines) {
        const auto eq = d.find('=');
        const auto value = eq != std::string::npos && eq > 0
                               ? stallscope::common::parse_int64(std::string_view(d).substr(eq + 1))
                               : std::nullopt;
        if (!value) {
          throw Error(ErrorKind::usage,
                      fmt::format("cannot use -D '{}': expected NAME=INTEGER", d));
        }
        run.defines.emplace_back(d.substr(0, eq), *value);
      }
      for (const auto& f : sql_files) {
        auto [path, weight] = stallscope::driver::split_weight(f);
        run.script_files.push_back({read_sql_file(path), path, weight});
      }
      if (run.builtin) {
        if (!sql_text.empty() || !sql_files.empty()) {
          throw Error(ErrorKind::usage, "cannot combine -S/-N/-b with --sql or -f");
        }
      } else if (!sql_files.empty()) {
        run.sql = run.script_files.front().text;
      } else if (!sql_text.empty()) {
        run.sql = sql_text;
      } else {
        throw Error(ErrorKind::usage, "no SQL to run: give --sql \"SELECT …\" or -f FILE");
      }
      if (!run.duration_s && !run.queries_per_client) run.duration_s = 10;
      return stallscope::tools::run_command(run);
    }
    if (record_cmd->parsed()) {
      record.argv.assign(argv, argv + argc);
      if (!record_pg.empty()) record.conninfo = record_pg;
      return stallscope::tools::record_command(record);
    }
    if (import_cmd->parsed()) {
      import_pgbench.argv.assign(argv, argv + argc);
      return stallscope::tools::import_pgbench_command(import_pgbench);
    }
    if (explain_cmd->parsed()) {
      if (!window_text.empty()) {
        explain.window_ns = stallscope::tools::parse_duration_ns(window_text, "--window");
      }
      return stallscope::tools::explain_command(explain);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "stallscope {}: {}\n", app.get_subcommands().front()->get_name(),
               stallscope::fold_lines(e.what()));
    return e.exit_status();
  } catch (const std::exception& e) {
    fmt::print(stderr, "stallscope {}: {}\n", app.get_subcommands().front()->get_name(),
               stallscope::fold_lines(e.what()));
    return 1;
  }
  return 2;
}
