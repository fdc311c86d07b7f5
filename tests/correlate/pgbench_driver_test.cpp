// An imported pgbench log explained with a record file (explain_pair):
// pgbench and its backends found in hand-made record files, with exact
// figures; and the pids pgbench's log file names carry.
#include <algorithm>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "correlate/correlate.h"
#include "correlate/passes.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using test::kMs;
using test::kS;
constexpr std::int64_t kT0 = 1'700'000'000 * kS;
constexpr int kPgbenchPid = 4242;

std::int64_t part_ns(const Accounting& a, const std::string& name) {
  for (const auto& p : a.parts)
    if (p.name == name) return p.time_ns;
  return -1;
}

schema::RunInfo run(const std::string& mode, const std::string& command_line,
                    std::optional<int> clients) {
  schema::RunInfo r;
  r.mode = mode;
  r.host = "db1";
  r.kernel = "6.1.0";
  r.cores = 4;
  r.clock_ticks_per_s = 100;
  r.start_ns = kT0 - kS;
  r.command_line = command_line;
  r.tool_version = "fixture";
  r.hz = 1;
  r.stallscope_pid = 77;
  r.clients = clients;
  return r;
}

// imp.db: an imported log of `clients` pgbench clients, one 1 s transaction
// each per second over 10 s (pgbench_log.4242 and .4242.1).
void write_imported(const std::string& path, int clients) {
  auto store = schema::Store::create(path);
  store.begin_run(run("import-pgbench",
                      "stallscope import-pgbench -o imp.db /logs/pgbench_log.4242 "
                      "/logs/pgbench_log.4242.1",
                      clients));
  schema::Batch b;
  for (int c = 0; c < clients; ++c) {
    for (int k = 0; k < 10; ++k)
      b.queries.push_back({.client_id = c, .seq = k, .start_ns = kT0 + k * kS, .latency_ns = kS});
  }
  store.write(b);
  store.end_run(kT0 + 10 * kS, "complete", "imported");
}

