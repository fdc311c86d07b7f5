// Small number and time formatting shared by the correlator's files
// (findings, stalls, the pooler facts, the renderers, explain_pair).
//
//   detail::round4(0.123456)            // 0.1235: evidence figures
//   detail::ms(1'500'000)               // 1.5
//   detail::pct(1, 4)                   // 25.0
//   detail::share_pct_text(0.254)       // "25%"
//   detail::utc_time_text(ns)           // "2026-12-01 20:43:52 UTC"
//   detail::epoch_seconds_text(ns)      // "1796157832.123"
//   detail::sql_one_line("SELECT *\n  FROM t", 12)  // "SELECT * FR…"
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/units.h"
#include "correlate/parts.h"

namespace stallscope::correlate::detail {

// Rounded to 4 decimal places, as evidence values are reported.
inline double round4(double v) {
  return std::round(v * 1e4) / 1e4;
}

// A duration in ns as milliseconds (common/units.h).
using common::ms;

// part ÷ whole in percent; 0 when whole is not positive.
inline double pct(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? 100.0 * double(part) / double(whole) : 0;
}

// An accounting part's id (AccountingPart::name) as the text report labels
// it (correlate/parts.h). Not escaped: wait channels come from the file, so
// renderers escape the label.
using correlate::part_label;

// A number rounded to an integer with thousands separated by commas:
// 9840.4 → "9,840", -12345 → "-12,345".
std::string grouped_text(double v);

// A share (0–1) as a whole percentage: 0.254 → "25%".
std::string share_pct_text(double share);

// A wall-clock time (ns since the epoch) to the second, in UTC:
// "2026-12-01 20:43:52 UTC".
std::string utc_time_text(std::int64_t ns);

// A wall-clock time (ns since the epoch) as seconds since the epoch with
// millisecond precision: "1796157832.123".
std::string epoch_seconds_text(std::int64_t ns);

// SQL text (or any text from the server) on one line for a summary or a
// culprit: runs of whitespace become one space, leading and trailing
// whitespace go, and past max_chars bytes it is cut at a UTF-8 character
// boundary and ends in "…".
std::string sql_one_line(std::string_view sql, std::size_t max_chars = 120);

}  // namespace stallscope::correlate::detail
