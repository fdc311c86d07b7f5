#include "tools/session.h"

#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/host.h"
#include "common/thread_name.h"

namespace stallscope::tools {

schema::RunInfo make_run_info(const std::string& mode, const std::vector<std::string>& argv,
                              const std::optional<std::string>& conninfo, double hz) {
  const HostInfo host = read_host_info();
  schema::RunInfo info;
  info.mode = mode;
  info.host = host.host;
  info.kernel = host.kernel;
  info.cores = host.cores;
  info.clock_ticks_per_s = host.clock_ticks_per_s;
  info.start_ns = wall_now_ns();
  info.command_line = mask_command_line(argv);
  if (conninfo) info.conninfo = mask_conninfo(*conninfo);
  info.tool_version = STALLSCOPE_VERSION;
  info.hz = hz;
  info.stallscope_pid = static_cast<int>(getpid());
  return info;
}

void remove_run_file(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
}

void warn_if_sampler_lagged(const sampler::HostSampler& host, double hz, double elapsed_s) {
  const double expected = hz * elapsed_s;
  const auto ticks = static_cast<double>(host.latest().ticks);
  if (expected >= 5 && ticks < 0.8 * expected) {
    fmt::print(stderr,
               "warning: the host sampler took {:.0f} ticks in {:.1f} s, {:.0f} % of --hz {:g} "
               "(mean interval {:.1f} ms); explain uses the real period\n",
               ticks, elapsed_s, 100.0 * ticks / expected, hz, 1000.0 * elapsed_s / ticks);
  }
}

ProgressPrinter::ProgressPrinter(double period_s, std::function<std::string()> driver_part,
                                 const sampler::HostSampler& host, const sampler::AshSampler* ash)
    : start_ns_(mono_now_ns()), driver_part_(std::move(driver_part)), host_(host), ash_(ash) {
  const auto period_ns = static_cast<std::int64_t>(period_s * 1e9);
  if (period_ns > 0) {
    thread_.start(
        kProgressThreadName, period_ns, [this] { print_line(); }, period_ns);
  }
}

void ProgressPrinter::print_line() {
  const double elapsed_s = static_cast<double>(mono_now_ns() - start_ns_) / 1e9;
  std::string driver = driver_part_ ? driver_part_() : std::string();
  const auto h = host_.latest();
  std::string top_wait = ash_ ? ash_->latest().top_wait_event : std::string();
  fmt::print(
      stderr,
      "progress: {:.1f} s, {}host idle {:.1f} %, iowait {:.1f} %, steal {:.1f} %, D {}"
      "{}\n",
      elapsed_s, driver.empty() ? std::string() : driver + "; ", h.idle_pct, h.iowait_pct,
      h.steal_pct, h.processes_d_state,
      ash_ ? "; top wait " + (top_wait.empty() ? std::string("-") : top_wait) : std::string());
}

}  // namespace stallscope::tools
