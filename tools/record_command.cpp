// `stallscope record`: sample only, beside any benchmark — for a duration,
// until SIGINT/SIGTERM, or for the life of a command it starts.
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/error.h"
#include "common/output.h"
#include "common/printable.h"
#include "common/stop.h"
#include "common/units.h"
#include "sampler/sampler.h"
#include "schema/store.h"
#include "schema/writer.h"
#include "tools/commands.h"
#include "tools/delayacct.h"
#include "tools/session.h"

extern char** environ;

namespace stallscope::tools {
namespace {

// Exit status of a waited-for child, shell style: code, or 128 + signal.
int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

// The --ash-hz to poll at (default: --hz, at most 100); a usage error
// outside (0, 100].
double ash_hz_of(const RecordOptions& o) {
  const double ash_hz = o.ash_hz.value_or(std::min(o.sampling.hz, 100.0));
  if (!(ash_hz > 0) || ash_hz > 100) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot poll ASH at {} Hz: --ash-hz must be in (0, 100]", ash_hz));
  }
  return ash_hz;
}

// The run row of a record (the command after --, --stacks); --delayacct is
// turned on here, through `delayacct`, which restores it when record ends.
schema::RunInfo record_run_info(const RecordOptions& o, DelayacctGuard& delayacct) {
  schema::RunInfo info = make_run_info("record", o.argv, o.conninfo, o.sampling.hz);
  if (!o.command.empty()) info.command = mask_command_line(o.command);
  if (o.sampling.delayacct) {
    delayacct = DelayacctGuard::enable("record");
    info.delayacct_set = delayacct.set_by_us() ? 1 : 0;
  }
  if (o.kernel_stacks) {
    // /proc/PID/stack is readable by root only (CAP_SYS_ADMIN in practice).
    info.kernel_stacks =
        geteuid() == 0 ? std::string("collected") : std::string("unavailable: not root");
  }
  return info;
}

// How record runs its command: the RLIMIT_NOFILE to give it, the -T limit
// after which it is sent SIGTERM, how long it may outlive a signal from
// record before SIGKILL, and what to call with its pid once started.
struct ChildOptions {
  const rlimit* nofile = nullptr;
  std::optional<std::int64_t> limit_ns;  // -T, CLOCK_MONOTONIC from start_mono_ns
  std::int64_t start_mono_ns = 0;
  std::int64_t kill_after_ns = 5 * common::kNsPerS;  // --kill-after
  std::function<void(pid_t)> started;
  // Requested at the run file's first failed commit: the command is sent
  // SIGTERM, as at the -T limit (its recording has stopped).
  StopToken write_failed;
};

// How the command ended: its shell-style exit status, whether record ended
// it at the -T limit, the signal record sent it first (0: none) and whether
// record then sent SIGKILL, the command being still alive kill_after_ns
// after that signal.
struct ChildEnd {
  int status = 0;
  bool limit_reached = false;
  int signal_sent = 0;
  bool killed = false;
};

// "SIGTERM", "SIGINT" or "SIGHUP": the signals record sends or passes on.
const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "SIGTERM";
  }
}

// --kill-after in seconds, for messages: "5 s", "0.5 s".
std::string grace_text(std::int64_t kill_after_ns) {
  return fmt::format("{:g} s", static_cast<double>(kill_after_ns) / common::kNsPerSDouble);
}

// What record did to end the command, for its end_reason and stderr line:
// "" when it ended by itself; " (killed: still running 5 s after SIGTERM)"
// when record had to send SIGKILL.
std::string kill_text(const ChildEnd& end, std::int64_t kill_after_ns) {
  if (!end.killed) return {};
  return fmt::format(" (killed: still running {} after {})", grace_text(kill_after_ns),
                     signal_name(end.signal_sent));
}