// rec.db, sampled every second over the same 10 s: two pgbench processes
// (4242, 300 ms CPU and 50 ms run delay a second; 5000, 500 ms), four
// client backends of postmaster 90 ("postgres: bench db [local]") — 300
// and 301 started as pgbench 4242 connected, 302 too but ASH saw it as
// application 'psql', 303 long before; 304 started as pgbench connected but
// keeps the postmaster's command line — each 100 ms CPU a second; ASH every
// 100 ms: pid 300 as 'pgbench' waiting on a Lock at every 10th poll (when
// `ash_pgbench`), 302 as 'psql' on every 10th, 301 once as it started (no
// application_name yet, no state).
void write_record(const std::string& path, bool ash_pgbench) {
  auto store = schema::Store::create(path);
  store.begin_run(run("record", "stallscope record --pg x -o rec.db", std::nullopt));
  schema::Batch b;
  for (int i = 0; i <= 10; ++i) {
    b.samples.push_back({.sample_id = i + 1,
                         .time_ns = kT0 + i * kS,
                         .mono_ns = i * kS,
                         .interval_ns = i ? std::optional<std::int64_t>(kS) : std::nullopt,
                         .sampler_cpu_ns = 20 * kMs,
                         .sampler_duration_ns = kMs});
  }
  const std::int64_t pgbench_start = kT0 - kS;
  struct P {
    std::int64_t id;
    int pid;
    std::int64_t start_ns;
    const char* comm;
    const char* cmdline;
    std::int64_t cpu_ns, run_delay_ns;
  };
  const P procs[] = {
      {1, kPgbenchPid, pgbench_start, "pgbench", "pgbench -c 2 -l", 300 * kMs, 50 * kMs},
      {2, 5000, pgbench_start, "pgbench", "pgbench -c 9", 500 * kMs, 0},
      {10, 300, pgbench_start + 10 * kMs, "postgres", "postgres: bench db [local] idle", 100 * kMs,
       0},
      {11, 301, pgbench_start + 20 * kMs, "postgres", "postgres: bench db [local] idle", 100 * kMs,
       0},
      {12, 302, pgbench_start + 30 * kMs, "postgres", "postgres: bench db [local] idle", 100 * kMs,
       0},
      {13, 303, kT0 - 20 * kS, "postgres", "postgres: bench db [local] idle", 100 * kMs, 0},
      // First sampled before it set its title: the postmaster's command line.
      {14, 304, pgbench_start + 40 * kMs, "postgres", "/usr/lib/postgresql/15/bin/postgres -D d",
       100 * kMs, 0},
  };
  for (const auto& p : procs) {
    b.processes.push_back({.process_id = p.id,
                           .pid = p.pid,
                           .start_ticks = 1000 + p.id,
                           .start_ns = p.start_ns,
                           .ppid = p.comm == std::string("postgres") ? 90 : 1,
                           .comm = p.comm,
                           .cmdline = p.cmdline,
                           .first_sample_id = 1});
    for (int i = 1; i <= 10; ++i) {
      schema::ProcessSampleRow row{.sample_id = i + 1, .process_id = p.id};
      row.state = 'S';
      row.cpu_ns = p.cpu_ns;
      row.run_delay_ns = p.run_delay_ns;
      row.span_ns = kS;
      b.process_samples.push_back(row);
    }
  }
  for (int k = 0; k < 100; ++k) {
    const auto t = kT0 + k * 100 * kMs;
    b.ash_ticks.push_back({.ash_tick = k + 1, .time_ns = t, .duration_ns = kMs});
    if (k == 0) {
      // 301 as it started: no application_name yet.
      b.pg_activity.push_back({.time_ns = t,
                               .ash_tick = k + 1,
                               .pid = 301,
                               .backend_type = "client backend",
                               .application_name = ""});
    }
    if (k % 10 != 0) continue;
    if (ash_pgbench) {
      b.pg_activity.push_back({.time_ns = t,
                               .ash_tick = k + 1,
                               .pid = 300,
                               .backend_type = "client backend",
                               .state = "active",
                               .wait_event_type = "Lock",
                               .wait_event = "transactionid",
                               .application_name = "pgbench",
                               .backend_start_ns = pgbench_start + 10 * kMs});
    }
    b.pg_activity.push_back({.time_ns = t,
                             .ash_tick = k + 1,
                             .pid = 302,
                             .backend_type = "client backend",
                             .state = "active",
                             .wait_event_type = "Lock",
                             .wait_event = "tuple",
                             .application_name = "psql"});
  }
  store.write(b);
  store.end_run(kT0 + 11 * kS, "complete", "duration reached");
}

