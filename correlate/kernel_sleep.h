// Backends asleep in the kernel outside any wait event (kernel_sleep.cpp)
// and blind ASH polls (ash_coverage.cpp): what the process pass, the
// accounting, the kernel_wait finding, the stalls and the notes call. Private
// to correlate/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/units.h"
#include "correlate/passes.h"
#include "correlate/row_source.h"
#include "schema/ash_tick_readers.h"

namespace stallscope::correlate::detail {

// Blind ASH polls: a gap between two polls (or between the span's edge and
// the nearest poll) of at least this many poll periods ...
inline constexpr std::int64_t kAshBlindMinGapPeriods = 5;
// ... and at least this long counts as blind, less the one period a poll
// covers.
inline constexpr std::int64_t kAshBlindMinGapNs = common::kNsPerS / 2;
// A stall window says that ASH was blind there when no poll covered at least
// this share of it.
inline constexpr double kAshBlindStallShare = 0.2;

// One process row of a backend serving the queries (process_pass.cpp): when
// it is asleep (S) on a wait channel held_on_query_path (detail.h), its sleep goes
// into acc[w].kernel_sleep_ns[wchan] — the row's whole span (t − span, t]
// when it did not run in it (cpu_ns 0: it slept throughout, in the sleep its
// wchan names), else one sample period before t.
void add_kernel_sleep(const WindowIndex& windows, std::int64_t t,
                      std::optional<std::int64_t> span_ns, std::optional<std::int64_t> cpu_ns,
                      std::int64_t sample_period_ns, std::string_view state,
                      std::optional<std::string_view> wchan, std::vector<WindowAcc>& acc);

// Accounting: a window's (or the run's) backend sleeps as
// acc.kernel_wait_by_wchan_ns (largest first) and acc.kernel_wait_ns.
void account_kernel_sleep(const WindowAcc& a, Accounting& acc);

// The culprit line of a sleep: "backends asleep in anon_pipe_write (a full
// pipe: their log output (stderr, …) …)". `who` names the sleepers
// ("backends", "the driver", "pgbouncer").
std::string sleep_culprit(std::string_view who, std::string_view role, std::string_view wchan);
// The culprit of the kernel_wait finding: the largest of the backends' sleeps
// (accounting, by wchan), the other query-path rows (driver, poolers,
// backends in D: rows × sample period) and the ASH IPC / Timeout / Extension
// events (rows × ASH period).
std::string kernel_wait_culprit(const Accounting* acc, const Facts& f,
                                const std::map<std::string, std::int64_t>& ash_events);

// Polls from this long before the span on are read (ash_tick), so that a
// gap running into the span is seen from its start.
inline constexpr std::int64_t kAshCoverageLookBackNs = 60 * common::kNsPerS;
// From the ASH polls (ash_tick rows, by time, from kAshCoverageLookBackNs
// before the span to its end), marks the time no poll covered: per window
// (acc[w].ash_blind_ns) and in f.kernel's ash_* figures.
// The poll period is 1 ÷ `hz` (the rate asked for: the polls' mean spacing,
// Facts::ash_period_ns, grows with the gaps), f.ash_period_ns when hz is not
// > 0. With blind gaps, f.ash_period_ns becomes the mean spacing of the
// polls outside them (what one ASH row stands for). Nothing without ASH.
void add_ash_coverage(const RowSource<schema::AshPoll>& polls, const WindowIndex& windows,
                      Span span, double hz, std::vector<WindowAcc>& acc, Facts& f);
// The note on blind ASH polls (none when ASH was never blind).
void add_ash_blind_note(const Facts& f, Report& report);
// The note on the host sampler's missed ticks (Facts::sampler_gaps; none
// without).
void add_sampler_gap_note(const Facts& f, Report& report);

}  // namespace stallscope::correlate::detail
