// The correlator on hand-made run files with exact numbers (run_fixture.h):
// the wait findings: lock_wait, lwlock_wait, io_wait, memory_pressure, kernel_wait,
// connection_setup, connection_lost.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/format.h"
#include "correlate/run_fixture.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using namespace test_run;

TEST(CorrelateFinding, LockWaitRanksFirstWhenBackendsWaitOnLocks) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  fx.rows(kBackendId[0], 20);
  fx.rows(kBackendId[1], 20);
  fx.ash(kBackendPid[0], "Lock", "transactionid", 70);
  fx.ash(kBackendPid[1], "Lock", "transactionid", 60, 10);
  fx.ash(kBackendPid[1], "Timeout", "PgSleep", 10);
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "lock_wait");
  EXPECT_DOUBLE_EQ(r.findings[0].score, 0.65);  // 130 samples × 0.1 s ÷ 20 s
  EXPECT_EQ(evidence<std::int64_t>(r.findings[0], "ash_samples"), 130);
  EXPECT_EQ(evidence<std::string>(r.findings[0], "top_wait_event"), "Lock:transactionid");
  EXPECT_EQ(finding(r, "io_wait"), nullptr);
  EXPECT_EQ(finding(r, "steal"), nullptr);
  EXPECT_EQ(finding(r, "lwlock_wait"), nullptr);
}

TEST(CorrelateFinding, LwlockWaitFiresOnLWLockSamples) {
  Fixture fx;
  fx.host({});
  fx.ash(kBackendPid[0], "LWLock", "WALWrite", 40);
  auto r = fx.explain();
  const auto* f = finding(r, "lwlock_wait");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f->score, 0.2);
  EXPECT_EQ(finding(r, "lock_wait"), nullptr);
}

TEST(CorrelateFinding, IoWaitRanksFirstOnDStateAndIoWaits) {
  Fixture fx;
  fx.host({.user_ms = 100, .idle_ms = 1000, .iowait_ms = 900, .d_state = 2});
  fx.rows(kDriverId, 50);
  fx.rows(kBackendId[0], 20, 0, 8);  // D in 8 of 10 samples: 8 s
  fx.rows(kBackendId[1], 20, 0, 8);
  fx.ash(kBackendPid[0], "IO", "DataFileRead", 50);
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "io_wait");
  // max(ASH 5 s, D state 16 s) ÷ 20 s.
  EXPECT_DOUBLE_EQ(r.findings[0].score, 0.8);
  EXPECT_EQ(evidence<std::int64_t>(r.findings[0], "backend_d_state_samples"), 16);
  EXPECT_EQ(evidence<std::string>(r.findings[0], "top_wchan"), "folio_wait_bit_common");
  EXPECT_EQ(finding(r, "lock_wait"), nullptr);
}

TEST(CorrelateFinding, IoWaitClaimsTheWalWriteQueueWhenStorageIsSlow) {
  Fixture fx;
  fx.host({});
  fx.ash(kBackendPid[0], "IO", "WALSync", 40);
  fx.ash(kBackendPid[1], "LWLock", "WALWrite", 80);
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "io_wait");
  // (40 IO + 80 WALWrite queue) × 0.1 s ÷ 20 s: committers queued behind a
  // WAL flush wait on storage, not on an internal lock.
  EXPECT_DOUBLE_EQ(r.findings[0].score, 0.6);
  EXPECT_EQ(evidence<std::int64_t>(r.findings[0], "ash_wal_queue_samples"), 80);
  EXPECT_EQ(finding(r, "lwlock_wait"), nullptr);
}

// An outage that took most of the query time leads the verdict even though
// the backends also waited on locks: both clients lost their connection at
// 3 s (57P01) and failed to reconnect until 9 s (08001 rows), 12 s of the
// 20 s of query time; the lock waits in windows 0–2 are 6 s.
TEST(CorrelateFinding, AnOutageLeadsTheVerdictWhenItIsTheLargestShare) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  for (auto& q : fx.batch().queries) {
    if (q.seq < 3 || q.seq > 8) continue;
    q.connection.reset();
    fx.batch().query_errors.push_back(
        {.client_id = q.client_id,
         .seq = q.seq,
         .start_ns = q.start_ns,
         .sqlstate = q.seq == 3 ? "57P01" : "08001",
         .error = q.seq == 3 ? "terminating connection due to administrator command"
                             : "cannot reconnect: connection refused"});
  }
  for (int c = 0; c < 2; ++c) fx.ash(kBackendPid[c], std::string("Lock"), std::string("tuple"), 30);
  auto r = fx.explain();
  ASSERT_TRUE(r.accounting.has_value());
  EXPECT_EQ(part_ns(*r.accounting, "connection_lost"), 12 * kS);
  const auto* x = finding(r, "connection_lost");
  ASSERT_NE(x, nullptr);
  EXPECT_DOUBLE_EQ(x->score, 0.6);
  EXPECT_NE(finding(r, "lock_wait"), nullptr);  // still reported, second
  ASSERT_TRUE(r.verdict.kind.has_value());
  EXPECT_EQ(to_string(*r.verdict.kind), "connection_lost");
  EXPECT_NE(x->summary.find("2 queries lost their connection and 10 connection attempts failed "
                            "(SQLSTATE 08001 ×10, 57P01 ×2)"),
            std::string::npos)
      << x->summary;
  EXPECT_EQ(x->culprit,
            "server unreachable 3.0–9.0 s: connections lost with SQLSTATE 57P01 (admin shutdown), "
            "10 reconnect attempts failed");
  EXPECT_EQ(evidence<std::int64_t>(*x, "lost_queries"), 2);
  EXPECT_EQ(evidence<std::int64_t>(*x, "connect_failures"), 10);
}

