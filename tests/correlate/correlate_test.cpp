// Tests of correlate::explain and its renderers on hand-made run files with
// exact numbers.
//
// The base fixture: 2 clients, 10 s. Each client sends one 1 s query per
// second from t0, so the query span is [t0, t0 + 10 s) and the client time
// N·W is 20 s. Samples tick every second at t0 + i s (i = 0..10); host CPU
// deltas (on i = 1..10) and process rows (at i = 1..10) each cover the
// second before their tick. ASH polls
// every 100 ms (t0 + k·100 ms, k = 0..100).
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
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using test::kMs;
using test::kS;
constexpr std::int64_t kUs = 1'000;
constexpr std::int64_t kT0 = 1'700'000'000 * kS;

constexpr int kDriverPid = 100;
constexpr std::int64_t kDriverId = 1;
constexpr int kBackendPid[2] = {201, 202};
constexpr std::int64_t kBackendId[2] = {2, 3};

struct HostCpu {
  std::int64_t user_ms = 100, system_ms = 0, idle_ms = 1900, iowait_ms = 0, steal_ms = 0;
  int procs_running = 1;
  int d_state = 0;
};

class Fixture {
 public:
  explicit Fixture(bool with_queries = true, int clients = 2)
      : store_(schema::Store::create(":memory:")) {
    schema::RunInfo r;
    r.mode = with_queries ? "run" : "record";
    r.host = "db1";
    r.kernel = "6.1.0";
    r.cores = 2;
    r.clock_ticks_per_s = 100;
    r.start_ns = kT0 - 2 * kS;
    r.command_line = "stallscope run";
    r.tool_version = "fixture";
    r.hz = 10;
    r.stallscope_pid = kDriverPid;
    r.stallscope_start_ticks = 5000;
    if (with_queries) {
      r.clients = clients;
      r.threads = 1;
      r.protocol = "simple";
      r.sql = "SELECT 1";
    }
    store_.begin_run(r);
    store_.end_run(kT0 + 11 * kS, "complete", "duration reached");
    b_.processes.push_back({.process_id = kDriverId,
                            .pid = kDriverPid,
                            .start_ticks = 5000,
                            .start_ns = kT0 - 3 * kS,
                            .comm = "stallscope",
                            .first_sample_id = 1});
    if (with_queries) {
      for (int c = 0; c < 2; ++c) {
        b_.processes.push_back({.process_id = kBackendId[c],
                                .pid = kBackendPid[c],
                                .start_ticks = 6000 + c,
                                .start_ns = kT0 - 2 * kS,
                                .comm = "postgres",
                                .first_sample_id = 1});
        b_.clients.push_back({.client_id = c,
                              .thread = 0,
                              .backend_pid = kBackendPid[c],
                              .connect_ns = kT0 - 2 * kS + 10 * kMs});
        for (int k = 0; k < 10; ++k) {
          b_.queries.push_back(
              {.client_id = c, .seq = k, .start_ns = kT0 + k * kS, .latency_ns = kS});
        }
      }
    }
    for (int k = 0; k <= 100; ++k) {
      b_.ash_ticks.push_back(
          {.ash_tick = k + 1, .time_ns = kT0 + k * 100 * kMs, .duration_ns = kMs});
    }
  }

  // Samples at t0 + i s, i = 0..10, each with 10 ms of sampler CPU; host CPU
  // deltas on all but the first.
  void host(const HostCpu& h) {
    for (int i = 0; i <= 10; ++i) {
      b_.samples.push_back({.sample_id = i + 1,
                            .time_ns = kT0 + i * kS,
                            .mono_ns = i * kS,
                            .interval_ns = i ? std::optional<std::int64_t>(kS) : std::nullopt,
                            .sampler_cpu_ns = 10 * kMs,
                            .sampler_duration_ns = kMs});
      schema::HostSampleRow row{.sample_id = i + 1};
      if (i > 0) {
        row.cpu_user_ns = h.user_ms * kMs;
        row.cpu_nice_ns = 0;
        row.cpu_system_ns = h.system_ms * kMs;
        row.cpu_idle_ns = h.idle_ms * kMs;
        row.cpu_iowait_ns = h.iowait_ms * kMs;
        row.cpu_irq_ns = 0;
        row.cpu_softirq_ns = 0;
        row.cpu_steal_ns = h.steal_ms * kMs;
      }
      row.procs_running = h.procs_running;
      row.processes_d_state = h.d_state;
      b_.host_samples.push_back(row);
    }
  }

  void process(std::int64_t id, int pid, const std::string& comm, std::int64_t start_ns) {
    b_.processes.push_back({.process_id = id,
                            .pid = pid,
                            .start_ticks = 7000 + id,
                            .start_ns = start_ns,
                            .comm = comm,
                            .first_sample_id = 1});
  }

  // Rows at samples i = 1..10 (`d_rows` of them, the first ones, in state D).
  void rows(std::int64_t id, std::int64_t cpu_ms, std::int64_t run_delay_ms = 0, int d_rows = 0,
            const std::string& wchan = "folio_wait_bit_common") {
    for (int i = 1; i <= 10; ++i) {
      schema::ProcessSampleRow r{.sample_id = i + 1, .process_id = id};
      r.state = i <= d_rows ? 'D' : 'S';
      if (i <= d_rows) r.wchan = wchan;
      r.cpu_ns = cpu_ms * kMs;
      r.run_delay_ns = run_delay_ms * kMs;
      r.span_ns = kS;
      b_.process_samples.push_back(r);
    }
  }

  // `ticks` ASH rows for `pid` on polls k = first .. first + ticks − 1.
  void ash(int pid, const std::optional<std::string>& type, const std::optional<std::string>& event,
           int ticks, int first = 0, const std::string& state = "active") {
    for (int k = first; k < first + ticks; ++k) {
      b_.pg_activity.push_back({.time_ns = kT0 + k * 100 * kMs,
                                .ash_tick = k + 1,
                                .pid = pid,
                                .backend_type = "client backend",
                                .state = state,
                                .wait_event_type = type,
                                .wait_event = event});
    }
  }

  schema::Batch& batch() { return b_; }
  schema::Store& store() { return store_; }

  Report explain(ExplainOptions opt = {}) {
    store_.write(b_);
    b_ = {};
    return correlate::explain(store_, opt);
  }

 private:
  schema::Store store_;
  schema::Batch b_;
};

const Finding* finding(const Report& r, const std::string& kind) {
  auto it = std::find_if(r.findings.begin(), r.findings.end(),
                         [&](const Finding& f) { return to_string(f.kind) == kind; });
  return it == r.findings.end() ? nullptr : &*it;
}

std::int64_t part_ns(const Accounting& a, const std::string& name) {
  for (const auto& p : a.parts) {
    if (p.name == name) return p.time_ns;
  }
  return -1;
}

template <typename T>
T evidence(const Finding& f, const std::string& name) {
  for (const auto& [k, v] : f.evidence) {
    if (k == name) return std::get<T>(v);
  }
  ADD_FAILURE() << "no evidence " << name << " in " << to_string(f.kind);
  return T{};
}

// --- Time accounting -------------------------------------------------------

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

// --- Windows -----------------------------------------------------------------

