// Blind ASH polls: the ASH sampler polls pg_stat_activity on its own
// connection, and its backend can be held up like any other (a full log
// pipe blocks it too under log_statement = 'all'), or the poll can come late
// on a saturated host. A gap between polls leaves the server's waits
// unsampled for that time: each window says how much of it no poll covered
// (Window::ash_blind_ns), a stall there says so, and a note sums it up; the
// host state (process states and wait channels) is sampled regardless.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "common/units.h"
#include "correlate/format.h"
#include "correlate/kernel_sleep.h"

namespace stallscope::correlate::detail {

void add_ash_coverage(const RowSource<schema::AshPoll>& polls, const WindowIndex& windows,
                      Span span, double hz, std::vector<WindowAcc>& acc, Facts& f) {
  const auto period =
      hz > 0 ? static_cast<std::int64_t>(common::kNsPerSDouble / hz) : f.ash_period_ns;
  if (!f.ash_available || period <= 0 || windows.starts_ns.empty()) return;
  const auto min_gap = std::max(kAshBlindMinGapPeriods * period, kAshBlindMinGapNs);
  auto& k = f.kernel;
  // [from, to) uncovered: clipped to the span, into the windows.
  auto blind = [&](std::int64_t gap_start, std::int64_t from, std::int64_t to) {
    from = std::max(from, span.start_ns);
    to = std::min(to, span.end_ns);
    if (to <= from) return;
    ++k.ash_blind_gaps;
    k.ash_blind_ns += to - from;
    if (to - gap_start > k.ash_longest_gap_ns) {
      k.ash_longest_gap_ns = to - gap_start;
      k.ash_longest_gap_start_ns = gap_start;
    }
    spread(windows, to, to - from, to - from,
           [&](std::size_t w, std::int64_t v) { acc[w].ash_blind_ns += v; });
  };
  std::optional<std::int64_t> last_ns;
  // The spacing of consecutive polls outside the blind gaps.
  std::int64_t covered_ns = 0, covered_intervals = 0;
  for (schema::AshPoll p; polls(p);) {
    k.ash_longest_poll_ns = std::max(k.ash_longest_poll_ns, p.duration_ns);
    const auto from = last_ns ? *last_ns : span.start_ns;
    if (p.time_ns - from >= min_gap) {
      blind(from, from + (last_ns ? period : 0), p.time_ns);
    } else if (last_ns) {
      covered_ns += p.time_ns - *last_ns;
      ++covered_intervals;
    }
    last_ns = p.time_ns;
  }
  // No poll after the last one until the span's end (one in progress, or
  // none at all).
  const auto from = last_ns ? *last_ns : span.start_ns;
  if (span.end_ns - from >= min_gap) blind(from, from + (last_ns ? period : 0), span.end_ns);
  // Each ASH row stands for one poll period of the time the polls covered:
  // with blind gaps the polls' mean spacing over the whole file would
  // stretch the rows over the gaps, whose waits are unknown.
  if (k.ash_blind_gaps > 0 && covered_intervals > 0)
    f.ash_period_ns = covered_ns / covered_intervals;
}

void add_ash_blind_note(const Facts& f, Report& report) {
  const auto& k = f.kernel;
  if (k.ash_blind_ns <= 0) return;
  const auto first_ns = report.windows.empty() ? f.span.start_ns : report.windows.front().start_ns;
  report.notes.push_back(fmt::format(
      "ASH was blind for {:.1f} s of the span ({} gap{} of {} poll periods or more without a "
      "poll; the longest {:.1f} s from +{:.1f} s; the slowest poll took {:.1f} s): the poll came "
      "late or not at all — its own backend may have been held up too. Server waits there are "
      "unsampled (ASH rows count one period of the time the polls covered); {}",
      double(k.ash_blind_ns) / common::kNsPerSDouble, k.ash_blind_gaps,
      k.ash_blind_gaps == 1 ? "" : "s", kAshBlindMinGapPeriods,
      double(k.ash_longest_gap_ns) / common::kNsPerSDouble,
      double(k.ash_longest_gap_start_ns - first_ns) / common::kNsPerSDouble,
      double(k.ash_longest_poll_ns) / common::kNsPerSDouble,
      f.sampler_gaps.empty()
          ? std::string("host state (process states and wait channels) was sampled throughout and "
                        "is what those windows are read from.")
          : fmt::format("host state was not sampled either for {:.1f} s (see the note on the "
                        "host sampler's missed ticks).",
                        double(f.sampler_gap_ns) / common::kNsPerSDouble)));
}

void add_sampler_gap_note(const Facts& f, Report& report) {
  if (f.sampler_gaps.empty()) return;
  report.notes.push_back(fmt::format(
      "The host sampler missed its ticks for {:.1f} s ({} gap{} of {} sample periods or more, "
      "every {:.1f} ms expected): stallscope's own process did not run there — stopped (SIGSTOP, "
      "a debugger, a paused VM) or starved of CPU — so host state, process CPU and waits are "
      "unsampled in those windows, and a driver in the same process sent nothing.",
      double(f.sampler_gap_ns) / common::kNsPerSDouble, f.sampler_gaps.size(),
      f.sampler_gaps.size() == 1 ? "" : "s", kSamplerGapMinPeriods,
      double(f.sample_period_ns) / common::kNsPerMsDouble));
}

}  // namespace stallscope::correlate::detail
