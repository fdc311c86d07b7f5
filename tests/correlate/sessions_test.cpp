// explain on a hand-made `record --pg` file: the session view, the
// accounting built from it and the client findings, with exact numbers.
#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "correlate/correlate.h"
#include "correlate/record_fixture.h"
#include "schema/store.h"

namespace stallscope::correlate {
namespace {

using test_record::kMs;
using test_record::kS;
constexpr std::int64_t kT0 = test_record::kRecordT0;
constexpr int kRecordPid = test_record::kRecordPid;
constexpr int kClientPid = test_record::kRecordClientPid;
constexpr int kBackendPid = test_record::kRecordBackendPid;

// A record of 10 s (samples at t0 + i s, ASH polls every 100 ms, ticks 1..101
// at t0 + k·100 ms): one client session of python3 (the command record
// started), active on CPU in polls 1-5 and idle in polls 6-101; its backend
// at 40 ms of CPU a second, the client at `client_cpu_ms` a second and
// `client_delay_ms` of run-queue delay, asleep the rest of each second in
// `client_wchan` (by default in poll, on its database socket), waiting on
// what `client_poll(second)` says (process_poll; none by default), on a host
// the hypervisor stole `host_steal_ms` a second from.
schema::Store record_file(
    std::int64_t client_cpu_ms, std::int64_t client_delay_ms = 0,
    const std::string& client_wchan = "do_sys_poll",
    const std::function<std::optional<schema::PollWaitRow>(int)>& client_poll = nullptr,
    std::int64_t host_steal_ms = 0) {
  auto f = test_record::record_file_skeleton(client_cpu_ms + 40, host_steal_ms);
  auto& b = f.batch;
  for (int i = 1; i <= 10; ++i) {
    for (auto [id, cpu_ms] : {std::pair<std::int64_t, std::int64_t>{2, 40}, {3, client_cpu_ms}}) {
      b.process_samples.push_back({.sample_id = i + 1,
                                   .process_id = id,
                                   .state = 'S',
                                   .cpu_ns = cpu_ms * kMs,
                                   .run_delay_ns = id == 3 ? client_delay_ms * kMs : 0,
                                   .span_ns = kS});
      // The client sleeps in poll on its database socket between queries.
      if (id == 3 && !client_wchan.empty()) b.process_samples.back().wchan = client_wchan;
      if (id == 3 && client_poll) b.process_samples.back().poll_wait = client_poll(i);
    }
  }
  for (int k = 0; k < 5; ++k) {
    b.pg_activity.push_back({.time_ns = kT0 + k * 100 * kMs,
                             .ash_tick = k + 1,
                             .pid = kBackendPid,
                             .backend_type = "client backend",
                             .state = "active",
                             .backend_start_ns = kT0 - kS});
  }
  b.pg_session_idles.push_back({.session_id = 1, .first_ash_tick = 6, .polls = 60});
  b.pg_session_idles.push_back({.session_id = 1, .first_ash_tick = 66, .polls = 36});
  f.store.write(b);
  return std::move(f.store);
}

std::int64_t part_ns(const std::vector<SessionPart>& parts, const std::string& name) {
  for (const auto& p : parts)
    if (p.name == name) return p.time_ns;
  return -1;
}

std::int64_t part_ns(const Accounting& a, const std::string& name) {
  for (const auto& p : a.parts)
    if (p.name == name) return p.time_ns;
  return -1;
}

TEST(CorrelateSessions, SplitsTheSessionTimeAndAccountsItExactly) {
  auto store = record_file(950);
  const auto r = explain(store, {});
  ASSERT_TRUE(r.sessions);
  const auto& v = *r.sessions;
  ASSERT_EQ(v.ash_period_ns, 100 * kMs);
  EXPECT_EQ(v.polls, 101);
  EXPECT_EQ(v.sessions, 1);
  EXPECT_EQ(v.session_ns, 101 * 100 * kMs);
  ASSERT_EQ(v.groups.size(), 1u);
  const auto& g = v.groups[0];
  EXPECT_EQ(g.application_name, "django");
  EXPECT_EQ(g.client_addr, "local");
  EXPECT_EQ(g.user, "app");
  EXPECT_EQ(g.database, "site");
  EXPECT_EQ(part_ns(g.parts, "on_cpu"), 500 * kMs);
  EXPECT_EQ(part_ns(g.parts, "idle"), 9600 * kMs);
  EXPECT_NEAR(g.idle_share, 9.6 / 10.1, 1e-4);
  EXPECT_EQ(g.client_pids, std::vector<int>{kClientPid});
  ASSERT_EQ(v.client_processes.size(), 1u);  // not stallscope itself
  const auto& c = v.client_processes[0];
  EXPECT_EQ(c.comm, "python3");
  EXPECT_EQ(c.found_by, "command");
  EXPECT_EQ(c.cpu_ns, 9500 * kMs);
  EXPECT_FALSE(c.top_thread_cores);
  EXPECT_NEAR(c.hottest_thread_cores, 0.95, 1e-4);

  // The accounting: session time = backend CPU (schedstat) + client CPU +
  // remainder.
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  EXPECT_EQ(a.clients, 1);
  EXPECT_EQ(a.client_ns, 10100 * kMs);
  EXPECT_EQ(part_ns(a, "server_cpu"), 400 * kMs);
  EXPECT_EQ(part_ns(a, "client_cpu"), 9500 * kMs);
  EXPECT_EQ(part_ns(a, "run_queue"), 0);
  EXPECT_EQ(part_ns(a, "remainder"), 200 * kMs);
  std::int64_t sum = 0;
  for (const auto& p : a.parts) sum += p.time_ns;
  EXPECT_EQ(sum, a.client_ns);
  EXPECT_EQ(a.excess_ns, 0);

  // The client at 0.95 cores with its session idle 95 %: single_thread
  // first, once, naming python3; score = idle 9.6 s × 0.95 ÷ 10.1 s.
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "single_thread");
  EXPECT_NEAR(r.findings[0].score, 0.903, 1e-3);
  EXPECT_NE(r.findings[0].summary.find("python3 (pid 300)"), std::string::npos)
      << r.findings[0].summary;
  EXPECT_EQ(std::count_if(r.findings.begin(), r.findings.end(),
                          [](const Finding& f) { return f.kind == FindingKind::single_thread; }),
            1);
  EXPECT_EQ(std::count_if(r.findings.begin(), r.findings.end(),
                          [](const Finding& f) { return f.kind == FindingKind::client_cpu; }),
            0);
  const auto j = to_json(r);
  EXPECT_EQ(j["sessions"]["groups"][0]["application_name"], "django");
  EXPECT_EQ(j["sessions"]["client_processes"][0]["found_by"], "command");
}

// The command record started, first seen a second into the record (its
// row without deltas at sample 2), then on CPU 950 ms of every second: its
// cores are over the 9 s it was sampled in, 0.95, not 8.55 s ÷ 10 s.
TEST(CorrelateSessions, AClientFirstSeenAfterTheStartHasItsCoresOverTheTimeItWasSampled) {
  auto f = test_record::record_file_skeleton(990);
  auto& b = f.batch;
  for (int i = 1; i <= 10; ++i) {
    b.process_samples.push_back({.sample_id = i + 1,
                                 .process_id = 2,
                                 .state = 'S',
                                 .cpu_ns = 40 * kMs,
                                 .run_delay_ns = 0,
                                 .span_ns = kS});
    b.process_samples.push_back({.sample_id = i + 1, .process_id = 3, .state = 'R'});
    if (i > 1) {
      b.process_samples.back().cpu_ns = 950 * kMs;
      b.process_samples.back().run_delay_ns = 0;
      b.process_samples.back().span_ns = kS;
    }
  }
  b.pg_session_idles.push_back({.session_id = 1, .first_ash_tick = 1, .polls = 101});
  f.store.write(b);
  const auto r = explain(f.store, {});
  ASSERT_TRUE(r.sessions);
  ASSERT_EQ(r.sessions->client_processes.size(), 1u);
  const auto& c = r.sessions->client_processes[0];
  EXPECT_EQ(c.cpu_ns, 9 * 950 * kMs);
  EXPECT_NEAR(c.cores, 0.95, 1e-4);
  EXPECT_NEAR(c.hottest_thread_cores, 0.95, 1e-4);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "single_thread") << r.findings[0].summary;
  // The finding's figures are over the same span.
  for (const auto& [k, v] : r.findings[0].evidence) {
    if (k == "client_cores" || k == "busiest_process_cores") {
      EXPECT_NEAR(std::get<double>(v), 0.95, 1e-4) << k;
    }
  }
}

