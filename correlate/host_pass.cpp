// Pass 2: the sampler's ticks (sample) and the host's CPU and run queue
// (host_sample) into the windows. A tick's CPU deltas cover the interval
// before it, so a tick at time t counts in the window holding t − 1 ns.
#include <algorithm>

#include "correlate/passes.h"
#include "schema/sample_readers.h"

namespace stallscope::correlate::detail {

void add_host_ticks(const RowSource<schema::HostTick>& ticks, const WindowIndex& wi,
                    std::vector<WindowAcc>& acc) {
  schema::HostTick tick;
  while (ticks(tick)) {
    auto i = wi.find(tick.time_ns - 1);
    if (i < 0) continue;
    auto& a = acc[static_cast<std::size_t>(i)];
    a.sampler_cpu_ns += tick.sampler_cpu_ns;
    if (!tick.has_host) continue;
    a.host.procs_running_max = std::max(a.host.procs_running_max, tick.procs_running);
    a.host.processes_d_state_max = std::max(a.host.processes_d_state_max, tick.processes_d_state);
    if (!tick.has_cpu) continue;  // first tick: no deltas
    a.host.busy_ns += tick.busy_ns;
    a.host.idle_ns += tick.idle_ns;
    a.host.iowait_ns += tick.iowait_ns;
    a.host.steal_ns += tick.steal_ns;
    a.host.total_ns += tick.busy_ns + tick.idle_ns + tick.iowait_ns + tick.steal_ns;
    ++a.host.cpu_rows;
  }
}

}  // namespace stallscope::correlate::detail