TEST(CorrelateWindow, TimeWindowsCountQueriesAndHostState) {
  Fixture fx;
  fx.host({.user_ms = 300,
           .system_ms = 100,
           .idle_ms = 1400,
           .iowait_ms = 200,
           .procs_running = 3,
           .d_state = 1});
  {
    const auto q = fx.batch().queries[3];  // client 0, second 3
    fx.batch().query_errors.push_back(
        {.client_id = q.client_id, .seq = q.seq, .start_ns = q.start_ns, .sqlstate = "40001"});
  }
  auto r = fx.explain();
  ASSERT_EQ(r.windows.size(), 10u);
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    const auto& w = r.windows[i];
    EXPECT_EQ(w.start_ns, kT0 + std::int64_t(i) * kS);
    EXPECT_DOUBLE_EQ(w.start_offset_s, double(i));
    // The failed query (window 3) is an error, not throughput.
    EXPECT_EQ(w.queries, i == 3 ? 1 : 2);
    EXPECT_DOUBLE_EQ(*w.tps, i == 3 ? 1.0 : 2.0);
    EXPECT_DOUBLE_EQ(*w.latency_mean_ms, 1000.0);
    EXPECT_DOUBLE_EQ(*w.latency_p99_ms, 1000.0);
    EXPECT_EQ(w.errors, i == 3 ? 1 : 0);
  }
  // The tick at t0 + (i + 1) s covers window i; the tick at t0 lies before.
  for (const auto& w : r.windows) EXPECT_DOUBLE_EQ(*w.cpu_busy_pct, 20.0);
  EXPECT_DOUBLE_EQ(*r.windows[1].cpu_busy_pct, 20.0);
  EXPECT_DOUBLE_EQ(*r.windows[1].cpu_idle_pct, 70.0);
  EXPECT_DOUBLE_EQ(*r.windows[1].cpu_iowait_pct, 10.0);
  EXPECT_DOUBLE_EQ(*r.windows[1].cpu_steal_pct, 0.0);
  EXPECT_EQ(r.windows[1].procs_running_max, 3);
  EXPECT_EQ(r.windows[1].processes_d_state_max, 1);
  EXPECT_EQ(r.run.queries, 20);
  EXPECT_EQ(r.run.errors, 1);
  EXPECT_NEAR(*r.run.tps, 1.9, 1e-12);  // 19 successful over 10 s
}

TEST(CorrelateWindow, EveryNQueriesGivesMinMaxMeanStddev) {
  Fixture fx(true, 1);
  fx.batch().queries.clear();
  // Latencies 1 2 3 4 | 10 20 30 40 | 50 ms, sent back to back by one client.
  const std::int64_t lat_ms[] = {1, 2, 3, 4, 10, 20, 30, 40, 50};
  std::int64_t t = kT0;
  for (int k = 0; k < 9; ++k) {
    fx.batch().queries.push_back(
        {.client_id = 0, .seq = k, .start_ns = t, .latency_ns = lat_ms[k] * kMs});
    t += lat_ms[k] * kMs;
  }
  auto r = fx.explain({.every_queries = 4});
  EXPECT_TRUE(r.query_windows);
  ASSERT_EQ(r.windows.size(), 3u);
  const auto& w0 = r.windows[0];
  EXPECT_EQ(w0.queries, 4);
  EXPECT_DOUBLE_EQ(*w0.latency_min_ms, 1.0);
  EXPECT_DOUBLE_EQ(*w0.latency_max_ms, 4.0);
  EXPECT_DOUBLE_EQ(*w0.latency_mean_ms, 2.5);
  EXPECT_NEAR(*w0.latency_stddev_ms, std::sqrt(1.25), 1e-9);  // population
  EXPECT_NEAR(w0.duration_s, 0.010, 1e-12);
  EXPECT_NEAR(*w0.tps, 400.0, 1e-9);
  const auto& w1 = r.windows[1];
  EXPECT_DOUBLE_EQ(*w1.latency_min_ms, 10.0);
  EXPECT_DOUBLE_EQ(*w1.latency_max_ms, 40.0);
  EXPECT_DOUBLE_EQ(*w1.latency_mean_ms, 25.0);
  EXPECT_NEAR(*w1.latency_stddev_ms, std::sqrt(125.0), 1e-9);
  EXPECT_EQ(w1.start_ns, kT0 + 10 * kMs);
  EXPECT_EQ(w0.end_ns, w1.start_ns);  // host figures partition time
  EXPECT_EQ(r.windows[2].queries, 1);
  EXPECT_DOUBLE_EQ(*r.windows[2].latency_stddev_ms, 0.0);
  // Whole run: nearest-rank percentiles over the 9 latencies.
  EXPECT_DOUBLE_EQ(*r.run.latency_p50_ms, 10.0);
  EXPECT_DOUBLE_EQ(*r.run.latency_p99_ms, 50.0);
  EXPECT_DOUBLE_EQ(*r.run.latency_max_ms, 50.0);
  EXPECT_NEAR(*r.run.latency_mean_ms, 160.0 / 9, 1e-9);
}

// Issue 27: --window 1ms over an hour, or --every 1 over 3 M queries, took
// 5.7–6.7 GB (about 1.9 KB a window, up to 10^7 windows). Windows are capped
// at kMaxWindows (200,000, about 0.4 GB): more is a usage error saying the
// limit and what fits, before the windows are made.
TEST(CorrelateWindow, TooManyWindowsIsAnErrorSayingTheLimit) {
  Fixture fx(true, 1);
  fx.batch().queries.clear();
  // 200,001 queries of 1 ms, back to back: 200 s.
  for (int k = 0; k <= 200'000; ++k) {
    fx.batch().queries.push_back(
        {.client_id = 0, .seq = k, .start_ns = kT0 + k * kMs, .latency_ns = kMs});
  }
  const auto message = [&](const ExplainOptions& o) {
    try {
      fx.explain(o);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({.window_ns = kMs / 2, .window_chosen = true}),
            "cannot explain with --window 500000 ns: 400002 windows is too many (at most 200000, "
            "about 400 MB at 2000 bytes each); --window 2500000 ns or longer fits");
  EXPECT_EQ(message({.every_queries = 1}),
            "cannot explain with --every 1: more than 200000 windows (at most 200000, about 400 MB "
            "at 2000 bytes each); a larger --every fits");
  // Within the limit it explains.
  EXPECT_EQ(fx.explain({.every_queries = 2}).windows.size(), 100'001u);
}

TEST(CorrelateWindow, RejectsNonPositiveOptions) {
  Fixture fx;
  EXPECT_THROW(fx.explain({.window_ns = 0}), Error);
  EXPECT_THROW(fx.explain({.every_queries = 0}), Error);
}

TEST(CorrelateExplain, RefusesAFileWithoutARun) {
  auto store = schema::Store::create(":memory:");
  try {
    explain(store, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
  }
}

// --- Finding rules -------------------------------------------------------------

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

TEST(CorrelateStall, ExplainsTheSlowWindowByItsLockWaitAndBlocker) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  fx.rows(kBackendId[0], 50);
  fx.rows(kBackendId[1], 50);
  // Window 5 (t0 + 5 s): both queries take 3 s instead of 1 s ...
  for (auto& q : fx.batch().queries) {
    if (q.seq == 5) q.latency_ns = 3 * kS;
  }
  // ... while both backends wait on a row lock held by pid 999.
  for (int pid : kBackendPid) fx.ash(pid, "Lock", "transactionid", 10, 50);
  for (auto& a : fx.batch().pg_activity) a.blocking_pids = "999";
  fx.batch().pg_activity.push_back({.time_ns = kT0 + 5 * kS,
                                    .ash_tick = 51,
                                    .pid = 999,
                                    .backend_type = "client backend",
                                    .state = "idle in transaction",
                                    .wait_event_type = "Client",
                                    .wait_event = "ClientRead"});
  auto r = fx.explain();
  // Window 5: the queries sent there are outstanding throughout and none is
  // answered — a full stop, explained by the lock wait and its blocker.
  ASSERT_EQ(r.stalls.size(), 2u);
  const auto& s = r.stalls[0];
  EXPECT_EQ(s.window_index, 5u);
  EXPECT_EQ(s.queries, 0);
  EXPECT_EQ(r.windows[5].query_time_ns, 2 * kS);
  EXPECT_EQ(to_string(s.cause), "lock_wait");
  EXPECT_FALSE(s.latency_mean_ms);
  EXPECT_DOUBLE_EQ(*s.typical_latency_mean_ms, 1000);
  EXPECT_NE(s.explanation.find("no query answered"), std::string::npos) << s.explanation;
  EXPECT_NE(s.explanation.find("pid 999"), std::string::npos) << s.explanation;
  EXPECT_NE(s.explanation.find("idle in transaction"), std::string::npos) << s.explanation;
  // Window 7: the held-up queries are answered there (3 s and 1 s), part of
  // the same stall.
  const auto& tail = r.stalls[1];
  EXPECT_EQ(tail.window_index, 7u);
  EXPECT_DOUBLE_EQ(*tail.latency_mean_ms, 2000);
  EXPECT_EQ(to_string(tail.cause), "lock_wait");
  EXPECT_NE(tail.explanation.find("Part of the stall at +5 s"), std::string::npos)
      << tail.explanation;
  // Saved into the run file, replacing earlier rows on each save.
  save_report(fx.store(), r);
  save_report(fx.store(), r);
  auto& db = fx.store().db();
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM stall").getInt64(), 2);
  EXPECT_EQ(db.execAndGet("SELECT cause FROM stall WHERE window_index = 5").getString(),
            "lock_wait");
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM finding").getInt64(),
            static_cast<std::int64_t>(r.findings.size()));
  EXPECT_EQ(db.execAndGet("SELECT kind FROM finding WHERE rank = 1").getString(),
            to_string(r.findings[0].kind));
}

TEST(CorrelateStall, NamesTheRootOfTheChainNotAFirstBlockerThatWaitsItself) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  fx.rows(kBackendId[0], 50);
  fx.rows(kBackendId[1], 50);
  for (auto& q : fx.batch().queries) {
    if (q.seq == 5) q.latency_ns = 3 * kS;
  }
  // Window 5: backend 201 waits for the tuple lock 202 holds, 202 for the
  // transaction of pid 999, idle in transaction (an outside session, with
  // a row in each of those polls, as the ASH sampler now stores it).
  fx.ash(kBackendPid[0], "Lock", "tuple", 10, 50);
  fx.ash(kBackendPid[1], "Lock", "transactionid", 10, 50);
  fx.ash(999, "Client", "ClientRead", 10, 50, "idle in transaction");
  fx.batch().pg_query_texts.push_back(
      {.query_text_id = 1, .query = "UPDATE acct SET n = 0", .first_time_ns = kT0});
  for (auto& a : fx.batch().pg_activity) {
    if (a.pid == kBackendPid[0]) a.blocking_pids = std::to_string(kBackendPid[1]);
    if (a.pid == kBackendPid[1]) a.blocking_pids = "999";
    if (a.pid == 999) {
      a.application_name = "batch";
      a.query_text_id = 1;
      a.xact_start_ns = kT0 + 2 * kS;
    }
  }
  auto r = fx.explain();
  ASSERT_FALSE(r.stalls.empty());
  const auto& s = r.stalls[0];
  EXPECT_EQ(to_string(s.cause), "lock_wait");
  // 201's first blocker is 202, which itself waits: the root is named.
  EXPECT_EQ(s.explanation.find("blocked mostly by"), std::string::npos) << s.explanation;
  EXPECT_NE(s.explanation.find("the root blocker pid 999 idle in transaction for 3.9 s"),
            std::string::npos)
      << s.explanation;
  // The last of the 10 polls is at +5.9 s, the transaction began at +2 s.
  EXPECT_EQ(s.culprit,
            "pid 999 idle in transaction for 3.9 s (client backend, app 'batch'): UPDATE acct SET "
            "n = 0 — holds the transactionid lock 2 backends wait for (chain: tuple → "
            "transactionid); the application holds it (cycle through the application likely)");
  const auto* f = finding(r, "lock_wait");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->culprit, s.culprit);
  EXPECT_EQ(evidence<std::int64_t>(*f, "root_blocker_pid"), 999);
  EXPECT_EQ(evidence<std::int64_t>(*f, "root_blocker_waiter_samples"), 20);
}

