// stallscope — where did the time go when the queries are slow and the CPUs idle?
//
// This file parses the command line (CLI11) and maps errors to exit status:
// 0 success, 1 the run or analysis failed, 2 bad usage or bad input — always
// with a one-line message naming the offending thing.
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "common/conninfo.h"
#include "common/error.h"
#include "common/output.h"
#include "common/parse.h"
#include "common/printable.h"
#include "common/stop.h"
#include "common/units.h"
#include "driver/script.h"
#include "tools/commands.h"

namespace {

using stallscope::Error;
using stallscope::ErrorKind;

// The most of an -f script read: a script is text a person wrote (pgbench's
// are a few lines); /dev/zero or a FIFO that never ends is refused at this
// size instead of read until memory runs out.
constexpr std::size_t kMaxSqlFileBytes = 16 * 1024 * 1024;

std::string read_sql_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(ErrorKind::usage, fmt::format("cannot read SQL file {}: is a directory", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read SQL file {}: {}", path, std::strerror(errno)), errno);
  }
  std::string sql;
  std::array<char, 64 * 1024> chunk{};
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
    sql.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (sql.size() > kMaxSqlFileBytes) {
      throw Error(ErrorKind::usage,
                  fmt::format("cannot read SQL file {}: larger than {} MiB, the most -f reads",
                              path, kMaxSqlFileBytes / (1024 * 1024)));
    }
  }
  if (in.bad()) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read SQL file {}: {}", path, std::strerror(errno)), errno);
  }
  if (sql.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw Error(ErrorKind::usage, fmt::format("SQL file {} is empty", path));
  }
  return sql;
}

// A validator accepting the finite numbers for which `ok` holds, else
// "'VALUE' <complaint>". A leading '+' is allowed (CLI11 converts the value
// itself, and reads "+5" as 5). NaN and infinity never pass: NaN passes
// every CLI::Range (each comparison with it is false) and would reach the
// run file.
CLI::Validator number_check(bool (*ok)(double), const char* complaint, const char* name) {
  return CLI::Validator(
      [ok, complaint](std::string& value) -> std::string {
        std::string_view text(value);
        if (text.starts_with('+')) text.remove_prefix(1);
        if (const auto v = stallscope::common::parse_double(text); v && std::isfinite(*v) && ok(*v))
          return {};
        return "'" + value + "' " + complaint;
      },
      name);
}

// A whole number in base 10 from `lo` to `hi`, else "'VALUE' is not an
// integer from LO to HI". The value is rewritten in canonical form ("+010"
// to "10") before CLI11 converts it: CLI11 reads integers with strtoll in
// base 0, which saturates past 64 bits (-t 99999999999999999999 became
// 2^63 − 1) and reads "010" as octal 8. Given with transform(), not
// check(): CLI11 discards what a check's validator writes back.
CLI::Validator integer_check(std::int64_t lo, std::int64_t hi, const char* name) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        std::string_view text(value);
        if (text.starts_with('+')) text.remove_prefix(1);
        const auto v = stallscope::common::parse_int64(text);
        if (!v || *v < lo || *v > hi) {
          return fmt::format("'{}' is not an integer from {} to {}", value, lo, hi);
        }
        value = std::to_string(*v);
        return {};
      },
      name);
}
const CLI::Validator kCount = integer_check(1, std::numeric_limits<std::int64_t>::max(), "COUNT");

// A positive number (CLI11's own PositiveNumber prints DBL_MAX in full).
const CLI::Validator kPositive =
    number_check([](double v) { return v > 0; }, "is not a positive number", "POSITIVE");
// -T: up to 10^8 s (3 years), so the deadline in ns cannot overflow.
const CLI::Validator kDuration =
    number_check([](double v) { return v > 0 && v <= 1e8; },
                 "is not a duration of more than 0 and at most 100000000 seconds", "SECONDS");
// -R: from 10^-6 (one transaction in 11.6 days) to 10^9 transactions per
// second, so the Poisson schedule's gaps in ns cannot overflow.
const CLI::Validator kRate =
    number_check([](double v) { return v >= 1e-6 && v <= 1e9; },
                 "is not a rate from 0.000001 to 1000000000 transactions per second", "TPS");
// A finite number, checked before a CLI::Range.
const CLI::Validator kFinite =
    number_check([](double) { return true; }, "is not a finite number", "NUMBER");
