// The pooler's wait in the time accounting (facts_pooler.cpp) on hand-made
// run files with exact numbers.
//
// 2 clients, 10 one-second queries each from t0: the query span is
// [t0, t0 + 10 s), client time N·W = 20 s, windows of 1 s. pooler_sample
// polls at t0 + k s + 0.5 s (k = −1..10), each (but the first) covering the
// second before it, so each poll's wait is split half and half between two
// windows.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "correlate/correlate.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using test::kMs;
using test::kS;
constexpr std::int64_t kT0 = 1'700'000'000 * kS;

class PoolerFixture {
 public:
  explicit PoolerFixture(std::optional<std::string> conninfo)
      : store_(schema::Store::create(":memory:")) {
    auto r = test::run_info(kT0 - 2 * kS);
    r.conninfo = std::move(conninfo);
    store_.begin_run(r);
    store_.end_run(kT0 + 11 * kS, "complete", "duration reached");
    for (int c = 0; c < 2; ++c) {
      for (int k = 0; k < 10; ++k) {
        b_.queries.push_back(
            {.client_id = c, .seq = k, .start_ns = kT0 + k * kS, .latency_ns = kS});
      }
    }
  }
  // Polls of `database` at t0 + k s + 0.5 s, k = −1..10; the poll at k
  // (k ≥ 0) waited wait_ms(k) in the second before it, its server
  // connections were held held_ms (total_xact_time counts the wait too);
  // cl_waiting = k + 1.
  template <typename WaitMs>
  void polls(const std::string& database, WaitMs&& wait_ms, std::int64_t held_ms = 1000) {
    for (int k = -1; k <= 10; ++k) {
      schema::PoolerSampleRow p{.time_ns = kT0 + k * kS + 500 * kMs, .database = database};
      if (k >= 0) {
        p.interval_ns = kS;
        p.wait_ns = wait_ms(k) * kMs;
        p.xacts = 2;
        p.xact_ns = (wait_ms(k) + held_ms) * kMs;
      }
      p.cl_waiting = k + 1;
      p.sv_active = 1;
      p.maxwait_ns = k * kMs;
      b_.pooler_samples.push_back(p);
    }
  }
  // Host CPU: busy_pct of the 2 cores busy in every second of the span;
  // each of the 2 backends (pids 201, 202, serving client 0 and 1) used
  // backend_cpu_ms of it per second, another process the rest.
  void host_busy(int busy_pct, std::int64_t backend_cpu_ms) {
    busy_pct_ = busy_pct;
    backend_cpu_ms_ = backend_cpu_ms;
  }
  Report explain() {
    // Samples at t0 + i s (i = 0..10), each (but the first) covering the
    // second before it: host CPU when host_busy() was given, and the
    // backends' and another process's CPU, so the CPU parts are measured.
    b_.processes.push_back(
        {.process_id = 1, .pid = 300, .start_ticks = 1, .comm = "cc1plus", .first_sample_id = 1});
    for (int c = 0; c < 2; ++c) {
      b_.processes.push_back({.process_id = 2 + c,
                              .pid = 201 + c,
                              .start_ticks = 2 + c,
                              .start_ns = kT0 - 2 * kS,
                              .comm = "postgres",
                              .first_sample_id = 1});
      b_.clients.push_back(
          {.client_id = c, .thread = 0, .backend_pid = 201 + c, .connect_ns = kT0 - kS});
    }
    const std::int64_t backend_ns = backend_cpu_ms_ * kMs;
    const std::int64_t other_ns = 20 * busy_pct_.value_or(0) * kMs - 2 * backend_ns;
    for (int i = 0; i <= 10; ++i) {
      b_.samples.push_back({.sample_id = i + 1,
                            .time_ns = kT0 + i * kS,
                            .mono_ns = i * kS,
                            .interval_ns = i ? std::optional<std::int64_t>(kS) : std::nullopt});
      if (i == 0) continue;
      b_.process_samples.push_back(
          {.sample_id = i + 1, .process_id = 1, .state = 'R', .cpu_ns = other_ns, .span_ns = kS});
      for (int c = 0; c < 2; ++c) {
        b_.process_samples.push_back({.sample_id = i + 1,
                                      .process_id = 2 + c,
                                      .state = 'S',
                                      .cpu_ns = backend_ns,
                                      .span_ns = kS});
      }
      if (!busy_pct_) continue;
      schema::HostSampleRow h{.sample_id = i + 1};
      h.cpu_user_ns = 20 * *busy_pct_ * kMs;
      h.cpu_idle_ns = 20 * (100 - *busy_pct_) * kMs;
      h.cpu_nice_ns = h.cpu_system_ns = h.cpu_iowait_ns = h.cpu_irq_ns = h.cpu_softirq_ns =
          h.cpu_steal_ns = 0;
      b_.host_samples.push_back(h);
    }
    store_.write(b_);
    b_ = {};
    return correlate::explain(store_, {.window_ns = kS});
  }

 private:
  schema::Store store_;
  schema::Batch b_;
  std::optional<int> busy_pct_;
  std::int64_t backend_cpu_ms_ = 0;
};

std::optional<std::int64_t> part_ns(const Accounting& a, const std::string& name) {
  for (const auto& p : a.parts) {
    if (p.name == name) return p.time_ns;
  }
  return std::nullopt;
}

