// The correlator on hand-made run files with exact numbers (run_fixture.h):
// the CPU, path and closed-loop findings: latency_bound, errors, driver_stopped, runqueue, steal,
// server_cpu, client_cpu, single_thread, network_roundtrip.
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

// A closed loop on a host with headroom: 2 clients, each 1 s query holds
// 600 ms of its backend's CPU and 10 ms of run delay; the host is 60 % busy.
// Nothing is saturated or waiting, so the verdict is latency_bound: 2
// clients ÷ 1,000 ms = 2 q/s; at 0.6 s of CPU per answer 2 cores would
// saturate near 3.33 q/s, about 3.3 clients at today's latency. server_cpu
// stays beneath as the largest part of each answer.
TEST(CorrelateFinding, AClosedLoopOnAnIdleHostIsLatencyBound) {
  Fixture fx;
  fx.host({.user_ms = 1200, .idle_ms = 800});
  fx.rows(kBackendId[0], 600, 10);
  fx.rows(kBackendId[1], 600, 10);
  auto r = fx.explain();
  ASSERT_GE(r.findings.size(), 2u);
  EXPECT_EQ(to_string(r.findings[0].kind), "latency_bound");
  ASSERT_TRUE(r.verdict.kind);
  EXPECT_EQ(to_string(*r.verdict.kind), "latency_bound");
  EXPECT_EQ(to_string(r.findings[1].kind), "server_cpu");
  EXPECT_NE(r.findings[1].summary.find("largest part of each answer"), std::string::npos)
      << r.findings[1].summary;
  const auto& x = r.findings[0];
  EXPECT_DOUBLE_EQ(x.score, 1.0);  // the clients spent all their time waiting for answers
  EXPECT_EQ(evidence<std::int64_t>(x, "clients"), 2);
  EXPECT_NEAR(evidence<double>(x, "clients_per_latency_qps"), 2.0, 1e-4);
  EXPECT_NEAR(evidence<double>(x, "server_cpu_per_answer_ms"), 600.0, 1e-4);
  EXPECT_NEAR(evidence<double>(x, "cpu_saturation_qps_estimate"), 2.0 / 0.6, 1e-3);
  EXPECT_NEAR(evidence<double>(x, "clients_to_saturate_estimate"), 2.0 / 0.6, 1e-3);
  EXPECT_NEAR(evidence<double>(x, "host_idle_cores"), 0.8, 1e-4);
  EXPECT_NE(x.summary.find("2 clients waited for every answer"), std::string::npos) << x.summary;
  EXPECT_NE(x.summary.find("2 ÷ 1000.000 ms ≈ 2 q/s"), std::string::npos) << x.summary;
  EXPECT_NE(x.summary.find("server backend CPU 600.000 ms"), std::string::npos) << x.summary;
  EXPECT_EQ(r.verdict.summary, x.summary);
}

// The same loop on a saturated host (90 % busy) is server_cpu's, and with a
// lock wait among the findings, or run-queue delay beyond noise, it is not
// merely latency-bound either.
TEST(CorrelateFinding, ASaturatedHostAWaitOrQueueingIsNotLatencyBound) {
  {
    Fixture fx;
    fx.host({.user_ms = 1800, .idle_ms = 200});
    fx.rows(kBackendId[0], 600, 10);
    fx.rows(kBackendId[1], 600, 10);
    auto r = fx.explain();
    EXPECT_EQ(finding(r, "latency_bound"), nullptr);
    ASSERT_TRUE(r.verdict.kind);
    EXPECT_EQ(to_string(*r.verdict.kind), "server_cpu");
  }
  {
    Fixture fx;
    fx.host({.user_ms = 1200, .idle_ms = 800});
    fx.rows(kBackendId[0], 600, 10);
    fx.rows(kBackendId[1], 600, 10);
    for (int s = 0; s < 10; ++s) fx.ash(kBackendPid[0], "Lock", "transactionid", 2, 10 * s);
    auto r = fx.explain();
    ASSERT_NE(finding(r, "lock_wait"), nullptr);
    EXPECT_EQ(finding(r, "latency_bound"), nullptr);
  }
  {
    Fixture fx;
    fx.host({.user_ms = 1200, .idle_ms = 800});
    fx.rows(kBackendId[0], 600, 300);  // 30 % of each query queued for a CPU
    fx.rows(kBackendId[1], 600, 300);
    auto r = fx.explain();
    EXPECT_EQ(finding(r, "latency_bound"), nullptr);
  }
}