TEST(CorrelateWindow, FlagsWindowsWhereTheSamplerTookMoreThanItsShare) {
  Fixture fx;
  fx.host({});  // 10 ms of sampler CPU per 1 s window: 1 % of a core
  fx.batch().samples[5].sampler_cpu_ns = 80 * kMs;  // window 4: 8 % of a core
  auto r = fx.explain();
  ASSERT_EQ(r.windows.size(), 10u);
  EXPECT_TRUE(r.windows[4].perturbed);
  EXPECT_DOUBLE_EQ(*r.windows[4].sampler_core_share, 0.08);
  EXPECT_FALSE(r.windows[3].perturbed);
  EXPECT_DOUBLE_EQ(*r.windows[3].sampler_core_share, 0.01);
  EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.starts_with("1 of 10 windows are flagged as perturbed");
  }));
}

// Client + server: a run file from the client host (queries, the driver)
// and a record file from the database host (backends, ASH) over the same
// 10 s. `offset_s` shifts the server file's times.
void write_pair(const std::string& client_path, const std::string& server_path,
                std::int64_t offset_s) {
  auto base_run = [](const std::string& mode, const std::string& host) {
    schema::RunInfo r;
    r.mode = mode;
    r.host = host;
    r.kernel = "6.1.0";
    r.cores = 4;
    r.clock_ticks_per_s = 100;
    r.start_ns = kT0 - kS;
    r.command_line = "stallscope " + mode;
    r.tool_version = "0";
    r.hz = 10;
    r.stallscope_pid = kDriverPid;
    return r;
  };
  auto samples = [](schema::Batch& b, std::int64_t shift_ns) {
    for (int i = 0; i <= 10; ++i) {
      b.samples.push_back({.sample_id = i + 1,
                           .time_ns = kT0 + shift_ns + i * kS,
                           .mono_ns = i * kS,
                           .interval_ns = i ? std::optional<std::int64_t>(kS) : std::nullopt,
                           .sampler_cpu_ns = 0,
                           .sampler_duration_ns = kMs});
      schema::HostSampleRow h{.sample_id = i + 1};
      if (i > 0) {
        h.cpu_user_ns = 400 * kMs, h.cpu_nice_ns = 0, h.cpu_system_ns = 0,
        h.cpu_idle_ns = 3600 * kMs;
        h.cpu_iowait_ns = 0, h.cpu_irq_ns = 0, h.cpu_softirq_ns = 0, h.cpu_steal_ns = 0;
      }
      b.host_samples.push_back(h);
    }
  };
  {
    auto store = schema::Store::create(client_path);
    auto r = base_run("run", "app1");
    r.clients = 2;
    r.threads = 1;
    r.sql = "UPDATE hot SET n = n + 1";
    store.begin_run(r);
    schema::Batch b;
    samples(b, 0);
    b.processes.push_back({.process_id = 1,
                           .pid = kDriverPid,
                           .start_ticks = 5000,
                           .start_ns = kT0 - 3 * kS,
                           .comm = "stallscope",
                           .first_sample_id = 1});
    for (int i = 1; i <= 10; ++i) {
      schema::ProcessSampleRow row{.sample_id = i + 1, .process_id = 1};
      row.state = 'S';
      row.cpu_ns = 200 * kMs;  // the driver: 2 s over the run
      row.run_delay_ns = 0;
      row.span_ns = kS;
      b.process_samples.push_back(row);
    }
    for (int c = 0; c < 2; ++c) {
      b.clients.push_back(
          {.client_id = c, .thread = 0, .backend_pid = kBackendPid[c], .connect_ns = kT0 - kS});
      for (int k = 0; k < 10; ++k)
        b.queries.push_back({.client_id = c, .seq = k, .start_ns = kT0 + k * kS, .latency_ns = kS});
    }
    store.write(b);
    store.end_run(kT0 + 11 * kS, "complete", "duration reached");
  }
  {
    auto store = schema::Store::create(server_path);
    auto r = base_run("record", "db1");
    r.start_ns += offset_s * kS;
    store.begin_run(r);
    schema::Batch b;
    samples(b, offset_s * kS);
    for (int c = 0; c < 2; ++c) {
      b.processes.push_back({.process_id = 10 + c,
                             .pid = kBackendPid[c],
                             .start_ticks = 6000 + c,
                             .start_ns = kT0 - 2 * kS + offset_s * kS,
                             .comm = "postgres",
                             .first_sample_id = 1});
      for (int i = 1; i <= 10; ++i) {
        schema::ProcessSampleRow row{.sample_id = i + 1, .process_id = 10 + c};
        row.state = 'S';
        row.cpu_ns = 100 * kMs;  // each backend: 1 s over the run
        row.run_delay_ns = 0;
        row.span_ns = kS;
        b.process_samples.push_back(row);
      }
    }
    for (int k = 0; k <= 100; ++k) {
      b.ash_ticks.push_back(
          {.ash_tick = k + 1, .time_ns = kT0 + offset_s * kS + k * 100 * kMs, .duration_ns = kMs});
      if (k < 80) {  // 16 s of Lock waits: with 2 s of each CPU, the 20 s of query time
        for (int pid : kBackendPid) {
          b.pg_activity.push_back({.time_ns = kT0 + offset_s * kS + k * 100 * kMs,
                                   .ash_tick = k + 1,
                                   .pid = pid,
                                   .backend_type = "client backend",
                                   .state = "active",
                                   .wait_event_type = "Lock",
                                   .wait_event = "transactionid"});
        }
      }
    }
    store.write(b);
    store.end_run(kT0 + 11 * kS + offset_s * kS, "complete", "duration reached");
  }
}

