// schema/tcp_readers.h on small hand-made run files, with exact expected
// values; a file without the tables reads as absent.
#include "schema/tcp_readers.h"

#include <cstdint>

#include <gtest/gtest.h>

#include "common/units.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::schema {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000 * common::kNsPerS;
using test::kMs;

Store run_file(const test::TempDir& dir) {
  auto store = Store::create(dir.file("run.db"));
  store.begin_run(test::run_info(kT0));
  return store;
}

TEST(TcpReaders, SummarisesTheDriverConnectionsRoundTrips) {
  test::TempDir dir;
  auto store = run_file(dir);
  EXPECT_FALSE(tcp_rtt_in(store, kT0, kT0 + 10'000 * kMs));  // no rows
  Batch b;
  // Client 1: rtt 2, 3, 9 ms; retransmits 5 → 7. Client 2: rtt 4 ms, 0 → 0.
  // A row outside the span (rtt 1 ms, retransmits 100) does not count.
  auto row = [](std::int64_t t, int client, std::int64_t rtt_ms, std::int64_t retrans) {
    return TcpSampleRow{.time_ns = t,
                        .client_id = client,
                        .connection = 0,
                        .rtt_ns = rtt_ms * kMs,
                        .rttvar_ns = rtt_ms * kMs / 2,
                        .total_retrans = retrans,
                        .unacked = 0};
  };
  b.tcp_samples = {row(kT0 + 1000 * kMs, 1, 2, 5), row(kT0 + 2000 * kMs, 1, 3, 6),
                   row(kT0 + 3000 * kMs, 1, 9, 7), row(kT0 + 1000 * kMs, 2, 4, 0),
                   row(kT0 + 9000 * kMs, 2, 1, 100)};
  store.write(b);
  const auto s = tcp_rtt_in(store, kT0, kT0 + 5000 * kMs);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->samples, 4);
  EXPECT_EQ(s->connections, 2);
  EXPECT_EQ(s->rtt_median_ns, 3 * kMs);  // 2 3 4 9: the lower middle
  EXPECT_EQ(s->rttvar_median_ns, 3 * kMs / 2);
  EXPECT_EQ(s->rtt_min_ns, 2 * kMs);
  EXPECT_EQ(s->retransmits, 2);
}

TEST(TcpReaders, SumsTheStackCountersOfTheTicksInTheSpan) {
  test::TempDir dir;
  auto store = run_file(dir);
  Batch b;
  for (int i = 1; i <= 4; ++i) {
    b.samples.push_back(
        SampleRow{.sample_id = i,
                  .time_ns = kT0 + i * 100 * kMs,
                  .mono_ns = i * 100 * kMs,
                  .interval_ns = i == 1 ? std::nullopt : std::optional<std::int64_t>(100 * kMs)});
  }
  b.tcp_stack_samples.push_back(TcpStackSampleRow{.sample_id = 1});  // first tick: no deltas
  b.tcp_stack_samples.push_back(TcpStackSampleRow{.sample_id = 2,
                                                  .span_ns = 100 * kMs,
                                                  .delayed_acks = 3,
                                                  .timeouts = 1,
                                                  .retrans_segs = 2,
                                                  .out_segs = 50});
  b.tcp_stack_samples.push_back(TcpStackSampleRow{.sample_id = 3,
                                                  .span_ns = 100 * kMs,
                                                  .delayed_acks = 4,
                                                  .to_zero_window_adv = 2,
                                                  .retrans_segs = 0,
                                                  .out_segs = 70});
  b.tcp_stack_samples.push_back(
      TcpStackSampleRow{.sample_id = 4, .span_ns = 100 * kMs, .delayed_acks = 100});
  store.write(b);
  // Ticks 1-3 (tick 4 is past the span's end).
  const auto t = tcp_stack_totals(store, kT0, kT0 + 300 * kMs);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->rows, 2);
  EXPECT_EQ(t->span_ns, 200 * kMs);
  EXPECT_EQ(t->delayed_acks, 7);
  EXPECT_EQ(t->timeouts, 1);
  EXPECT_EQ(t->to_zero_window_adv, 2);
  EXPECT_EQ(t->retrans_segs, 2);
  EXPECT_EQ(t->out_segs, 120);
  EXPECT_EQ(t->listen_drops, 0);
  // Only the first tick: rows without deltas are no data.
  EXPECT_FALSE(tcp_stack_totals(store, kT0, kT0 + 100 * kMs));
}

TEST(TcpReaders, AFileWithoutTheTablesReadsAsAbsent) {
  test::TempDir dir;
  auto store = run_file(dir);
  Batch b;
  b.samples.push_back(SampleRow{.sample_id = 1, .time_ns = kT0 + 100 * kMs});
  b.tcp_stack_samples.push_back(TcpStackSampleRow{.sample_id = 1, .delayed_acks = 3});
  b.tcp_samples.push_back(TcpSampleRow{.time_ns = kT0 + 100 * kMs, .rtt_ns = kMs});
  store.write(b);
  ASSERT_TRUE(tcp_stack_totals(store, kT0, kT0 + 1000 * kMs));
  // As written before these tables existed.
  store.db().exec("DROP TABLE tcp_stack_sample");
  store.db().exec("DROP TABLE tcp_sample");
  EXPECT_FALSE(tcp_stack_totals(store, kT0, kT0 + 1000 * kMs));
  EXPECT_FALSE(tcp_rtt_in(store, kT0, kT0 + 1000 * kMs));
}

}  // namespace
}  // namespace stallscope::schema