// Two pgbouncer server connections idle at every poll: one whose backend
// used no CPU (the pool's spare, or one left from an earlier run) served
// none of the queries — left out of the application's sessions and time,
// with a note; the other's backend ran 30 ms a second (short queries ASH
// never caught active) — the application's.
TEST(CorrelateSessions, AnIdlePooledServerConnectionIsNotTheApplicationsSession) {
  auto store = record_file(950);
  schema::Batch b;
  b.processes.push_back({.process_id = 4,
                         .pid = 400,
                         .start_ticks = 7000,
                         .start_ns = kT0 - 5 * kS,
                         .comm = "pgbouncer",
                         .first_sample_id = 1});
  for (const auto& [id, pid, cpu_ms] :
       {std::tuple<std::int64_t, int, std::int64_t>{5, 202, 0}, {6, 203, 30}}) {
    b.processes.push_back({.process_id = id,
                           .pid = pid,
                           .start_ticks = 7100,
                           .start_ns = kT0 - 5 * kS,
                           .ppid = 50,
                           .comm = "postgres",
                           .first_sample_id = 1});
    for (int i = 1; i <= 10; ++i) {
      b.process_samples.push_back({.sample_id = i + 1,
                                   .process_id = id,
                                   .state = 'S',
                                   .cpu_ns = cpu_ms * kMs,
                                   .run_delay_ns = 0,
                                   .span_ns = kS});
    }
    const std::int64_t session_id = id - 3;  // 2, 3
    b.pg_sessions.push_back({.session_id = session_id,
                             .pid = pid,
                             .backend_start_ns = kT0 - 5 * kS,
                             .backend_type = "client backend",
                             .application_name = "",
                             .client_port = 41000 + pid,
                             .usename = "app",
                             .datname = "site",
                             .first_ash_tick = 1,
                             .client_pid = 400,
                             .client_start_ticks = 7000});
    b.pg_session_idles.push_back({.session_id = session_id, .first_ash_tick = 1, .polls = 60});
    b.pg_session_idles.push_back({.session_id = session_id, .first_ash_tick = 61, .polls = 41});
  }
  store.write(b);
  const auto r = explain(store, {});
  ASSERT_TRUE(r.sessions);
  EXPECT_EQ(r.sessions->sessions, 2);
  EXPECT_EQ(r.sessions->session_ns, 2 * 101 * 100 * kMs);
  EXPECT_EQ(r.sessions->idle_pooled_sessions, 1);
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(r.accounting->client_ns, 2 * 10100 * kMs);
  EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.starts_with("1 server connection of pgbouncer was idle at every poll");
  }));
}