TEST(CorrelatePair, SplitsTheAccountingBetweenClientAndServerHost) {
  test::TempDir dir;
  write_pair(dir.file("client.db"), dir.file("server.db"), 0);
  auto client = schema::Store::open_readwrite(dir.file("client.db"));
  auto r = explain_pair(client, dir.file("server.db"), {});
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "driver_cpu"), 2 * kS);         // from the client file
  EXPECT_EQ(part_ns(*r.accounting, "server_cpu"), 2 * kS);         // backends on the server host
  EXPECT_EQ(part_ns(*r.accounting, "server_wait:Lock"), 16 * kS);  // 160 ASH rows × 0.1 s
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "lock_wait");
  ASSERT_EQ(r.hosts.size(), 2u);
  EXPECT_EQ(r.hosts[0].role, "client");
  EXPECT_EQ(r.hosts[0].host, "app1");
  EXPECT_EQ(r.hosts[1].role, "server");
  EXPECT_EQ(r.hosts[1].host, "db1");
  EXPECT_DOUBLE_EQ(*r.hosts[1].cpu_busy_pct, 10.0);
  EXPECT_NE(r.notes.front().find("assumed to share one clock"), std::string::npos);
  // The client file is left as it was: no views, no attached file.
  EXPECT_EQ(client.db().execAndGet("SELECT count(*) FROM process").getInt64(), 1);
}

// The server's clock runs 5 s ahead of the client's. With the driver's
// estimate in the run file the server's rows line up with the queries as if
// both clocks agreed; without it, only the server's first 5 s overlap.
TEST(CorrelatePair, ShiftsServerTimesByTheNearestClockOffsetEstimate) {
  test::TempDir dir;
  write_pair(dir.file("client.db"), dir.file("server.db"), 5);
  {
    auto client = schema::Store::open_readwrite(dir.file("client.db"));
    client.db().exec(
        fmt::format("INSERT INTO clock_offset VALUES ({0}, {2}, {3}, {4}, 5, 'start'), "
                    "({1}, {2}, {3}, {4}, 5, 'end')",
                    kT0, kT0 + 10 * kS, 5 * kS, 250'000, 500'000));
  }
  auto client = schema::Store::open_readwrite(dir.file("client.db"));
  auto r = explain_pair(client, dir.file("server.db"), {});
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "server_cpu"), 2 * kS);
  EXPECT_EQ(part_ns(*r.accounting, "server_wait:Lock"), 16 * kS);  // all 160 ASH rows
  ASSERT_EQ(r.windows.size(), 10u);
  // The server's first second (its t0 + 5 s) is the client's first window.
  EXPECT_EQ(r.windows.front().top_wait_event.value_or(""), "Lock:transactionid");
  EXPECT_EQ(r.windows.front().top_wait_event_samples, 20);
  EXPECT_DOUBLE_EQ(r.windows.front().cpu_busy_pct.value_or(-1), 10.0);
  ASSERT_TRUE(r.clock);
  EXPECT_EQ(r.clock->estimates, 2);
  EXPECT_EQ(r.clock->offset_ns, 5 * kS);
  EXPECT_EQ(r.clock->uncertainty_ns, 250'000);
  const auto j = to_json(r);
  EXPECT_EQ(j["clock"]["offset_ns"], 5 * kS);
  EXPECT_EQ(j["clock"]["uncertainty_ns"], 250'000);
  EXPECT_EQ(j["clock"]["applied"], true);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("clock     server - client +5000.000 ms +/- 0.250 ms"),
            std::string::npos)
      << text.str();
}

TEST(CorrelatePair, WithoutAnEstimateTheServerTimesAreUnshiftedAndTheOutputSaysSo) {
  test::TempDir dir;
  write_pair(dir.file("client.db"), dir.file("server.db"), 5);
  auto client = schema::Store::open_readwrite(dir.file("client.db"));
  auto r = explain_pair(client, dir.file("server.db"), {});
  ASSERT_TRUE(r.accounting);
  // Only the server's ASH polls at its t0 .. t0 + 5 s fall in the queries' span.
  EXPECT_EQ(part_ns(*r.accounting, "server_wait:Lock"), 10 * kS);
  EXPECT_FALSE(r.windows.front().top_wait_event);
  ASSERT_TRUE(r.clock);
  EXPECT_EQ(r.clock->estimates, 0);
  EXPECT_FALSE(r.clock->offset_ns);
  EXPECT_NE(r.notes.front().find("holds no clock-offset estimate"), std::string::npos);
  EXPECT_EQ(to_json(r)["clock"]["applied"], false);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("no clock-offset estimate in the run file"), std::string::npos);
}

// Errors come from query_error, matched to their query by the whole key:
// both clients send at the same instants, so start_ns alone would not do; an
// error row without its query (a file edited by hand) counts for nothing.
TEST(CorrelateWindow, ErrorsAreMatchedToTheirQueriesByTheWholeKey) {
  Fixture fx;
  fx.host({});
  auto error = [&](int client, std::int64_t seq, std::int64_t start_ns) {
    fx.batch().query_errors.push_back(
        {.client_id = client, .seq = seq, .start_ns = start_ns, .sqlstate = "40P01"});
  };
  error(1, 2, kT0 + 2 * kS);
  error(0, 5, kT0 + 5 * kS);
  error(1, 5, kT0 + 5 * kS);
  error(0, 5, kT0 + 5 * kS + 1);  // no such query
  error(1, 7, kT0 + 6 * kS);      // no such query (seq 7 started at 7 s)
  auto r = fx.explain();
  ASSERT_EQ(r.windows.size(), 10u);
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    EXPECT_EQ(r.windows[i].errors, i == 2 ? 1 : i == 5 ? 2 : 0) << "window " << i;
  }
  EXPECT_EQ(r.run.errors, 3);
  EXPECT_EQ(r.run.queries, 20);
}

// A pgbench log's failed transactions have no latency (stored as 0): they
// must not pull the latency figures down or count as throughput, in time
// windows or in windows of N queries.
TEST(CorrelateWindow, FailedQueriesAreNotThroughputOrLatency) {
  for (const bool every : {false, true}) {
    Fixture fx;
    fx.host({});
    for (int k = 0; k < 10; ++k) {
      const std::int64_t start = kT0 + k * kS + 500 * kMs;
      fx.batch().queries.push_back(
          {.client_id = 0, .seq = 100 + k, .start_ns = start, .latency_ns = 0});
      fx.batch().query_errors.push_back(
          {.client_id = 0, .seq = 100 + k, .start_ns = start, .sqlstate = "40001"});
    }
    ExplainOptions opt;
    if (every) opt.every_queries = 4;
    auto r = fx.explain(opt);
    EXPECT_EQ(r.run.queries, 30);
    EXPECT_EQ(r.run.errors, 10);
    EXPECT_DOUBLE_EQ(*r.run.latency_mean_ms, 1000.0);
    EXPECT_DOUBLE_EQ(*r.run.latency_p50_ms, 1000.0);
    EXPECT_DOUBLE_EQ(*r.run.tps, 2.0);
    std::int64_t queries = 0, errors = 0;
    for (const auto& w : r.windows) {
      queries += w.queries;
      errors += w.errors;
      if (w.queries > 0) {
        EXPECT_DOUBLE_EQ(*w.latency_mean_ms, 1000.0);
      }
    }
    EXPECT_EQ(queries, 20) << "every=" << every;
    EXPECT_EQ(errors, 10) << "every=" << every;
    if (every) {
      // 4 successful each, then one holding only the last failure (9.5 s).
      ASSERT_EQ(r.windows.size(), 6u);
      EXPECT_EQ(r.windows.back().queries, 0);
      EXPECT_EQ(r.windows.back().errors, 1);
    }
  }
}