// A lost connection or two in a long run is no finding (below 5 % of query
// time), only a stall.
TEST(CorrelateFinding, AShortOutageIsNoFinding) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  for (auto& q : fx.batch().queries) {
    if (q.seq != 5 || q.client_id != 1) continue;
    q.latency_ns = 10 * kMs;
    fx.batch().query_errors.push_back(
        {.client_id = 1, .seq = 5, .start_ns = q.start_ns, .sqlstate = "57P01"});
  }
  auto r = fx.explain();
  EXPECT_EQ(finding(r, "connection_lost"), nullptr);
}

// Rows of process `id` in state `state` with `wchan` at samples i = 1..n
// (no CPU), as a task asleep in the kernel.
void sleep_rows(Fixture& fx, std::int64_t id, char state, const std::string& wchan, int n) {
  for (int i = 1; i <= n; ++i) {
    schema::ProcessSampleRow r{.sample_id = i + 1, .process_id = id};
    r.state = state;
    r.wchan = wchan;
    r.cpu_ns = 0;
    r.run_delay_ns = 0;
    r.span_ns = kS;
    fx.batch().process_samples.push_back(r);
  }
}

// host_memory_sample rows at samples i = 1..10 with these per-tick figures.
void memory_rows(Fixture& fx, std::int64_t psi_some_us, std::int64_t psi_full_us,
                 std::int64_t major_faults, std::int64_t swap_in_pages) {
  for (int i = 1; i <= 10; ++i) {
    schema::HostMemorySampleRow m{.sample_id = i + 1};
    m.psi_memory_some_us = psi_some_us;
    m.psi_memory_full_us = psi_full_us;
    m.major_faults = major_faults;
    m.swap_in_pages = swap_in_pages;
    m.swap_out_pages = 0;
    fx.batch().host_memory_samples.push_back(m);
  }
}

TEST(CorrelateFinding, MemoryPressureFiresOnPsiFullAndReclaimWaits) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100, 0, 3, "mem_cgroup_handle_over_high");
  fx.rows(kBackendId[1], 100);
  // PSI memory: some 500 ms, full 200 ms of every 1 s tick; 50 major faults.
  memory_rows(fx, 500'000, 200'000, 50, 20);
  auto r = fx.explain();
  const auto* m = finding(r, "memory_pressure");
  ASSERT_NE(m, nullptr);
  // max(3 reclaim rows × 1 s ÷ 20 s = 0.15, PSI full 0.2) = 0.2.
  EXPECT_DOUBLE_EQ(m->score, 0.2);
  EXPECT_DOUBLE_EQ(evidence<double>(*m, "psi_memory_some_share"), 0.5);
  EXPECT_EQ(evidence<std::int64_t>(*m, "path_memory_wait_samples"), 3);
  EXPECT_EQ(evidence<std::int64_t>(*m, "host_major_faults"), 500);
  EXPECT_EQ(evidence<std::int64_t>(*m, "swap_in_pages"), 200);
  EXPECT_NE(evidence<std::string>(*m, "top_wchan").find("mem_cgroup_handle_over_high"),
            std::string::npos);
  EXPECT_NE(m->suggestion.find("memory"), std::string::npos);
  // Reclaim is not storage: the D rows do not make an io_wait.
  EXPECT_EQ(finding(r, "io_wait"), nullptr);
}

TEST(CorrelateFinding, MemoryPressureStaysSilentBelowItsThreshold) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100);
  fx.rows(kBackendId[1], 100);
  // PSI full 40 ms per second (0.04 < 0.05); faults alone are not a time.
  memory_rows(fx, 300'000, 40'000, 1000, 0);
  auto r = fx.explain();
  EXPECT_EQ(finding(r, "memory_pressure"), nullptr);
}

TEST(CorrelateFinding, KernelWaitNamesThePipeAndTheWaitEvents) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  sleep_rows(fx, kBackendId[0], 'S', "anon_pipe_write", 4);  // a full log pipe
  fx.rows(kBackendId[1], 100);
  fx.ash(kBackendPid[1], "IPC", "ParallelFinish", 10);
  auto r = fx.explain();
  const auto* k = finding(r, "kernel_wait");
  ASSERT_NE(k, nullptr);
  // 4 rows × 1 s + 10 ASH rows × 100 ms = 5 s of 20 s.
  EXPECT_DOUBLE_EQ(k->score, 0.25);
  EXPECT_EQ(evidence<std::int64_t>(*k, "os_wait_samples"), 4);
  EXPECT_EQ(evidence<std::int64_t>(*k, "ash_samples"), 10);
  EXPECT_EQ(evidence<std::string>(*k, "top_wchan"), "backend anon_pipe_write (4)");
  EXPECT_EQ(evidence<std::string>(*k, "top_wait_events"), "IPC:ParallelFinish (10)");
  EXPECT_NE(k->summary.find("anon_pipe_write"), std::string::npos);
  EXPECT_EQ(finding(r, "io_wait"), nullptr);
}

