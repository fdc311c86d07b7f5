// AshSampler against the scratch PostgreSQL 15 the ctest fixture starts.
#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/pg.h"
#include "common/units.h"
#include "sampler/sampler.h"
#include "support/test_support.h"

namespace stallscope::sampler {
namespace {

using namespace std::chrono_literals;
using Collector = test::Collected;

TEST(AshSampler, SeesPgSleepAsTimeoutWaitAndNeverItself) {
  const std::string conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  pg::Conn sleeper = pg::connect(conninfo, "ash-test-sleeper");
  const int sleeper_pid = pg::backend_pid(sleeper.get());

  Collector collector;
  const AshSamplerOptions options{
      .conninfo = conninfo, .hz = 20, .application_name = "stallscope/ash-test"};
  AshSampler ash(options, collector.sink());
  const std::int64_t begin_ns = mono_now_ns();
  ash.start();
  ASSERT_EQ(PQsendQuery(sleeper.get(), "SELECT pg_sleep(1.5)"), 1);
  std::this_thread::sleep_for(1000ms);
  const AshSnapshot during = ash.latest();
  // Drain the sleeper's result (blocks until pg_sleep returns).
  while (pg::Result r{PQgetResult(sleeper.get())}) {
    EXPECT_EQ(PQresultStatus(r.get()), PGRES_TUPLES_OK);
  }
  std::this_thread::sleep_for(200ms);
  ash.stop();
  const double elapsed_s = static_cast<double>(mono_now_ns() - begin_ns) / 1e9;
  ash.stop();  // idempotent

  EXPECT_EQ(during.top_wait_event, "Timeout:PgSleep");

  const auto ticks = collector.ash_ticks();
  const auto activity = collector.activity();
  const AshSnapshot after = ash.latest();
  EXPECT_EQ(after.poll_errors, 0) << after.last_error;
  EXPECT_EQ(static_cast<std::int64_t>(ticks.size()), after.polls);
  EXPECT_NEAR(static_cast<double>(ticks.size()), 20 * elapsed_s, 0.2 * 20 * elapsed_s);
  std::map<std::int64_t, std::int64_t> tick_time;
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    EXPECT_EQ(ticks[i].ash_tick, static_cast<std::int64_t>(i) + 1);
    EXPECT_GT(ticks[i].duration_ns, 0);
    tick_time[ticks[i].ash_tick] = ticks[i].time_ns;
  }