// An imported pgbench aggregate log (no query rows): totals over all files
// (one per pgbench thread), and each time window gets the intervals that
// start in it.
TEST(CorrelateWindow, PgbenchAggregateIntervalsGiveThroughputAndWindows) {
  Fixture fx(false);
  fx.host({});
  for (const auto& [file, per_s] : {std::pair{"log.1", 100}, std::pair{"log.1.1", 50}}) {
    for (int k = 1; k <= 3; ++k) {
      fx.batch().pgbench_aggregates.push_back({.file = file,
                                               .line = k,
                                               .interval_start_ns = kT0 + k * kS,
                                               .transactions = per_s,
                                               .latency_sum_ns = per_s * 2 * kMs,
                                               .latency_min_ns = kMs,
                                               .latency_max_ns = k * 5 * kMs,
                                               .serialization_failures = k == 2 ? 1 : 0});
    }
  }
  auto r = fx.explain();
  ASSERT_TRUE(r.pgbench_aggregate);
  const auto& a = *r.pgbench_aggregate;
  EXPECT_EQ(a.intervals, 6);
  EXPECT_EQ(a.interval_ns, kS);
  EXPECT_EQ(a.transactions, 450);
  EXPECT_EQ(a.failures, 2);
  EXPECT_EQ(a.start_ns, kT0 + kS);
  EXPECT_EQ(a.end_ns, kT0 + 4 * kS);
  EXPECT_DOUBLE_EQ(*a.tps, 150.0);
  EXPECT_DOUBLE_EQ(*a.latency_mean_ms, 2.0);
  EXPECT_DOUBLE_EQ(*a.latency_max_ms, 15.0);
  EXPECT_EQ(r.run.queries, 0);
  std::int64_t total = 0;
  for (const auto& w : r.windows) {
    total += w.queries;
    const bool in = w.start_ns >= kT0 + kS && w.start_ns < kT0 + 4 * kS;
    EXPECT_EQ(w.queries, in ? 150 : 0) << "window at " << (w.start_ns - kT0) / kS << " s";
    if (in) {
      EXPECT_DOUBLE_EQ(*w.tps, 150.0);
      EXPECT_DOUBLE_EQ(*w.latency_mean_ms, 2.0);
      EXPECT_EQ(w.errors, w.start_ns == kT0 + 2 * kS ? 2 : 0);
    }
  }
  EXPECT_EQ(total, 450);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(
      text.str().find("pgbench   450 transactions (2 failed) in 6 aggregate intervals of 1 s"),
      std::string::npos)
      << text.str();
  EXPECT_EQ(to_json(r)["run"]["pgbench_aggregate"]["transactions"], 450);
}

// -R: the schedule lag of the queries is in the run summary, and a lag that
// makes up most of the latency (the rate was not kept) is said in a note.
TEST(CorrelateWindow, ScheduleLagIsReportedAndARateNotKeptIsNoted) {
  for (const std::int64_t lag_ms : {100, 600}) {
    Fixture fx;
    fx.host({});
    for (auto& q : fx.batch().queries) q.lag_ns = lag_ms * kMs + q.seq * kMs;  // seq 0..9
    auto r = fx.explain();
    ASSERT_TRUE(r.run.lag_mean_ms);
    EXPECT_DOUBLE_EQ(*r.run.lag_mean_ms, double(lag_ms) + 4.5);
    EXPECT_DOUBLE_EQ(*r.run.lag_max_ms, double(lag_ms) + 9);
    const bool noted = std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
      return n.find("fixed rate (-R) was not kept") != std::string::npos;
    });
    EXPECT_EQ(noted, lag_ms == 600) << "lag " << lag_ms << " ms of 1000 ms latency";
    EXPECT_EQ(to_json(r)["run"]["lag_max_ms"], double(lag_ms) + 9);
  }
  Fixture closed_loop;
  closed_loop.host({});
  EXPECT_FALSE(closed_loop.explain().run.lag_mean_ms);
}

TEST(CorrelateWindow, SkippedQueriesAreCountedApartNotAsQueries) {
  Fixture fx;
  fx.host({});
  // Three --skip-late rows (never sent) with absurd latencies.
  for (int k = 0; k < 3; ++k) {
    fx.batch().query_skips.push_back(
        {.client_id = 0, .seq = 100 + k, .start_ns = kT0 + k * kS + 1, .lag_ns = 100 * kS});
  }
  auto r = fx.explain();
  EXPECT_EQ(r.run.queries, 20);
  EXPECT_EQ(r.run.skipped, 3);
  EXPECT_DOUBLE_EQ(*r.run.latency_max_ms, 1000.0);
  EXPECT_EQ(*r.run.query_end_ns, kT0 + 10 * kS);
  EXPECT_EQ(r.windows.front().queries, 2);
  EXPECT_EQ(to_json(r)["run"]["skipped"], 3);
  std::ostringstream text;
  render_text(r, text);
  EXPECT_NE(text.str().find("(0 errors, 3 skipped as late, not counted)"), std::string::npos);
}

TEST(CorrelateCompare, StatesThePoolersThroughputCostAgainstTheDirectRun) {
  Report pooled, direct;
  pooled.run.tps = 6120.4;
  pooled.run.queries = 61204;
  pooled.accounting = Accounting{};
  pooled.accounting->path_cpu_by_comm_ns = {{"pgbouncer", 9 * kS}};
  direct.run.tps = 9840;
  direct.run.queries = 98400;
  const auto c = compare_runs(pooled, "pooled.db", direct, "direct.db");
  EXPECT_EQ(c.summary, "through pgbouncer: 6,120 tps vs 9,840 tps direct (-38%)");
  EXPECT_NEAR(*c.tps_ratio, 6120.4 / 9840, 1e-12);
  EXPECT_EQ(c.baseline.path, "direct.db");
  pooled.comparison = c;
  const auto j = to_json(pooled);
  EXPECT_EQ(j["comparison"]["summary"], c.summary);
  EXPECT_EQ(j["comparison"]["baseline"]["tps"], 9840.0);
  // Two runs without a pooler are told apart by their file names.
  const auto plain = compare_runs(direct, "a.db", direct, "b.db");
  EXPECT_EQ(plain.summary, "a.db: 9,840 tps vs 9,840 tps b.db (+0%)");
}

