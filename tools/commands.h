// The subcommands of the stallscope executable. tools/ only wires the
// libraries: each function takes options built by main.cpp and returns the
// process exit status, or throws stallscope::Error (main maps it to 1 or 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/units.h"

namespace stallscope::tools {

// The sampling flags run and record share, registered once
// (tools/main.cpp add_sampling_options).
struct SamplingOptions {
  double hz = 10;                           // --hz
  double progress_s = 1;                    // -P; 0 = no progress lines
  bool delayacct = false;                   // --delayacct
  std::optional<std::string> pooler_admin;  // --pooler-admin: pgbouncer's admin console
  double pooler_period_s = 1;               // --pooler-period
};

struct RunOptions {
  std::string output_path;                         // -o
  std::string conninfo;                            // positional; "" = PG* environment
  int clients = 1;                                 // -c
  int threads = 1;                                 // -j
  std::optional<double> duration_s;                // -T
  std::optional<std::int64_t> queries_per_client;  // -t
  std::string sql;                                 // --sql or the contents of -f
  std::string protocol = "simple";                 // -M
  bool connect_per_transaction = false;            // -C
  std::optional<double> rate_tps;                  // -R
  std::optional<double> latency_limit_ms;          // -L
  bool skip_late = false;                          // --skip-late
  struct ScriptFile {
    std::string text, path;
    int weight = 1;
  };
  std::vector<ScriptFile> script_files;  // -f FILE[@WEIGHT], contents read
  std::optional<std::string> builtin;    // -S (select-only) or -b NAME
  std::optional<std::int64_t> scale;     // -s
  // -D NAME=VALUE: script variables set before each client's first
  // transaction (pgbench's -D).
  std::vector<std::pair<std::string, std::string>> defines;
  std::optional<std::string> random_seed;  // --random-seed: an integer, "time" or "rand"
  SamplingOptions sampling;                // --hz, -P, --delayacct, --pooler-*
  int pipeline = 0;                        // --pipeline N; 0 = off
  bool per_statement = false;              // -r
  int max_tries = 1;                       // --max-tries; 0 = no limit
  bool failures_detailed = false;          // --failures-detailed
  bool verbose_errors = false;             // --verbose-errors
  bool exit_on_abort = false;              // --exit-on-abort
  bool progress_timestamp = false;         // --progress-timestamp
  double clock_offset_period_s = 10;       // --clock-offset-period
  std::vector<std::string> argv;           // for the run row (masked there)
};
int run_command(const RunOptions& options);

struct RecordOptions {
  std::string output_path;                    // -o
  std::optional<std::string> conninfo;        // --pg; no ASH sampling without it
  SamplingOptions sampling{.progress_s = 0};  // --hz, -P, --delayacct, --pooler-*
  std::optional<double> duration_s;           // -T
  std::vector<std::string> command;           // after --; sampled until it exits
  std::optional<double> ash_hz;               // --ash-hz; default = hz, at most 100
  bool all_threads = false;                   // --threads
  bool kernel_stacks = false;                 // --stacks
  std::vector<std::string> client_processes;  // --client-process NAME (comm), repeatable
  // --kill-after: how long the command may outlive the SIGTERM record sends
  // it (at -T, or at a failed write) or a signal record passes on, before it
  // is sent SIGKILL.
  std::int64_t kill_after_ns = 5 * common::kNsPerS;
  std::vector<std::string> argv;
};
// Returns the command's exit status when one was given, else 0. With a
// command and -T, the command is sent SIGTERM after -T seconds and record
// ends when it exits — or, if it is still running kill_after_ns later, when
// the SIGKILL it is then sent ends it (status 137).
int record_command(const RecordOptions& options);

struct ExplainCommandOptions {
  std::vector<std::string> paths;             // run files
  bool json = false;                          // --json
  std::optional<std::int64_t> window_ns;      // --window (nullopt: 1 s, or longer for a long run)
  std::optional<std::int64_t> every_queries;  // --every
  std::vector<std::string> path_processes;    // --path-process NAME (repeatable)
  bool no_check = false;                      // --no-check: no PRAGMA quick_check
};
int explain_command(const ExplainCommandOptions& options);

struct ReportCommandOptions {
  std::vector<std::string> paths;            // run file [server's record file]
  std::string output_path;                   // -o: the HTML file, "-" for stdout
  std::optional<std::string> baseline_path;  // --baseline
  std::optional<std::int64_t> window_ns;     // --window (explain's windows, stalls; as explain's)
  std::vector<std::string> path_processes;   // --path-process NAME (repeatable)
  int max_bins = 1000;                       // --bins: points per chart series at most
};
// Explains the file(s) as explain does (without saving findings into them)
// and writes the HTML report with common::write_whole_file (mode 0600,
// renamed into place; a device or FIFO written directly), or on standard
// output for "-" (a failed write is Error(io) "cannot write standard
// output: …"). An output that is one of the files read is refused first.
int report_command(const ReportCommandOptions& options);

struct ImportPgbenchOptions {
  std::string output_path;         // -o
  std::vector<std::string> files;  // pgbench -l logs or --aggregate-interval logs
  std::vector<std::string> argv;
};
// Parses the files into one new run file as it reads them, in chunks
// (memory bounded, whatever the logs' length). Error(usage) "cannot import
// FILE:LINE: …" on a malformed line or a row already imported (a repeated
// line, a log given twice), and "cannot import FILE: …" for a file that
// cannot be read or is named twice: the run file is then removed again.
int import_pgbench_command(const ImportPgbenchOptions& options);

// Parses "1s", "250ms", "2m", "1.5" (seconds) into ns; throws Error(usage)
// naming `flag` otherwise.
std::int64_t parse_duration_ns(const std::string& text, const std::string& flag);

}  // namespace stallscope::tools
