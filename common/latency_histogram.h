// Log-bucketed latency histograms: the driver's progress and summary, and
// explain's whole-run percentiles (correlate/query_scan.cpp).
//
// HDR-style buckets: with a resolution of b sub-bucket bits, values below
// 2^(b+1) ns each have their own bucket; above that every power of two is
// split into 2^b equal sub-buckets. A percentile is read from the bucket
// holding the nearest rank: its midpoint (within 2^-(b+1) of every value in
// it), or — with report_bucket_max — the largest value recorded in it (never
// above the exact percentile by more than a bucket's width, and exact when
// the bucket holds one distinct value).
//
//   kDriverResolution: b = 6 — exact below 128 ns, midpoints within 1/128
//   (< 0.8 %), well inside the ±3 % the driver promises.
//   kExplainResolution: b = 9 — exact below 1024 ns, buckets 1/512 of a
//   power of two wide (< 0.2 %), the bucket's largest value.
//
//   common::LatencyHistogram h;  // kDriverResolution
//   h.record_ns(1'500'000);
//   h.percentile_ns(0.99);  // ≈ 1'500'000 (±0.8 %)
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace stallscope::common {

// How finely a histogram splits each power of two, and what a percentile
// reports.
struct LatencyResolution {
  int sub_bucket_bits = 6;  // 2^bits sub-buckets per power of two (1 … 16)
  // Percentiles report the largest value recorded in the bucket instead of
  // its midpoint (keeps one more number per bucket).
  bool report_bucket_max = false;
};
inline constexpr LatencyResolution kDriverResolution{6, false};
inline constexpr LatencyResolution kExplainResolution{9, true};

// Number of buckets covering 0 .. INT64_MAX ns at a resolution.
constexpr int latency_bucket_count(int sub_bucket_bits) noexcept {
  return (64 - sub_bucket_bits) << sub_bucket_bits;
}
// Bucket of a latency at a resolution; negative values count as 0.
int latency_bucket(std::int64_t latency_ns, int sub_bucket_bits) noexcept;
// Smallest value that falls into `bucket`.
std::int64_t latency_bucket_lower_ns(int bucket, int sub_bucket_bits) noexcept;
// Midpoint of `bucket`.
std::int64_t latency_bucket_mid_ns(int bucket, int sub_bucket_bits) noexcept;

// The same at kDriverResolution (SharedLatencyHistogram's buckets).
inline constexpr int kLatencyBucketCount = latency_bucket_count(kDriverResolution.sub_bucket_bits);
inline int latency_bucket(std::int64_t latency_ns) noexcept {
  return latency_bucket(latency_ns, kDriverResolution.sub_bucket_bits);
}
inline std::int64_t latency_bucket_lower_ns(int bucket) noexcept {
  return latency_bucket_lower_ns(bucket, kDriverResolution.sub_bucket_bits);
}
inline std::int64_t latency_bucket_mid_ns(int bucket) noexcept {
  return latency_bucket_mid_ns(bucket, kDriverResolution.sub_bucket_bits);
}

// A plain histogram: one thread at a time. Used for snapshots, merging and
// reading percentiles.
class LatencyHistogram {
 public:
  LatencyHistogram() : LatencyHistogram(kDriverResolution) {}
  explicit LatencyHistogram(LatencyResolution resolution);

  void record_ns(std::int64_t latency_ns) noexcept {
    const int b = latency_bucket(latency_ns, resolution_.sub_bucket_bits);
    ++counts_[b];
    if (resolution_.report_bucket_max && latency_ns > max_[b]) max_[b] = latency_ns;
    if (latency_ns > max_ns_) max_ns_ = latency_ns;
    sum_ns_ += latency_ns;
    ++count_;
  }
  // Building blocks for snapshots: add raw bucket counts, sum and count.
  void add_bucket(int bucket, std::int64_t count) noexcept { counts_[bucket] += count; }
  void add_sum_ns(std::int64_t sum_ns) noexcept { sum_ns_ += sum_ns; }
  void add_count(std::int64_t count) noexcept { count_ += count; }
  // The largest value recorded in a merged histogram (the max of both).
  void add_max_ns(std::int64_t max_ns) noexcept {
    if (max_ns > max_ns_) max_ns_ = max_ns;
  }
  // Adds another histogram of the same resolution, bucket by bucket (counts,
  // and with report_bucket_max each bucket's largest value): the result is
  // the histogram of the union of both samples, exactly — its percentiles
  // are those a single histogram of every value would give, never an
  // average of percentiles. Throws std::invalid_argument when the
  // resolutions differ.
  void merge(const LatencyHistogram& other);
  // *this - earlier, bucket by bucket (earlier must be an older snapshot of
  // the same cumulative histogram, at the same resolution; without
  // report_bucket_max).
  LatencyHistogram minus(const LatencyHistogram& earlier) const;

  std::int64_t count() const noexcept { return count_; }
  std::int64_t sum_ns() const noexcept { return sum_ns_; }
  // Mean of the recorded values (exact), 0 when empty.
  double mean_ns() const noexcept;
  // The q-quantile (0 < q ≤ 1), e.g. 0.99: the midpoint (or the largest
  // value, report_bucket_max) of the bucket that holds the ceil(q·count)-th
  // smallest sample, never above the largest value recorded (a midpoint
  // may lie above every value of its bucket: a p99 of 1568.670 ms was
  // printed beside a maximum of 1565.822 ms); 0 when empty.
  std::int64_t percentile_ns(double q) const noexcept;

 private:
  LatencyResolution resolution_;
  std::vector<std::int64_t> counts_;
  std::vector<std::int64_t> max_;  // report_bucket_max: per bucket (negatives as 0)
  std::int64_t count_ = 0;
  std::int64_t sum_ns_ = 0;
  // The largest value recorded (record_ns, add_max_ns); minus() keeps the
  // later snapshot's, a bound for the interval's values too.
  std::int64_t max_ns_ = 0;
};

// Adds `by` to a counter that exactly one thread writes (others only read
// it): a relaxed load and store, no atomic read-modify-write. The driver's
// per-thread counters (driver/stats.h) and SharedLatencyHistogram use it.
inline void bump(std::atomic<std::int64_t>& a, std::int64_t by) noexcept {
  a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// A cumulative histogram at kDriverResolution written by exactly one thread
// and read by any: record_ns() is plain relaxed loads and stores (no locks,
// no atomic read-modify-write), add_to() copies a slightly racy but never
// torn snapshot.
class SharedLatencyHistogram {
 public:
  // Only the owning thread may call this.
  void record_ns(std::int64_t latency_ns) noexcept {
    bump(counts_[latency_bucket(latency_ns)], 1);
    bump(sum_ns_, latency_ns);
    bump(count_, 1);
    if (latency_ns > max_ns_.load(std::memory_order_relaxed)) {
      max_ns_.store(latency_ns, std::memory_order_relaxed);
    }
  }
  // Any thread: adds the current totals to `out` (a kDriverResolution histogram).
  void add_to(LatencyHistogram& out) const noexcept;

 private:
  std::array<std::atomic<std::int64_t>, kLatencyBucketCount> counts_{};
  std::atomic<std::int64_t> sum_ns_{0};
  std::atomic<std::int64_t> count_{0};
  std::atomic<std::int64_t> max_ns_{0};
};

}  // namespace stallscope::common
