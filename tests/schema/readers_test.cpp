// schema's readers (run_reader.h, sample_readers.h, fact_readers.h,
// attribution_readers.h, server_file.h) on small hand-made run files, with
// exact expected values.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "common/units.h"
#include "schema/attribution_readers.h"
#include "schema/fact_readers.h"
#include "schema/run_reader.h"
#include "schema/sample_readers.h"
#include "schema/server_file.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::schema {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000 * common::kNsPerS;
using test::kMs;

Store run_file(const test::TempDir& dir, const std::string& name = "run.db") {
  auto store = Store::create(dir.file(name));
  store.begin_run(test::run_info(kT0));
  return store;
}

TEST(RunReader, ReadsTheRunRowItsModeAndItsEnd) {
  test::TempDir dir;
  auto empty = Store::create(dir.file("empty.db"));
  EXPECT_FALSE(read_run(empty));
  EXPECT_FALSE(run_mode(empty));
  EXPECT_FALSE(run_conninfo(empty));

  auto store = run_file(dir);
  auto run = read_run(store);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->host, "db1");
  EXPECT_EQ(run->kernel, "6.1.0");
  EXPECT_EQ(run->cores, 2);
  EXPECT_EQ(run->mode, "run");
  EXPECT_EQ(run->status, "running");
  EXPECT_EQ(run->start_ns, kT0);
  EXPECT_FALSE(run->end_ns);
  EXPECT_EQ(run->clients, 2);
  EXPECT_EQ(run->threads, 1);
  EXPECT_EQ(run->protocol, "simple");
  EXPECT_EQ(run->sql, "SELECT 1");
  EXPECT_FALSE(run->end_reason);
  EXPECT_EQ(run->hz, 10);
  EXPECT_EQ(run->stallscope_pid, 100);
  EXPECT_FALSE(run->stallscope_start_ticks);
  EXPECT_EQ(run->clock_ticks_per_s, 100);
  EXPECT_EQ(run_mode(store), RunMode::run);
  EXPECT_FALSE(run_conninfo(store));

  store.end_run(kT0 + 5 * common::kNsPerS, "complete", "duration reached");
  run = read_run(store);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->status, "complete");
  EXPECT_EQ(run->end_ns, kT0 + 5 * common::kNsPerS);
  EXPECT_EQ(run->end_reason, "duration reached");
}

TEST(RunReader, RunModeNamesEveryMode) {
  for (auto mode : {RunMode::run, RunMode::record, RunMode::import_pgbench}) {
    EXPECT_EQ(parse_run_mode(to_string(mode)), mode);
  }
  EXPECT_EQ(to_string(RunMode::import_pgbench), "import-pgbench");
  EXPECT_FALSE(parse_run_mode("import_pgbench"));
  EXPECT_FALSE(parse_run_mode(""));
}

