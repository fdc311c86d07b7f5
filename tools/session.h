// Pieces `run` and `record` share: the run row, the progress printer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/periodic.h"
#include "sampler/pooler.h"
#include "sampler/sampler.h"
#include "schema/records.h"
#include "schema/writer.h"

namespace stallscope::tools {

// The run row as a command starts: `mode` ("run", "record",
// "import-pgbench"), the host facts (read_host_info(); an import's without the
// machine and boot ids: the log's host is not known), start_ns (wall clock
// now, ns since the epoch), argv and conninfo masked (mask_command_line,
// mask_conninfo), the version, `hz` (ticks per second; 0 for an import) and
// this process's pid. Never throws (beyond allocation).
schema::RunInfo make_run_info(const std::string& mode, const std::vector<std::string>& argv,
                              const std::optional<std::string>& conninfo, double hz);

// --pooler-admin: options for a sampler::PoolerSampler polling `conninfo`
// every `period_s`, whose lost-connection messages are printed on stderr as
// "warning: …". Throws Error(usage) when libpq cannot parse `conninfo`.
sampler::PoolerSamplerOptions pooler_options(const std::string& conninfo, double period_s);

// The files explain and report were given, told apart by what they hold,
// not by order: a record file given before a file with queries (a run file
// or an imported pgbench log) is the server's, and goes second. Any other
// pair or one file keeps its order; a first file that cannot be read too
// (opening it again names what is wrong). After a record file, a second file
// that cannot be read throws the open's Error.
std::vector<std::string> client_file_first(std::vector<std::string> paths);

// Removes a run file and its -wal/-shm companions (used only when a run
// failed before anything was recorded). Errors are ignored: a companion that
// does not exist is the usual case.
void remove_run_file(const std::string& path);
// Closes `store` (it is left an in-memory store) and removes its file at
// `path` with remove_run_file: for a command that fails before anything
// worth keeping was recorded, so no file blocks the next -o.
void discard_run_file(schema::Store& store, const std::string& path);

// Closes the run file of a run whose commit failed (`failure`, from
// writer.failure()): prints on stderr, in one line,
//   stallscope run: run.db: database or disk is full at 18.3 s: stopped driving; the 18.0 s
//   committed are kept
// (`command` "run" or "record", `stopped` what stopped, e.g. "stopped driving";
// the time committed is failure.kept_until_ns after `start_ns`, 0.0 s when
// no query or sample was: the figure explain's note on the file gives),
// marks the run 'failed' at `end_ns` with schema::end_reason(), and says so
// on a second line when even that could not be stored (the file then stays
// 'running'). Times: wall clock, ns since the epoch.
void close_after_write_failure(schema::Writer& writer, const schema::WriteFailure& failure,
                               const std::string& command, const std::string& path,
                               std::int64_t start_ns, std::int64_t end_ns,
                               const std::string& stopped,
                               std::optional<int> command_exit_status = std::nullopt);

// Watches a run file for being deleted while the command writes it (SQLite
// writes on into the unlinked inode and nothing is kept): it holds a
// descriptor of the file, whose link count drops to 0 when the last name
// goes. Destroy it only after the file's SQLite connection is closed
// (declare it before the Store and the Writer): closing a descriptor of a
// file drops every POSIX lock the process holds on it, SQLite's too.
class RunFileWatch {
 public:
  // Opens `path` read-only; a file that cannot be opened is not watched.
  void watch(const std::string& path);
  // Whether the file has no name left (st_nlink 0 on the descriptor).
  bool deleted() const;

 private:
  common::Fd fd_;
};

// Warns on stderr when the host sampler took fewer than 80 % of the ticks
// `hz` asks for over `elapsed_s` (an overloaded host, or --hz too high for
// its process count); explain then uses the real period.
void warn_if_sampler_lagged(const sampler::HostSampler& host, double hz, double elapsed_s);

// While it lives, looks every 100 ms whether standard output or error lost
// its reader (common::standard_output_closed: `run … | head -1` once head
// exited) and then requests a stop as SIGINT does
// (request_stop_on_broken_pipe, common/stop.h), so the run ends with its
// file complete, marked interrupted, even when it has nothing to write.
class BrokenPipeWatch {
 public:
  BrokenPipeWatch();
  ~BrokenPipeWatch() { thread_.stop(); }
  BrokenPipeWatch(const BrokenPipeWatch&) = delete;
  BrokenPipeWatch& operator=(const BrokenPipeWatch&) = delete;

 private:
  PeriodicThread thread_;
};

// Prints a progress line on stderr every `period_s` (nothing when 0):
// "progress: 3.0 s, <driver part>; host idle …, iowait …, steal …, D n; top wait …".
// `driver_part` (may be empty) gives the driver's figures for the interval.
// The host figures are the mean over the host sampler's ticks in the
// interval (idle, iowait, steal %, tasks in D state), read every 50 ms (or
// every period when shorter); the latest tick when none was new.
class ProgressPrinter {
 public:
  // `unix_time`: each line starts with the Unix time (--progress-timestamp)
  // instead of the seconds since the start.
  ProgressPrinter(double period_s, std::function<std::string()> driver_part,
                  const sampler::HostSampler& host, const sampler::AshSampler* ash,
                  bool unix_time = false);
  ~ProgressPrinter() { stop(); }
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;
  void stop() { thread_.stop(); }

 private:
  void tick();  // reads the sampler's latest tick; prints every ticks_per_line_-th call
  void print_line();
  std::int64_t start_ns_;
  bool unix_time_;
  std::int64_t ticks_per_line_ = 1;
  std::int64_t tick_count_ = 0;
  // Host ticks seen in the current interval (only the progress thread touches these).
  std::int64_t last_host_time_ns_ = 0;
  std::int64_t host_ticks_ = 0;
  double idle_sum_pct_ = 0, iowait_sum_pct_ = 0, steal_sum_pct_ = 0, d_sum_ = 0;
  std::function<std::string()> driver_part_;
  const sampler::HostSampler& host_;
  const sampler::AshSampler* ash_;
  PeriodicThread thread_;
};

}  // namespace stallscope::tools