// -P: 0 (no progress) or at least 0.1 s, at most an hour.
const CLI::Validator kProgressPeriod =
    number_check([](double v) { return v == 0 || (v >= 0.1 && v <= 3600); },
                 "is neither 0 (no progress) nor 0.1 to 3600 seconds", "SECONDS");

// `run`: the subcommand, the options CLI11 fills in, and the flags main
// turns into RunOptions once the command line parsed (finish_run).
struct RunCli {
  CLI::App* cmd = nullptr;
  stallscope::tools::RunOptions options;
  std::string sql_text;
  std::vector<std::string> sql_files;
  std::optional<std::string> host, port, user;
  bool no_vacuum = false;
  bool select_only = false;
  bool simple_update = false;
  std::vector<std::string> defines;
};

// run's -o, conninfo and pgbench's connection flags.
void add_run_target_options(RunCli& r) {
  auto* cmd = r.cmd;
  // -h is pgbench's --host here; help is --help only.
  cmd->set_help_flag("--help", "Print this help message and exit");
  cmd->add_option("-o,--output", r.options.output_path,
                  "Run file to create (SQLite; must not exist)")
      ->required();
  cmd->add_option("conninfo", r.options.conninfo,
                  "Where to connect: anything libpq accepts (key=value or URI), or a bare "
                  "database name as pgbench takes it; PG* environment variables apply");
  cmd->add_option("-h,--host", r.host, "Server host or socket directory (as pgbench -h)");
  cmd->add_option("-p,--port", r.port, "Server port (as pgbench -p)");
  cmd->add_option("-U,--username", r.user, "User name (as pgbench -U)");
  cmd->add_flag("-n,--no-vacuum", r.no_vacuum,
                "Accepted for pgbench command lines: stallscope never vacuums before a run");
}

// run's clients, length and what each transaction runs.
void add_run_workload_options(RunCli& r) {
  auto* cmd = r.cmd;
  auto& o = r.options;
  cmd->add_option("-c,--client", o.clients, "Number of clients (connections)")
      ->capture_default_str()
      ->transform(integer_check(1, 10000, "CLIENTS"));
  cmd->add_option("-j,--jobs", o.threads, "Number of driver threads")
      ->capture_default_str()
      ->transform(integer_check(1, 1024, "THREADS"));
  auto* opt_T = cmd->add_option("-T,--time", o.duration_s,
                                "Duration in seconds (default 10 when -t is not given)")
                    ->check(kDuration);
  auto* opt_t =
      cmd->add_option("-t,--transactions", o.queries_per_client, "Transactions per client")
          ->transform(kCount);
  opt_T->excludes(opt_t);
  auto* opt_sql = cmd->add_option("--sql", r.sql_text, "SQL of one transaction");
  auto* opt_f =
      cmd->add_option("-f,--file", r.sql_files,
                      "pgbench script file (SQL and meta-commands), FILE@WEIGHT; repeatable")
          ->allow_extra_args(false);  // one file per -f, as pgbench: `-f x.sql DBNAME`
  auto* opt_S =
      cmd->add_flag("-S,--select-only", r.select_only, "pgbench's built-in select-only script");
  auto* opt_b = cmd->add_option("-b,--builtin", o.builtin,
                                "pgbench built-in script: tpcb-like, simple-update, "
                                "select-only (tables from 'pgbench -i')");
  auto* opt_N = cmd->add_flag("-N,--skip-some-updates", r.simple_update,
                              "pgbench's built-in simple-update script");
  opt_S->excludes(opt_b);
  opt_N->excludes(opt_b);
  opt_N->excludes(opt_S);
  cmd->add_option("-D,--define", r.defines,
                  "NAME=VALUE: set script variable :NAME before the first transaction, as "
                  "pgbench -D; repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--random-seed", o.random_seed,
                  "Seed of the scripts' random functions: an integer, 'time' or 'rand' "
                  "(default), as pgbench's");
  cmd->add_option("-s,--scale", o.scale, "Value of :scale (default: from pgbench_branches)")
      ->transform(kCount);
  opt_sql->excludes(opt_f);
  cmd->add_option("-M,--protocol", o.protocol, "Query protocol: simple, extended or prepared")
      ->capture_default_str()
      ->check(CLI::IsMember({"simple", "extended", "prepared"}));
  cmd->add_flag("-C,--connect", o.connect_per_transaction,
                "New connection for each transaction (its connect time counts in its latency)");
}

