// The correlator on hand-made run files with exact numbers (run_fixture.h):
// the time accounting: parts that add up to the client time, a fixed rate's schedule lag, think
// time, a driver's threads, schedstat over ticks.
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

TEST(CorrelateAccounting, SplitsClientTimeExactly) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);          // 1 s of driver CPU, 0.1 s of it the sampler's
  fx.rows(kBackendId[0], 200, 50);  // backends: 2 s CPU and 0.5 s run delay each
  fx.rows(kBackendId[1], 200, 50);
  // pid 201 reused after the run's backend: must not count as a backend.
  fx.process(9, kBackendPid[0], "postgres", kT0 + 5 * kS);
  fx.rows(9, 900);
  fx.ash(kBackendPid[0], "Lock", "transactionid", 30);   // 3 s
  fx.ash(kBackendPid[1], "IO", "DataFileRead", 10, 50);  // 1 s
  fx.ash(kBackendPid[1], "Client", "ClientRead", 5, 20,
         "idle in transaction");                              // not a server wait
  fx.ash(kBackendPid[1], std::nullopt, std::nullopt, 7, 40);  // on CPU, not a wait
  fx.ash(999, "Lock", "tuple", 50);                           // not this run's backend
  fx.ash(kBackendPid[0], "Lock", "transactionid", 1, 100);    // at t0 + 10 s: after the span
  auto r = fx.explain();

  ASSERT_TRUE(r.accounting.has_value());
  const auto& a = *r.accounting;
  EXPECT_EQ(a.clients, 2);
  EXPECT_EQ(a.wall_ns, 10 * kS);
  EXPECT_EQ(a.client_ns, 20 * kS);
  EXPECT_EQ(a.sampler_cpu_ns, 100 * kMs);
  EXPECT_EQ(a.driver_cpu_ns, 900 * kMs);
  EXPECT_EQ(a.server_cpu_ns, 4 * kS);
  EXPECT_EQ(a.run_delay_ns, 1 * kS);
  EXPECT_EQ(a.server_wait_ns, 4 * kS);
  ASSERT_EQ(a.server_wait_by_class_ns.size(), 2u);
  EXPECT_EQ(a.server_wait_by_class_ns[0], (std::pair<std::string, std::int64_t>{"Lock", 3 * kS}));
  EXPECT_EQ(a.server_wait_by_class_ns[1], (std::pair<std::string, std::int64_t>{"IO", 1 * kS}));
  EXPECT_EQ(a.remainder_ns, 20 * kS - 900 * kMs - 4 * kS - 4 * kS - 1 * kS);
  EXPECT_EQ(a.excess_ns, 0);
  EXPECT_EQ(part_ns(a, "server_wait:Lock"), 3 * kS);
  EXPECT_EQ(part_ns(a, "run_queue"), 1 * kS);
  for (const auto& p : a.parts) {
    if (p.name == "server_cpu") {
      EXPECT_DOUBLE_EQ(p.share, 0.2);
    }
    if (p.name == "server_wait:Lock") {
      EXPECT_DOUBLE_EQ(p.share, 0.15);
    }
  }
  EXPECT_EQ(r.ash_period_ns, 100 * kMs);

  // Per window: the same split, one second at a time.
  ASSERT_EQ(r.windows.size(), 10u);
  ASSERT_TRUE(r.windows[0].accounting.has_value());
  EXPECT_EQ(r.windows[0].accounting->client_ns, 2 * kS);
  EXPECT_EQ(r.windows[0].accounting->server_cpu_ns, 400 * kMs);
  EXPECT_EQ(r.windows[0].accounting->driver_cpu_ns, 90 * kMs);
  EXPECT_EQ(r.windows[0].top_wait_event, "Lock:transactionid");
  EXPECT_EQ(r.windows[0].top_wait_event_samples, 10);
}