// A driver thread at 0.86 cores (net of the sampler) beside backends at 0.3
// each, the host 73 % busy: a closed loop nothing saturates, latency_bound.
// The same run on a host the hypervisor stole 100 ms a second from: the
// thread never left its core — 0.86 × (1,460 + 100) ÷ 1,460 ≈ 0.92 with its
// share of the steal — so the driver is at its limit and the loop is not
// merely latency-bound.
TEST(CorrelateFinding, ADriverThreadShortOfACoreOnlyByStealIsNotLatencyBound) {
  const auto explained = [](std::int64_t steal_ms) {
    Fixture fx;
    fx.host({.user_ms = 1460, .idle_ms = 540 - steal_ms, .steal_ms = steal_ms});
    fx.rows(kDriverId, 870);
    fx.rows(kBackendId[0], 300);
    fx.rows(kBackendId[1], 300);
    return fx.explain();
  };
  const auto unstolen = explained(0);
  ASSERT_FALSE(unstolen.findings.empty());
  EXPECT_EQ(to_string(unstolen.findings[0].kind), "latency_bound");
  const auto stolen = explained(100);
  EXPECT_EQ(finding(stolen, "latency_bound"), nullptr);
  ASSERT_FALSE(stolen.findings.empty());
  EXPECT_EQ(to_string(stolen.findings[0].kind), "client_cpu") << stolen.findings[0].summary;
}

// Every transaction failed with a syntax error (a script split inside a
// dollar-quoted block): the verdict is errors, ranked first whatever the
// CPU parts, with the SQLSTATE, a message and the statement; no stall is
// computed against typical windows that answered nothing.
TEST(CorrelateFinding, MostTransactionsFailedIsTheErrorsVerdict) {
  Fixture fx;
  fx.host({.user_ms = 1900, .idle_ms = 100});  // a saturated host: server_cpu would rank high
  fx.rows(kBackendId[0], 900);
  fx.rows(kBackendId[1], 900);
  for (const auto& q : fx.batch().queries) {
    fx.batch().query_errors.push_back(
        {.client_id = q.client_id,
         .seq = q.seq,
         .start_ns = q.start_ns,
         .sqlstate = q.seq < 8 ? "42601" : "22012",
         .error = q.seq < 8 ? "syntax error at or near \"$$\"" : "division by zero"});
  }
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  const auto& x = r.findings[0];
  EXPECT_EQ(to_string(x.kind), "errors");
  EXPECT_DOUBLE_EQ(x.score, 1.0);
  ASSERT_TRUE(r.verdict.kind);
  EXPECT_EQ(to_string(*r.verdict.kind), "errors");
  EXPECT_EQ(evidence<std::int64_t>(x, "failed"), 20);
  EXPECT_EQ(evidence<std::string>(x, "sqlstates"), "42601 ×16, 22012 ×4");
  EXPECT_EQ(x.culprit, "SQLSTATE 42601 \"syntax error at or near \"$$\"\" from SELECT 1");
  EXPECT_NE(x.summary.find("20 of 20 transactions failed (100%), 0 answered"), std::string::npos)
      << x.summary;
  EXPECT_TRUE(r.stalls.empty());
  EXPECT_EQ(finding(r, "latency_bound"), nullptr);
}