TEST(CorrelateSessions, AClientBelowOneCoreIsClientCpu) {
  auto store = record_file(500);
  const auto r = explain(store, {});
  ASSERT_TRUE(r.sessions);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "client_cpu");
  // min(5.0 s of CPU, 9.6 s idle) ÷ 10.1 s.
  EXPECT_NEAR(r.findings[0].score, 5.0 / 10.1, 1e-4);
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "remainder"), (10100 - 400 - 5000) * kMs);
}

// A busy host: the client ran 0.7 cores and waited for a CPU 0.25 more. Its
// demand is evidence; with 0.7 cores of CPU it is client_cpu, scored by its
// CPU and run delay (9.5 s of the 9.6 s idle) ÷ 10.1 s.
TEST(CorrelateSessions, AClientBelowOneCoreOfCpuOnABusyHostIsClientCpuWithItsRunDelay) {
  auto store = record_file(700, 250);
  const auto r = explain(store, {});
  ASSERT_TRUE(r.sessions);
  ASSERT_EQ(r.sessions->client_processes.size(), 1u);
  EXPECT_NEAR(r.sessions->client_processes[0].hottest_thread_cores, 0.7, 1e-4);
  EXPECT_NEAR(r.sessions->client_processes[0].hottest_thread_demand_cores, 0.95, 1e-4);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "client_cpu");
  EXPECT_NEAR(r.findings[0].score, 9.5 / 10.1, 1e-4);
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "client_cpu"), 7000 * kMs);
  EXPECT_EQ(part_ns(*r.accounting, "run_queue"), 2500 * kMs);
  EXPECT_EQ(part_ns(*r.accounting, "remainder"), (10100 - 400 - 7000 - 2500) * kMs);
}

// Think time: the client runs 50 ms a second and sleeps the rest in a
// timer (hrtimer_nanosleep). Its side of the idle session time is asleep by
// choice (client_sleep), not round trips; the clients were paced by their
// own sleep and nothing was saturated: no bottleneck.
TEST(CorrelateSessions, AClientAsleepInATimerIsThinkTimeNotRoundTrips) {
  auto store = record_file(50, 0, "hrtimer_nanosleep");
  const auto r = explain(store, {});
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  // Left to the client's side: 10.1 s − 0.4 s backend CPU − 0.5 s client CPU.
  EXPECT_EQ(part_ns(a, "client_sleep"), (10100 - 400 - 500) * kMs);
  EXPECT_EQ(part_ns(a, "remainder"), 0);
  std::int64_t sum = 0;
  for (const auto& p : a.parts) sum += p.time_ns;
  EXPECT_EQ(sum, a.client_ns);
  EXPECT_FALSE(r.verdict.kind) << to_string(*r.verdict.kind);
  EXPECT_EQ(r.verdict.reason, "paced");
  EXPECT_NE(r.verdict.summary.find("asleep by choice"), std::string::npos) << r.verdict.summary;
  for (const auto& f : r.findings) EXPECT_NE(f.kind, FindingKind::network_roundtrip);
}