TEST(CorrelatePgbench, ThePgbenchNamedByTheLogIsTheDriverAndItsBackendsTheServer) {
  test::TempDir dir;
  write_imported(dir.file("imp.db"), 3);
  write_record(dir.file("rec.db"), true);
  auto store = schema::Store::open_readwrite(dir.file("imp.db"));
  const auto r = explain_pair(store, dir.file("rec.db"), {});
  ASSERT_TRUE(r.pgbench);
  const auto& pg = *r.pgbench;
  EXPECT_EQ(pg.pid, kPgbenchPid);  // not 5000, which used more CPU
  EXPECT_EQ(pg.found_by, "log file name");
  EXPECT_EQ(pg.processes, 2);
  // 300 by ASH; 301 and the untitled 304 by their start; 302 is psql's,
  // 303 older than pgbench.
  EXPECT_EQ(pg.backend_pids, (std::vector<int>{300, 301, 304}));
  EXPECT_EQ(pg.backends_by_application_name, 1);
  EXPECT_EQ(pg.backends_by_start, 2);
  EXPECT_EQ(pg.backend_processes, 3);
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  // pgbench's whole process CPU (no sampler CPU subtracted) and run delay.
  EXPECT_EQ(part_ns(a, "driver_cpu"), 3 * kS);
  EXPECT_EQ(part_ns(a, "client_run_queue"), 500 * kMs);
  // Its three backends' CPU; pid 300's ASH waits only (not psql's).
  EXPECT_EQ(part_ns(a, "server_cpu"), 3 * kS);
  EXPECT_EQ(part_ns(a, "server_wait:Lock"), 1 * kS);
  EXPECT_EQ(part_ns(a, "run_queue"), 0);
  // The parts add up to the query time (Σ latency: 3 clients × 10 × 1 s).
  EXPECT_EQ(a.query_ns, 30 * kS);
  EXPECT_EQ(a.excess_ns, 0);
  std::int64_t sum = 0;
  for (const auto& p : a.parts) sum += p.time_ns;
  EXPECT_EQ(sum, a.query_ns);
  EXPECT_EQ(pg.cpu_ns, 3 * kS);
  EXPECT_EQ(pg.run_delay_ns, 500 * kMs);
  EXPECT_EQ(to_string(r.attribution->method), "host_wide");
  EXPECT_NE(r.attribution->reason.find("pgbench's 3 backends"), std::string::npos);
  ASSERT_EQ(r.hosts.size(), 2u);
  EXPECT_EQ(r.hosts[0].role, "client");
  EXPECT_EQ(r.hosts[0].host, "db1");
  EXPECT_NE(r.notes.front().find("no shift is needed"), std::string::npos) << r.notes.front();
  EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.starts_with(
        "pgbench found in the record file: pid 4242 (its pid is in the imported "
        "log files' names)");
  }));
  const auto j = to_json(r);
  EXPECT_EQ(j["pgbench"]["pid"], kPgbenchPid);
  EXPECT_EQ(j["pgbench"]["backends_by_start"], 2);
}

// Without ASH rows of pgbench's backends, any client backend started as
// pgbench connected counts — but not when more started than the log's
// clients: then none, and the note says so.
TEST(CorrelatePgbench, BackendsByStartAreCappedByTheLogsClients) {
  test::TempDir dir;
  write_record(dir.file("rec.db"), false);
  write_imported(dir.file("two.db"), 2);
  {
    auto store = schema::Store::open_readwrite(dir.file("two.db"));
    const auto r = explain_pair(store, dir.file("rec.db"), {});
    ASSERT_TRUE(r.pgbench);
    EXPECT_EQ(r.pgbench->backend_pids, (std::vector<int>{300, 301}));
    EXPECT_EQ(r.pgbench->backends_by_start, 2);
  }
  write_imported(dir.file("one.db"), 1);
  auto store = schema::Store::open_readwrite(dir.file("one.db"));
  const auto r = explain_pair(store, dir.file("rec.db"), {});
  ASSERT_TRUE(r.pgbench);
  EXPECT_TRUE(r.pgbench->backend_pids.empty());
  EXPECT_NE(r.pgbench->note.find("2 client backends started as pgbench connected, more than the "
                                 "log's 1 clients"),
            std::string::npos)
      << r.pgbench->note;
}

TEST(CorrelatePgbench, LogFileNamesGiveTheirPids) {
  using detail::pids_in_log_names;
  EXPECT_EQ(pids_in_log_names("stallscope import-pgbench -o x.db /tmp/pgbench_log.4242 "
                              "/tmp/pgbench_log.4242.1 /tmp/pgbench_log.4242.2"),
            (std::vector<int>{1, 2, 4242}));
  EXPECT_EQ(pids_in_log_names("import-pgbench -o a.db run.7/tx.99"), (std::vector<int>{99}));
  // Not pids: no number after a dot, a leading dot, more than pid_max.
  EXPECT_TRUE(pids_in_log_names("import-pgbench -o a.db log .5 x.99999999 y.0").empty());
}

}  // namespace
}  // namespace stallscope::correlate