// A few failures beside answers: an errors finding scored by the query time
// the failed transactions took (4 of 20 one-second transactions: 0.2),
// ranked like any other; the verdict stays the closed loop's.
TEST(CorrelateFinding, AFewFailuresAreAFindingOfTheirTime) {
  Fixture fx;
  fx.host({.user_ms = 1200, .idle_ms = 800});
  fx.rows(kBackendId[0], 600, 10);
  fx.rows(kBackendId[1], 600, 10);
  for (const auto& q : fx.batch().queries) {
    if (q.seq % 5 != 0) continue;
    fx.batch().query_errors.push_back(
        {.client_id = q.client_id, .seq = q.seq, .start_ns = q.start_ns, .sqlstate = "40001"});
  }
  auto r = fx.explain();
  const auto* x = finding(r, "errors");
  ASSERT_NE(x, nullptr);
  EXPECT_DOUBLE_EQ(x->score, 0.2);
  EXPECT_NE(to_string(r.findings[0].kind), "errors");
  ASSERT_TRUE(r.verdict.kind);
  EXPECT_NE(to_string(*r.verdict.kind), "errors");
}

// The driver's process stopped (SIGSTOP) from t0 + 2 s to t0 + 8 s: its
// sampler has no tick in between (one interval of 6 s, ≥ 5 periods of 1 s),
// while both clients' queries were outstanding. Those 12 s of the 20 s of
// query time are the stop, driver_stopped, ranked first — not round trips —
// and the notes say the host was not sampled there.
TEST(CorrelateFinding, ADriverStoppedWhileItsQueriesWereOutstandingIsDriverStopped) {
  Fixture fx;
  fx.host({});
  auto& b = fx.batch();
  std::erase_if(b.samples, [](const auto& x) { return x.sample_id >= 4 && x.sample_id <= 8; });
  std::erase_if(b.host_samples, [](const auto& x) { return x.sample_id >= 4 && x.sample_id <= 8; });
  for (auto& x : b.samples) {
    if (x.sample_id == 9) x.interval_ns = 6 * kS;  // t0 + 2 s → t0 + 8 s
  }
  auto r = fx.explain();
  const auto* x = finding(r, "driver_stopped");
  ASSERT_NE(x, nullptr);
  EXPECT_NEAR(x->score, 12.0 / 20.0, 1e-4);
  EXPECT_EQ(to_string(r.findings[0].kind), "driver_stopped");
  ASSERT_TRUE(r.verdict.kind) << r.verdict.reason << ": " << r.verdict.summary;
  EXPECT_EQ(to_string(*r.verdict.kind), "driver_stopped");
  EXPECT_NEAR(evidence<double>(*x, "stopped_s"), 6.0, 1e-4);
  EXPECT_NE(x->culprit.find("stopped for 6.0 s from +2.0 s"), std::string::npos) << x->culprit;
  const auto* trips = finding(r, "network_roundtrip");
  if (trips) {
    EXPECT_LT(trips->score, 0.45);
  }
  // The accounting has the stop as a part of its own, out of what nothing
  // measured (here "unaccounted": no process rows to split CPU), and its
  // parts still add up to the query time.
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "driver_stopped"), 12 * kS);
  EXPECT_EQ(part_ns(*r.accounting, "unaccounted"), 8 * kS);
  std::int64_t sum_ns = 0;
  for (const auto& p : r.accounting->parts) sum_ns += p.time_ns;
  EXPECT_EQ(sum_ns, r.accounting->query_ns);
  EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.find("The host sampler missed its ticks for 6.0 s") != std::string::npos;
  }));
}

