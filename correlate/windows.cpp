// The windows the passes fill: closed at the analysed span's end, indexed
// for the passes' lookups, and — for a file with only pgbench aggregate
// intervals — given the intervals' throughput.
#include <fmt/format.h>

#include "common/error.h"
#include "common/units.h"
#include "correlate/passes.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {

void throw_too_many_windows(std::int64_t window_ns, std::int64_t count) {
  throw TooManyWindows(
      fmt::format("cannot explain with --window {} ns: {} windows is too many (at most {}, about "
                  "{} MB at {} bytes each); --window {} ns or longer fits",
                  window_ns, count, kMaxWindows, kMaxWindows * kWindowBytes / 1'000'000,
                  kWindowBytes, window_to_fit(window_ns, count, kMaxWindows)),
      window_ns, count);
}

std::int64_t window_to_fit(std::int64_t window_ns, std::int64_t count, std::int64_t target) {
  // ceil(count / factor) ≤ target; count ≤ 2^63 / window_ns + 1, so
  // window_ns × factor stays within a few times span / target.
  const std::int64_t needed = (count + target - 1) / target;
  for (std::int64_t decade = 1;; decade *= 10) {
    for (const std::int64_t step : {1, 2, 5}) {
      if (step * decade >= needed) return window_ns * step * decade;
    }
  }
}

// Time windows partition the span (without queries they are made here, over
// the samples' span); query windows each end where the next starts, the last
// at the span's end.
WindowIndex finish_windows(const ExplainOptions& opt, Report& report, Span span) {
  auto& windows = report.windows;
  WindowIndex wi;
  if (report.query_windows) {
    for (std::size_t i = 0; i < windows.size(); ++i) {
      windows[i].end_ns = i + 1 < windows.size() ? windows[i + 1].start_ns : span.end_ns;
    }
  } else {
    const auto w = opt.window_ns;
    const auto count = std::max<std::int64_t>(1, (span.end_ns - span.start_ns + w - 1) / w);
    if (count > kMaxWindows) throw_too_many_windows(w, count);
    windows.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      auto& win = windows[static_cast<std::size_t>(i)];
      win.start_ns = span.start_ns + i * w;
      win.end_ns = std::min(span.start_ns + (i + 1) * w, span.end_ns);
      win.duration_s = double(win.end_ns - win.start_ns) / common::kNsPerSDouble;
      if (win.duration_s > 0) win.tps = double(win.queries) / win.duration_s;
    }
    wi.uniform_ns = opt.window_ns;
  }
  for (auto& win : windows) {
    win.start_offset_s = double(win.start_ns - windows.front().start_ns) / common::kNsPerSDouble;
    wi.starts_ns.push_back(win.start_ns);
    wi.ends_ns.push_back(win.end_ns);
  }
  return wi;
}

void fill_windows_from_aggregates(const std::vector<schema::AggregateInterval>& intervals,
                                  Report& report) {
  std::vector<std::int64_t> latency_sum(report.windows.size(), 0);
  std::size_t w = 0;
  for (const auto& interval : intervals) {
    while (w < report.windows.size() && interval.start_ns >= report.windows[w].end_ns) ++w;
    if (w == report.windows.size()) break;
    if (interval.start_ns < report.windows[w].start_ns) continue;
    report.windows[w].queries += interval.transactions;
    latency_sum[w] += interval.latency_sum_ns;
    report.windows[w].errors += interval.failures;
  }
  for (std::size_t i = 0; i < report.windows.size(); ++i) {
    auto& win = report.windows[i];
    if (win.duration_s > 0) win.tps = double(win.queries) / win.duration_s;
    if (win.queries > 0)
      win.latency_mean_ms = double(latency_sum[i]) / double(win.queries) / common::kNsPerMsDouble;
  }
}

}  // namespace stallscope::correlate::detail
