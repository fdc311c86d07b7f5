// The skeleton of a 10 s `record --pg` file, shared by the correlator's
// record-file tests (sessions_test.cpp, kernel_sleep_test.cpp): the run row
// (record, 2 cores, 100 ticks/s, 10 Hz) and, in the batch returned, the
// stallscope process (process_id 1, pid kRecordPid), one client backend
// (process_id 2, pid kRecordBackendPid), the client python3 (process_id 3,
// pid kRecordClientPid, the command record started), samples 1..11 at
// kRecordT0 + i s with host rows (after the first: `host_user_ms` of user CPU a
// second, `host_steal_ms` stolen, the rest of the 2 cores idle, procs_running 1), ASH ticks 1..101
// every 100 ms from kRecordT0, and the backend's pg_session row (application
// 'django', user 'app', database 'site', Unix socket). Tests add the process
// samples and ASH rows of their case, then write the batch.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "schema/records.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate::test_record {

using test::kMs;
using test::kS;
inline constexpr std::int64_t kRecordT0 = 1'700'000'000 * kS;
inline constexpr int kRecordPid = 100;
inline constexpr int kRecordClientPid = 300;
inline constexpr int kRecordBackendPid = 201;

struct RecordFile {
  schema::Store store;
  schema::Batch batch;  // the rows above, not yet written
};

inline RecordFile record_file_skeleton(std::int64_t host_user_ms, std::int64_t host_steal_ms = 0) {
  RecordFile f{schema::Store::create(":memory:"), {}};
  schema::RunInfo r;
  r.mode = "record";
  r.host = "db1";
  r.kernel = "6.1.0";
  r.cores = 2;
  r.clock_ticks_per_s = 100;
  r.start_ns = kRecordT0 - kS;
  r.command_line = "stallscope record --pg … -- python3 client.py";
  r.tool_version = "0";
  r.hz = 10;
  r.stallscope_pid = kRecordPid;
  f.store.begin_run(r);
  f.store.end_run(kRecordT0 + 11 * kS, "complete", "duration reached");
  auto& b = f.batch;
  b.processes.push_back({.process_id = 1,
                         .pid = kRecordPid,
                         .start_ticks = 5000,
                         .start_ns = kRecordT0 - 2 * kS,
                         .comm = "stallscope",
                         .first_sample_id = 1});
  b.processes.push_back({.process_id = 2,
                         .pid = kRecordBackendPid,
                         .start_ticks = 8000,
                         .start_ns = kRecordT0 - kS,
                         .ppid = 50,
                         .comm = "postgres",
                         .first_sample_id = 1});
  b.processes.push_back({.process_id = 3,
                         .pid = kRecordClientPid,
                         .start_ticks = 7900,
                         .start_ns = kRecordT0 - kS - 5 * kMs,
                         .ppid = kRecordPid,
                         .comm = "python3",
                         .first_sample_id = 1});
  b.record_clients.push_back({.source = "command", .pid = kRecordClientPid, .start_ticks = 7900});
  for (int i = 0; i <= 10; ++i) {
    b.samples.push_back({.sample_id = i + 1,
                         .time_ns = kRecordT0 + i * kS,
                         .mono_ns = i * kS,
                         .interval_ns = i ? std::optional<std::int64_t>(kS) : std::nullopt,
                         .sampler_cpu_ns = 10 * kMs,
                         .sampler_duration_ns = kMs});
    schema::HostSampleRow h{.sample_id = i + 1};
    if (i > 0) {
      h.cpu_user_ns = host_user_ms * kMs;
      h.cpu_nice_ns = h.cpu_system_ns = h.cpu_iowait_ns = h.cpu_irq_ns = h.cpu_softirq_ns = 0;
      h.cpu_steal_ns = host_steal_ms * kMs;
      h.cpu_idle_ns = (2000 - host_user_ms - host_steal_ms) * kMs;
    }
    h.procs_running = 1;
    b.host_samples.push_back(h);
  }
  for (int k = 0; k <= 100; ++k) {
    b.ash_ticks.push_back(
        {.ash_tick = k + 1, .time_ns = kRecordT0 + k * 100 * kMs, .duration_ns = kMs});
  }
  b.pg_sessions.push_back({.session_id = 1,
                           .pid = kRecordBackendPid,
                           .backend_start_ns = kRecordT0 - kS,
                           .backend_type = "client backend",
                           .application_name = "django",
                           .client_port = -1,
                           .usename = "app",
                           .datname = "site",
                           .first_ash_tick = 1});
  return f;
}

}  // namespace stallscope::correlate::test_record
