// Every tick's host state with each CPU mode apart and the pressure stall
// figures, for the HTML report's host timelines (report/timeline.cpp).
// explain's own host pass reads the same rows more narrowly
// (sample_readers.h HostTicks).
//
//   schema::HostStateTicks ticks(store, from_ns, to_ns);
//   for (schema::HostStateTick t; ticks.next(t);) if (t.has_cpu) use(t.user_ns, ...);
//
// Reads through store.db() (explain_pair's shifted views included); throws
// schema::SqliteError on errors.
#pragma once

#include <cstdint>
#include <optional>

#include "schema/row.h"
#include "schema/store.h"

namespace stallscope::schema {

// One tick: sample, host_sample and host_memory_sample (schema/v1.sql).
struct HostStateTick {
  std::int64_t time_ns = 0;      // sample.time_ns, wall clock
  std::int64_t interval_ns = 0;  // sample.interval_ns; 0 on the first tick
  bool has_host = false;         // a host_sample row
  int procs_running = 0;         // /proc/stat procs_running: runnable tasks now
  int processes_d_state = 0;     // tasks in D state now (sampled processes)
  // CPU time of all CPUs since the previous tick by mode, ns (host_sample);
  // has_cpu false on the first tick, which has no deltas.
  bool has_cpu = false;
  std::int64_t user_ns = 0;  // user + nice
  std::int64_t system_ns = 0;
  std::int64_t iowait_ns = 0;
  std::int64_t irq_ns = 0;  // irq + softirq
  std::int64_t steal_ns = 0;
  std::int64_t idle_ns = 0;
  // Pressure stall time since the previous tick, µs (host_memory_sample;
  // absent where the kernel has no /proc/pressure or the file no such row).
  std::optional<std::int64_t> psi_cpu_some_us;
  std::optional<std::int64_t> psi_io_some_us;
  std::optional<std::int64_t> psi_io_full_us;
  std::optional<std::int64_t> psi_memory_some_us;
  std::optional<std::int64_t> psi_memory_full_us;
};

// Ticks with from_ns ≤ time_ns < to_ns, by sample_id.
class HostStateTicks {
 public:
  HostStateTicks(Store& store, std::int64_t from_ns, std::int64_t to_ns);
  bool next(HostStateTick& tick);

 private:
  Cursor st_;
};

}  // namespace stallscope::schema