// A fixed rate (-R) far below capacity: each client sends one 10 ms
// transaction a second (2 ms of it schedule lag) and is idle in between.
// The total is the query time (Σ latency from the scheduled start), not
// clients × wall time; the lag is its own part; the idle time is the clients'
// idle share; nothing limits the run, so the verdict is "no bottleneck".
TEST(CorrelateAccounting, FixedRateCountsQueryTimeAndScheduleLagNotIdleClients) {
  Fixture fx;
  for (auto& q : fx.batch().queries) {
    q.latency_ns = 10 * kMs;
    q.lag_ns = 2 * kMs;
  }
  fx.host({});                // 5 % busy
  fx.rows(kBackendId[0], 3);  // 3 ms of backend CPU a second, each
  fx.rows(kBackendId[1], 3);
  auto r = fx.explain();
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  EXPECT_EQ(a.query_ns, 20 * 10 * kMs);
  EXPECT_EQ(a.schedule_lag_ns, 20 * 2 * kMs);
  EXPECT_EQ(part_ns(a, "schedule_lag"), 40 * kMs);
  // 6 ms a second, the last sample's second only 10 ms inside the span.
  EXPECT_EQ(part_ns(a, "server_cpu"), 9 * 6 * kMs + 60 * kUs);
  EXPECT_EQ(a.client_ns, 2 * (9 * kS + 10 * kMs));
  EXPECT_EQ(a.idle_ns, a.client_ns - a.query_ns);
  EXPECT_NEAR(a.client_busy_share, 0.2 / 18.02, 1e-9);
  std::int64_t sum_ns = 0;
  for (const auto& p : a.parts) {
    sum_ns += p.time_ns;
    // No part per query exceeds the mean latency (10 ms).
    EXPECT_LE(double(p.time_ns) / 20, double(10 * kMs)) << p.name;
  }
  EXPECT_EQ(sum_ns, a.query_ns);
  EXPECT_EQ(a.remainder_ns, 200 * kMs - 40 * kMs - (9 * 6 * kMs + 60 * kUs));
  // Each window holds its two queries' time.
  EXPECT_EQ(r.windows[4].query_time_ns, 20 * kMs);
  EXPECT_EQ(r.windows[4].schedule_lag_ns, 4 * kMs);
  // The rate was kept (lag 20 % of latency) and nothing saturated or waited.
  EXPECT_FALSE(r.verdict.kind);
  EXPECT_EQ(r.verdict.reason, "paced");
  EXPECT_NE(r.verdict.summary.find("fixed rate was kept"), std::string::npos) << r.verdict.summary;
  EXPECT_NE(r.verdict.summary.find("mean latency 10.000 ms"), std::string::npos)
      << r.verdict.summary;
  const auto j = to_json(r);
  EXPECT_TRUE(j["verdict"]["kind"].is_null());
  EXPECT_EQ(j["verdict"]["reason"], "paced");
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("verdict: no bottleneck"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("schedule lag: the rate was kept"), std::string::npos) << text.str();
}

// A rate not kept: the schedule lag is most of the latency. The
// clients were not paced, so the verdict is the first finding; scores are
// shares of the service time (the lag apportioned to what made it slow).
TEST(CorrelateAccounting, FixedRateNotKeptTakesTheFirstFindingAndApportionsTheLag) {
  Fixture fx;
  // Back to back: each 1 s transaction waited 800 ms for its turn (more than
  // half a client's 1 s gap between transactions).
  for (auto& q : fx.batch().queries) q.lag_ns = 800 * kMs;
  fx.host({});
  // Both backends wait on a lock for 200 ms a second: their whole service time.
  fx.ash(kBackendPid[0], "Lock", "transactionid", 2, 0);
  fx.ash(kBackendPid[1], "Lock", "transactionid", 2, 0);
  for (int s = 1; s < 10; ++s) {
    fx.ash(kBackendPid[0], "Lock", "transactionid", 2, 10 * s);
    fx.ash(kBackendPid[1], "Lock", "transactionid", 2, 10 * s);
  }
  fx.rows(kBackendId[0], 0);
  fx.rows(kBackendId[1], 0);
  auto r = fx.explain();
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(r.accounting->schedule_lag_ns, 20 * 800 * kMs);
  EXPECT_EQ(part_ns(*r.accounting, "server_wait:Lock"), 20 * 200 * kMs);
  ASSERT_TRUE(r.verdict.kind);
  EXPECT_EQ(to_string(*r.verdict.kind), "lock_wait");
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "lock_wait");
  EXPECT_DOUBLE_EQ(r.findings[0].score, 1.0);  // 4 s of 4 s of service time
}