// A record of an idle host: a process that ran 10 ms
// a second and waited 5 ms a second for a CPU spent a third of its runnable
// time queued, but that is 0.005 cores of waiting — no bottleneck. Waiting
// 300 ms a second (0.3 cores) is one.
TEST(CorrelateFinding, RunqueueInARecordFileNeedsTimeNotOnlyAShare) {
  for (const auto& [delay_ms, expected] : {std::pair{5, false}, std::pair{300, true}}) {
    Fixture fx(/*with_queries=*/false);
    fx.host({.user_ms = 20, .idle_ms = 1980});
    fx.process(20, 777, "worker", kT0 - 100 * kS);
    fx.rows(20, delay_ms == 5 ? 10 : 600, delay_ms);
    auto r = fx.explain();
    EXPECT_EQ(finding(r, "runqueue") != nullptr, expected) << "run delay " << delay_ms << " ms/s";
    if (!expected) {
      EXPECT_FALSE(r.verdict.kind) << to_string(*r.verdict.kind);
    }
  }
}

TEST(CorrelateFinding, CpuThrottleInferredFromRunDelayWhileTheHostIdles) {
  Fixture fx;
  fx.host({.user_ms = 200, .idle_ms = 1800});  // 10 % busy
  fx.rows(kDriverId, 50);
  fx.rows(kBackendId[0], 50, 600);  // runnable but not running 0.6 s of each second
  fx.rows(kBackendId[1], 50, 600);
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "cpu_throttle");
  EXPECT_DOUBLE_EQ(r.findings[0].score, 0.6);  // 12 s ÷ 20 s
  EXPECT_EQ(evidence<std::string>(r.findings[0], "source"), "run delay while host idle");
  // The quota's delay is not charged to the backends' CPU or to other processes.
  EXPECT_EQ(finding(r, "runqueue"), nullptr);
  const auto* cpu = finding(r, "server_cpu");
  if (cpu) {
    EXPECT_DOUBLE_EQ(evidence<double>(*cpu, "run_delay_charged_share"), 0);
  }
}

TEST(CorrelateFinding, CpuThrottleUsesCgroupCpuStatWhenRecorded) {
  Fixture fx;
  fx.host({.user_ms = 1950, .idle_ms = 50});  // busy: inference alone would not fire
  fx.rows(kDriverId, 50);
  fx.rows(kBackendId[0], 50, 500);
  fx.rows(kBackendId[1], 50, 0);
  auto& b = fx.batch();
  for (auto& p : b.processes) {
    if (p.process_id == kBackendId[0]) p.cgroup = "/quota";
    if (p.process_id == kBackendId[1]) p.cgroup = "/free";
  }
  for (int i = 1; i <= 10; ++i) {
    b.cgroup_samples.push_back({.sample_id = i + 1,
                                .cgroup = "/quota",
                                .nr_periods = 10,
                                .nr_throttled = 8,
                                .throttled_ns = 400 * kMs,
                                .span_ns = kS});
    b.cgroup_samples.push_back({.sample_id = i + 1,
                                .cgroup = "/free",
                                .nr_periods = 10,
                                .nr_throttled = 0,
                                .throttled_ns = 0,
                                .span_ns = kS});
  }
  auto r = fx.explain();
  const auto* f = finding(r, "cpu_throttle");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f->score, 0.25);  // backend 0's 5 s of run delay ÷ 20 s
  EXPECT_EQ(evidence<std::string>(*f, "cgroup"), "/quota");
  EXPECT_EQ(evidence<std::int64_t>(*f, "cgroup_nr_throttled"), 80);
}

// A few stolen ticks on a mostly idle guest: 1 % of all CPU time is a
// sixth of the 6 % this guest wanted, yet it is under the 2 % floor
// (kStealMinAllCpuShare) and no finding; at 3 % it is one.
TEST(CorrelateFinding, StealUnderTwoPercentOfAllCpuTimeIsNoFinding) {
  {
    Fixture fx(/*with_queries=*/false);
    fx.host({.user_ms = 100, .idle_ms = 1880, .steal_ms = 20});
    auto r = fx.explain();
    EXPECT_EQ(finding(r, "steal"), nullptr);
  }
  Fixture fx(/*with_queries=*/false);
  fx.host({.user_ms = 100, .idle_ms = 1840, .steal_ms = 60});
  auto r = fx.explain();
  const auto* f = finding(r, "steal");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(f->score, 0.6 / 1.6, 1e-4);
}