TEST(CorrelateFinding, KernelWaitIgnoresLatchFutexAndStorageSleeps) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  // Idle or lock waits on the latch, an LWLock futex, a page read: other kinds.
  sleep_rows(fx, kBackendId[0], 'S', "do_epoll_wait", 10);
  sleep_rows(fx, kBackendId[1], 'S', "futex_do_wait", 5);
  fx.process(40, 400, "postgres", kT0 - 10 * kS);
  auto r = fx.explain();
  EXPECT_EQ(finding(r, "kernel_wait"), nullptr);
  // One ASH Timeout row (100 ms of 20 s) stays below the threshold too.
  Fixture fy;
  fy.host({});
  fy.rows(kBackendId[0], 100);
  fy.ash(kBackendPid[0], "Timeout", "PgSleep", 9);
  EXPECT_EQ(finding(fy.explain(), "kernel_wait"), nullptr);
}

TEST(CorrelateFinding, LockWaitCountsBufferPinWaits) {
  Fixture fx;
  fx.host({});
  fx.rows(kBackendId[0], 100);
  fx.ash(kBackendPid[0], "BufferPin", "BufferPin", 30);
  auto r = fx.explain();
  const auto* l = finding(r, "lock_wait");
  ASSERT_NE(l, nullptr);
  EXPECT_DOUBLE_EQ(l->score, 0.15);  // 30 × 100 ms ÷ 20 s
  EXPECT_EQ(evidence<std::int64_t>(*l, "ash_bufferpin_samples"), 30);
  EXPECT_EQ(evidence<std::string>(*l, "top_wait_event"), "BufferPin:BufferPin");
}

// `n` driver connections opened during the queries, `latency_ms` each.
void connections(Fixture& fx, int n, std::int64_t latency_ms) {
  for (int i = 0; i < n; ++i) {
    fx.batch().clients.push_back({.client_id = i % 2,
                                  .connection = 1 + i / 2,
                                  .thread = 0,
                                  .backend_pid = 3000 + i,
                                  .connect_ns = kT0 + i * (10 * kS / n) + kMs,
                                  .connect_latency_ns = latency_ms * kMs});
  }
}

TEST(CorrelateFinding, ConnectionSetupFiresWhenConnectingCostsClientTime) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100);
  fx.rows(kBackendId[1], 100);
  fx.ash(kBackendPid[0], std::nullopt, std::nullopt, 5);
  connections(fx, 8, 500);  // 8 reconnects of 500 ms: 4 s of 20 s
  auto r = fx.explain();
  const auto* k = finding(r, "connection_setup");
  ASSERT_NE(k, nullptr);
  EXPECT_DOUBLE_EQ(k->score, 0.2);
  EXPECT_EQ(evidence<std::int64_t>(*k, "connections"), 8);
  EXPECT_DOUBLE_EQ(evidence<double>(*k, "connections_per_s"), 0.8);
  EXPECT_DOUBLE_EQ(evidence<double>(*k, "connect_latency_mean_ms"), 500);
  EXPECT_EQ(evidence<std::int64_t>(*k, "connection_per_transaction"), 0);
  // The round trip keeps only the remainder connecting did not explain.
  const auto* rt = finding(r, "network_roundtrip");
  ASSERT_NE(rt, nullptr);
  EXPECT_NEAR(rt->score, r.accounting->remainder_ns / double(20 * kS) - 0.2, 1e-4);
}

TEST(CorrelateFinding, ConnectionSetupClaimsTheRemainderWithAConnectionPerTransaction) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100);
  fx.rows(kBackendId[1], 100);
  fx.ash(kBackendPid[0], std::nullopt, std::nullopt, 5);
  connections(fx, 20, 100);  // one per transaction (-C), 2 s of 20 s
  auto r = fx.explain();
  const auto* k = finding(r, "connection_setup");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(to_string(r.findings[0].kind), "connection_setup");
  EXPECT_EQ(evidence<std::int64_t>(*k, "connection_per_transaction"), 1);
  EXPECT_DOUBLE_EQ(evidence<double>(*k, "connect_latency_share"), 0.1);
  // 20 − 0.9 driver − 2 backends = 17.1 s of remainder, all set-up.
  EXPECT_DOUBLE_EQ(k->score, 0.855);
  EXPECT_EQ(finding(r, "network_roundtrip"), nullptr);
}

TEST(CorrelateFinding, ConnectionSetupStaysSilentForOneSlowReconnect) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100);
  connections(fx, 1, 500);  // 0.5 s of 20 s = 0.025
  auto r = fx.explain();
  EXPECT_EQ(finding(r, "connection_setup"), nullptr);
}

}  // namespace
}  // namespace stallscope::correlate
