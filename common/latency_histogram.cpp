#include "common/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

namespace stallscope::common {

int latency_bucket(std::int64_t latency_ns, int sub_bucket_bits) noexcept {
  const std::int64_t exact = std::int64_t{2} << sub_bucket_bits;  // values below are exact
  if (latency_ns < exact) return latency_ns < 0 ? 0 : static_cast<int>(latency_ns);
  const auto v = static_cast<std::uint64_t>(latency_ns);
  const int msb = 63 - std::countl_zero(v);  // sub_bucket_bits + 1 .. 62
  const int shift = msb - sub_bucket_bits;
  // shift · 2^bits + the top bits + 1 of v (2^bits .. 2^(bits+1) − 1): the
  // buckets continue where the exact ones end.
  return (shift << sub_bucket_bits) + static_cast<int>(v >> shift);
}

std::int64_t latency_bucket_lower_ns(int bucket, int sub_bucket_bits) noexcept {
  const int exact = 2 << sub_bucket_bits;
  if (bucket < exact) return bucket;
  const int k = bucket - exact;
  const int shift = 1 + (k >> sub_bucket_bits);
  const std::int64_t mantissa = (1 << sub_bucket_bits) + (k & ((1 << sub_bucket_bits) - 1));
  return mantissa << shift;
}

std::int64_t latency_bucket_mid_ns(int bucket, int sub_bucket_bits) noexcept {
  const int exact = 2 << sub_bucket_bits;
  if (bucket < exact) return bucket;
  const int shift = 1 + ((bucket - exact) >> sub_bucket_bits);
  return latency_bucket_lower_ns(bucket, sub_bucket_bits) + (std::int64_t{1} << (shift - 1));
}

LatencyHistogram::LatencyHistogram(LatencyResolution resolution)
    : resolution_(resolution),
      counts_(latency_bucket_count(resolution.sub_bucket_bits), 0),
      max_(resolution.report_bucket_max ? counts_.size() : 0, 0) {}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  if (other.resolution_.sub_bucket_bits != resolution_.sub_bucket_bits ||
      other.resolution_.report_bucket_max != resolution_.report_bucket_max) {
    throw std::invalid_argument("LatencyHistogram::merge: the resolutions differ");
  }
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  for (std::size_t i = 0; i < max_.size(); ++i) max_[i] = std::max(max_[i], other.max_[i]);
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
  max_ns_ = std::max(max_ns_, other.max_ns_);
}

LatencyHistogram LatencyHistogram::minus(const LatencyHistogram& earlier) const {
  LatencyHistogram out(resolution_);
  for (std::size_t i = 0; i < counts_.size(); ++i) out.counts_[i] = counts_[i] - earlier.counts_[i];
  out.count_ = count_ - earlier.count_;
  out.sum_ns_ = sum_ns_ - earlier.sum_ns_;
  out.max_ns_ = max_ns_;
  return out;
}

double LatencyHistogram::mean_ns() const noexcept {
  return count_ > 0 ? static_cast<double>(sum_ns_) / static_cast<double>(count_) : 0.0;
}

std::int64_t LatencyHistogram::percentile_ns(double q) const noexcept {
  // Walk the buckets rather than trusting count_: a snapshot taken while the
  // owner records may see a bucket bumped before the total (or after).
  std::int64_t total = 0;
  for (auto c : counts_) total += c;
  if (total <= 0) return 0;
  auto rank = static_cast<std::int64_t>(std::ceil(q * static_cast<double>(total)));
  if (rank < 1) rank = 1;
  const auto value = [&](std::size_t i) {
    // The top rank in the bucket that holds the largest value is that value,
    // known exactly (a bucket's midpoint could put one transaction's p99
    // below its own latency).
    if (rank >= total && max_ns_ > 0 &&
        latency_bucket(max_ns_, resolution_.sub_bucket_bits) == static_cast<int>(i)) {
      return max_ns_;
    }
    const std::int64_t v =
        resolution_.report_bucket_max
            ? max_[i]
            : latency_bucket_mid_ns(static_cast<int>(i), resolution_.sub_bucket_bits);
    // Counts added alone (add_bucket) bring no max: unclamped then.
    return max_ns_ > 0 ? std::min(v, max_ns_) : v;
  };
  std::int64_t seen = 0;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) return value(i);
  }
  return value(counts_.size() - 1);
}

void SharedLatencyHistogram::add_to(LatencyHistogram& out) const noexcept {
  for (int i = 0; i < kLatencyBucketCount; ++i) {
    auto c = counts_[i].load(std::memory_order_relaxed);
    if (c != 0) out.add_bucket(i, c);
  }
  out.add_sum_ns(sum_ns_.load(std::memory_order_relaxed));
  out.add_count(count_.load(std::memory_order_relaxed));
  out.add_max_ns(max_ns_.load(std::memory_order_relaxed));
}

}  // namespace stallscope::common
