#include "common/latency_histogram.h"

#include <bit>
#include <cmath>

namespace stallscope::common {
namespace {
constexpr int kSubBits = 6;                     // 64 sub-buckets per power of two
constexpr std::int64_t kExact = 2 << kSubBits;  // values below 128 are exact
}  // namespace

int latency_bucket(std::int64_t latency_ns) noexcept {
  if (latency_ns < kExact) return latency_ns < 0 ? 0 : static_cast<int>(latency_ns);
  auto v = static_cast<std::uint64_t>(latency_ns);
  int msb = 63 - std::countl_zero(v);  // 7 .. 62
  int shift = msb - kSubBits;
  auto mantissa = static_cast<int>(v >> shift);  // 64 .. 127
  return static_cast<int>(kExact) + (msb - kSubBits - 1) * (1 << kSubBits) +
         (mantissa - (1 << kSubBits));
}

std::int64_t latency_bucket_lower_ns(int bucket) noexcept {
  if (bucket < kExact) return bucket;
  int k = bucket - static_cast<int>(kExact);
  int msb = kSubBits + 1 + (k >> kSubBits);
  int shift = msb - kSubBits;
  std::int64_t mantissa = (1 << kSubBits) + (k & ((1 << kSubBits) - 1));
  return mantissa << shift;
}

std::int64_t latency_bucket_mid_ns(int bucket) noexcept {
  if (bucket < kExact) return bucket;
  int k = bucket - static_cast<int>(kExact);
  int shift = 1 + (k >> kSubBits);
  return latency_bucket_lower_ns(bucket) + (std::int64_t{1} << (shift - 1));
}

void LatencyHistogram::record_ns(std::int64_t latency_ns) noexcept {
  ++counts_[latency_bucket(latency_ns)];
  sum_ns_ += latency_ns;
  ++count_;
}

LatencyHistogram LatencyHistogram::minus(const LatencyHistogram& earlier) const {
  LatencyHistogram out;
  for (int i = 0; i < kLatencyBucketCount; ++i) out.counts_[i] = counts_[i] - earlier.counts_[i];
  out.count_ = count_ - earlier.count_;
  out.sum_ns_ = sum_ns_ - earlier.sum_ns_;
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
  std::int64_t seen = 0;
  for (int i = 0; i < kLatencyBucketCount; ++i) {
    seen += counts_[i];
    if (seen >= rank) return latency_bucket_mid_ns(i);
  }
  return latency_bucket_mid_ns(kLatencyBucketCount - 1);
}

void SharedLatencyHistogram::add_to(LatencyHistogram& out) const noexcept {
  for (int i = 0; i < kLatencyBucketCount; ++i) {
    auto c = counts_[i].load(std::memory_order_relaxed);
    if (c != 0) out.add_bucket(i, c);
  }
  out.add_sum_ns(sum_ns_.load(std::memory_order_relaxed));
  out.add_count(count_.load(std::memory_order_relaxed));
}

}  // namespace stallscope::common