TEST(CorrelateFinding, StealFiresOnThirtyPercentSteal) {
  Fixture fx;
  // 30 % of all CPU time stolen; the guest wanted 1.2 + 0.6 s of each 2 s.
  fx.host({.user_ms = 1000, .system_ms = 200, .idle_ms = 200, .steal_ms = 600, .procs_running = 2});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 500);
  fx.rows(kBackendId[1], 500);
  auto r = fx.explain();
  const auto* f = finding(r, "steal");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(evidence<double>(*f, "steal_pct"), 30.0);
  // The driver's 0.9 s and the backends' 10 s of CPU, each unit of it
  // stretched by steal ÷ busy = 0.6 ÷ 1.2 (the guest saturated, but no run
  // delay), of 20 s of query time.
  const double stolen_s = (0.9 + 10.0) * (0.6 / 1.2);
  EXPECT_NEAR(f->score, stolen_s / 20.0, 1e-4);
  EXPECT_NEAR(evidence<double>(*f, "query_path_stolen_s"), stolen_s, 1e-4);
  EXPECT_EQ(f->start_ns, kT0);
  EXPECT_EQ(f->end_ns, kT0 + 10 * kS);
  EXPECT_EQ(finding(r, "lock_wait"), nullptr);
  EXPECT_EQ(finding(r, "io_wait"), nullptr);
}

TEST(CorrelateFinding, IdleHostLeavesOnlyTheRoundTrip) {
  Fixture fx;
  fx.host({.user_ms = 200, .idle_ms = 1800});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 200);
  fx.rows(kBackendId[1], 200);
  fx.ash(kBackendPid[0], std::nullopt, std::nullopt, 20);
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "network_roundtrip");
  EXPECT_DOUBLE_EQ(r.findings[0].score, (20.0 - 0.9 - 4.0) / 20.0);
  EXPECT_DOUBLE_EQ(evidence<double>(r.findings[0], "remainder_per_query_ms"), 15.1 / 20 * 1000);
  EXPECT_DOUBLE_EQ(evidence<double>(r.findings[0], "backend_cpu_per_query_ms"), 200.0);
  for (const char* kind :
       {"lock_wait", "io_wait", "steal", "lwlock_wait", "runqueue", "single_thread"}) {
    EXPECT_EQ(finding(r, kind), nullptr) << kind;
  }
  // Findings are ordered by score.
  for (std::size_t i = 1; i < r.findings.size(); ++i)
    EXPECT_GE(r.findings[i - 1].score, r.findings[i].score);
}

TEST(CorrelateFinding, NoRoundTripWithoutAsh) {
  Fixture fx;
  fx.batch().ash_ticks.clear();
  fx.host({.user_ms = 200, .idle_ms = 1800});
  fx.rows(kBackendId[0], 200);
  auto r = fx.explain();
  EXPECT_EQ(finding(r, "network_roundtrip"), nullptr);
}

// Short queries at a high rate: ASH caught every backend just done
// (active, Client:ClientRead), none on CPU. server_cpu names the query the
// backends were seen active in, and says ASH caught none on CPU.
TEST(CorrelateFinding, ServerCpuNamesTheActiveQueryWhenNoneWasCaughtOnCpu) {
  Fixture fx;
  fx.host({.user_ms = 1700, .system_ms = 200, .idle_ms = 100, .procs_running = 9});
  fx.rows(kBackendId[0], 800, 300);
  fx.rows(kBackendId[1], 800, 300);
  fx.ash(kBackendPid[0], "Client", "ClientRead", 30);
  fx.ash(kBackendPid[1], "Client", "ClientRead", 10);
  fx.batch().pg_query_texts.push_back(
      {.query_text_id = 1, .query = "SELECT * FROM hot WHERE k = 1", .first_time_ns = kT0});
  fx.batch().pg_query_texts.push_back({.query_text_id = 2, .query = "BEGIN", .first_time_ns = kT0});
  for (auto& a : fx.batch().pg_activity) a.query_text_id = a.pid == kBackendPid[0] ? 1 : 2;
  auto r = fx.explain();
  const auto* cpu = finding(r, "server_cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->culprit,
            "SELECT * FROM hot WHERE k = 1 (75% of the backends' active samples; ASH caught none "
            "on CPU with its query)");
}

