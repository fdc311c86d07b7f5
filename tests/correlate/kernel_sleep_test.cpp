// Backends asleep in the kernel outside any wait event (kernel_wait parts,
// the kernel_wait finding's culprit, stalls) and blind ASH polls, on
// hand-made run files with exact numbers.
//
// The fixture: run_fixture.h's, with queries each test sends; ASH polls
// every 100 ms (t0 + k·100 ms, k = 0..100) unless a test drops some.
#include <algorithm>

#include <gtest/gtest.h>

#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/kernel_sleep.h"
#include "correlate/record_fixture.h"
#include "correlate/run_fixture.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using namespace test_run;

// The base run fixture with host rows (the default HostCpu: 100 ms of user
// CPU a second) and no queries: each test sends its own (steady_queries).
class Fixture : public test_run::Fixture {
 public:
  Fixture() {
    batch().queries.clear();
    host({});
  }
};

const Finding* finding(const Report& r, const std::string& kind) {
  auto it = std::find_if(r.findings.begin(), r.findings.end(),
                         [&](const Finding& f) { return to_string(f.kind) == kind; });
  return it == r.findings.end() ? nullptr : &*it;
}

std::int64_t part_ns(const Accounting& a, const std::string& name) {
  for (const auto& p : a.parts)
    if (p.name == name) return p.time_ns;
  return -1;
}

template <typename T>
T evidence(const Finding& f, const std::string& name) {
  for (const auto& [k, v] : f.evidence)
    if (k == name) return std::get<T>(v);
  ADD_FAILURE() << "no evidence " << name << " in " << to_string(f.kind);
  return T{};
}

// Backend 0 asleep on a full pipe for its last 6 s (rows with no CPU), seen
// by ASH as active with no wait event; `wchan` for the sleep.
Report pipe_run(const std::string& wchan) {
  Fixture fx;
  fx.steady_queries(kS);
  fx.busy(kDriverId, 100);
  fx.busy(kBackendId[0], 100, 1, 4);
  for (int i = 5; i <= 10; ++i) fx.row(kBackendId[0], i, 'S', wchan, 0);
  fx.busy(kBackendId[1], 100);
  fx.ash_cpu(kBackendPid[0], 40, 60);
  return fx.explain();
}

TEST(KernelSleep, BackendsAsleepOnAFullPipeAreAKernelWaitPartNotRemainder) {
  const auto r = pipe_run("anon_pipe_write");
  ASSERT_TRUE(r.accounting);
  const auto& a = *r.accounting;
  EXPECT_EQ(part_ns(a, "kernel_wait:anon_pipe_write"), 6 * kS);
  EXPECT_EQ(a.kernel_wait_ns, 6 * kS);
  // The same run asleep in epoll (waiting for the client, not counted):
  // the 6 s were in the remainder, read as round trips.
  const auto idle = pipe_run("do_epoll_wait");
  ASSERT_TRUE(idle.accounting);
  EXPECT_EQ(part_ns(*idle.accounting, "kernel_wait:do_epoll_wait"), -1);
  EXPECT_EQ(idle.accounting->remainder_ns - a.remainder_ns, 6 * kS);
  EXPECT_EQ(finding(idle, "kernel_wait"), nullptr);
  // Each window of the sleep holds 1 s of it.
  for (std::size_t w = 4; w < 10; ++w) {
    ASSERT_TRUE(r.windows[w].accounting);
    EXPECT_EQ(part_ns(*r.windows[w].accounting, "kernel_wait:anon_pipe_write"), kS) << w;
  }
  EXPECT_EQ(part_ns(*r.windows[3].accounting, "kernel_wait:anon_pipe_write"), -1);
}

TEST(KernelSleep, TheFindingNamesThePipeAsItsCulprit) {
  const auto r = pipe_run("anon_pipe_write");
  const auto* k = finding(r, "kernel_wait");
  ASSERT_NE(k, nullptr);
  EXPECT_DOUBLE_EQ(k->score, 0.3);  // 6 s of 20 s
  // Its span: the windows where the backend slept.
  EXPECT_EQ(k->start_ns, kT0 + 4 * kS);
  EXPECT_EQ(k->end_ns, kT0 + 10 * kS);
  EXPECT_EQ(k->culprit,
            "backends asleep in anon_pipe_write (a full pipe: their log output (stderr, or the "
            "logging collector's pipe) is not read fast enough)");
  EXPECT_DOUBLE_EQ(evidence<double>(*k, "backend_sleep_s"), 6.0);
  // ASH called 60 polls (6 s) of it CPU; the backends used 1.4 s.
  EXPECT_DOUBLE_EQ(evidence<double>(*k, "ash_cpu_share"), 0.3);
  EXPECT_DOUBLE_EQ(evidence<double>(*k, "backend_cpu_share"), 0.07);
  EXPECT_EQ(evidence<std::int64_t>(*k, "os_wait_samples"), 6);
  EXPECT_NE(k->summary.find("active with no wait event"), std::string::npos) << k->summary;
}

