// explain on a run without an end (still being written, or killed): the
// tail where some clients' rows are not yet stored is left out, at most the
// last second before the latest stored query, and the output says so; the
// same for a run cut short by its file, with a first note that says so; and
// the note on queries that span much less than the run (a slow -R).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "correlate/correlate.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using test::kMs;
using test::kS;
constexpr std::int64_t kT0 = 1'700'000'000 * kS;

// Client 0 sent a query every 100 ms for 10 s; client 1's rows stop after
// `client1_s` seconds (not yet written, or the client was held up).
schema::Store make_run(bool ended, int client1_s) {
  auto store = schema::Store::create(":memory:");
  store.begin_run(test::run_info(kT0 - kS));
  schema::Batch b;
  for (int c = 0; c < 2; ++c) {
    const int n = c == 0 ? 100 : client1_s * 10;
    for (int k = 0; k < n; ++k) {
      b.queries.push_back(
          {.client_id = c, .seq = k, .start_ns = kT0 + k * 100 * kMs, .latency_ns = 10 * kMs});
    }
  }
  store.write(b);
  if (ended) store.end_run(kT0 + 10 * kS, "complete", "duration reached");
  return store;
}

bool has_note(const Report& r, const std::string& text) {
  return std::any_of(r.notes.begin(), r.notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

TEST(CorrelateUnfinishedRun, LeavesOutTheTailWhereAClientsRowsAreMissing) {
  // Both clients' rows reach 9.9 s: nothing is left out.
  auto store = make_run(false, 10);
  auto full = explain(store, {});
  EXPECT_EQ(full.run.queries, 200);
  EXPECT_FALSE(has_note(full, "left out"));

  auto partial_store = make_run(false, 9);  // client 1 up to 8.9 s
  auto partial = explain(partial_store, {});
  // Cut at max(8.9 s, 9.9 s − 1 s) = 8.9 s: client 0's 90 queries up to
  // 8.9 s and client 1's 90.
  EXPECT_EQ(partial.run.queries, 180);
  EXPECT_TRUE(has_note(partial, "10 queries sent after"))
      << (partial.notes.empty() ? "" : partial.notes.back());
  ASSERT_TRUE(partial.run.query_end_ns.has_value());
  EXPECT_EQ(*partial.run.query_end_ns, kT0 + 8'900 * kMs + 10 * kMs);
  EXPECT_EQ(partial.run.queries_until_ns, kT0 + 8'900 * kMs);
  EXPECT_FALSE(full.run.queries_until_ns.has_value() &&
               *full.run.queries_until_ns < kT0 + 9'900 * kMs);
}

TEST(CorrelateUnfinishedRun, NeverLeavesOutMoreThanTheLastSecond) {
  // Client 1 held up after 3 s (e.g. in a lock wait when the run was killed):
  // only the last second before 9.9 s is left out, not 6.9 s of client 0.
  auto store = make_run(false, 3);
  auto r = explain(store, {});
  EXPECT_EQ(r.run.queries, 30 + 90);  // client 0 up to 8.9 s, client 1's 30
  EXPECT_TRUE(has_note(r, "10 queries sent after"));
}

TEST(CorrelateUnfinishedRun, AFinishedRunKeepsEveryQuery) {
  auto store = make_run(true, 3);
  auto r = explain(store, {});
  EXPECT_EQ(r.run.queries, 130);
  EXPECT_FALSE(r.run.queries_until_ns.has_value());
  EXPECT_FALSE(has_note(r, "left out"));
}

// A run whose file filled: the tail is cut as for a killed run (the failed
// commit's rows are lost), and the first note says the run was cut short
// and that the figures cover only the time kept.
TEST(CorrelateUnfinishedRun, ARunCutShortByItsFileSaysSoFirst) {
  auto store = make_run(false, 9);
  store.end_run(kT0 + 10 * kS, "failed", "disk full at 10.0 s: database or disk is full");
  auto r = explain(store, {});
  EXPECT_EQ(r.run.queries, 180);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_EQ(r.notes.front(),
            "The run was cut short: its file could not be written (disk full at 10.0 s: database "
            "or disk is full), so stallscope stopped there and kept what it had committed: its "
            "first 10.9 s of the 11.0 s the run lasted. The figures and the accounting cover only "
            "the 8.9 s analysed (up to 9.9 s after the start).");
  EXPECT_TRUE(has_note(r, "The run's last commit failed: 10 queries sent after"));
}

// The time kept is how far the file's rows reach (the figure run and
// record print): nothing when no query or sample was committed, not the
// run's start to its end.
TEST(CorrelateUnfinishedRun, ARunCutShortBeforeItsFirstCommitKeptNothing) {
  auto store = schema::Store::create(":memory:");
  auto info = test::run_info(kT0);
  info.mode = "record";
  store.begin_run(info);
  store.end_run(kT0 + 300 * kMs, "failed", "disk full at 0.3 s: database or disk is full");
  auto r = explain(store, {});
  ASSERT_FALSE(r.notes.empty());
  EXPECT_EQ(r.notes.front(),
            "The run was cut short: its file could not be written (disk full at 0.3 s: database "
            "or disk is full), so stallscope stopped there and kept what it had committed: its "
            "first 0.0 s of the 0.3 s the run lasted. No query or sample was committed: there are "
            "no figures.");
}

TEST(CorrelateUnfinishedRun, ARunWithoutAnEndSaysItDidNotEnd) {
  auto store = make_run(false, 10);
  auto r = explain(store, {});
  ASSERT_FALSE(r.notes.empty());
  EXPECT_TRUE(r.notes.front().starts_with(
      "The run did not end: its status is still 'running' and it has no end time"))
      << r.notes.front();
  auto ended_store = make_run(true, 10);
  EXPECT_FALSE(has_note(explain(ended_store, {}), "did not end"));
}

// A slow -R schedule: two queries 1 s apart in a 10 s run. tps is over the
// queries' span; a note gives it over the run.
TEST(CorrelateUnfinishedRun, QueriesSpanningLittleOfTheRunAreNoted) {
  auto store = schema::Store::create(":memory:");
  store.begin_run(test::run_info(kT0));
  schema::Batch b;
  for (int k = 0; k < 2; ++k) {
    b.queries.push_back(
        {.client_id = 0, .seq = k, .start_ns = kT0 + (4 + k) * kS, .latency_ns = 10 * kMs});
  }
  store.write(b);
  store.end_run(kT0 + 10 * kS, "complete", "duration reached");
  auto r = explain(store, {});
  EXPECT_TRUE(has_note(r,
                       "The queries span 1.01 s of the run's 10.00 s (a slow -R schedule, or "
                       "clients that stopped early): tps 2.0 is over the queries' span; over the "
                       "run it is 0.20."))
      << (r.notes.empty() ? "" : r.notes.back());
}

}  // namespace
}  // namespace stallscope::correlate