// run's schedule (-R, -L), pipelining and per-statement latencies.
void add_run_schedule_options(RunCli& r) {
  auto* cmd = r.cmd;
  auto& o = r.options;
  cmd->add_option("-R,--rate", o.rate_tps,
                  "Fixed rate: transactions per second over all clients, Poisson schedule; "
                  "latency counts from the scheduled start")
      ->check(kRate);
  auto* opt_L = cmd->add_option("-L,--latency-limit", o.latency_limit_ms,
                                "Count transactions slower than this many ms as late")
                    ->check(kPositive);
  cmd->add_flag("--skip-late", o.skip_late,
                "With -R and -L: skip (record as skipped) transactions already later than -L")
      ->needs(opt_L);
  cmd->add_option("--pipeline", o.pipeline,
                  "libpq pipeline mode: N transactions in flight per connection (one SQL "
                  "statement each, no \\sleep; not with -C, -R, -r)")
      ->transform(integer_check(1, 256, "N"));
  cmd->add_flag("-r,--report-per-command", o.per_statement,
                "Store per-statement latencies and print their averages at the end");
  cmd->add_option("--max-tries", o.max_tries,
                  "Tries per transaction: a serialization failure or deadlock is rolled back and "
                  "the script run again (0: no limit, with -T or -L), as pgbench's")
      ->capture_default_str()
      ->transform(integer_check(0, 1'000'000'000, "N"));
  cmd->add_flag("--failures-detailed", o.failures_detailed,
                "Print failed transactions by kind (serialization, deadlock, other)");
  cmd->add_flag("--verbose-errors", o.verbose_errors,
                "Print every retried or failed try's error on stderr");
  cmd->add_flag("--exit-on-abort", o.exit_on_abort,
                "End the run at the first transaction that fails for good (exit status 1)");
  cmd->add_flag("--progress-timestamp", o.progress_timestamp,
                "Progress lines show the Unix time instead of the time since the start");
}

// The sampling flags of run and record (SamplingOptions), their help in
// the command's words: `hz_help` for --hz, `while_doing` for --delayacct's
// "while running" / "while recording".
void add_sampling_options(CLI::App* cmd, stallscope::tools::SamplingOptions& s, const char* hz_help,
                          const char* while_doing) {
  cmd->add_option("--hz", s.hz, hz_help)
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::Range(0.1, 100.0));
  cmd->add_option("-P,--progress", s.progress_s, "Progress line every N seconds (0 = none)")
      ->capture_default_str()
      ->check(kProgressPeriod);
  cmd->add_option("--pooler-admin", s.pooler_admin,
                  "Conninfo of pgbouncer's admin console (dbname=pgbouncer): poll SHOW "
                  "STATS / SHOW POOLS into pooler_sample");
  cmd->add_option("--pooler-period", s.pooler_period_s, "Seconds between pooler polls")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::Range(0.01, 3600.0));
  cmd->add_flag("--delayacct", s.delayacct,
                fmt::format("Turn kernel.task_delayacct on {} (restored at exit)", while_doing));
}

// run's samplers: clock offset, then the sampling flags record has too.
void add_run_sampling_options(RunCli& r) {
  r.cmd
      ->add_option("--clock-offset-period", r.options.clock_offset_period_s,
                   "Seconds between server clock-offset estimates (also at start and end)")
      ->capture_default_str()
      ->check(kFinite)
      ->check(CLI::Range(0.1, 3600.0));
  add_sampling_options(r.cmd, r.options.sampling, "Host and ASH samples per second",
                       "while running");
}

void add_run_command(CLI::App& app, RunCli& r) {
  r.cmd = app.add_subcommand(
      "run",
      "Drive PostgreSQL with a closed-loop libpq client while sampling the host and "
      "pg_stat_activity; store both streams in one SQLite file.");
  add_run_target_options(r);
  add_run_workload_options(r);
  add_run_schedule_options(r);
  add_run_sampling_options(r);
}

