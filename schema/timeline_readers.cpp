// Host state per tick for the HTML report's timelines.
#include "schema/timeline_readers.h"

namespace stallscope::schema {
namespace {

// host_memory_sample is absent in files made before it existed: its columns
// then read as NULL.
const char* host_state_sql(Store& store) {
  if (detail::table_exists(store, "host_memory_sample")) {
    return "SELECT s.time_ns, s.interval_ns, h.sample_id, h.procs_running, h.processes_d_state, "
           "h.cpu_user_ns + h.cpu_nice_ns, h.cpu_system_ns, h.cpu_iowait_ns, "
           "h.cpu_irq_ns + h.cpu_softirq_ns, h.cpu_steal_ns, h.cpu_idle_ns, m.psi_cpu_some_us, "
           "m.psi_io_some_us, m.psi_io_full_us, m.psi_memory_some_us, m.psi_memory_full_us "
           "FROM sample s LEFT JOIN host_sample h ON h.sample_id = s.sample_id "
           "LEFT JOIN host_memory_sample m ON m.sample_id = s.sample_id "
           "WHERE s.time_ns >= ?1 AND s.time_ns < ?2 ORDER BY s.sample_id";
  }
  return "SELECT s.time_ns, s.interval_ns, h.sample_id, h.procs_running, h.processes_d_state, "
         "h.cpu_user_ns + h.cpu_nice_ns, h.cpu_system_ns, h.cpu_iowait_ns, "
         "h.cpu_irq_ns + h.cpu_softirq_ns, h.cpu_steal_ns, h.cpu_idle_ns, NULL, NULL, NULL, "
         "NULL, NULL FROM sample s LEFT JOIN host_sample h ON h.sample_id = s.sample_id "
         "WHERE s.time_ns >= ?1 AND s.time_ns < ?2 ORDER BY s.sample_id";
}

}  // namespace

HostStateTicks::HostStateTicks(Store& store, std::int64_t from_ns, std::int64_t to_ns)
    : st_(store.db(), host_state_sql(store)) {
  st_.bind(1, from_ns);
  st_.bind(2, to_ns);
}

bool HostStateTicks::next(HostStateTick& tick) {
  if (!st_.step()) return false;
  tick = HostStateTick{};
  tick.time_ns = st_.int64(0);
  tick.interval_ns = st_.int64(1);
  tick.has_host = !st_.is_null(2);
  if (!tick.has_host) return true;
  tick.procs_running = static_cast<int>(st_.int64(3));
  tick.processes_d_state = static_cast<int>(st_.int64(4));
  tick.has_cpu = !st_.is_null(5) && tick.interval_ns > 0;
  if (tick.has_cpu) {
    tick.user_ns = st_.int64(5);
    tick.system_ns = st_.int64(6);
    tick.iowait_ns = st_.int64(7);
    tick.irq_ns = st_.int64(8);
    tick.steal_ns = st_.int64(9);
    tick.idle_ns = st_.int64(10);
  }
  tick.psi_cpu_some_us = st_.opt_int64(11);
  tick.psi_io_some_us = st_.opt_int64(12);
  tick.psi_io_full_us = st_.opt_int64(13);
  tick.psi_memory_some_us = st_.opt_int64(14);
  tick.psi_memory_full_us = st_.opt_int64(15);
  return true;
}

}  // namespace stallscope::schema