TEST(CorrelatePair, NonOverlappingFilesAreAOneLineUsageError) {
  test::TempDir dir;
  write_pair(dir.file("client.db"), dir.file("server.db"), 3600);
  auto client = schema::Store::open_readwrite(dir.file("client.db"));
  try {
    (void)explain_pair(client, dir.file("server.db"), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    const std::string what = e.what();
    EXPECT_NE(what.find("do not overlap"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// A server restart: in window 5 one client's query is cut by the shutdown
// (57P01) and the other waits 3 s for the server to come back. The stall is
// the lost connections, not whatever else moved.
TEST(CorrelateStall, ARestartIsNamedByItsLostConnections) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  for (auto& q : fx.batch().queries) {
    if (q.seq == 5 && q.client_id == 0) q.latency_ns = 3 * kS;
    if (q.seq == 5 && q.client_id == 1) {
      fx.batch().query_errors.push_back({.client_id = 1,
                                         .seq = 5,
                                         .start_ns = q.start_ns,
                                         .sqlstate = "57P01",
                                         .error = "terminating connection due to administrator "
                                                  "command"});
    }
  }
  auto r = fx.explain();
  // Window 5, and window 7 where client 0's 3 s query was answered: one stall.
  ASSERT_EQ(r.stalls.size(), 2u);
  EXPECT_EQ(r.stalls[0].window_index, 5u);
  EXPECT_EQ(to_string(r.stalls[0].cause), "connection_lost");
  EXPECT_NE(r.stalls[0].explanation.find("1 query lost its connection in this window "
                                         "(SQLSTATE 57P01, admin shutdown)"),
            std::string::npos)
      << r.stalls[0].explanation;
  EXPECT_EQ(r.stalls[1].window_index, 7u);
  EXPECT_EQ(to_string(r.stalls[1].cause), "connection_lost");
  EXPECT_NE(r.stalls[1].explanation.find("Part of the stall at +5 s"), std::string::npos)
      << r.stalls[1].explanation;
}

// An outage as the driver stores it: client 1's query at 5 s is cut by the
// shutdown (57P01) and its next two rows are failed reconnect attempts
// (08001) covering 6–8 s. The three rows' 3 s are the accounting part
// connection_lost (exact, the parts still adding up to the query time), and
// the stall in window 6 gives the clients' time reconnecting and the last
// error.
TEST(CorrelateStall, AnOutageIsTimeReconnectingInTheAccountingAndTheStall) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  for (auto& q : fx.batch().queries) {
    if (q.client_id != 1 || q.seq < 5 || q.seq > 7) continue;
    q.connection.reset();
    fx.batch().query_errors.push_back(
        {.client_id = 1,
         .seq = q.seq,
         .start_ns = q.start_ns,
         .sqlstate = q.seq == 5 ? "57P01" : "08001",
         .error = q.seq == 5 ? "terminating connection due to administrator command"
                             : fmt::format("cannot reconnect: attempt {} refused", q.seq)});
  }
  auto r = fx.explain();
  ASSERT_TRUE(r.accounting.has_value());
  std::int64_t sum_ns = 0, lost_ns = -1;
  for (const auto& p : r.accounting->parts) {
    sum_ns += p.time_ns;
    if (p.name == "connection_lost") lost_ns = p.time_ns;
  }
  EXPECT_EQ(lost_ns, 3 * kS);
  EXPECT_EQ(r.accounting->connection_lost_ns, 3 * kS);
  EXPECT_EQ(sum_ns, r.accounting->query_ns);
  const auto six = std::find_if(r.stalls.begin(), r.stalls.end(),
                                [](const Stall& s) { return s.window_index == 6; });
  ASSERT_NE(six, r.stalls.end());
  EXPECT_EQ(to_string(six->cause), "connection_lost");
  // A failed reconnect attempt is not a query that lost its connection.
  EXPECT_NE(six->explanation.find("1 connection attempt failed in this window (SQLSTATE "
                                  "08001): the server could not be reached, and the clients "
                                  "were reconnecting for 1.0 s of client time in this window."),
            std::string::npos)
      << six->explanation;
  EXPECT_EQ(six->culprit,
            "lost connections: SQLSTATE 08001 (last: cannot reconnect: attempt 6 "
            "refused)");
}

// A long outage in a short run: windows 3–5 answer nothing (every query
// failed: 08001), and the other windows' throughput varies (2 to 11 q/s), so
// the MAD is wide enough that 0 q/s is within 3 of it (z ≈ −0.7). A window
// with queries outstanding and none answered successfully is a stall anyway.
TEST(CorrelateStall, WindowsWithOnlyFailedAnswersAreStallsWhateverTheSpread) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  for (auto& q : fx.batch().queries) {
    if (q.seq < 3 || q.seq > 5) continue;
    q.connection.reset();
    fx.batch().query_errors.push_back({.client_id = q.client_id,
                                       .seq = q.seq,
                                       .start_ns = q.start_ns,
                                       .sqlstate = "08001",
                                       .error = "cannot reconnect: refused"});
  }
  std::int64_t seq = 0;
  for (int w : {1, 2, 6, 7, 8, 9}) {
    for (int j = 0; j < w; ++j) {
      fx.batch().queries.push_back({.client_id = 2,
                                    .seq = seq++,
                                    .start_ns = kT0 + w * kS + j * 10 * kMs,
                                    .latency_ns = 5 * kMs});
    }
  }
  auto r = fx.explain();
  std::vector<std::size_t> lost;
  for (const auto& s : r.stalls) {
    if (to_string(s.cause) == "connection_lost") lost.push_back(s.window_index);
  }
  EXPECT_EQ(lost, (std::vector<std::size_t>{3, 4, 5}));
}

// A lock held past the run's end: both clients' transactions sent at 3 s
// wait on it until the driver gives up on them at 10.5 s (query_unfinished).
// Without those rows the span would end at the last answer (3 s): no stall,
// and tps over 3 s. With them the span runs to 10.5 s, windows 3–10 are full
// stops with the clients' lock waits, and lock_wait leads.
TEST(CorrelateStall, AStallLastingToTheEndIsSeenThroughTheTransactionsCutShort) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 50);
  auto& queries = fx.batch().queries;
  std::erase_if(queries, [](const schema::QueryRow& q) { return q.seq >= 3; });
  for (int c = 0; c < 2; ++c) {
    fx.batch().query_unfinished.push_back({.client_id = c,
                                           .seq = 3,
                                           .start_ns = kT0 + 3 * kS,
                                           .elapsed_ns = 7500 * kMs,
                                           .connection = 0});
    fx.ash(kBackendPid[c], std::string("Lock"), std::string("transactionid"), 71, 30);
  }
  auto r = fx.explain();
  EXPECT_EQ(r.run.queries, 6);
  EXPECT_EQ(r.run.unfinished, 2);
  EXPECT_EQ(r.run.unfinished_max_ns, 7500 * kMs);
  ASSERT_TRUE(r.run.query_end_ns.has_value());
  EXPECT_EQ(*r.run.query_end_ns, kT0 + 10500 * kMs);
  ASSERT_TRUE(r.run.tps.has_value());
  EXPECT_NEAR(*r.run.tps, 6.0 / 10.5, 1e-9);
  ASSERT_TRUE(r.accounting.has_value());
  EXPECT_EQ(r.accounting->query_ns, 6 * kS + 15 * kS);  // answered + in flight at the end
  std::vector<std::size_t> stalled;
  for (const auto& st : r.stalls) {
    stalled.push_back(st.window_index);
    EXPECT_EQ(to_string(st.cause), "lock_wait") << st.explanation;
  }
  EXPECT_EQ(stalled, (std::vector<std::size_t>{3, 4, 5, 6, 7, 8, 9, 10}));  // 10: 10.0–10.5 s
  ASSERT_TRUE(r.verdict.kind.has_value());
  EXPECT_EQ(to_string(*r.verdict.kind), "lock_wait");
  EXPECT_NE(std::find_if(r.notes.begin(), r.notes.end(),
                         [](const std::string& n) {
                           return n.starts_with(
                               "2 transactions were still unanswered when the "
                               "run ended, for up to 7.500 s");
                         }),
            r.notes.end());
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

TEST(CorrelateStall, SteadyRunHasNoStall) {
  Fixture fx;
  fx.host({});
  auto r = fx.explain();
  EXPECT_TRUE(r.stalls.empty());
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

// --- Renderers -------------------------------------------------------------------

TEST(CorrelateRender, JsonHasTheContractShape) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 300);
  fx.rows(kBackendId[1], 300);
  fx.ash(kBackendPid[0], "Lock", "tuple", 40);
  auto r = fx.explain();
  auto j = to_json(r);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"accounting", "attribution", "findings", "notes", "run",
                                            "stalls", "verdict", "windows"}));
  EXPECT_EQ(j["run"]["queries"], 20);
  EXPECT_EQ(j["accounting"]["client_ns"], 20 * kS);
  // Back-to-back 1 s queries: the clients were never idle.
  EXPECT_EQ(j["accounting"]["query_ns"], 20 * kS);
  EXPECT_EQ(j["accounting"]["idle_ns"], 0);
  std::int64_t parts_ns = 0;
  for (const auto& p : j["accounting"]["parts"]) parts_ns += p["time_ns"].get<std::int64_t>();
  EXPECT_EQ(parts_ns, 20 * kS);
  EXPECT_EQ(j["windows"][3]["query_time_ns"], 2 * kS);
  // A closed loop's verdict is its first finding.
  EXPECT_EQ(j["verdict"]["kind"], j["findings"][0]["kind"]);
  EXPECT_TRUE(j["verdict"]["reason"].is_null());
  EXPECT_EQ(j["windows"].size(), 10u);
  ASSERT_GE(j["findings"].size(), 2u);
  double prev = 2;
  for (const auto& f : j["findings"]) {
    std::vector<std::string> fk;
    for (auto it = f.begin(); it != f.end(); ++it) fk.push_back(it.key());
    std::sort(fk.begin(), fk.end());
    EXPECT_EQ(fk, (std::vector<std::string>{"culprit", "end_ns", "evidence", "kind", "score",
                                            "start_ns", "suggestion", "summary"}));
    EXPECT_TRUE(f["evidence"].is_object());
    EXPECT_TRUE(f["culprit"].is_null() || f["culprit"].is_string());
    EXPECT_LE(f["score"].get<double>(), prev);
    prev = f["score"].get<double>();
  }
  EXPECT_EQ(j["findings"][0]["kind"], "network_roundtrip");
  EXPECT_EQ(j["findings"][1]["kind"], "server_cpu");
  // No ASH sample caught a backend on CPU with its query: the run's SQL is named.
  EXPECT_EQ(j["findings"][1]["culprit"],
            "SELECT 1 (the run's SQL; ASH caught no backend on CPU with its query)");
  EXPECT_TRUE(j["notes"].is_array());
  EXPECT_FALSE(j["notes"].empty());
  EXPECT_NO_THROW((void)j.dump());
}