// -D NAME=VALUE (any VALUE, as pgbench's: a script reads it as an integer,
// a double, a boolean word or text); Error(usage) naming the -D otherwise.
std::vector<std::pair<std::string, std::string>> parse_defines(
    const std::vector<std::string>& defines) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& d : defines) {
    const auto eq = d.find('=');
    if (eq == std::string::npos || eq + 1 == d.size() ||
        !stallscope::driver::valid_variable_name(d.substr(0, eq))) {
      throw Error(ErrorKind::usage,
                  fmt::format("cannot use -D '{}': invalid variable definition: \"{}\" (expected "
                              "NAME=VALUE, NAME a variable name)",
                              d, d));
    }
    out.emplace_back(d.substr(0, eq), d.substr(eq + 1));
  }
  return out;
}

// RunOptions from the parsed command line (the SQL, scripts, -D, the
// connection flags), then the run.
int finish_run(RunCli& r, int argc, char** argv) {
  auto& run = r.options;
  run.argv.assign(argv, argv + argc);
  run.conninfo = stallscope::with_connection_flags(run.conninfo, r.host, r.port, r.user);
  if (r.select_only) run.builtin = "select-only";
  if (r.simple_update) run.builtin = "simple-update";
  run.defines = parse_defines(r.defines);
  for (const auto& f : r.sql_files) {
    auto [path, weight] = stallscope::driver::split_weight(f);
    run.script_files.push_back({read_sql_file(path), path, weight});
  }
  if (run.builtin) {
    if (!r.sql_text.empty() || !r.sql_files.empty()) {
      throw Error(ErrorKind::usage, "cannot combine -S/-N/-b with --sql or -f");
    }
  } else if (!r.sql_files.empty()) {
    run.sql = run.script_files.front().text;
  } else if (!r.sql_text.empty()) {
    run.sql = r.sql_text;
  } else {
    throw Error(ErrorKind::usage, "no SQL to run: give --sql \"SELECT …\" or -f FILE");
  }
  if (!run.duration_s && !run.queries_per_client) run.duration_s = 10;
  return stallscope::tools::run_command(run);
}

// `record`: the subcommand and its options; --pg's text is kept apart
// (empty: no ASH sampling).
struct RecordCli {
  CLI::App* cmd = nullptr;
  stallscope::tools::RecordOptions options;
  std::string pg;
  std::string kill_after_text;  // --kill-after, parsed by finish_record
};

void add_record_command(CLI::App& app, RecordCli& r) {
  auto& o = r.options;
  auto* cmd = r.cmd = app.add_subcommand(
      "record",
      "Sample the host (and pg_stat_activity with --pg) beside any benchmark: for -T seconds, "
      "for the life of a command given after --, or until SIGINT/SIGTERM.");
  cmd->add_option("-o,--output", o.output_path, "Run file to create (must not exist)")->required();
  cmd->add_option("--pg", r.pg, "Conninfo of a PostgreSQL to sample (ASH)");
  add_sampling_options(cmd, o.sampling, "Samples per second", "while recording");
  cmd->add_option("-T,--time", o.duration_s, "Duration in seconds")->check(kDuration);
  cmd->add_option("--ash-hz", o.ash_hz, "ASH polls per second (default: --hz)")
      ->check(kFinite)
      ->check(CLI::Range(0.1, 100.0));
  cmd->add_flag("--threads", o.all_threads,
                "Sample every thread (default: only processes using >= half a core)");
  cmd->add_flag("--stacks", o.kernel_stacks,
                "Record the kernel stack of D-state tasks (root only)");
  cmd->add_option("--client-process", o.client_processes,
                  "A process name (comm) whose processes are the database's clients, for "
                  "explain's session accounting (repeatable; the command after -- and its "
                  "descendants are always taken)");
  auto* opt_command =
      cmd->add_option("command", o.command,
                      "Command to start and sample until it exits (after --; with -T it is sent "
                      "SIGTERM after -T seconds)");
  cmd->add_option("--kill-after", r.kill_after_text,
                  "SIGKILL the command when it has not ended this long after record sent it "
                  "SIGTERM (at -T, or a failed write) or passed on a signal, e.g. 5s, 500ms "
                  "(default 5s)")
      ->needs(opt_command);
}

