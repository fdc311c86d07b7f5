// Pass 2: the sampler's ticks (sample) and the host's CPU and run queue
// (host_sample) into the windows. A tick's CPU deltas cover the interval
// before it, so a tick at time t counts in the window holding t − 1 ns.
#include <SQLiteCpp/Statement.h>

#include "correlate/passes.h"

namespace stallscope::correlate::detail {

void read_host(SQLite::Database& db, const WindowIndex& wi, std::vector<WindowAcc>& acc,
               Span span) {
  SQLite::Statement st(db,
                       "SELECT s.time_ns, s.sampler_cpu_ns, h.sample_id, h.cpu_user_ns, "
                       "h.cpu_nice_ns, h.cpu_system_ns, h.cpu_irq_ns, h.cpu_softirq_ns, "
                       "h.cpu_idle_ns, h.cpu_iowait_ns, h.cpu_steal_ns, h.procs_running, "
                       "h.processes_d_state FROM sample s LEFT JOIN host_sample h "
                       "ON h.sample_id = s.sample_id WHERE s.time_ns > ?1 AND s.time_ns <= ?2 "
                       "ORDER BY s.sample_id");
  st.bind(1, span.start_ns);
  st.bind(2, span.end_ns);
  while (st.executeStep()) {
    auto i = wi.find(st.getColumn(0).getInt64() - 1);
    if (i < 0) continue;
    auto& a = acc[static_cast<std::size_t>(i)];
    a.sampler_cpu_ns += st.getColumn(1).getInt64();
    if (st.getColumn(2).isNull()) continue;
    a.host.procs_running_max = std::max(a.host.procs_running_max, st.getColumn(11).getInt());
    a.host.processes_d_state_max =
        std::max(a.host.processes_d_state_max, st.getColumn(12).getInt());
    if (st.getColumn(3).isNull()) continue;  // first tick: no deltas
    std::int64_t busy = 0;
    for (int c = 3; c <= 7; ++c) busy += st.getColumn(c).getInt64();
    auto idle = st.getColumn(8).getInt64();
    auto iowait = st.getColumn(9).getInt64();
    auto steal = st.getColumn(10).getInt64();
    a.host.busy_ns += busy;
    a.host.idle_ns += idle;
    a.host.iowait_ns += iowait;
    a.host.steal_ns += steal;
    a.host.total_ns += busy + idle + iowait + steal;
    ++a.host.cpu_rows;
  }
}

}  // namespace stallscope::correlate::detail
