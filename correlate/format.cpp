// Text formatting shared by the correlator's files (format.h).
#include "correlate/format.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace stallscope::correlate::detail {

std::string grouped_text(double v) {
  const auto digits = fmt::format("{:.0f}", std::abs(v));
  std::string out(v <= -0.5 ? "-" : "");
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string share_pct_text(double share) {
  return fmt::format("{:.0f}%", 100 * share);
}

std::string utc_time_text(std::int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / common::kNsPerS);
  return fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", fmt::gmtime(t));
}

std::string sql_one_line(std::string_view sql, std::size_t max_chars) {
  std::string out;
  out.reserve(std::min(sql.size(), max_chars + 4));
  bool space = false;
  for (const char ch : sql) {
    const bool blank =
        ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
    if (blank) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += ch;
    if (out.size() > max_chars) break;
  }
  if (out.size() <= max_chars) return out;
  std::size_t cut = max_chars;
  // Back to the first byte of a UTF-8 character (not a 10xxxxxx continuation).
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  return out + "…";
}

std::string epoch_seconds_text(std::int64_t ns) {
  return fmt::format("{:.3f}", double(ns) / common::kNsPerSDouble);
}

}  // namespace stallscope::correlate::detail