// An application worker (a web server's) that waits in select on its own
// clients' sockets between requests — sockets to other processes, none the
// database's, or the database's with nothing outstanding on it — 7 s of its
// 10, and on its database socket 3 s: the 7 s are
// the client waiting for other input (client_idle), not round trips; the
// round trips are only the 3 s on the database socket beyond the server's
// parts. Mostly idle and nothing saturated: no bottleneck.
TEST(CorrelateSessions, AClientWaitingOnSocketsThatAreNotTheDatabasesIsIdleNotRoundTrips) {
  auto store = record_file(50, 0, "do_select", [](int second) {
    // Seconds 1-2: the database socket alone; 3: among its clients' sockets
    // with a query outstanding (bytes queued); 4-6: among them, nothing
    // queued (an event loop's idle connection); 7-10: its clients' alone.
    return schema::PollWaitRow{.syscall = "select",
                               .timed = true,
                               .peer_sockets = second <= 2 ? 1 : 2,
                               .database_sockets = second <= 6 ? 1 : 0,
                               .database_queued = second == 3 ? 1 : 0};
  });
  const auto r = explain(store, {});
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  ASSERT_TRUE(r.sessions);
  ASSERT_EQ(r.sessions->client_processes.size(), 1u);
  EXPECT_EQ(r.sessions->client_processes[0].on_database_ns, 3 * 950 * kMs);
  EXPECT_EQ(r.sessions->client_processes[0].on_other_ns, 7 * 950 * kMs);
  // Its own 10 s (0.5 s CPU, 9.5 s asleep) scaled to the 10.1 s of session
  // time: 6.65 s other → 6.7165 s; 2.85 s on the database socket → 2.8785 s,
  // less the backend's 0.4 s already taken. Those two split the 9.2 s left
  // after both CPUs in proportion.
  const double other_s = 6.65 * 1.01, socket_s = 2.85 * 1.01 - 0.4;
  const double scale = 9.2 / (other_s + socket_s);
  EXPECT_NEAR(double(part_ns(a, "client_idle")), other_s * scale * 1e9, 2e6);
  EXPECT_NEAR(double(part_ns(a, "remainder")), socket_s * scale * 1e9, 2e6);
  std::int64_t sum = 0;
  for (const auto& p : a.parts) sum += p.time_ns;
  EXPECT_EQ(sum, a.client_ns);
  EXPECT_FALSE(r.verdict.kind) << to_string(*r.verdict.kind);
  EXPECT_EQ(r.verdict.reason, "paced");
}

// Which socket is the database's is known only from a wait on one: a client
// never seen waiting on a database socket keeps its waits by wait channel.
TEST(CorrelateSessions, WaitsOnOtherSocketsOfAClientNeverSeenOnTheDatabaseStayByWaitChannel) {
  auto store = record_file(50, 0, "do_select", [](int) {
    return schema::PollWaitRow{
        .syscall = "select", .timed = true, .peer_sockets = 1, .database_sockets = 0};
  });
  const auto r = explain(store, {});
  ASSERT_TRUE(r.sessions);
  ASSERT_EQ(r.sessions->client_processes.size(), 1u);
  EXPECT_EQ(r.sessions->client_processes[0].on_other_ns, 0);
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "client_idle"), -1);
  EXPECT_GT(part_ns(*r.accounting, "remainder"), 0);
}

// A client blocked writing to a full pipe (its log's reader is slow): its
// side of the session time is client_blocked:anon_pipe_write, and
// kernel_wait names the client and the pipe, first.
TEST(CorrelateSessions, AClientBlockedOnAFullPipeIsKernelWaitNamingIt) {
  auto store = record_file(200, 0, "anon_pipe_write");
  const auto r = explain(store, {});
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "client_blocked:anon_pipe_write"), (10100 - 400 - 2000) * kMs);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(to_string(r.findings[0].kind), "kernel_wait");
  EXPECT_NEAR(r.findings[0].score, 7.7 / 10.1, 1e-4);
  EXPECT_NE(r.findings[0].culprit.find("python3 (pid 300)"), std::string::npos)
      << r.findings[0].culprit;
  EXPECT_NE(r.findings[0].culprit.find("anon_pipe_write (a full pipe"), std::string::npos)
      << r.findings[0].culprit;
  ASSERT_TRUE(r.verdict.kind);
  EXPECT_EQ(to_string(*r.verdict.kind), "kernel_wait");
}