  int sleeping = 0;
  for (const auto& a : activity) {
    ASSERT_TRUE(tick_time.count(a.ash_tick)) << "activity row for an unknown ash_tick";
    EXPECT_EQ(a.time_ns, tick_time[a.ash_tick]);
    EXPECT_NE(a.application_name, std::optional<std::string>(options.application_name));
    if (a.pid == sleeper_pid && a.wait_event_type == "Timeout" && a.wait_event == "PgSleep") {
      ++sleeping;
      EXPECT_EQ(a.state, "active");
      EXPECT_EQ(a.backend_type, "client backend");
      EXPECT_EQ(a.application_name, "ash-test-sleeper");
    }
  }
  // 1.5 s of sleep at 20 Hz: about 30 polls see it.
  EXPECT_GE(sleeping, 20);
  EXPECT_LE(sleeping, 35);
  // Background processes (state NULL) are sampled too, with their SQL NULLs kept.
  EXPECT_TRUE(std::any_of(activity.begin(), activity.end(),
                          [](const auto& a) { return !a.state.has_value(); }));
}

TEST(AshSampler, BadConninfoNamesItWithPasswordMasked) {
  AshSampler ash({.conninfo = "host=/nonexistent-stallscope-dir port=5999 user=ash "
                              "password=hunter2 connect_timeout=2"},
                 nullptr);
  try {
    ash.start();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::postgres);
    EXPECT_NE(what.find("cannot connect to"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent-stallscope-dir"), std::string::npos) << what;
    EXPECT_NE(what.find("password=***"), std::string::npos) << what;
    EXPECT_EQ(what.find("hunter2"), std::string::npos) << what;
  }
  ash.stop();  // nothing started: still fine
}

TEST(AshSampler, ReconnectsAfterItsBackendIsTerminated) {
  const std::string conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  Collector collector;
  AshSampler ash({.conninfo = conninfo, .hz = 20, .application_name = "stallscope/ash-kill"},
                 collector.sink());
  ash.start();
  std::this_thread::sleep_for(300ms);
  test::psql(conninfo,
             "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
             "WHERE application_name = 'stallscope/ash-kill'");
  std::this_thread::sleep_for(300ms);
  const std::int64_t polls_after_kill = ash.latest().polls;
  std::this_thread::sleep_for(700ms);
  ash.stop();
  const AshSnapshot snap = ash.latest();
  EXPECT_GE(snap.poll_errors, 1);
  EXPECT_NE(snap.last_error.find("cannot poll pg_stat_activity"), std::string::npos)
      << snap.last_error;
  EXPECT_GT(snap.polls, polls_after_kill + 5);  // polling went on
  const auto ticks = collector.ash_ticks();
  EXPECT_EQ(static_cast<std::int64_t>(ticks.size()), snap.polls);
}

// An idle session: one pg_session row, and its idle polls as consecutive
// stretches of at most idle_stretch_max_ns (0.5 s = 10 polls at 20 Hz), the
// last one handed over by stop(); no pg_activity_sample row.
TEST(AshSampler, IdleSessionIsOneSessionRowAndStretchesOfPolls) {
  const std::string conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  pg::Conn idle = pg::connect(conninfo, "ash-test-idle");
  const int idle_pid = pg::backend_pid(idle.get());
  Collector collector;
  AshSampler ash({.conninfo = conninfo,
                  .hz = 20,
                  .application_name = "stallscope/ash-test",
                  .idle_stretch_max_ns = 500 * common::kNsPerMs},
                 collector.sink());
  ash.start();
  std::this_thread::sleep_for(1600ms);
  ash.stop();
  const auto polls = static_cast<std::int64_t>(collector.ash_ticks().size());
  ASSERT_GE(polls, 20);
  std::optional<std::int64_t> session_id;
  for (const auto& s : collector.sessions()) {
    if (s.pid != idle_pid) continue;
    EXPECT_FALSE(session_id) << "one pg_session row per session";
    session_id = s.session_id;
    EXPECT_EQ(s.application_name, "ash-test-idle");
    EXPECT_EQ(s.backend_type, "client backend");
    EXPECT_EQ(s.first_ash_tick, 1);
    EXPECT_FALSE(s.client_pid);  // find_client_sockets is off
  }
  ASSERT_TRUE(session_id);
  std::vector<schema::PgSessionIdleRow> stretches;
  for (const auto& i : collector.idle_stretches())
    if (i.session_id == *session_id) stretches.push_back(i);
  std::sort(stretches.begin(), stretches.end(),
            [](const auto& x, const auto& y) { return x.first_ash_tick < y.first_ash_tick; });
  ASSERT_FALSE(stretches.empty());
  std::int64_t next = 1;
  for (const auto& st : stretches) {
    EXPECT_EQ(st.first_ash_tick, next);  // consecutive, no gap, no overlap
    EXPECT_GE(st.polls, 1);
    EXPECT_LE(st.polls, 10);
    next = st.first_ash_tick + st.polls;
  }
  EXPECT_EQ(next, polls + 1);  // every poll, the open stretch flushed by stop()
  EXPECT_EQ(static_cast<std::int64_t>(stretches.size()), (polls + 9) / 10);
  for (const auto& a : collector.activity()) EXPECT_NE(a.pid, idle_pid);
}

}  // namespace
}  // namespace stallscope::sampler
