#include "common/latency_histogram.h"

#include <cstdint>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace stallscope::common {
namespace {

TEST(LatencyHistogram, SmallValuesHaveExactBuckets) {
  for (std::int64_t v = 0; v < 128; ++v) {
    EXPECT_EQ(latency_bucket(v), v);
    EXPECT_EQ(latency_bucket_mid_ns(latency_bucket(v)), v);
  }
  EXPECT_EQ(latency_bucket(-5), 0);
}

TEST(LatencyHistogram, BucketsAreContiguousAndMidpointsWithinOnePercent) {
  // Every bucket starts where the previous one ended.
  for (int b = 1; b < kLatencyBucketCount; ++b) {
    std::int64_t lower = latency_bucket_lower_ns(b);
    ASSERT_GT(lower, latency_bucket_lower_ns(b - 1)) << b;
    ASSERT_EQ(latency_bucket(lower), b) << b;
    ASSERT_EQ(latency_bucket(lower - 1), b - 1) << b;
  }
  EXPECT_EQ(latency_bucket(std::numeric_limits<std::int64_t>::max()), kLatencyBucketCount - 1);
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> exponent(7, 61);
  for (int i = 0; i < 100'000; ++i) {
    std::int64_t v = (std::int64_t{1} << exponent(rng)) + static_cast<std::int64_t>(rng() >> 40);
    int b = latency_bucket(v);
    ASSERT_LE(latency_bucket_lower_ns(b), v);
    double mid = static_cast<double>(latency_bucket_mid_ns(b));
    ASSERT_NEAR(mid / static_cast<double>(v), 1.0, 1.0 / 128) << v;
  }
}

TEST(LatencyHistogram, P99OfOneToThousandMicroseconds) {
  LatencyHistogram h;
  for (int i = 1000; i >= 1; --i) h.record_ns(std::int64_t{i} * 1000);
  EXPECT_EQ(h.count(), 1000);
  // ceil(0.99 * 1000) = 990th smallest = 990 µs.
  EXPECT_NEAR(static_cast<double>(h.percentile_ns(0.99)), 990'000.0, 990'000.0 * 0.01);
  EXPECT_NEAR(static_cast<double>(h.percentile_ns(0.5)), 500'000.0, 500'000.0 * 0.01);
  EXPECT_NEAR(static_cast<double>(h.percentile_ns(1.0)), 1'000'000.0, 1'000'000.0 * 0.01);
  EXPECT_DOUBLE_EQ(h.mean_ns(), 500'500.0);  // exact, from the sum
}

TEST(LatencyHistogram, P99SeesTheSlowTailOnlyWhenItIsMoreThanOnePercent) {
  LatencyHistogram one_slow;
  for (int i = 0; i < 99; ++i) one_slow.record_ns(1'000'000);
  one_slow.record_ns(100'000'000);
  EXPECT_NEAR(static_cast<double>(one_slow.percentile_ns(0.99)), 1e6, 1e6 * 0.01);

  LatencyHistogram two_slow;
  for (int i = 0; i < 98; ++i) two_slow.record_ns(1'000'000);
  two_slow.record_ns(100'000'000);
  two_slow.record_ns(100'000'000);
  EXPECT_NEAR(static_cast<double>(two_slow.percentile_ns(0.99)), 1e8, 1e8 * 0.01);
}

// One transaction's p99 is its latency: a bucket's midpoint put the run
// summary's p99 (50.070 ms) below its only latency (50.145 ms).
TEST(LatencyHistogram, TheTopRankInTheBucketOfTheMaximumIsTheMaximum) {
  LatencyHistogram one;
  one.record_ns(50'145'357);
  EXPECT_EQ(one.percentile_ns(0.99), 50'145'357);
  EXPECT_EQ(one.percentile_ns(0.5), 50'145'357);
}

TEST(LatencyHistogram, EmptyReportsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.percentile_ns(0.99), 0);
  EXPECT_EQ(h.mean_ns(), 0.0);
}

TEST(LatencyHistogram, MinusGivesTheInterval) {
  LatencyHistogram earlier;
  for (int i = 0; i < 50; ++i) earlier.record_ns(5'000'000);  // 5 ms
  LatencyHistogram later = earlier;
  for (int i = 0; i < 10; ++i) later.record_ns(20'000);  // 20 µs
  LatencyHistogram delta = later.minus(earlier);
  EXPECT_EQ(delta.count(), 10);
  EXPECT_EQ(delta.sum_ns(), 200'000);
  EXPECT_NEAR(static_cast<double>(delta.percentile_ns(0.99)), 20'000.0, 20'000.0 * 0.01);
}

// kExplainResolution (explain's p50/p99): every value below 1024 ns has its
// own bucket, so percentiles there are the exact nearest rank.
TEST(LatencyHistogram, ExplainResolutionIsExactBelow1024Ns) {
  LatencyHistogram h(kExplainResolution);
  for (std::int64_t v = 1; v <= 1000; ++v) h.record_ns(v);
  EXPECT_EQ(h.percentile_ns(0.50), 500);  // rank ceil(0.5 · 1000)
  EXPECT_EQ(h.percentile_ns(0.99), 990);
  EXPECT_EQ(h.percentile_ns(0.001), 1);
  EXPECT_EQ(h.percentile_ns(1.0), 1000);
  h.record_ns(1023);
  EXPECT_EQ(h.percentile_ns(1.0), 1023);
  for (std::int64_t v = 0; v < 1024; ++v) ASSERT_EQ(latency_bucket(v, 9), v);
  EXPECT_EQ(latency_bucket_lower_ns(latency_bucket(1025, 9), 9), 1024);  // 2 ns wide above
}

// Above 1024 ns a percentile is the largest value recorded in the bucket
// holding the nearest rank: 999'424 .. 1'000'447 is one bucket (1/512 of
// 2^19 .. 2^20, 1024 ns wide).
TEST(LatencyHistogram, ExplainResolutionReportsTheLargestValueInTheBucket) {
  LatencyHistogram h(kExplainResolution);
  EXPECT_EQ(latency_bucket(999'424, 9), latency_bucket(1'000'447, 9));
  EXPECT_NE(latency_bucket(1'000'447, 9), latency_bucket(1'000'448, 9));
  h.record_ns(999'500);
  h.record_ns(1'000'400);
  h.record_ns(1'000'000);
  h.record_ns(2'000'000);
  // Ranks 1–3 share the bucket: each reads its largest value, not its
  // midpoint (999'936) nor the exact rank.
  EXPECT_EQ(h.percentile_ns(0.25), 1'000'400);
  EXPECT_EQ(h.percentile_ns(0.50), 1'000'400);
  EXPECT_EQ(h.percentile_ns(0.75), 1'000'400);
  // A bucket with one value is exact.
  EXPECT_EQ(h.percentile_ns(0.99), 2'000'000);
  EXPECT_EQ(h.percentile_ns(1.0), 2'000'000);
  // The driver's resolution reports the midpoint instead (below the largest
  // value recorded: PercentileNeverExceedsTheLargestValue).
  LatencyHistogram d(kDriverResolution);
  d.record_ns(1'000'400);
  d.record_ns(2'000'000);
  EXPECT_EQ(d.percentile_ns(0.5), latency_bucket_mid_ns(latency_bucket(1'000'400)));
  EXPECT_NE(d.percentile_ns(0.5), 1'000'400);
}

// Two hosts' latencies: a fast one (0.1–0.2 ms) with most of the queries and
// a slow one (5–10 ms). Merged, the histograms give the union's
// percentiles exactly as one histogram of every value does — the p99 is the
// slow host's, where an average of the two p99s would be neither.
TEST(LatencyHistogram, MergeIsTheHistogramOfTheUnion) {
  LatencyHistogram fast(kExplainResolution), slow(kExplainResolution), all(kExplainResolution);
  for (std::int64_t i = 0; i < 9'800; ++i) {
    const std::int64_t v = 100'000 + i * 10;
    fast.record_ns(v);
    all.record_ns(v);
  }
  for (std::int64_t i = 0; i < 200; ++i) {
    const std::int64_t v = 5'000'000 + i * 25'000;
    slow.record_ns(v);
    all.record_ns(v);
  }
  LatencyHistogram merged(kExplainResolution);
  merged.merge(fast);
  merged.merge(slow);
  EXPECT_EQ(merged.count(), 10'000);
  EXPECT_EQ(merged.sum_ns(), all.sum_ns());
  for (double q : {0.5, 0.9, 0.98, 0.99, 0.999, 1.0}) {
    EXPECT_EQ(merged.percentile_ns(q), all.percentile_ns(q)) << q;
  }
  // The 9,900th of 10,000 is the slow host's 100th: 5 ms + 99 × 25 µs,
  // within a bucket (1/512 of 2^22 ns, 8,192 ns wide) above it.
  EXPECT_GE(merged.percentile_ns(0.99), 7'475'000);
  EXPECT_LT(merged.percentile_ns(0.99), 7'475'000 + 8'192);
  EXPECT_GT(merged.percentile_ns(0.99), (fast.percentile_ns(0.99) + slow.percentile_ns(0.99)) / 2);
  LatencyHistogram driver(kDriverResolution);
  EXPECT_THROW(merged.merge(driver), std::invalid_argument);
}

TEST(SharedLatencyHistogram, SnapshotMatchesAPlainHistogram) {
  SharedLatencyHistogram shared;
  LatencyHistogram plain;
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> latency(13.0, 1.0);  // median ≈ 0.44 ms
  for (int i = 0; i < 10'000; ++i) {
    auto v = static_cast<std::int64_t>(latency(rng));
    shared.record_ns(v);
    plain.record_ns(v);
  }
  LatencyHistogram snap;
  shared.add_to(snap);
  EXPECT_EQ(snap.count(), plain.count());
  EXPECT_EQ(snap.sum_ns(), plain.sum_ns());
  EXPECT_EQ(snap.percentile_ns(0.99), plain.percentile_ns(0.99));
  // Merging two threads' snapshots adds them.
  shared.add_to(snap);
  EXPECT_EQ(snap.count(), 2 * plain.count());
  EXPECT_EQ(snap.percentile_ns(0.99), plain.percentile_ns(0.99));
}

// Issue 27: a p99 of 1568.670 ms was printed beside a maximum of 1565.822
// ms: the bucket's midpoint lay above every value in it. A percentile is
// never above the largest value recorded, in a plain histogram, a shared
// one's snapshot and an interval (minus).
TEST(LatencyHistogram, PercentileNeverExceedsTheLargestValue) {
  const std::int64_t max_ns = 1'565'822'000;
  const int bucket = latency_bucket(max_ns);
  ASSERT_GT(latency_bucket_mid_ns(bucket), max_ns);  // the midpoint lies above it
  LatencyHistogram plain;
  SharedLatencyHistogram shared;
  for (const std::int64_t v : {latency_bucket_lower_ns(bucket), max_ns}) {
    plain.record_ns(v);
    shared.record_ns(v);
  }
  EXPECT_EQ(plain.percentile_ns(0.99), max_ns);
  LatencyHistogram snap;
  shared.add_to(snap);
  EXPECT_EQ(snap.percentile_ns(0.99), max_ns);
  EXPECT_EQ(snap.minus(LatencyHistogram()).percentile_ns(0.99), max_ns);
  // Below the largest value, the midpoint as before.
  plain.record_ns(4 * max_ns);
  EXPECT_EQ(plain.percentile_ns(0.5), latency_bucket_mid_ns(bucket));
}

}  // namespace
}  // namespace stallscope::common