TEST(RunReader, PgbenchAggregateSpanStepsWithinOneFile) {
  test::TempDir dir;
  auto store = run_file(dir);
  EXPECT_FALSE(pgbench_aggregate_span(store));
  EXPECT_FALSE(pgbench_aggregate_totals(store));
  Batch b;
  auto row = [](std::string file, std::int64_t line, std::int64_t start_ns, std::int64_t xacts) {
    PgbenchAggregateRow r;
    r.file = std::move(file);
    r.line = line;
    r.interval_start_ns = start_ns;
    r.transactions = xacts;
    r.latency_sum_ns = xacts * kMs;
    return r;
  };
  // File a: every 2 s; file b: one interval, 1 s after a's first.
  b.pgbench_aggregates.push_back(row("a", 1, kT0, 10));
  b.pgbench_aggregates.push_back(row("a", 2, kT0 + 2 * common::kNsPerS, 20));
  b.pgbench_aggregates.push_back(row("a", 3, kT0 + 4 * common::kNsPerS, 30));
  b.pgbench_aggregates.push_back(row("b", 1, kT0 + common::kNsPerS, 40));
  b.pgbench_aggregates[1].serialization_failures = 1;
  b.pgbench_aggregates[2].deadlock_failures = 2;
  b.pgbench_aggregates[3].skipped = 5;
  b.pgbench_aggregates[0].latency_min_ns = 300'000;
  b.pgbench_aggregates[3].latency_max_ns = 9 * kMs;
  store.write(b);

  const auto span = pgbench_aggregate_span(store);
  ASSERT_TRUE(span);
  EXPECT_EQ(span->start_ns, kT0);
  EXPECT_EQ(span->interval_ns, 2 * common::kNsPerS);  // not a→b's 1 s
  EXPECT_EQ(span->end_ns, kT0 + 6 * common::kNsPerS);
  const auto totals = pgbench_aggregate_totals(store);
  ASSERT_TRUE(totals);
  EXPECT_EQ(totals->intervals, 4);
  EXPECT_EQ(totals->transactions, 100);
  EXPECT_EQ(totals->failures, 3);
  EXPECT_EQ(totals->skipped, 5);
  EXPECT_EQ(totals->latency_sum_ns, 100 * kMs);
  EXPECT_EQ(totals->latency_min_ns, 300'000);
  EXPECT_EQ(totals->latency_max_ns, 9 * kMs);
  EXPECT_FALSE(totals->lag_sum_ns);
  const auto intervals = pgbench_aggregate_intervals(store);
  ASSERT_EQ(intervals.size(), 4u);
  EXPECT_EQ(intervals[1].start_ns, kT0 + common::kNsPerS);  // b's, by start
  EXPECT_EQ(intervals[1].transactions, 40);
  EXPECT_EQ(intervals[2].failures, 1);
  EXPECT_EQ(intervals[3].failures, 2);
}

TEST(RunReader, OneIntervalPerFileSpansOneSecond) {
  test::TempDir dir;
  auto store = run_file(dir);
  Batch b;
  b.pgbench_aggregates.push_back({.file = "a", .line = 1, .interval_start_ns = kT0});
  store.write(b);
  const auto span = pgbench_aggregate_span(store);
  ASSERT_TRUE(span);
  EXPECT_EQ(span->interval_ns, common::kNsPerS);
  EXPECT_EQ(span->end_ns, kT0 + common::kNsPerS);
}

TEST(SampleReaders, HostTicksReadEachTickAndItsCpuDeltas) {
  test::TempDir dir;
  auto store = run_file(dir);
  Batch b;
  for (std::int64_t id = 1; id <= 3; ++id) {
    b.samples.push_back({.sample_id = id,
                         .time_ns = kT0 + id * 100 * kMs,
                         .mono_ns = id * 100 * kMs,
                         .sampler_cpu_ns = id * 1000});
  }
  // Tick 1: no CPU deltas yet; tick 2: deltas; tick 3: no host row.
  b.host_samples.push_back({.sample_id = 1, .procs_running = 3});
  b.host_samples.push_back({.sample_id = 2,
                            .cpu_user_ns = 10,
                            .cpu_nice_ns = 1,
                            .cpu_system_ns = 5,
                            .cpu_idle_ns = 100,
                            .cpu_iowait_ns = 7,
                            .cpu_irq_ns = 2,
                            .cpu_softirq_ns = 3,
                            .cpu_steal_ns = 4,
                            .procs_running = 4,
                            .processes_d_state = 1});
  store.write(b);

  HostTicks ticks(store, kT0, kT0 + 300 * kMs);
  HostTick t;
  ASSERT_TRUE(ticks.next(t));
  EXPECT_EQ(t.time_ns, kT0 + 100 * kMs);
  EXPECT_EQ(t.sampler_cpu_ns, 1000);
  EXPECT_TRUE(t.has_host);
  EXPECT_FALSE(t.has_cpu);
  EXPECT_EQ(t.procs_running, 3);
  ASSERT_TRUE(ticks.next(t));
  EXPECT_TRUE(t.has_cpu);
  EXPECT_EQ(t.busy_ns, 21);  // user + nice + system + irq + softirq
  EXPECT_EQ(t.idle_ns, 100);
  EXPECT_EQ(t.iowait_ns, 7);
  EXPECT_EQ(t.steal_ns, 4);
  EXPECT_EQ(t.procs_running, 4);
  EXPECT_EQ(t.processes_d_state, 1);
  ASSERT_TRUE(ticks.next(t));
  EXPECT_EQ(t.time_ns, kT0 + 300 * kMs);
  EXPECT_FALSE(t.has_host);
  EXPECT_FALSE(ticks.next(t));

  // (from_ns, to_ns]: the tick at from_ns is left out.
  HostTicks one(store, kT0 + 100 * kMs, kT0 + 200 * kMs);
  ASSERT_TRUE(one.next(t));
  EXPECT_EQ(t.time_ns, kT0 + 200 * kMs);
  EXPECT_FALSE(one.next(t));

  const auto range = sample_ticks(store);
  EXPECT_EQ(range.rows, 3);
  EXPECT_EQ(range.first_ns, kT0 + 100 * kMs);
  EXPECT_EQ(range.last_ns, kT0 + 300 * kMs);
}

TEST(FactReaders, ConnectsInCountsTheSpansConnections) {
  test::TempDir dir;
  auto store = run_file(dir);
  Batch b;
  b.clients.push_back({.client_id = 0,
                       .backend_pid = 500,
                       .connect_ns = kT0 + 1000 * kMs,
                       .connect_latency_ns = 2 * kMs});
  b.clients.push_back(
      {.client_id = 1, .connect_ns = kT0 + 2000 * kMs, .connect_latency_ns = 3 * kMs});
  b.clients.push_back({.client_id = 2, .connect_ns = kT0 + 3000 * kMs});  // latency unknown
  b.clients.push_back({.client_id = 3, .connect_ns = kT0 + 9000 * kMs, .connect_latency_ns = kMs});
  store.write(b);

  const auto in = connects_in(store, kT0, kT0 + 5000 * kMs);
  EXPECT_EQ(in.connections, 3);
  EXPECT_EQ(in.connect_latency_ns, 5 * kMs);
  // [from_ns, to_ns): a connection at to_ns is left out.
  EXPECT_EQ(connects_in(store, kT0 + 1000 * kMs, kT0 + 2000 * kMs).connections, 1);
  // No host_memory_sample rows: zero sums.
  const auto memory = host_memory_totals(store, kT0, kT0 + 5000 * kMs);
  EXPECT_EQ(memory.rows, 0);
  EXPECT_EQ(memory.major_faults, 0);
  EXPECT_FALSE(sample_ids_in(store, kT0, kT0 + 5000 * kMs));
}

TEST(AttributionReaders, ScansGiveBackendsAndSendIntervals) {
  test::TempDir dir;
  auto store = run_file(dir);
  Batch b;
  b.clients.push_back({.client_id = 0, .connection = 0, .backend_pid = 500});
  b.clients.push_back({.client_id = 1, .connection = 0});  // pid unknown
  b.queries.push_back(
      {.client_id = 0, .seq = 0, .start_ns = kT0 + 1000, .latency_ns = 500, .connection = 0});
  b.queries.push_back(
      {.client_id = 1, .seq = 0, .start_ns = kT0 + 2000, .latency_ns = 300, .lag_ns = 100});
  b.queries.push_back({.client_id = 0, .seq = 1, .start_ns = kT0 + 5000, .latency_ns = 10});
  store.write(b);

  ClientBackendScan backends(store);
  ClientBackend cb;
  ASSERT_TRUE(backends.next(cb));
  EXPECT_EQ(cb.client_id, 0);
  EXPECT_EQ(cb.connection, 0);
  EXPECT_EQ(cb.backend_pid, 500);
  EXPECT_FALSE(backends.next(cb));
  EXPECT_TRUE(queries_name_connections(store));

  QuerySendScan sends(store, kT0 + 4000);
  QuerySend q;
  ASSERT_TRUE(sends.next(q));
  EXPECT_EQ(q.start_ns, kT0 + 1000);
  EXPECT_EQ(q.sent_ns, kT0 + 1000);
  EXPECT_EQ(q.answered_ns, kT0 + 1500);
  EXPECT_EQ(q.key, 0);
  ASSERT_TRUE(sends.next(q));
  EXPECT_EQ(q.sent_ns, kT0 + 2100);  // after its lag
  EXPECT_EQ(q.answered_ns, kT0 + 2300);
  EXPECT_EQ(q.key, (std::int64_t{1} << 24) + kQuerySendNoConnection);
  EXPECT_FALSE(sends.next(q));  // the third was sent after until_ns
}

TEST(ServerFile, AttachedFileGivesItsSampleSpanHostAndCores) {
  test::TempDir dir;
  {
    auto server = run_file(dir, "server.db");
    Batch b;
    b.samples.push_back({.sample_id = 1, .time_ns = kT0 + 100 * kMs});
    b.samples.push_back({.sample_id = 2, .time_ns = kT0 + 900 * kMs});
    server.write(b);
  }
  auto client = run_file(dir);
  Batch b;
  b.clock_offsets.push_back({.time_ns = kT0 + 2000, .offset_ns = -7, .uncertainty_ns = 3});
  b.clock_offsets.push_back({.time_ns = kT0 + 1000, .offset_ns = 5, .uncertainty_ns = 2});
  client.write(b);

  const auto offsets = clock_offsets(client);
  ASSERT_EQ(offsets.size(), 2u);
  EXPECT_EQ(offsets[0].time_ns, kT0 + 1000);  // in time order
  EXPECT_EQ(offsets[0].offset_ns, 5);
  EXPECT_EQ(offsets[1].offset_ns, -7);
  EXPECT_EQ(offsets[1].uncertainty_ns, 3);

  AttachedServerFile server(client, dir.file("server.db"));
  const auto span = server.sample_span();
  ASSERT_TRUE(span);
  EXPECT_EQ(span->first_ns, kT0 + 100 * kMs);
  EXPECT_EQ(span->last_ns, kT0 + 900 * kMs);
  EXPECT_EQ(server.host(), "db1");
  EXPECT_EQ(server.cores(), 2);
}

TEST(ServerFile, AFileThatCannotBeAttachedThrowsSqliteError) {
  test::TempDir dir;
  auto client = run_file(dir);
  try {
    AttachedServerFile server(client, dir.file("no-such-dir/server.db"));
    FAIL() << "attached";
  } catch (const SqliteError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::sqlite);
    EXPECT_EQ(e.code() & 0xff, 14);  // SQLITE_CANTOPEN
    EXPECT_FALSE(is_busy(e));
  }
}

}  // namespace
}  // namespace stallscope::schema