// Without any sample of where the client slept (its rows carry no wait
// channel), the client's side is unaccounted, never round trips, and with
// it larger than any finding there is no verdict.
TEST(CorrelateSessions, AClientSideNotSampledIsUnaccountedNotRoundTrips) {
  auto store = record_file(50, 0, "");
  const auto r = explain(store, {});
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "remainder"), 0);
  EXPECT_EQ(part_ns(*r.accounting, "unaccounted"), (10100 - 400 - 500) * kMs);
  EXPECT_FALSE(r.verdict.kind);
  EXPECT_EQ(r.verdict.reason, "unaccounted");
  for (const auto& f : r.findings) EXPECT_NE(f.kind, FindingKind::network_roundtrip);
}

// A closed loop beside the recorder: the client (0.6 cores, never asleep by
// choice) and its backend take turns, the host is 32 % busy, nothing waits.
// The server committed 2,000 transactions a second (pg_stat_database), so
// one session's loop took 1 ÷ 2,000 s = 0.5 ms an answer: latency_bound,
// with the latency derived from the throughput.
TEST(CorrelateSessions, AClosedLoopBesideTheRecorderIsLatencyBound) {
  auto store = record_file(600);
  schema::Batch b;
  b.pg_stats.samples.push_back({.time_ns = kT0, .duration_ns = kMs, .xact_commit = 1000});
  b.pg_stats.samples.push_back(
      {.time_ns = kT0 + 10 * kS, .duration_ns = kMs, .xact_commit = 21000, .xact_rollback = 0});
  store.write(b);
  const auto r = explain(store, {});
  ASSERT_FALSE(r.findings.empty());
  const auto& x = r.findings[0];
  EXPECT_EQ(to_string(x.kind), "latency_bound") << x.summary;
  ASSERT_TRUE(r.verdict.kind);
  EXPECT_EQ(to_string(*r.verdict.kind), "latency_bound");
  for (const auto& [k, v] : x.evidence) {
    if (k == "measured_tps") {
      EXPECT_NEAR(std::get<double>(v), 2000.0, 1e-6);
    } else if (k == "latency_mean_ms") {
      EXPECT_NEAR(std::get<double>(v), 0.5, 1e-6);
    } else if (k == "latency_source") {
      EXPECT_EQ(std::get<std::string>(v), "pg_stat_database");
    }
  }
  EXPECT_NE(x.summary.find("1 client session waited for every answer"), std::string::npos)
      << x.summary;
  EXPECT_NE(x.summary.find("2,000 transactions/s (pg_stat_database)"), std::string::npos)
      << x.summary;
}

// The same loop with a client at 0.86 cores: alone that is a closed loop
// (latency_bound); on a host the hypervisor stole 50 ms a second from (the
// host busy 900 ms a second), the client's thread never left its core —
// 0.86 × (900 + 50) ÷ 900 ≈ 0.908 cores with its steal — and it is the
// limit: single_thread, no latency_bound.
TEST(CorrelateSessions, AClientThreadShortOfACoreOnlyByStealIsTheLimit) {
  const auto explained = [](std::int64_t steal_ms) {
    auto store = record_file(860, 0, "do_sys_poll", nullptr, steal_ms);
    schema::Batch b;
    b.pg_stats.samples.push_back({.time_ns = kT0, .duration_ns = kMs, .xact_commit = 1000});
    b.pg_stats.samples.push_back(
        {.time_ns = kT0 + 10 * kS, .duration_ns = kMs, .xact_commit = 3000});
    store.write(b);
    return explain(store, {});
  };
  const auto unstolen = explained(0);
  ASSERT_FALSE(unstolen.findings.empty());
  EXPECT_EQ(to_string(unstolen.findings[0].kind), "latency_bound") << unstolen.findings[0].summary;
  const auto stolen = explained(50);
  ASSERT_FALSE(stolen.findings.empty());
  EXPECT_EQ(to_string(stolen.findings[0].kind), "single_thread") << stolen.findings[0].summary;
  for (const auto& x : stolen.findings) EXPECT_NE(x.kind, FindingKind::latency_bound);
}

}  // namespace
}  // namespace stallscope::correlate