TEST(CorrelateFinding, ServerCpuRanksFirstWhenBackendsSaturateTheHost) {
  Fixture fx;
  fx.host({.user_ms = 1700, .system_ms = 200, .idle_ms = 100, .procs_running = 9});
  fx.rows(kDriverId, 300, 100);
  fx.rows(kBackendId[0], 800, 300);
  fx.rows(kBackendId[1], 800, 300);
  fx.process(10, 500, "walwriter", kT0 - 10 * kS);
  fx.rows(10, 50);
  fx.ash(kBackendPid[0], std::nullopt, std::nullopt, 90);
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "server_cpu");
  // Driver CPU 2.9 s, backend CPU 16 s and 7 s of run delay exceed the 20 s
  // of query time (the parts overlap): the clients were never idle, so all
  // are trimmed in proportion, backend CPU to 16 × 20 / 25.9 s. The score
  // adds the backends' charge of the run delay.
  EXPECT_NEAR(evidence<double>(r.findings[0], "server_cpu_share"), 16.0 / 25.9, 1e-4);
  EXPECT_GT(r.findings[0].score, 16.0 / 25.9);
  EXPECT_LE(r.findings[0].score, 1.0);
  EXPECT_EQ(r.accounting->excess_ns, 5900 * kMs);
  EXPECT_EQ(r.accounting->query_ns, 20 * kS);
  for (const char* kind : {"lock_wait", "io_wait", "steal", "network_roundtrip", "single_thread"}) {
    EXPECT_EQ(finding(r, kind), nullptr) << kind;
  }
  EXPECT_GT(r.accounting->excess_ns, 0);
  EXPECT_EQ(r.accounting->remainder_ns, 0);
}

TEST(CorrelateFinding, ClientCpuRanksFirstWhenTheDriverIsBusy) {
  Fixture fx;
  fx.host({.user_ms = 1100, .idle_ms = 900});
  fx.rows(kDriverId, 1000);  // 0.99 cores net of the sampler, on 1 thread
  fx.rows(kBackendId[0], 50);
  fx.rows(kBackendId[1], 50);
  fx.ash(kBackendPid[0], std::nullopt, std::nullopt, 5);
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  // Driver 9.9 s of 20 s; the remainder 20 − 9.9 − 1 = 9.1 s comes second.
  EXPECT_EQ(to_string(r.findings[0].kind), "client_cpu");
  EXPECT_DOUBLE_EQ(r.findings[0].score, 0.495);
  EXPECT_DOUBLE_EQ(evidence<double>(r.findings[0], "driver_cpu_cores"), 0.99);
  EXPECT_NE(r.findings[0].suggestion.find("add threads"), std::string::npos);
  ASSERT_GE(r.findings.size(), 2u);
  EXPECT_EQ(to_string(r.findings[1].kind), "network_roundtrip");
  EXPECT_DOUBLE_EQ(r.findings[1].score, 0.455);
}