int finish_record(RecordCli& r, int argc, char** argv) {
  r.options.argv.assign(argv, argv + argc);
  if (!r.kill_after_text.empty()) {
    r.options.kill_after_ns =
        stallscope::tools::parse_duration_ns(r.kill_after_text, "--kill-after");
    // As -T: at most 10^8 s, so the deadline in ns cannot overflow.
    if (r.options.kill_after_ns > 100'000'000 * stallscope::common::kNsPerS) {
      throw Error(ErrorKind::usage,
                  fmt::format("--kill-after: '{}' is longer than 100000000 s", r.kill_after_text));
    }
  }
  if (!r.pg.empty()) r.options.conninfo = r.pg;
  return stallscope::tools::record_command(r.options);
}

struct ImportCli {
  CLI::App* cmd = nullptr;
  stallscope::tools::ImportPgbenchOptions options;
};

void add_import_command(CLI::App& app, ImportCli& r) {
  r.cmd = app.add_subcommand(
      "import-pgbench",
      "Import pgbench logs (-l per-transaction, or --aggregate-interval) into a new run file.");
  r.cmd->add_option("-o,--output", r.options.output_path, "Run file to create")->required();
  r.cmd->add_option("logs", r.options.files, "pgbench log files")->required();
}

int finish_import(ImportCli& r, int argc, char** argv) {
  r.options.argv.assign(argv, argv + argc);
  return stallscope::tools::import_pgbench_command(r.options);
}

// `explain`: the subcommand and its options; --window's text is parsed once
// the command line parsed (finish_explain).
struct ExplainCli {
  CLI::App* cmd = nullptr;
  stallscope::tools::ExplainCommandOptions options;
  std::string window_text;
};

void add_explain_command(CLI::App& app, ExplainCli& r) {
  auto& o = r.options;
  auto* cmd = r.cmd = app.add_subcommand(
      "explain", "Explain a run file: windows, time accounting and findings ranked by score.");
  cmd->add_option("run.db", o.paths,
                  "Run file written by 'stallscope run', optionally followed by the "
                  "server host's 'stallscope record' file")
      ->required();
  cmd->add_flag("--json", o.json, "Print one JSON object instead of text");
  auto* opt_window =
      cmd->add_option("--window", r.window_text, "Window length, e.g. 1s, 500ms (default 1s)");
  auto* opt_every =
      cmd->add_option("--every", o.every_queries,
                      "Windows of N consecutive queries (min/max/mean/stddev latency per window)")
          ->transform(kCount);
  opt_window->excludes(opt_every);
  cmd->add_option("--path-process", o.path_processes,
                  "A pooler or proxy between driver and server, by process name (comm); "
                  "its CPU gets its own line in the accounting (repeatable)");
  cmd->add_flag("--no-check", o.no_check,
                "Skip the integrity check of the file(s) (PRAGMA quick_check, about 2.5 s of CPU "
                "per 10 M queries): a damaged page may then go unseen");
}

int finish_explain(ExplainCli& r) {
  if (!r.window_text.empty()) {
    r.options.window_ns = stallscope::tools::parse_duration_ns(r.window_text, "--window");
  }
  return stallscope::tools::explain_command(r.options);
}

// `report`: the subcommand and its options.
struct ReportCli {
  CLI::App* cmd = nullptr;
  stallscope::tools::ReportCommandOptions options;
  std::string window_text;
};

void add_report_command(CLI::App& app, ReportCli& r) {
  auto& o = r.options;
  auto* cmd = r.cmd = app.add_subcommand(
      "report",
      "Write an HTML report of a run file: the verdict, findings and stalls, the time "
      "accounting, and the client's, hosts' and database's timelines on one zoomable time axis.");
  cmd->add_option("run.db", o.paths,
                  "Run file (run, record or import-pgbench), optionally followed by the server "
                  "host's 'stallscope record' file")
      ->required();
  cmd->add_option("-o,--output", o.output_path, "HTML file to write ('-': standard output)")
      ->required();
  cmd->add_option("--baseline", o.baseline_path,
                  "A run file of the same workload to compare with, side by side");
  cmd->add_option("--window", r.window_text,
                  "explain's window length, for stalls, e.g. 1s, 500ms (default 1s)");
  cmd->add_option("--path-process", o.path_processes,
                  "A pooler or proxy between driver and server, by process name (comm) "
                  "(repeatable)");
  cmd->add_option("--bins", o.max_bins, "Points per chart series at most (default 1000)")
      ->transform(integer_check(10, 20000, "BINS"));
}

int finish_report(ReportCli& r) {
  if (!r.window_text.empty()) {
    r.options.window_ns = stallscope::tools::parse_duration_ns(r.window_text, "--window");
  }
  return stallscope::tools::report_command(r.options);
}

