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
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/error.h"
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

}  // namespace

int record_command(const RecordOptions& o) {
  if (o.conninfo) check_conninfo(*o.conninfo);
  if (o.pooler_admin) check_conninfo(*o.pooler_admin);
  const double ash_hz = o.ash_hz.value_or(std::min(o.hz, 100.0));
  if (!(ash_hz > 0) || ash_hz > 100) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot poll ASH at {} Hz: --ash-hz must be in (0, 100]", ash_hz));
  }
  auto store = schema::Store::create(o.output_path);
  schema::RunInfo info = make_run_info("record", o.argv, o.conninfo, o.hz);
  if (!o.command.empty()) info.command = mask_command_line(o.command);
  DelayacctGuard delayacct;  // restores kernel.task_delayacct when record ends
  if (o.delayacct) {
    delayacct = DelayacctGuard::enable("record");
    info.delayacct_set = delayacct.set_by_us() ? 1 : 0;
  }
  if (o.kernel_stacks) {
    // /proc/PID/stack is readable by root only (CAP_SYS_ADMIN in practice).
    info.kernel_stacks =
        geteuid() == 0 ? std::string("collected") : std::string("unavailable: not root");
  }
  store.begin_run(info);
  schema::Writer writer(std::move(store));
  auto sink = [&writer](schema::Batch b) { writer.submit(std::move(b)); };

  install_stop_handlers();
  // The host sampler raises our RLIMIT_NOFILE soft limit (it keeps /proc
  // files open); the command gets the limit we were started with.
  rlimit nofile_before{};
  const bool have_nofile = getrlimit(RLIMIT_NOFILE, &nofile_before) == 0;
  sampler::HostSampler host_sampler({.hz = o.hz,
                                     .all_threads = o.all_threads,
                                     .kernel_stacks = o.kernel_stacks && geteuid() == 0,
                                     .own_threads = false},
                                    sink);
  std::optional<sampler::AshSampler> ash_sampler;
  std::optional<sampler::PoolerSampler> pooler;
  std::optional<int> child_status;
  std::string reason;
  bool sampling_started = false;
  try {
    if (o.conninfo) {
      ash_sampler.emplace(sampler::AshSamplerOptions{.conninfo = *o.conninfo, .hz = ash_hz}, sink);
      ash_sampler->start();
    }
    if (o.pooler_admin) {
      pooler.emplace(pooler_options(*o.pooler_admin, o.pooler_period_s), sink);
      pooler->start();  // Error(postgres) naming the masked conninfo
    }
    host_sampler.start();
    sampling_started = true;
    ProgressPrinter progress(o.progress_s, {}, host_sampler, ash_sampler ? &*ash_sampler : nullptr);
    const std::int64_t start_ns = mono_now_ns();
    if (!o.command.empty()) {
      std::vector<char*> args;
      for (const auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      pid_t pid = 0;
      if (int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ); rc != 0) {
        throw Error(
            ErrorKind::usage,
            fmt::format("cannot run command '{}': {}", o.command.front(), std::strerror(rc)), rc);
      }
      if (have_nofile) prlimit(pid, RLIMIT_NOFILE, &nofile_before, nullptr);
      bool forwarded = false;
      int wait_status = 0;
      while (true) {
        pid_t done = waitpid(pid, &wait_status, WNOHANG);
        if (done == pid) break;
        if (done < 0 && errno != EINTR) break;
        if (stop_requested() && !forwarded) {
          // Pass our SIGINT/SIGTERM on to the command and keep sampling until it ends.
          kill(pid, stop_signal() != 0 ? stop_signal() : SIGTERM);
          forwarded = true;
        }
        // One look a tick at most: this thread's wake-ups are part of
        // record's cost.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      child_status = shell_status(wait_status);
      reason = fmt::format("command exited with status {}", *child_status);
    } else {
      const std::int64_t limit_ns =
          o.duration_s ? static_cast<std::int64_t>(*o.duration_s * common::kNsPerSDouble)
                       : INT64_MAX;
      while (!stop_requested() && mono_now_ns() - start_ns < limit_ns) {
        const std::int64_t left_ns = limit_ns - (mono_now_ns() - start_ns);
        std::this_thread::sleep_for(
            std::chrono::nanoseconds(std::min<std::int64_t>(left_ns, 100 * common::kNsPerMs)));
      }
      reason =
          stop_requested() ? (stop_signal() == SIGTERM ? "SIGTERM" : "SIGINT") : "duration reached";
    }
  } catch (const Error& e) {
    host_sampler.stop();
    if (ash_sampler) ash_sampler->stop();
    if (pooler) pooler->stop();
    writer.close(wall_now_ns(), "failed", e.what());
    // A file that holds nothing (e.g. --pg unreachable) would only block the
    // next attempt with the same -o.
    if (!sampling_started || e.kind() == ErrorKind::usage) remove_run_file(o.output_path);
    throw;
  }
  warn_if_sampler_lagged(
      host_sampler, o.hz,
      static_cast<double>(wall_now_ns() - info.start_ns) / common::kNsPerSDouble);
  host_sampler.stop();
  if (ash_sampler) ash_sampler->stop();
  if (pooler) pooler->stop();
  // A record without a limit ends by a signal: that is its normal end.
  const bool interrupted = stop_requested() && (o.duration_s || !o.command.empty());
  writer.close(wall_now_ns(), interrupted ? "interrupted" : "complete", reason, child_status);
  fmt::print(stderr, "record: {} ({}), {} ticks\n", o.output_path, reason,
             host_sampler.latest().ticks);
  return child_status.value_or(0);
}

}  // namespace stallscope::tools