// A heartbeat row of an older file (one row after 5 s without CPU) counts
// its whole span, spread over the windows it covers.
TEST(KernelSleep, ARowWithoutCpuCountsItsWholeSpan) {
  Fixture fx;
  fx.steady_queries(kS);
  fx.busy(kDriverId, 100);
  fx.busy(kBackendId[0], 100, 1, 5);
  fx.row(kBackendId[0], 10, 'S', "pipe_write", 0, 5 * kS);
  fx.busy(kBackendId[1], 100);
  const auto r = fx.explain();
  ASSERT_TRUE(r.accounting);
  EXPECT_EQ(part_ns(*r.accounting, "kernel_wait:pipe_write"), 5 * kS);
  for (std::size_t w = 5; w < 10; ++w)
    EXPECT_EQ(part_ns(*r.windows[w].accounting, "kernel_wait:pipe_write"), kS) << w;
  // A row that ran counts one sample period only.
  Fixture fy;
  fy.steady_queries(kS);
  fy.busy(kDriverId, 100);
  fy.busy(kBackendId[0], 100, 1, 9);
  fy.row(kBackendId[0], 10, 'S', "sk_stream_wait_memory", 50 * kMs, 5 * kS);
  const auto q = fy.explain();
  EXPECT_EQ(part_ns(*q.accounting, "kernel_wait:sk_stream_wait_memory"), kS);
}

TEST(KernelSleep, CulpritsSayWhatTheWaitChannelIs) {
  using detail::sleep_culprit;
  EXPECT_EQ(sleep_culprit("pgbouncer", "pooler:pgbouncer", "sk_stream_wait_memory"),
            "pgbouncer asleep in sk_stream_wait_memory (a full TCP send buffer: the peer does not "
            "read)");
  EXPECT_EQ(sleep_culprit("the driver", "driver", "futex_wait_queue"),
            "the driver asleep in futex_wait_queue (a futex: a lock or condition inside the "
            "process)");
  EXPECT_NE(sleep_culprit("backends", "backend", "sock_alloc_send_pskb").find("syslog"),
            std::string::npos);
  EXPECT_EQ(sleep_culprit("backends", "backend", "some_new_wait"),
            "backends asleep in some_new_wait");
}

// ASH polls missing from 2.9 s to 7.0 s: 4 s no poll covered (the gap less
// the 100 ms the last poll covers), in windows 3..6.
TEST(KernelSleep, BlindAshPollsAreMarkedPerWindowAndNoted) {
  Fixture fx;
  fx.steady_queries(kS);
  fx.busy(kDriverId, 100);
  fx.busy(kBackendId[0], 100);
  fx.busy(kBackendId[1], 100);
  fx.drop_polls(30, 70);
  const auto r = fx.explain();
  ASSERT_EQ(r.windows.size(), 10u);
  for (std::size_t w = 0; w < 10; ++w)
    EXPECT_EQ(r.windows[w].ash_blind_ns, w >= 3 && w <= 6 ? kS : 0) << w;
  const auto note = std::find_if(r.notes.begin(), r.notes.end(), [](const std::string& n) {
    return n.starts_with("ASH was blind for 4.0 s");
  });
  ASSERT_NE(note, r.notes.end());
  EXPECT_NE(note->find("the longest 4.1 s from +2.9 s"), std::string::npos) << *note;
  // An ASH row stands for the polls' spacing outside the gap (100 ms), not
  // their mean spacing over the file (10 s ÷ 60 intervals).
  EXPECT_EQ(r.ash_period_ns, 100 * kMs);
  // Polls 100 ms apart (or a little late) are not blind.
  Fixture fy;
  fy.steady_queries(kS);
  fy.busy(kDriverId, 100);
  fy.drop_polls(30, 33);
  const auto q = fy.explain();
  for (const auto& w : q.windows) EXPECT_EQ(w.ash_blind_ns, 0);
}