// Each transaction: a 10 ms query, then a 490 ms \sleep (query_sleep).
void add_think_time(Fixture& fx) {
  for (auto& q : fx.batch().queries) {
    q.latency_ns = 500 * kMs;
    fx.batch().query_sleeps.push_back(
        {.client_id = q.client_id, .seq = q.seq, .start_ns = q.start_ns, .sleep_ns = 490 * kMs});
  }
}

// Think time: each transaction is a 10 ms query followed by a 490 ms \sleep
// (query_sleep). The sleep is in the latency (as pgbench counts it) but not
// query time; the clients are paced by their script.
TEST(CorrelateAccounting, ThinkTimeIsTheClientsIdleShareNotAPart) {
  Fixture fx;
  add_think_time(fx);
  fx.host({});
  fx.rows(kBackendId[0], 2);
  fx.rows(kBackendId[1], 2);
  auto r = fx.explain();
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(r.accounting->query_ns, 20 * 10 * kMs);
  EXPECT_DOUBLE_EQ(*r.run.latency_mean_ms, 500);  // latency as pgbench reports it
  EXPECT_EQ(r.windows[2].query_time_ns, 20 * kMs);
  std::int64_t sum_ns = 0;
  for (const auto& p : r.accounting->parts) sum_ns += p.time_ns;
  EXPECT_EQ(sum_ns, 200 * kMs);
  EXPECT_EQ(part_ns(*r.accounting, "server_cpu"),
            9 * 4 * kMs + 2 * kMs);  // the last half in the span
  EXPECT_FALSE(r.verdict.kind);
  EXPECT_EQ(r.verdict.reason, "paced");
  EXPECT_NE(r.verdict.summary.find("between queries"), std::string::npos) << r.verdict.summary;
}

// Think time on a host 90 % busy with work off the query path: still paced
// (nothing on the path saturated or waited), and the summary says the host
// was busy instead of "nothing was saturated".
TEST(CorrelateAccounting, ThinkTimeOnAHostBusyWithOtherWorkSaysSo) {
  Fixture fx;
  add_think_time(fx);
  fx.host({.user_ms = 1800, .idle_ms = 200});
  auto r = fx.explain();
  EXPECT_FALSE(r.verdict.kind) << to_string(*r.verdict.kind);
  EXPECT_EQ(r.verdict.reason, "paced");
  EXPECT_NE(r.verdict.summary.find("nothing on the query path was saturated or waiting (the "
                                   "host's CPUs were 90% busy with other work)"),
            std::string::npos)
      << r.verdict.summary;
  EXPECT_EQ(r.verdict.summary.find("idle"), std::string::npos) << r.verdict.summary;
}

// SELECT pg_sleep(…): the backends spent the queries in Timeout:PgSleep, the
// workload's own sleep. It is pacing, as \sleep is: "no bottleneck", and no
// kernel_wait finding for it. The same time in Timeout:VacuumDelay (not the
// workload's choice) stays a kernel_wait verdict.
TEST(CorrelateAccounting, PgSleepInTheQueriesIsPacingNotAWait) {
  for (const std::string event : {"PgSleep", "VacuumDelay"}) {
    Fixture fx;
    fx.host({});
    fx.rows(kBackendId[0], 2);
    fx.rows(kBackendId[1], 2);
    fx.ash(kBackendPid[0], "Timeout", event, 95);
    fx.ash(kBackendPid[1], "Timeout", event, 95);
    auto r = fx.explain();
    if (event == "PgSleep") {
      EXPECT_FALSE(r.verdict.kind) << to_string(*r.verdict.kind);
      EXPECT_EQ(r.verdict.reason, "paced");
      EXPECT_NE(r.verdict.summary.find("pg_sleep, wait event Timeout:PgSleep) for 95%"),
                std::string::npos)
          << r.verdict.summary;
      EXPECT_EQ(finding(r, "kernel_wait"), nullptr);
    } else {
      ASSERT_TRUE(r.verdict.kind);
      EXPECT_EQ(to_string(*r.verdict.kind), "kernel_wait");
    }
  }
}

