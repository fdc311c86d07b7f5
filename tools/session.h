// Pieces `run` and `record` share: the run row, the progress printer.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/periodic.h"
#include "sampler/sampler.h"
#include "schema/records.h"

namespace stallscope::tools {

// The run row's host facts, start time, masked command line and conninfo.
schema::RunInfo make_run_info(const std::string& mode, const std::vector<std::string>& argv,
                              const std::optional<std::string>& conninfo, double hz);

// Removes a run file and its -wal/-shm companions (used only when a run
// failed before anything was recorded).
void remove_run_file(const std::string& path);

// Warns on stderr when the host sampler took fewer than 80 % of the ticks
// `hz` asks for over `elapsed_s` (an overloaded host, or --hz too high for
// its process count); explain then uses the real period.
void warn_if_sampler_lagged(const sampler::HostSampler& host, double hz, double elapsed_s);

// Prints a progress line on stderr every `period_s` (nothing when 0):
// "progress: 3.0 s, <driver part>; host idle …, iowait …, steal …, D n; top wait …".
// `driver_part` (may be empty) gives the driver's figures for the interval.
class ProgressPrinter {
 public:
  ProgressPrinter(double period_s, std::function<std::string()> driver_part,
                  const sampler::HostSampler& host, const sampler::AshSampler* ash);
  ~ProgressPrinter() { stop(); }
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;
  void stop() { thread_.stop(); }

 private:
  void print_line();
  std::int64_t start_ns_;
  std::function<std::string()> driver_part_;
  const sampler::HostSampler& host_;
  const sampler::AshSampler* ash_;
  PeriodicThread thread_;
};

}  // namespace stallscope::tools