TEST(CorrelateRender, TextEscapesControlCharactersInUntrustedNames) {
  Fixture fx;
  fx.host({.user_ms = 1200, .idle_ms = 800});
  fx.rows(kBackendId[0], 100);
  fx.process(30, 300, "pgb\x1b[31mouncer\xff", kT0 - 100 * kS);
  fx.rows(30, 970);
  auto r = fx.explain();
  ASSERT_NE(finding(r, "single_thread"), nullptr);
  std::ostringstream out;
  render_text(r, out);
  const auto text = out.str();
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_NE(text.find("pgb\\x1b[31mouncer"), std::string::npos) << text;
  // The culprit names the process, escaped the same way.
  EXPECT_NE(text.find("culprit: pgb\\x1b[31mouncer"), std::string::npos) << text;
  // JSON stays dumpable: invalid UTF-8 is replaced, ESC is escaped by the dumper.
  auto dumped = to_json(r).dump();
  EXPECT_EQ(dumped.find('\x1b'), std::string::npos);
  EXPECT_NE(dumped.find("\\u001b[31m"), std::string::npos);
}

TEST(CorrelateRender, TextEscapesInvalidUtf8InUntrustedNames) {
  Fixture fx;
  fx.host({.user_ms = 1200, .idle_ms = 800});
  fx.rows(kBackendId[0], 100);
  // A comm with bytes that are not UTF-8 (prctl(PR_SET_NAME) takes any).
  fx.process(30, 300, "pgb\xff\xfeouncer", kT0 - 100 * kS);
  fx.rows(30, 970);
  auto r = fx.explain();
  ASSERT_NE(finding(r, "single_thread"), nullptr);
  std::ostringstream out;
  render_text(r, out);
  const auto text = out.str();
  EXPECT_EQ(text.find('\xff'), std::string::npos) << "raw byte reached the text output";
  EXPECT_NE(text.find("culprit: pgb\\xff\\xfeouncer"), std::string::npos) << text;
  EXPECT_EQ(common::valid_utf8(text), text);
  // JSON: the same name with U+FFFD for each invalid byte.
  const auto dumped = to_json(r).dump();
  EXPECT_NE(dumped.find("pgb\xef\xbf\xbd\xef\xbf\xbdouncer"), std::string::npos);
}

TEST(CorrelateRender, TextHasHeaderWindowsAccountingAndRankedFindings) {
  Fixture fx;
  fx.host({});
  fx.rows(kBackendId[0], 100);
  fx.ash(kBackendPid[0], "Lock", "transactionid", 90);
  fx.ash(kBackendPid[1], "Lock", "transactionid", 90);
  auto r = fx.explain();
  std::ostringstream out;
  render_text(r, out);
  const auto text = out.str();
  EXPECT_NE(text.find("host db1"), std::string::npos);
  EXPECT_NE(text.find("queries   20 (0 errors)"), std::string::npos) << text;
  EXPECT_NE(text.find("time accounting: 20.000 s of query time (Σ latency); 2 clients x 10.000 s "
                      "= 20.000 s of client time, 100.0% of it in queries"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("verdict: lock_wait"), std::string::npos) << text;
  EXPECT_NE(text.find("server wait Lock"), std::string::npos);
  EXPECT_NE(text.find("  1. lock_wait"), std::string::npos) << text;
  EXPECT_NE(text.find("probability"), std::string::npos);  // the ASH sampling note
}

TEST(CorrelateRender, EscapeTextReplacesC0AndC1Controls) {
  EXPECT_EQ(detail::escape_text("a\tb\x7f"), "a\\x09b\\x7f");
  EXPECT_EQ(detail::escape_text("x\xc2\x9b"
                                "1m"),
            "x\\xc2\\x9b1m");
  EXPECT_EQ(detail::escape_text("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(detail::valid_utf8("ok\xff"), "ok\xef\xbf\xbd");
}

// --- PostgreSQL statistics: replication_wait, setting culprits -------------

// The stats poll of second i (t0 + i s, i = 0..10), with `walsenders`.
void stats_samples(Fixture& fx, std::int64_t walsenders,
                   const std::function<void(int, schema::PgStatsSampleRow&)>& fill = {}) {
  for (int i = 0; i <= 10; ++i) {
    schema::PgStatsSampleRow row{
        .time_ns = kT0 + i * kS, .duration_ns = kMs, .walsenders = walsenders};
    if (fill) fill(i, row);
    fx.batch().pg_stats.samples.push_back(row);
  }
}

void setting(Fixture& fx, const std::string& name, const std::string& value,
             const std::optional<std::string>& unit = std::nullopt) {
  fx.batch().pg_stats.settings.push_back(
      {.name = name, .setting = value, .unit = unit, .time_ns = kT0 - kS});
}

TEST(CorrelateFinding, ReplicationWaitNamesTheSynchronousStandby) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100);
  fx.rows(kBackendId[1], 100);
  fx.ash(kBackendPid[0], "IPC", "SyncRep", 80);
  fx.ash(kBackendPid[1], "IPC", "SyncRep", 80);
  setting(fx, "synchronous_standby_names", "standby1");
  setting(fx, "synchronous_commit", "on");
  stats_samples(fx, 1);
  for (int i = 0; i <= 10; ++i) {
    fx.batch().pg_stats.replication.push_back({.time_ns = kT0 + i * kS,
                                               .pid = 900,
                                               .application_name = "standby1",
                                               .client_addr = "127.0.0.1",
                                               .state = "streaming",
                                               .sync_state = "sync",
                                               .flush_lag_ns = 5 * kMs,
                                               .flush_behind_bytes = i * 200 * 1024,
                                               .reply_age_ns = i * 420 * kMs});
  }
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  const auto& x = r.findings[0];
  EXPECT_EQ(to_string(x.kind), "replication_wait");
  // 160 ASH rows × 100 ms = 16 s of 20 s of query time.
  EXPECT_DOUBLE_EQ(x.score, 0.8);
  EXPECT_EQ(x.culprit,
            "standby 'standby1' (127.0.0.1): state streaming, sync_state sync, flush lag up to 5 "
            "ms, last reply up to 4.2 s old, up to 2.0 MiB of WAL unconfirmed");
  EXPECT_EQ(evidence<std::int64_t>(x, "ash_samples"), 160);
  EXPECT_EQ(evidence<std::string>(x, "synchronous_standby_names"), "standby1");
  EXPECT_EQ(evidence<std::string>(x, "standby_1"), "standby1 (127.0.0.1, streaming, sync)");
  EXPECT_EQ(evidence<std::int64_t>(x, "standby_1_flush_behind_max_bytes"), 2000 * 1024);
  EXPECT_NE(x.suggestion.find("synchronous_commit = local"), std::string::npos);
  // IPC:SyncRep is not a kernel wait any more.
  EXPECT_EQ(finding(r, "kernel_wait"), nullptr);
  EXPECT_EQ(to_string(*r.verdict.kind), "replication_wait");
}

TEST(CorrelateFinding, ReplicationWaitNamesAStandbyThatIsNotConnected) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 100);
  fx.rows(kBackendId[1], 100);
  fx.ash(kBackendPid[0], "IPC", "SyncRep", 100);
  fx.ash(kBackendPid[1], "IPC", "SyncRep", 100);
  setting(fx, "synchronous_standby_names", "FIRST 1 (standby1, \"b-2\")");
  stats_samples(fx, 0);
  auto r = fx.explain();
  const auto* x = finding(r, "replication_wait");
  ASSERT_NE(x, nullptr);
  EXPECT_DOUBLE_EQ(x->score, 1.0);
  EXPECT_EQ(x->culprit,
            "standby 'standby1' named in synchronous_standby_names but not connected; standby "
            "'b-2' named in synchronous_standby_names but not connected");
  EXPECT_EQ(evidence<std::int64_t>(*x, "polls_without_walsender"), 11);
}

