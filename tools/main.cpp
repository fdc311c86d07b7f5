// stallscope — where did the time go when the queries are slow and the CPUs idle?
//
// This file parses the command line (CLI11) and maps errors to exit status:
// 0 success, 1 the run or analysis failed, 2 bad usage or bad input — always
// with a one-line message naming the offending thing.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "common/error.h"
#include "tools/commands.h"

namespace {

using stallscope::Error;
using stallscope::ErrorKind;

std::string read_sql_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::usage, fmt::format("cannot read SQL file {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string sql = ss.str();
  if (sql.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw Error(ErrorKind::usage, fmt::format("SQL file {} is empty", path));
  }
  return sql;
}

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
  std::string sql_text, sql_file, every_text;
  auto* run_cmd = app.add_subcommand(
      "run",
      "Drive PostgreSQL with a closed-loop libpq client while sampling the host and "
      "pg_stat_activity; store both streams in one SQLite file.");
  run_cmd->add_option("-o,--output", run.output_path, "Run file to create (SQLite; must not exist)")
      ->required();
  run_cmd->add_option("conninfo", run.conninfo,
                      "Where to connect: anything libpq accepts (key=value or URI); PG* "
                      "environment variables apply");
  run_cmd->add_option("-c,--client", run.clients, "Number of clients (connections)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  run_cmd->add_option("-j,--jobs", run.threads, "Number of driver threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  auto* opt_T = run_cmd
                    ->add_option("-T,--time", run.duration_s,
                                 "Duration in seconds (default 10 when -t is not given)")
                    ->check(CLI::PositiveNumber);
  auto* opt_t =
      run_cmd->add_option("-t,--transactions", run.queries_per_client, "Transactions per client")
          ->check(CLI::PositiveNumber);
  opt_T->excludes(opt_t);
  auto* opt_sql = run_cmd->add_option("--sql", sql_text, "SQL of one transaction");
  auto* opt_f =
      run_cmd->add_option("-f,--file", sql_file, "File holding the SQL of one transaction");
  opt_sql->excludes(opt_f);
  run_cmd->add_option("-M,--protocol", run.protocol, "Query protocol: simple, extended or prepared")
      ->capture_default_str()
      ->check(CLI::IsMember({"simple", "extended", "prepared"}));
  run_cmd->add_option("--hz", run.hz, "Host and ASH samples per second")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 100.0));
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
                    ->check(CLI::PositiveNumber);
  record_cmd
      ->add_option("-P,--progress", record.progress_s, "Progress line every N seconds (0 = none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  auto* rec_cmd = record_cmd->add_option("command", record.command,
                                         "Command to start and sample until it exits (after --)");
  rec_T->excludes(rec_cmd);

  stallscope::tools::ExplainCommandOptions explain;
  std::string window_text;
  auto* explain_cmd = app.add_subcommand(
      "explain", "Explain a run file: windows, time accounting and findings ranked by score.");
  explain_cmd->add_option("run.db", explain.paths, "Run file written by 'stallscope run'")
      ->required();
  explain_cmd->add_flag("--json", explain.json, "Print one JSON object instead of text");
  auto* opt_window = explain_cmd->add_option("--window", window_text,
                                             "Window length, e.g. 1s, 500ms (default 1s)");
  auto* opt_every =
      explain_cmd
          ->add_option("--every", explain.every_queries,
                       "Windows of N consecutive queries (min/max/mean/stddev latency per window)")
          ->check(CLI::PositiveNumber);
  opt_window->excludes(opt_every);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = app.get_subcommands().empty()
                            ? std::string("stallscope")
                            : "stallscope " + app.get_subcommands().front()->get_name();
    fmt::print(stderr, "{}: {} (see '{} --help')\n", where, stallscope::fold_lines(e.what()),
               where);
    return 2;
  }

  try {
    if (run_cmd->parsed()) {
      run.argv.assign(argv, argv + argc);
      if (!sql_file.empty()) {
        run.sql = read_sql_file(sql_file);
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
    if (explain_cmd->parsed()) {
      if (!window_text.empty()) {
        explain.window_ns = stallscope::tools::parse_duration_ns(window_text, "--window");
      }
      return stallscope::tools::explain_command(explain);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "stallscope: {}\n", stallscope::fold_lines(e.what()));
    return e.exit_status();
  } catch (const std::exception& e) {
    fmt::print(stderr, "stallscope: {}\n", stallscope::fold_lines(e.what()));
    return 1;
  }
  return 2;
}
