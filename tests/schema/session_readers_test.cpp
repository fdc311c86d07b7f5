// The session readers (session_readers.h) on hand-made run files, with exact
// values; files of schema version 2 (without the session tables) are read.
#include <cstdint>
#include <string>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>

#include "common/units.h"
#include "schema/session_readers.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::schema {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000 * common::kNsPerS;
constexpr std::int64_t kPollNs = 100 * common::kNsPerMs;

// Ten polls (ticks 1..10, 100 ms apart); session 1 idle in ticks 1-3 and
// 6-10, active in 4-5; session 2 (a background worker) has no idle rows.
Store sessions_file(const test::TempDir& dir) {
  auto store = Store::create(dir.file("s.db"));
  store.begin_run(test::run_info(kT0));
  Batch b;
  for (int t = 1; t <= 10; ++t)
    b.ash_ticks.push_back({.ash_tick = t, .time_ns = kT0 + t * kPollNs, .duration_ns = 1000});
  b.pg_sessions.push_back({.session_id = 1,
                           .pid = 500,
                           .backend_start_ns = kT0 - 7,
                           .backend_type = "client backend",
                           .application_name = "app",
                           .client_addr = "10.0.0.2",
                           .client_port = 40000,
                           .usename = "u",
                           .datname = "d",
                           .first_ash_tick = 1,
                           .client_pid = 900,
                           .client_start_ticks = 1234});
  b.pg_sessions.push_back(
      {.session_id = 2, .pid = 501, .backend_type = "checkpointer", .first_ash_tick = 1});
  b.pg_session_idles.push_back({.session_id = 1, .first_ash_tick = 1, .polls = 3});
  b.pg_session_idles.push_back({.session_id = 1, .first_ash_tick = 6, .polls = 5});
  for (int t : {4, 5}) {
    b.pg_activity.push_back(
        {.time_ns = kT0 + t * kPollNs,
         .ash_tick = t,
         .pid = 500,
         .backend_type = "client backend",
         .state = "active",
         .wait_event_type = t == 4 ? std::optional<std::string>("Lock") : std::nullopt,
         .backend_start_ns = kT0 - 7});
  }
  b.record_clients.push_back({.source = "command", .pid = 77, .start_ticks = 55});
  b.record_clients.push_back({.source = "comm", .comm = "python3"});
  store.write(b);
  return store;
}

TEST(SessionReaders, ReadSessionsTheirPollsAndTheDeclaredClients) {
  test::TempDir dir;
  auto store = sessions_file(dir);
  EXPECT_TRUE(has_sessions(store));
  const auto sessions = read_sessions(store);
  ASSERT_EQ(sessions.size(), 2u);
  EXPECT_EQ(sessions[0].pid, 500);
  EXPECT_EQ(sessions[0].application_name, "app");
  EXPECT_EQ(sessions[0].client_pid, 900);
  EXPECT_EQ(sessions[0].client_start_ticks, 1234);
  EXPECT_EQ(sessions[1].backend_type, "checkpointer");
  EXPECT_FALSE(sessions[1].client_pid);

  // Polls 2..8 by time: ticks 2-8.
  const auto span = ash_tick_span(store, kT0 + 2 * kPollNs, kT0 + 9 * kPollNs);
  ASSERT_TRUE(span);
  EXPECT_EQ(span->first, 2);
  EXPECT_EQ(span->last, 8);
  EXPECT_EQ(span->polls, 7);
  // Idle stretches clipped to ticks 2-8: 2-3 and 6-8.
  const auto idle = session_idle_polls(store, *span);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0].session_id, 1);
  EXPECT_EQ(idle[0].polls, 5);
  const auto busy = session_busy_polls(store, kT0 + 2 * kPollNs, kT0 + 9 * kPollNs);
  ASSERT_EQ(busy.size(), 2u);  // (active, no wait) and (active, Lock), one poll each
  std::int64_t polls = 0;
  for (const auto& b : busy) {
    EXPECT_EQ(b.pid, 500);
    EXPECT_EQ(b.state, "active");
    polls += b.polls;
  }
  EXPECT_EQ(polls, 2);
  EXPECT_FALSE(ash_tick_span(store, kT0 + 20 * kPollNs, kT0 + 30 * kPollNs));

  const auto clients = read_record_clients(store);
  ASSERT_EQ(clients.size(), 2u);
  EXPECT_EQ(clients[0].source, "command");
  EXPECT_EQ(clients[0].pid, 77);
  EXPECT_EQ(clients[0].start_ticks, 55);
  EXPECT_EQ(clients[1].comm, "python3");
}

TEST(SessionReaders, AVersion2FileIsReadAsOneWithoutSessions) {
  test::TempDir dir;
  {
    auto store = Store::create(dir.file("v2.db"));
    store.begin_run(test::run_info(kT0));
  }
  {
    SQLite::Database db(dir.file("v2.db"), SQLite::OPEN_READWRITE);
    db.exec(
        "DROP TABLE pg_session; DROP TABLE pg_session_idle; DROP TABLE record_client; "
        "PRAGMA user_version = 2");
  }
  auto store = Store::open_readonly(dir.file("v2.db"));
  EXPECT_FALSE(has_sessions(store));
  EXPECT_TRUE(read_sessions(store).empty());
  EXPECT_TRUE(read_record_clients(store).empty());
  EXPECT_TRUE(session_idle_polls(store, {.first = 1, .last = 10, .polls = 10}).empty());
}

}  // namespace
}  // namespace stallscope::schema