// An error message as printed: secrets masked as in any argument (an extra
// argument CLI11 quotes may be a conninfo with its password=…; a command
// record cannot run may be one), folded to one line, made printable.
std::string masked_printable(const std::string& message) {
  const auto masked = stallscope::mask_args({"stallscope", message});
  return stallscope::common::printable(stallscope::fold_lines(masked.back()));
}

// Parses the command line into the subcommands' options; the exit status
// when parsing ends the program (--help, --version, a usage error), else
// nullopt.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // `stallscope foo`: name foo, and what the commands are.
    if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-') {
      std::string names;
      for (const auto* sub : app.get_subcommands({}))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      stallscope::common::print_stderr(
          "stallscope: unknown command '{}' (commands: {}; see 'stallscope --help')\n",
          masked_printable(argv[1]), names);
      return 2;
    }
    const std::string where = app.get_subcommands().empty()
                                  ? std::string("stallscope")
                                  : "stallscope " + app.get_subcommands().front()->get_name();
    stallscope::common::print_stderr("{}: {} (see '{} --help')\n", where,
                                     masked_printable(e.what()), where);
    return 2;
  }
  return std::nullopt;
}

// The one-line error of a failed command on stderr (a write that fails is
// lost: there is nowhere left to say so).
void print_error(const CLI::App& app, const char* what) {
  stallscope::common::print_stderr("stallscope {}: {}\n", app.get_subcommands().front()->get_name(),
                                   masked_printable(what));
}

// Runs the parsed subcommand; its exit status.
int run_subcommand(RunCli& run, RecordCli& record, ImportCli& import_pgbench, ExplainCli& explain,
                   ReportCli& report, int argc, char** argv) {
  if (run.cmd->parsed()) return finish_run(run, argc, argv);
  if (record.cmd->parsed()) return finish_record(record, argc, argv);
  if (import_pgbench.cmd->parsed()) return finish_import(import_pgbench, argc, argv);
  if (explain.cmd->parsed()) return finish_explain(explain);
  if (report.cmd->parsed()) return finish_report(report);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // `stallscope … >&-`: no file opened later may land on descriptor 1, and
  // a write to standard output must fail (checked below).
  stallscope::common::hold_closed_standard_output();
  // The commands that write a run file end cleanly on SIGINT, SIGTERM,
  // SIGHUP or a broken pipe from their first instruction on (a signal while
  // the command line is parsed stops the run before it starts), not only
  // once their own setup reaches install_stop_handlers.
  if (argc > 1) {
    const std::string_view command = argv[1];
    if (command == "run" || command == "record" || command == "import-pgbench")
      stallscope::install_stop_handlers();
  }
  CLI::App app{
      "stallscope: record host state and PostgreSQL wait events beside a benchmark, drive "
      "queries, and explain where the time went.",
      "stallscope"};
  app.set_version_flag("--version", std::string("stallscope ") + STALLSCOPE_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Exit status: 0 success, 1 the run or analysis failed, 2 bad usage or bad input.\n"
      "Run 'stallscope COMMAND --help' for a command's options.");
  RunCli run;
  add_run_command(app, run);
  RecordCli record;
  add_record_command(app, record);
  ImportCli import_pgbench;
  add_import_command(app, import_pgbench);
  ExplainCli explain;
  add_explain_command(app, explain);
  ReportCli report;
  add_report_command(app, report);
  if (const auto status = parse_command_line(app, argc, argv)) return *status;

  try {
    const int status = run_subcommand(run, record, import_pgbench, explain, report, argc, argv);
    // Every write to standard output is checked: what was not written is a
    // failure, whatever the command's own status.
    stallscope::common::check_standard_output();
    return status;
  } catch (const Error& e) {
    print_error(app, e.what());
    return e.exit_status();
  } catch (const std::system_error& e) {
    // fmt::print throws this for a write that failed: to standard output,
    // unless it says otherwise.
    if (std::ferror(stdout) != 0) {
      print_error(
          app,
          fmt::format("cannot write standard output: {}", std::strerror(e.code().value())).c_str());
    } else {
      print_error(app, e.what());
    }
    return 1;
  } catch (const std::exception& e) {
    print_error(app, e.what());
    return 1;
  }
}