const Finding* finding(const Report& r, const std::string& kind) {
  for (const auto& f : r.findings) {
    if (to_string(f.kind) == kind) return &f;
  }
  return nullptr;
}

TEST(PoolerFacts, WaitIsProratedOverWindowsAndCountsOnlyTheRunsDatabase) {
  PoolerFixture fx("host=127.0.0.1 port=6432 user=u dbname=app password=***");
  fx.polls("app", [](int k) { return 100 * (k + 1); });
  fx.polls("other", [](int) { return 5000; });  // another database of the same pgbouncer
  const auto r = fx.explain();
  ASSERT_TRUE(r.accounting);
  // Window j gets half of poll j's wait and half of poll j+1's:
  // 50 ms × (j + 1) + 50 ms × (j + 2); poll 0's first half lies before the span.
  ASSERT_EQ(r.windows.size(), 10u);
  for (int j = 0; j < 10; ++j) {
    ASSERT_TRUE(r.windows[j].accounting);
    EXPECT_EQ(r.windows[j].accounting->path_wait_ns, 50 * kMs * (2 * j + 3)) << "window " << j;
  }
  // Σ 50 ms × (2j + 3) over j = 0..9 = 6 s, of 20 s client time.
  EXPECT_EQ(r.accounting->path_wait_ns, 6 * kS);
  EXPECT_EQ(part_ns(*r.accounting, "path_wait:pgbouncer"), 6 * kS);
  // The remainder shrank by the wait: nothing else was measured.
  EXPECT_EQ(r.accounting->remainder_ns, 20 * kS - 6 * kS);
  const Finding* f = finding(r, "pool_wait");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f->score, 0.3);
  EXPECT_NE(f->summary.find("6.000 s for a server connection in pgbouncer"), std::string::npos)
      << f->summary;
  EXPECT_NE(f->summary.find("cl_waiting up to 10"), std::string::npos) << f->summary;
  EXPECT_NE(f->suggestion.find("default_pool_size"), std::string::npos);
  // The span starts at the first window where the wait was ≥ 5 % of its client time.
  EXPECT_EQ(f->start_ns, kT0);
  EXPECT_EQ(f->end_ns, kT0 + 10 * kS);
  // JSON carries the part and the total.
  const auto j = to_json(r);
  EXPECT_EQ(j["accounting"]["path_wait_ns"], 6 * kS);
}

TEST(PoolerFacts, WithoutADbnameEveryDatabaseCounts) {
  PoolerFixture fx("host=127.0.0.1 port=6432");
  fx.polls("app", [](int) { return 100; });
  fx.polls("other", [](int) { return 300; });
  const auto r = fx.explain();
  ASSERT_TRUE(r.accounting);
  // Each database: 10 polls' worth of the per-second wait lies in the span.
  EXPECT_EQ(r.accounting->path_wait_ns, 10 * 100 * kMs + 10 * 300 * kMs);
}

TEST(PoolerFacts, OnSaturatedCpusCpuBoundServerConnectionsDiscountThePoolWait) {
  PoolerFixture fx("dbname=app");
  // 10 s of 20 s waited: share 0.5; the 2 server connections were held
  // 1 s a second, all of it on CPU (2 backends × 0.5 s): wait and CPU fill
  // the query time.
  fx.polls(
      "app", [](int) { return 1000; }, 1000);
  fx.host_busy(90, 500);  // saturation (0.9 − 0.8) ÷ 0.2 = 0.5
  const auto r = fx.explain();
  ASSERT_TRUE(r.accounting);
  ASSERT_EQ(r.accounting->server_cpu_ns, 10 * kS);
  EXPECT_EQ(r.accounting->excess_ns, 0);
  const Finding* f = finding(r, "pool_wait");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(f->score, 0.25, 1e-4);  // 0.5 × (1 − 0.5 × 1)
  EXPECT_NE(f->suggestion.find("90% busy"), std::string::npos) << f->suggestion;
}

TEST(PoolerFacts, HeldConnectionsThatMostlyWaitedKeepThePoolWait) {
  PoolerFixture fx("dbname=app");
  // The same saturation, but the backends were on CPU 0.2 s of the 2 s a
  // second their connections were held (the rest another process's CPU).
  fx.polls(
      "app", [](int) { return 1000; }, 2000);
  fx.host_busy(90, 100);
  const auto r = fx.explain();
  const Finding* f = finding(r, "pool_wait");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(f->score, 0.475, 1e-4);  // 0.5 × (1 − 0.5 × 0.1)
  EXPECT_NE(f->suggestion.find("default_pool_size"), std::string::npos) << f->suggestion;
}

TEST(PoolerFacts, NoPoolerSamplesNoPart) {
  PoolerFixture fx("dbname=app");
  const auto r = fx.explain();
  ASSERT_TRUE(r.accounting);
  EXPECT_FALSE(r.accounting->path_wait_ns);
  EXPECT_FALSE(part_ns(*r.accounting, "path_wait:pgbouncer"));
  EXPECT_EQ(finding(r, "pool_wait"), nullptr);
  EXPECT_TRUE(to_json(r)["accounting"]["path_wait_ns"].is_null());
}

}  // namespace
}  // namespace stallscope::correlate
