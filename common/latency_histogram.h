// Log-bucketed latency histograms (the driver's progress and summary).
//
// HDR-style buckets: values below 128 ns each have their own bucket; above
// that every power of two is split into 64 equal sub-buckets. A bucket's
// midpoint is within 1/128 (< 0.8 %) of every value in it, so percentiles
// read from it are within the ±3 % the driver promises.
//
//   common::LatencyHistogram h;
//   h.record_ns(1'500'000);
//   h.percentile_ns(0.99);  // ≈ 1'500'000 (±0.8 %)
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace stallscope::common {

// Number of buckets covering 0 .. INT64_MAX ns.
inline constexpr int kLatencyBucketCount = 128 + 56 * 64;

// Bucket of a latency; negative values count as 0.
int latency_bucket(std::int64_t latency_ns) noexcept;
// Smallest value that falls into `bucket`.
std::int64_t latency_bucket_lower_ns(int bucket) noexcept;
// Midpoint of `bucket`: the value reported for samples in it.
std::int64_t latency_bucket_mid_ns(int bucket) noexcept;

// A plain histogram: one thread at a time. Used for snapshots, merging and
// reading percentiles.
class LatencyHistogram {
 public:
  LatencyHistogram() : counts_(kLatencyBucketCount, 0) {}

  void record_ns(std::int64_t latency_ns) noexcept;
  // Building blocks for snapshots: add raw bucket counts, sum and count.
  void add_bucket(int bucket, std::int64_t count) noexcept { counts_[bucket] += count; }
  void add_sum_ns(std::int64_t sum_ns) noexcept { sum_ns_ += sum_ns; }
  void add_count(std::int64_t count) noexcept { count_ += count; }
  // *this - earlier, bucket by bucket (earlier must be an older snapshot of
  // the same cumulative histogram).
  LatencyHistogram minus(const LatencyHistogram& earlier) const;

  std::int64_t count() const noexcept { return count_; }
  std::int64_t sum_ns() const noexcept { return sum_ns_; }
  // Mean of the recorded values (exact), 0 when empty.
  double mean_ns() const noexcept;
  // The q-quantile (0 < q ≤ 1), e.g. 0.99: the midpoint of the bucket that
  // holds the ceil(q·count)-th smallest sample; 0 when empty.
  std::int64_t percentile_ns(double q) const noexcept;

 private:
  std::vector<std::int64_t> counts_;
  std::int64_t count_ = 0;
  std::int64_t sum_ns_ = 0;
};

// A cumulative histogram written by exactly one thread and read by any:
// record_ns() is plain relaxed loads and stores (no locks, no atomic
// read-modify-write), add_to() copies a slightly racy but never torn
// snapshot.
class SharedLatencyHistogram {
 public:
  // Only the owning thread may call this.
  void record_ns(std::int64_t latency_ns) noexcept {
    bump(counts_[latency_bucket(latency_ns)], 1);
    bump(sum_ns_, latency_ns);
    bump(count_, 1);
  }
  // Any thread: adds the current totals to `out`.
  void add_to(LatencyHistogram& out) const noexcept;

 private:
  static void bump(std::atomic<std::int64_t>& a, std::int64_t by) noexcept {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  std::array<std::atomic<std::int64_t>, kLatencyBucketCount> counts_{};
  std::atomic<std::int64_t> sum_ns_{0};
  std::atomic<std::int64_t> count_{0};
};

}  // namespace stallscope::common