// Think time on a guest whose hypervisor took 10 % of all CPU time (two
// thirds of the little it wanted): steal lengthens each query's CPU parts
// and is a finding, but the script's pacing set the rate and the guest was
// far from saturated, so the verdict stays "no bottleneck".
TEST(CorrelateAccounting, StealOnAnIdleGuestDoesNotLimitAPacedRun) {
  Fixture fx;
  add_think_time(fx);
  fx.host({.user_ms = 100, .idle_ms = 1700, .steal_ms = 200});
  fx.rows(kBackendId[0], 2);
  fx.rows(kBackendId[1], 2);
  auto r = fx.explain();
  const auto* f = finding(r, "steal");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(evidence<double>(*f, "steal_share"), 2.0 / 3.0, 1e-4);
  EXPECT_FALSE(r.verdict.kind) << to_string(*r.verdict.kind);
  EXPECT_EQ(r.verdict.reason, "paced");
}

TEST(CorrelateAccounting, SpreadsAProcessDeltaOverTheWindowsItCovers) {
  Fixture fx;
  fx.host({});
  // One backend row at t0 + 2 s covering 2 s of CPU work over [t0, t0 + 2 s).
  schema::ProcessSampleRow row{.sample_id = 3, .process_id = kBackendId[0], .state = 'S'};
  row.cpu_ns = 2 * kS;
  row.span_ns = 2 * kS;
  fx.batch().process_samples.push_back(row);
  auto r = fx.explain();
  ASSERT_GE(r.windows.size(), 2u);
  EXPECT_EQ(r.windows[0].accounting->server_cpu_ns, kS);
  EXPECT_EQ(r.windows[1].accounting->server_cpu_ns, kS);
  EXPECT_EQ(r.accounting->server_cpu_ns, 2 * kS);
}

TEST(CorrelateAccounting, DriverCpuIsItsDriverThreadsNotTheWritersOrSamplers) {
  Fixture fx;
  fx.host({});
  // The stallscope process: 500 ms/s on CPU and 100 ms/s queued over all
  // threads; of that its ss-driver/0 thread ran 300 ms/s and waited 40 ms/s,
  // the writer 200 ms/s and 60 ms/s.
  fx.rows(kDriverId, 500, 100);
  for (int i = 1; i <= 10; ++i) {
    for (const auto& [tid, comm, cpu_ms, delay_ms] :
         {std::tuple{11, "ss-driver/0", 300, 40}, std::tuple{12, "ss-writer", 200, 60}}) {
      schema::ThreadSampleRow t{
          .sample_id = i + 1, .process_id = kDriverId, .tid = tid, .comm = comm, .state = 'S'};
      t.cpu_ns = cpu_ms * kMs;
      t.run_delay_ns = delay_ms * kMs;
      t.span_ns = kS;
      fx.batch().thread_samples.push_back(t);
    }
  }
  auto r = fx.explain();
  // 10 s × 300 ms/s, and the sampler's own CPU is not subtracted again.
  EXPECT_EQ(r.accounting->driver_cpu_ns, 3 * kS);
  EXPECT_EQ(r.accounting->run_delay_ns, 400 * kMs);
}

