// The correlator on hand-made run files with exact numbers (run_fixture.h):
// windows: by time and by --every, their figures, errors by key, pgbench aggregate intervals,
// skipped queries, the window limit and options.
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

}  // namespace
}  // namespace stallscope::correlate