// Queries of 10 ms; at 5 s each client's query waits 2 s while its backend
// sleeps on a full pipe and ASH is blind: windows 5 and 6 answer nothing.
TEST(KernelSleep, AStallWhileBackendsSleepOnAPipeIsKernelWaitAndSaysAshWasBlind) {
  Fixture fx;
  for (int c = 0; c < 2; ++c) {
    int seq = 0;
    for (int s = 0; s < 10; ++s) {
      if (s == 6) continue;
      if (s == 5) {
        fx.batch().queries.push_back(
            {.client_id = c, .seq = seq++, .start_ns = kT0 + 5 * kS, .latency_ns = 2 * kS});
        continue;
      }
      for (int j = 0; j < 100; ++j)
        fx.batch().queries.push_back({.client_id = c,
                                      .seq = seq++,
                                      .start_ns = kT0 + s * kS + j * 10 * kMs,
                                      .latency_ns = 10 * kMs});
    }
  }
  fx.busy(kDriverId, 100);
  for (int c = 0; c < 2; ++c) {
    fx.busy(kBackendId[c], 50, 1, 5);
    fx.row(kBackendId[c], 6, 'S', "anon_pipe_write", 0);
    fx.row(kBackendId[c], 7, 'S', "anon_pipe_write", 0);
    fx.busy(kBackendId[c], 50, 8, 10);
  }
  fx.drop_polls(50, 70);
  const auto r = fx.explain();
  ASSERT_GE(r.stalls.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& x = r.stalls[i];
    EXPECT_EQ(x.window_index, 5 + i);
    EXPECT_EQ(x.cause, StallCause::kernel_wait);
    EXPECT_EQ(to_string(x.cause), "kernel_wait");
    EXPECT_TRUE(x.culprit.starts_with("backends asleep in anon_pipe_write (a full pipe"))
        << x.culprit;
    EXPECT_NE(x.explanation.find("slept in the kernel outside any wait event for 100%"),
              std::string::npos)
        << x.explanation;
    EXPECT_NE(x.explanation.find("ASH was blind for 1.0 s of this window"), std::string::npos)
        << x.explanation;
  }
  const auto* k = finding(r, "kernel_wait");
  ASSERT_NE(k, nullptr);
  EXPECT_DOUBLE_EQ(evidence<double>(*k, "backend_sleep_s"), 4.0);
  EXPECT_DOUBLE_EQ(evidence<double>(*k, "ash_blind_s"), 2.0);
}

// A record --pg file (no queries): one session of python3, active with no
// wait event in every ASH poll (as on CPU) while its backend ran 3 s and then
// slept 7 s on a full pipe. The session accounting takes the 7 s as
// kernel_wait, not as CPU or remainder.
TEST(KernelSleep, ARecordFilesSessionAccountingTakesTheSleepToo) {
  constexpr int kBackend = test_record::kRecordBackendPid;
  auto f = test_record::record_file_skeleton(100);
  auto& b = f.batch;
  for (int i = 1; i <= 10; ++i) {
    schema::ProcessSampleRow backend{
        .sample_id = i + 1, .process_id = 2, .state = 'S', .run_delay_ns = 0, .span_ns = kS};
    backend.cpu_ns = i <= 3 ? 40 * kMs : 0;
    if (i > 3) backend.wchan = "anon_pipe_write";
    b.process_samples.push_back(backend);
    b.process_samples.push_back({.sample_id = i + 1,
                                 .process_id = 3,
                                 .state = 'S',
                                 .cpu_ns = 10 * kMs,
                                 .run_delay_ns = 0,
                                 .span_ns = kS});
  }
  for (int k = 0; k <= 100; ++k) {
    b.pg_activity.push_back({.time_ns = kT0 + k * 100 * kMs,
                             .ash_tick = k + 1,
                             .pid = kBackend,
                             .backend_type = "client backend",
                             .state = "active",
                             .backend_start_ns = kT0 - kS});
  }
  auto& store = f.store;
  store.write(b);
  const auto rep = correlate::explain(store, {});
  ASSERT_TRUE(rep.sessions);
  ASSERT_TRUE(rep.accounting);
  EXPECT_EQ(rep.accounting->query_ns, 101 * 100 * kMs);  // the session time
  EXPECT_EQ(part_ns(*rep.accounting, "kernel_wait:anon_pipe_write"), 7 * kS);
  EXPECT_EQ(rep.accounting->server_cpu_ns, 120 * kMs);
  const auto* k = finding(rep, "kernel_wait");
  ASSERT_NE(k, nullptr);
  EXPECT_DOUBLE_EQ(k->score, 0.6931);  // 7 s of 10.1 s
  EXPECT_TRUE(k->culprit.starts_with("backends asleep in anon_pipe_write (a full pipe"))
      << k->culprit;
  ASSERT_FALSE(rep.findings.empty());
  EXPECT_EQ(rep.findings.front().kind, FindingKind::kernel_wait);
}

}  // namespace
}  // namespace stallscope::correlate