TEST(CorrelateAccounting, ProcessCpuIsSchedstatAndTicksOnlyAFallback) {
  Fixture fx;
  fx.host({});
  // 10 rows of 50 ms schedstat CPU; the 10 ms ticks say 60 ms. schedstat wins.
  fx.rows(kBackendId[0], 50);
  for (auto& row : fx.batch().process_samples) {
    row.utime_ticks = 5;
    row.stime_ticks = 1;
  }
  // A backend without schedstat: ticks (100/s) are the fallback.
  for (int i = 1; i <= 10; ++i) {
    schema::ProcessSampleRow row{.sample_id = i + 1, .process_id = kBackendId[1], .state = 'S'};
    row.utime_ticks = 2;
    row.stime_ticks = 1;
    row.span_ns = kS;
    fx.batch().process_samples.push_back(row);
  }
  auto r = fx.explain();
  EXPECT_EQ(r.accounting->server_cpu_ns, 500 * kMs + 300 * kMs);
}

TEST(CorrelateAccounting, RecordFileHasNoAccounting) {
  Fixture fx(/*with_queries=*/false);
  fx.host({.user_ms = 1000, .idle_ms = 400, .steal_ms = 600});
  auto r = fx.explain();
  EXPECT_FALSE(r.accounting.has_value());
  EXPECT_EQ(r.run.queries, 0);
  EXPECT_FALSE(r.run.latency_mean_ms.has_value());
  for (const auto& w : r.windows) EXPECT_FALSE(w.accounting.has_value());
  EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.find("no queries") != std::string::npos;
  }));
  // Host-only rule: steal's score is the steal share of the CPU time wanted.
  const auto* steal = finding(r, "steal");
  ASSERT_NE(steal, nullptr);
  EXPECT_NEAR(steal->score, 0.375, 1e-4);
  EXPECT_EQ(finding(r, "network_roundtrip"), nullptr);
  EXPECT_TRUE(to_json(r)["accounting"].is_null());
  // Instead, the host's CPU time, its parts adding up: 10 s of 2 s a second.
  ASSERT_TRUE(r.host_accounting);
  const auto& h = *r.host_accounting;
  EXPECT_EQ(h.cpu_ns, 20 * kS);
  std::int64_t sum_ns = 0;
  for (const auto& p : h.parts) sum_ns += p.time_ns;
  EXPECT_EQ(sum_ns, h.cpu_ns);
  auto host_part = [&](const std::string& name) {
    for (const auto& p : h.parts)
      if (p.name == name) return p.time_ns;
    return std::int64_t{-1};
  };
  EXPECT_EQ(host_part("steal"), 6 * kS);
  EXPECT_EQ(host_part("idle"), 4 * kS);
  EXPECT_EQ(host_part("other_cpu"), 10 * kS);  // no process sampled: all of busy
  EXPECT_EQ(to_json(r)["host_accounting"]["cpu_ns"], 20 * kS);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("the host's CPU time, 20.000 s on 2 cores over"), std::string::npos)
      << text.str();
}

// A transaction cut short in \sleep: its 2 s in flight at the end hold
// 1.5 s of \sleep (its query_sleep row), which is not query time, though
// the span still runs to the moment the driver gave up on it.
TEST(CorrelateAccounting, AnUnfinishedTransactionsSleepIsNotQueryTime) {
  const auto explain = [](bool slept) {
    Fixture fx;
    fx.host({});
    fx.batch().query_unfinished.push_back(
        {.client_id = 0, .seq = 100, .start_ns = kT0 + 10 * kS, .elapsed_ns = 2 * kS});
    if (slept) {
      fx.batch().query_sleeps.push_back(
          {.client_id = 0, .seq = 100, .start_ns = kT0 + 10 * kS, .sleep_ns = 1500 * kMs});
    }
    return fx.explain();
  };
  const auto awake = explain(false);
  const auto slept = explain(true);
  ASSERT_TRUE(awake.accounting && slept.accounting);
  EXPECT_EQ(awake.accounting->query_ns - slept.accounting->query_ns, 1500 * kMs);
  EXPECT_EQ(slept.run.unfinished, 1);
  ASSERT_TRUE(slept.run.query_end_ns.has_value());
  EXPECT_EQ(*slept.run.query_end_ns, kT0 + 12 * kS);
}

}  // namespace
}  // namespace stallscope::correlate
