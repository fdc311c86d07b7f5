#include "tools/session.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/error.h"
#include "common/host.h"
#include "common/output.h"
#include "common/printable.h"
#include "common/stop.h"
#include "common/thread_name.h"
#include "common/units.h"
#include "schema/run_reader.h"
#include "schema/store.h"

namespace stallscope::tools {

void RunFileWatch::watch(const std::string& path) {
  fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
}

bool RunFileWatch::deleted() const {
  struct stat st {};
  return fd_ && ::fstat(fd_.get(), &st) == 0 && st.st_nlink == 0;
}

schema::RunInfo make_run_info(const std::string& mode, const std::vector<std::string>& argv,
                              const std::optional<std::string>& conninfo, double hz) {
  const HostInfo host = read_host_info();
  schema::RunInfo info;
  info.mode = mode;
  info.host = host.host;
  info.kernel = host.kernel;
  info.cores = host.cores;
  info.clock_ticks_per_s = host.clock_ticks_per_s;
  // An import's host is where the log was read, not where pgbench ran: its
  // ids stay unknown.
  if (mode != to_string(schema::RunMode::import_pgbench)) {
    if (!host.machine_id.empty()) info.machine_id = host.machine_id;
    if (!host.boot_id.empty()) info.boot_id = host.boot_id;
  }
  info.start_ns = wall_now_ns();
  info.command_line = mask_command_line(argv);
  if (conninfo) info.conninfo = mask_conninfo(*conninfo);
  info.tool_version = STALLSCOPE_VERSION;
  info.hz = hz;
  info.stallscope_pid = static_cast<int>(getpid());
  return info;
}

sampler::PoolerSamplerOptions pooler_options(const std::string& conninfo, double period_s) {
  check_conninfo(conninfo);
  return {.conninfo = conninfo, .period_s = period_s, .warn = [](const std::string& message) {
            common::print_stderr("warning: {}\n", common::printable(message));
          }};
}

std::vector<std::string> client_file_first(std::vector<std::string> paths) {
  if (paths.size() != 2) return paths;
  auto mode = [](const std::string& path) -> std::optional<schema::RunMode> {
    try {
      auto store = schema::Store::open_readonly(path);
      return schema::run_mode(store);
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  const auto first = mode(paths[0]);
  if (first != schema::RunMode::record) return paths;
  // A record file first: the second is read now, and a second that cannot
  // be read is named as it is (not "neither file holds queries").
  const auto second = [&]() -> std::optional<schema::RunMode> {
    auto store = schema::Store::open_readonly(paths[1]);
    return schema::run_mode(store);
  }();
  if (second == schema::RunMode::run || second == schema::RunMode::import_pgbench) {
    std::swap(paths[0], paths[1]);
  }
  return paths;
}

void remove_run_file(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
}

void discard_run_file(schema::Store& store, const std::string& path) {
  store = schema::Store::create(":memory:");
  remove_run_file(path);
}

void close_after_write_failure(schema::Writer& writer, const schema::WriteFailure& failure,
                               const std::string& command, const std::string& path,
                               std::int64_t start_ns, std::int64_t end_ns,
                               const std::string& stopped, std::optional<int> command_exit_status) {
  const auto seconds = [start_ns](std::int64_t t_ns) {
    return static_cast<double>(t_ns - start_ns) / common::kNsPerSDouble;
  };
  // What the file holds, as explain's note on the run states it.
  common::print_stderr("stallscope {}: {}: {} at {:.1f} s: {}; the {:.1f} s committed are kept\n",
                       command, path, failure.reason, seconds(failure.failed_ns), stopped,
                       seconds(std::max(failure.kept_until_ns.value_or(start_ns), start_ns)));
  std::string end_error;
  if (!writer.close_after_failure(end_ns, "failed", schema::end_reason(failure, start_ns),
                                  command_exit_status, &end_error)) {
    common::print_stderr(
        "stallscope {}: {}: cannot mark the run's end ({}): it stays 'running' and explain "
        "says the run did not end\n",
        command, path, fold_lines(end_error));
  }
}

void warn_if_sampler_lagged(const sampler::HostSampler& host, double hz, double elapsed_s) {
  const double expected = hz * elapsed_s;
  const auto ticks = static_cast<double>(host.latest().ticks);
  if (expected >= 5 && ticks < 0.8 * expected) {
    common::print_stderr(
        "warning: the host sampler took {:.0f} ticks in {:.1f} s, {:.0f} % of --hz {:g} "
        "(mean interval {:.1f} ms); explain uses the real period\n",
        ticks, elapsed_s, 100.0 * ticks / expected, hz, common::kMsPerSDouble * elapsed_s / ticks);
  }
}

BrokenPipeWatch::BrokenPipeWatch() {
  thread_.start(kOutputWatchThreadName, 100 * common::kNsPerMs, [] {
    if (common::standard_output_closed()) request_stop_on_broken_pipe();
  });
}

ProgressPrinter::ProgressPrinter(double period_s, std::function<std::string()> driver_part,
                                 const sampler::HostSampler& host, const sampler::AshSampler* ash,
                                 bool unix_time)
    : start_ns_(mono_now_ns()),
      unix_time_(unix_time),
      driver_part_(std::move(driver_part)),
      host_(host),
      ash_(ash) {
  const auto period_ns = static_cast<std::int64_t>(period_s * common::kNsPerSDouble);
  if (period_ns > 0) {
    constexpr std::int64_t kReadNs = 50 * common::kNsPerMs;
    ticks_per_line_ = std::max<std::int64_t>(1, (period_ns + kReadNs - 1) / kReadNs);
    const std::int64_t slice_ns = period_ns / ticks_per_line_;
    thread_.start(
        kProgressThreadName, slice_ns, [this] { tick(); }, slice_ns);
  }
}

void ProgressPrinter::tick() {
  const auto h = host_.latest();
  if (h.time_ns != 0 && h.time_ns != last_host_time_ns_) {
    last_host_time_ns_ = h.time_ns;
    ++host_ticks_;
    idle_sum_pct_ += h.idle_pct;
    iowait_sum_pct_ += h.iowait_pct;
    steal_sum_pct_ += h.steal_pct;
    d_sum_ += h.processes_d_state;
  }
  if (++tick_count_ % ticks_per_line_ == 0) print_line();
}

void ProgressPrinter::print_line() {
  const double elapsed_s =
      unix_time_ ? static_cast<double>(wall_now_ns()) / common::kNsPerSDouble
                 : static_cast<double>(mono_now_ns() - start_ns_) / common::kNsPerSDouble;
  std::string driver = driver_part_ ? driver_part_() : std::string();
  const auto latest = host_.latest();
  struct {
    double idle_pct, iowait_pct, steal_pct, processes_d_state;
  } h{latest.idle_pct, latest.iowait_pct, latest.steal_pct,
      static_cast<double>(latest.processes_d_state)};
  if (host_ticks_ > 0) {
    const auto n = static_cast<double>(host_ticks_);
    h = {idle_sum_pct_ / n, iowait_sum_pct_ / n, steal_sum_pct_ / n, d_sum_ / n};
  }
  host_ticks_ = 0;
  idle_sum_pct_ = iowait_sum_pct_ = steal_sum_pct_ = d_sum_ = 0;
  std::string top_wait = ash_ ? ash_->latest().top_wait_event : std::string();
  common::print_stderr(
      "progress: {:.{}f} s, {}host idle {:.1f} %, iowait {:.1f} %, steal {:.1f} %, D {:.1f}"
      "{}\n",
      elapsed_s, unix_time_ ? 3 : 1, driver.empty() ? std::string() : driver + "; ", h.idle_pct,
      h.iowait_pct, h.steal_pct, h.processes_d_state,
      ash_ ? "; top wait " + (top_wait.empty() ? std::string("-") : common::printable(top_wait))
           : std::string());
}

}  // namespace stallscope::tools