TEST(CorrelateFinding, ReplicationWaitWithoutStatisticsStillRanksTheWait) {
  // A file without the pg_stats tables (made before they existed).
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.ash(kBackendPid[0], "IPC", "SyncRep", 50);
  fx.store().db().exec(
      "DROP TABLE pg_setting; DROP TABLE pg_stats_sample; DROP TABLE pg_replication_sample; "
      "DROP TABLE pg_statement_sample; DROP TABLE pg_statement_text");
  auto r = fx.explain();
  const auto* x = finding(r, "replication_wait");
  ASSERT_NE(x, nullptr);
  EXPECT_DOUBLE_EQ(x->score, 0.25);
  EXPECT_EQ(x->culprit, "");
}

TEST(CorrelateFinding, SyncStandbyNamesReadsEveryForm) {
  using detail::sync_standby_names;
  EXPECT_EQ(sync_standby_names(""), std::vector<std::string>{});
  EXPECT_EQ(sync_standby_names("a"), std::vector<std::string>{"a"});
  EXPECT_EQ(sync_standby_names("a, b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(sync_standby_names("FIRST 1 (a, \"B c\")"), (std::vector<std::string>{"a", "B c"}));
  EXPECT_EQ(sync_standby_names("ANY 2 (x,y,z)"), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(sync_standby_names("2 (s1, s2)"), (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(sync_standby_names("*"), std::vector<std::string>{"*"});
}

// The ServerCpuRanksFirst fixture: backends saturate the host.
void busy_backends(Fixture& fx) {
  fx.host({.user_ms = 1700, .system_ms = 200, .idle_ms = 100, .procs_running = 9});
  fx.rows(kDriverId, 300, 100);
  fx.rows(kBackendId[0], 800, 300);
  fx.rows(kBackendId[1], 800, 300);
  fx.ash(kBackendPid[0], std::nullopt, std::nullopt, 90);
}

TEST(CorrelateFinding, ServerCpuNamesJitFromPgStatStatements) {
  Fixture fx;
  busy_backends(fx);
  setting(fx, "jit", "on");
  setting(fx, "jit_above_cost", "0");
  stats_samples(fx, 0);
  // Snapshots at t0 − 1 s (every entry) and t0 + 11 s: query 7 ran 1,000
  // times for 10 s of execution, 3 s of it generating and 2 s emitting JIT
  // code; query 8 appeared later (counted from 0) with 1 s and no JIT.
  auto& st = fx.batch().pg_stats.statements;
  st.push_back({.time_ns = kT0 - kS,
                .query_id = 7,
                .calls = 5,
                .total_exec_time_ns = 0,
                .jit_generation_time_ns = 0,
                .jit_inlining_time_ns = 0,
                .jit_optimization_time_ns = 0,
                .jit_emission_time_ns = 0});
  st.push_back({.time_ns = kT0 + 11 * kS,
                .query_id = 7,
                .calls = 1005,
                .total_exec_time_ns = 10 * kS,
                .jit_generation_time_ns = 3 * kS,
                .jit_inlining_time_ns = 0,
                .jit_optimization_time_ns = 0,
                .jit_emission_time_ns = 2 * kS,
                .query = "SELECT sum(n) FROM small"});
  st.push_back({.time_ns = kT0 + 11 * kS,
                .query_id = 8,
                .calls = 1000,
                .total_exec_time_ns = 1 * kS,
                .jit_generation_time_ns = 0});
  auto r = fx.explain();
  ASSERT_FALSE(r.findings.empty());
  const auto& x = r.findings[0];
  EXPECT_EQ(to_string(x.kind), "server_cpu");
  // 5 s of JIT against 11 s of planning and execution (JIT code is
  // generated outside what pgss counts as execution): 5 / 16 = 31 %; 5 s
  // over 2,000 calls.
  EXPECT_EQ(x.culprit,
            "jit = on, jit_above_cost = 0: JIT compiled 31% of backend time (pg_stat_statements: "
            "2.500 ms of JIT per call)");
  EXPECT_DOUBLE_EQ(evidence<double>(x, "jit_share"), 0.3125);
  EXPECT_EQ(evidence<std::int64_t>(x, "pgss_calls"), 2000);
  EXPECT_EQ(x.suggestion.rfind("JIT compilation costs more", 0), 0u);
}

TEST(CorrelateFinding, ServerCpuNamesWorkMemFromTempBytesWithoutPgStatStatements) {
  Fixture fx;
  busy_backends(fx);
  setting(fx, "work_mem", "64", "kB");
  // 4 MiB of temp files a second, 2 files and 10 transactions a second.
  stats_samples(fx, 0, [](int i, schema::PgStatsSampleRow& row) {
    row.xact_commit = 10 * i;
    row.temp_files = 2 * i;
    row.temp_bytes = i * 4 * 1024 * 1024;
  });
  auto r = fx.explain();
  const auto* x = finding(r, "server_cpu");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->culprit,
            "work_mem = 64kB: queries spilled 4.0 MiB/s to temp files (0.4 MiB per transaction, "
            "20 files)");
  EXPECT_EQ(evidence<std::int64_t>(*x, "transactions"), 100);
  EXPECT_DOUBLE_EQ(evidence<double>(*x, "temp_bytes_per_xact"), 419430.4);
}

TEST(CorrelateFinding, ServerCpuKeepsNoSettingCulpritBelowTheThresholds) {
  Fixture fx;
  busy_backends(fx);
  setting(fx, "work_mem", "4096", "kB");
  stats_samples(fx, 0, [](int i, schema::PgStatsSampleRow& row) {
    row.xact_commit = 10 * i;
    row.temp_bytes = i * 1024;  // 1 kB/s: no spill worth naming
  });
  auto r = fx.explain();
  const auto* x = finding(r, "server_cpu");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->culprit.find("work_mem"), std::string::npos) << x->culprit;
}

}  // namespace
}  // namespace stallscope::correlate

namespace stallscope::correlate {
namespace {

TEST(CorrelateFormat, GroupedTextSeparatesThousands) {
  using detail::grouped_text;
  EXPECT_EQ(grouped_text(9840.4), "9,840");
  EXPECT_EQ(grouped_text(999.6), "1,000");
  EXPECT_EQ(grouped_text(12), "12");
  EXPECT_EQ(grouped_text(1234567), "1,234,567");
  EXPECT_EQ(grouped_text(-12345), "-12,345");
  EXPECT_EQ(grouped_text(-0.2), "0");
}

TEST(CorrelateFormat, SqlOneLineCollapsesBlanksAndCutsAtACharacterBoundary) {
  using detail::sql_one_line;
  EXPECT_EQ(sql_one_line("  SELECT *\n\tFROM  t\r\n WHERE id = 1;  "),
            "SELECT * FROM t WHERE id = 1;");
  EXPECT_EQ(sql_one_line("SELECT 1", 8), "SELECT 1");
  EXPECT_EQ(sql_one_line("SELECT 12", 8), "SELECT 1…");
  // "é" is two bytes (C3 A9): a cut inside it goes back to its first byte.
  EXPECT_EQ(sql_one_line("SELECT 'é'", 9), "SELECT '…");
  EXPECT_EQ(sql_one_line("SELECT 'é'", 10), "SELECT 'é…");
  EXPECT_EQ(sql_one_line(" \n "), "");
}

}  // namespace
}  // namespace stallscope::correlate