TEST(CorrelateFinding, RunqueueNamesTheProcessesHoldingTheCpus) {
  Fixture fx;
  fx.host({.user_ms = 1950, .idle_ms = 50, .procs_running = 5});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100, 500);
  fx.rows(kBackendId[1], 100, 500);
  fx.process(20, 777, "stress", kT0 - 100 * kS);
  fx.rows(20, 1900);  // two cores' worth: not a single thread
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "runqueue");
  // 2 clients on 2 cores cannot queue behind each other: all 10 s of run
  // delay is charged to the processes off the path; on the saturated host
  // (97.5 % busy) the remainder, 20 − 0.9 driver − 2 backend − 10 run delay =
  // 7.1 s, is contention too and goes the same way: (10 + 7.1) ÷ 20 s.
  EXPECT_DOUBLE_EQ(r.findings[0].score, 0.855);
  EXPECT_DOUBLE_EQ(evidence<double>(r.findings[0], "run_delay_charged_share"), 0.5);
  EXPECT_DOUBLE_EQ(evidence<double>(r.findings[0], "remainder_charged_share"), 0.355);
  // None of the hog-made queueing goes to server_cpu, and the backends' own
  // CPU (2 s of 20 s) is weighted by the query path's part of the CPU used on
  // this saturated host, (0.9 + 2) ÷ (0.9 + 2 + 19) ≈ 0.13: 0.013, below the
  // reporting threshold (unweighted it would be 0.1).
  EXPECT_EQ(finding(r, "server_cpu"), nullptr);
  EXPECT_EQ(evidence<std::string>(r.findings[0], "top_other_1"), "stress (pid 777)");
  EXPECT_EQ(finding(r, "single_thread"), nullptr);
  EXPECT_EQ(finding(r, "network_roundtrip"), nullptr);
}

TEST(CorrelateFinding, SingleThreadNamesASaturatedPoolerOnAnIdleHost) {
  Fixture fx;
  fx.host({.user_ms = 1200, .idle_ms = 800});
  fx.rows(kDriverId, 150);
  fx.rows(kBackendId[0], 100);
  fx.rows(kBackendId[1], 100);
  fx.process(30, 300, "pgbouncer", kT0 - 100 * kS);
  fx.rows(30, 970);
  fx.ash(kBackendPid[0], std::nullopt, std::nullopt, 5);
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "single_thread");
  EXPECT_EQ(evidence<std::string>(r.findings[0], "comm"), "pgbouncer");
  EXPECT_EQ(evidence<std::int64_t>(r.findings[0], "pid"), 300);
  // 0.97 cores × all 10 windows × the other cores' idle share 8 / (20 − 9.7).
  EXPECT_NEAR(r.findings[0].score, 0.97 * 8 / 10.3, 1e-4);
  EXPECT_DOUBLE_EQ(evidence<double>(r.findings[0], "hot_cores"), 0.97);
  EXPECT_DOUBLE_EQ(evidence<double>(r.findings[0], "hot_time_share"), 1.0);
  EXPECT_EQ(r.findings[0].suggestion,
            "pgbouncer at 97 % of one core: run more pgbouncer processes with so_reuseport or "
            "pool on the client.");
  // The round trip keeps only what the pooler did not claim.
  const auto* rt = finding(r, "network_roundtrip");
  const double remainder = (20 - 1.4 - 2.0) / 20;
  if (remainder - r.findings[0].score >= detail::kMinScore) {
    ASSERT_NE(rt, nullptr);
    EXPECT_NEAR(rt->score, remainder - r.findings[0].score, 1e-3);
  } else {
    EXPECT_EQ(rt, nullptr);
  }
}

TEST(CorrelateFinding, SingleThreadStaysSilentOnABusyHost) {
  Fixture fx;
  fx.host({.user_ms = 1900, .idle_ms = 100});
  fx.rows(kBackendId[0], 100);
  fx.process(30, 300, "pgbouncer", kT0 - 100 * kS);
  fx.rows(30, 970);
  fx.process(31, 301, "other", kT0 - 100 * kS);
  fx.rows(31, 800);
  auto r = fx.explain();
  EXPECT_EQ(finding(r, "single_thread"), nullptr);
}

}  // namespace
}  // namespace stallscope::correlate