// Starts `command` (PATH lookup) and waits for it, passing a SIGINT/SIGTERM
// on (and a SIGTERM at the -T limit or a failed write); a command still
// running kill_after_ns after that signal is sent SIGKILL, with a line on
// stderr. The command runs in record's process group (a terminal's signals
// reach it directly); record's own signals go to the command and to the
// processes descended from it at that moment (a shell's background jobs, an
// application's workers), and SIGKILL to those of them still running.
// Throws Error(usage) when it cannot be started.
ChildEnd run_child(const std::vector<std::string>& command, const ChildOptions& c) {
  std::vector<char*> args;
  for (const auto& a : command) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The command gets SIGXFSZ's and SIGPIPE's default actions back
  // (install_stop_handlers ignores them for stallscope's own writes, and an
  // ignored signal stays ignored across exec).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t default_signals;
  sigemptyset(&default_signals);
  sigaddset(&default_signals, SIGXFSZ);
  sigaddset(&default_signals, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &default_signals);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot run command '{}': {}", command.front(), std::strerror(rc)), rc);
  }
  if (c.nofile) prlimit(pid, RLIMIT_NOFILE, c.nofile, nullptr);
  if (c.started) c.started(pid);
  ChildEnd end;
  std::int64_t signalled_mono_ns = 0;  // when end.signal_sent was sent
  // The command's descendants when it was signalled (by pid and start time:
  // a pid reused since is not theirs).
  std::vector<sampler::SocketOwner> descendants;
  const auto send = [&](int sig) {
    descendants = sampler::descendant_processes(pid);
    kill(pid, sig);
    for (const auto& d : descendants) kill(d.pid, sig);
    end.signal_sent = sig;
    signalled_mono_ns = mono_now_ns();
  };
  int wait_status = 0;
  while (true) {
    pid_t done = waitpid(pid, &wait_status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    const bool signalled = end.signal_sent != 0;
    if (stop_requested() && !signalled) {
      // Pass our SIGINT/SIGTERM on to the command and keep sampling until it
      // ends; a broken pipe (no signal came) ends it with SIGTERM.
      send(stop_signal() != 0 && stop_signal() != SIGPIPE ? stop_signal() : SIGTERM);
    } else if (c.write_failed.stop_requested() && !signalled) {
      send(SIGTERM);
    } else if (c.limit_ns && !signalled && mono_now_ns() - c.start_mono_ns >= *c.limit_ns) {
      send(SIGTERM);  // -T reached: end the command, sample until it exits
      end.limit_reached = true;
    } else if (signalled && !end.killed && mono_now_ns() - signalled_mono_ns >= c.kill_after_ns) {
      // It ignores or outlasts the signal (e.g. `trap '' TERM`): as timeout -k.
      kill(pid, SIGKILL);
      for (const auto& d : descendants) {
        if (sampler::process_alive(d.pid, d.start_ticks)) kill(d.pid, SIGKILL);
      }
      end.killed = true;
      common::print_stderr(
          "stallscope record: the command (pid {}) was still running {} after {}: sent it "
          "SIGKILL\n",
          pid, grace_text(c.kill_after_ns), signal_name(end.signal_sent));
    }
    // One look a tick at most: this thread's wake-ups are part of
    // record's cost.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  end.status = shell_status(wait_status);
  // The command ended; what it started and record signalled may not have
  // (a job that ignores SIGTERM): they get the same grace, then SIGKILL.
  const auto alive = [&] {
    std::vector<int> pids;
    for (const auto& d : descendants) {
      if (sampler::process_alive(d.pid, d.start_ticks)) pids.push_back(d.pid);
    }
    return pids;
  };
  while (end.signal_sent != 0 && !alive().empty()) {
    if (mono_now_ns() - signalled_mono_ns >= c.kill_after_ns) {
      const auto pids = alive();
      for (const int p : pids) kill(p, SIGKILL);
      common::print_stderr(
          "stallscope record: {} process{} the command started ({}) {} still running {} after "
          "{}: sent {} SIGKILL\n",
          pids.size(), pids.size() == 1 ? "" : "es", fmt::join(pids, ", "),
          pids.size() == 1 ? "was" : "were", grace_text(c.kill_after_ns),
          signal_name(end.signal_sent), pids.size() == 1 ? "it" : "them");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return end;
}

// Waits for -T seconds from `start_ns` (forever without -T), a
// SIGINT/SIGTERM or `write_failed`; the run's end reason (the caller
// replaces it after a failed write).
std::string wait_for_end(const RecordOptions& o, std::int64_t start_ns, StopToken write_failed) {
  const std::int64_t limit_ns =
      o.duration_s ? static_cast<std::int64_t>(*o.duration_s * common::kNsPerSDouble) : INT64_MAX;
  while (!stop_requested() && !write_failed.stop_requested() &&
         mono_now_ns() - start_ns < limit_ns) {
    const std::int64_t left_ns = limit_ns - (mono_now_ns() - start_ns);
    std::this_thread::sleep_for(
        std::chrono::nanoseconds(std::min<std::int64_t>(left_ns, 100 * common::kNsPerMs)));
  }
  return stop_requested() ? stop_signal_name() : "duration reached";
}

// -T in ns, if given.
std::optional<std::int64_t> duration_limit_ns(const RecordOptions& o) {
  if (!o.duration_s) return std::nullopt;
  return static_cast<std::int64_t>(*o.duration_s * common::kNsPerSDouble);
}

// record_client rows: the --client-process names.
schema::Batch client_name_rows(const RecordOptions& o) {
  schema::Batch b;
  for (const auto& name : o.client_processes) {
    b.record_clients.push_back({.source = "comm", .comm = name});
  }
  return b;
}

// The command's record_client row (pid and start time), so explain finds it
// and its descendants among the sampled processes.
void submit_command_process(pid_t pid, const sampler::Sink& sink) {
  schema::Batch b;
  b.record_clients.push_back({.source = "command",
                              .pid = static_cast<int>(pid),
                              .start_ticks = sampler::process_start_ticks(static_cast<int>(pid))});
  sink(std::move(b));
}

// A warning on stderr when ASH polls failed (a server that accepts the
// login and fails every query: a pooler whose server is gone, a role that
// may not read pg_stat_activity); and, when not one poll succeeded, what
// the end reason adds ("; no ASH samples: …"), as for a sampler that never
// connected. Some polls failing is said on stderr only: explain reads the
// gaps as blind ASH time and says so.
std::string ash_failure_note(const sampler::AshSnapshot& ash) {
  if (ash.failed_polls == 0) return {};
  const std::string last = fold_lines(ash.last_poll_error);
  if (ash.polls == 0) {
    fmt::print(stderr,
               "stallscope record: warning: no ASH samples: all {} polls of pg_stat_activity "
               "failed; last: {}\n",
               ash.failed_polls, common::printable(last));
    return fmt::format("; no ASH samples: all {} ASH polls failed (last: {})", ash.failed_polls,
                       last);
  }
  fmt::print(stderr,
             "stallscope record: warning: {} of {} polls of pg_stat_activity failed (explain "
             "reads them as blind ASH time); last: {}\n",
             ash.failed_polls, ash.failed_polls + ash.polls, common::printable(last));
  return {};
}

// The samplers of a record, all feeding one writer.
struct Samplers {
  sampler::HostSampler host;
  std::optional<sampler::AshSampler> ash;
  std::optional<sampler::PoolerSampler> pooler;

  void stop() {
    host.stop();
    if (ash) ash->stop();
    if (pooler) pooler->stop();
  }
};

// Starts the ASH sampler (--pg) and the pooler sampler (--pooler-admin)
// beside the running host sampler; returns why the ASH sampler never
// polled when -T or a signal cut its connect short (else empty).
std::string start_database_samplers(const RecordOptions& o, std::int64_t start_mono_ns,
                                    const std::shared_ptr<sampler::ClientWatch>& client_watch,
                                    const sampler::Sink& sink, Samplers& samplers) {
  std::string ash_missing;
  if (o.conninfo) {
    const auto limit_ns = duration_limit_ns(o);
    samplers.ash.emplace(
        sampler::AshSamplerOptions{
            .conninfo = *o.conninfo,
            .hz = ash_hz_of(o),
            .find_client_sockets = true,
            .client_watch = client_watch,
            .connect_deadline_mono_ns =
                limit_ns ? std::optional<std::int64_t>(start_mono_ns + *limit_ns) : std::nullopt},
        sink);
    try {
      samplers.ash->start();
    } catch (const Error& e) {
      // -T or SIGINT/SIGTERM came first: the record ends now, with its
      // host samples and no ASH poll, and its end_reason says why.
      if (e.kind() != ErrorKind::runtime) throw;
      samplers.ash.reset();
      ash_missing = e.what();
    }
  }
  if (o.sampling.pooler_admin) {
    samplers.pooler.emplace(pooler_options(*o.sampling.pooler_admin, o.sampling.pooler_period_s),
                            sink);
    samplers.pooler->start();  // Error(postgres) naming the masked conninfo
  }
  return ash_missing;
}

// How the recording ended: the command's end (with one), or -T, a signal,
// a failed write.
struct RecordEnd {
  std::string reason;  // the run's end_reason
  std::optional<int> child_status;
  bool ended_by_limit = false;      // -T ended the command: record's own exit status is 0
  std::int64_t command_end_ns = 0;  // wall clock when the command ended
  bool command_killed = false;      // record sent the command SIGKILL (--kill-after)
};

// Runs the command given after -- until it ends (or -T ends it), or waits
// for -T, a signal or a failed write.
RecordEnd record_until_end(const RecordOptions& o, std::int64_t start_mono_ns, const rlimit* nofile,
                           const sampler::Sink& sink,
                           const std::shared_ptr<sampler::ClientWatch>& client_watch,
                           const schema::Writer& writer) {
  RecordEnd r;
  if (o.command.empty()) {
    r.reason = wait_for_end(o, start_mono_ns, writer.failure_token());
    return r;
  }
  ChildOptions child{.nofile = nofile,
                     .limit_ns = duration_limit_ns(o),
                     .start_mono_ns = start_mono_ns,
                     .kill_after_ns = o.kill_after_ns,
                     .started =
                         [&](pid_t pid) {
                           submit_command_process(pid, sink);
                           client_watch->add_pid(static_cast<int>(pid));
                         },
                     .write_failed = writer.failure_token()};
  const ChildEnd end = run_child(o.command, child);
  r.command_end_ns = wall_now_ns();
  r.child_status = end.status;
  const std::string killed = kill_text(end, o.kill_after_ns);
  r.reason = end.limit_reached ? fmt::format("duration reached; command ended with status {}{}",
                                             end.status, killed)
                               : fmt::format("command exited with status {}{}", end.status, killed);
  if (!end.limit_reached && stop_signal() == SIGPIPE) {
    r.reason += fmt::format("; record sent it SIGTERM: {}", stop_signal_name());
  }
  r.ended_by_limit = end.limit_reached;
  r.command_killed = end.killed;
  return r;
}

}  // namespace

int record_command(const RecordOptions& o) {
  if (o.conninfo) check_conninfo(*o.conninfo);
  if (o.sampling.pooler_admin) check_conninfo(*o.sampling.pooler_admin);
  // Before the file exists: a signal from here on ends the record cleanly,
  // and so does a reader of stdout or stderr that went away.
  install_stop_handlers();
  const BrokenPipeWatch broken_pipe;
  RunFileWatch file_watch;  // destroyed after the store and writer (tools/session.h)
  auto store = schema::Store::create(o.output_path);
  file_watch.watch(o.output_path);
  DelayacctGuard delayacct;  // restores kernel.task_delayacct when record ends
  const schema::RunInfo info = record_run_info(o, delayacct);
  try {
    store.begin_run(info);
  } catch (...) {
    // E.g. a disk that filled since the file was created: leave no file.
    discard_run_file(store, o.output_path);
    throw;
  }
  schema::Writer writer(std::move(store));
  const sampler::Sink sink = [&writer](schema::Batch b) { writer.submit(std::move(b)); };
  if (!o.client_processes.empty()) sink(client_name_rows(o));

  // The host sampler raises our RLIMIT_NOFILE soft limit (it keeps /proc
  // files open); the command gets the limit we were started with.
  rlimit nofile_before{};
  const bool have_nofile = getrlimit(RLIMIT_NOFILE, &nofile_before) == 0;
  // The application's processes: the command, --client-process names and
  // the sessions' socket owners (what they wait on is sampled).
  auto client_watch = std::make_shared<sampler::ClientWatch>();
  for (const auto& name : o.client_processes) client_watch->add_comm(name);
  Samplers samplers{
      .host = sampler::HostSampler({.hz = o.sampling.hz,
                                    .all_threads = o.all_threads,
                                    .kernel_stacks = o.kernel_stacks && geteuid() == 0,
                                    .own_threads = false,
                                    .client_watch = client_watch},
                                   sink),
      .ash = std::nullopt,
      .pooler = std::nullopt};
  RecordEnd end;
  bool sampling_started = false;
  // -T counts from here: a connect to --pg that hangs does not stretch it.
  const std::int64_t start_ns = mono_now_ns();
  try {
    // Host state first: it is sampled while --pg connects, however long.
    samplers.host.start();
    const std::string ash_missing =
        start_database_samplers(o, start_ns, client_watch, sink, samplers);
    sampling_started = true;
    ProgressPrinter progress(o.sampling.progress_s, {}, samplers.host,
                             samplers.ash ? &*samplers.ash : nullptr);
    end = record_until_end(o, start_ns, have_nofile ? &nofile_before : nullptr, sink, client_watch,
                           writer);
    if (!ash_missing.empty()) {
      end.reason +=
          fmt::format("; no ASH samples: the ASH sampler never connected ({})", ash_missing);
    }
  } catch (const Error& e) {
    samplers.stop();
    writer.close(wall_now_ns(), "failed", e.what());
    // A file that holds nothing (e.g. --pg unreachable) would only block the
    // next attempt with the same -o.
    if (!sampling_started || e.kind() == ErrorKind::usage) remove_run_file(o.output_path);
    throw;
  }
  warn_if_sampler_lagged(
      samplers.host, o.sampling.hz,
      static_cast<double>(wall_now_ns() - info.start_ns) / common::kNsPerSDouble);
  samplers.stop();
  if (samplers.ash) end.reason += ash_failure_note(samplers.ash->latest());
  writer.drain();  // a commit that fails now still makes the run 'failed'
  if (const auto failure = writer.failure()) {
    // Recording stopped at the failed commit (with a command: it was sent
    // SIGTERM then, and waited for); exit 1 whatever the command's status.
    close_after_write_failure(
        writer, *failure, "record", o.output_path, info.start_ns, wall_now_ns(),
        failure->failed_ns >= end.command_end_ns ? "stopped recording"
        : end.command_killed
            ? fmt::format("stopped recording, sent the command SIGTERM and, {} later, SIGKILL",
                          grace_text(o.kill_after_ns))
            : "stopped recording, sent the command SIGTERM",
        end.child_status);
    return 1;
  }
  // A record without a limit ends by a signal: that is its normal end; a
  // broken pipe (its output closed) is not.
  const bool interrupted =
      stop_requested() && (o.duration_s || !o.command.empty() || stop_signal() == SIGPIPE);
  writer.close(wall_now_ns(), interrupted ? "interrupted" : "complete", end.reason,
               end.child_status);
  common::print_stderr("record: {} ({}), {} ticks\n", common::printable(o.output_path),
                       common::printable(end.reason), samplers.host.latest().ticks);
  if (file_watch.deleted()) {
    common::print_stderr(
        "stallscope record: {}: the run file was deleted while record wrote it: nothing it "
        "recorded is kept\n",
        common::printable(o.output_path));
    return 1;
  }
  return end.ended_by_limit ? 0 : end.child_status.value_or(0);
}

}  // namespace stallscope::tools
