// Text formatting shared by the correlator's files (format.h).
#include "correlate/format.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace stallscope::correlate::detail {

std::string part_label(std::string_view name) {
  if (name == "driver_cpu") return "driver CPU";
  if (name == "server_cpu") return "server backend CPU";
  if (name == "run_queue") return "run-queue delay";
  if (name == "client_run_queue") return "driver run-queue delay";
  if (name.starts_with("server_d_state:")) return "backend D state " + std::string(name.substr(15));
  if (name.starts_with("kernel_wait:")) return "backend asleep in " + std::string(name.substr(12));
  if (name == "remainder") return "remainder (round trips)";
  if (name == "schedule_lag") return "schedule lag";
  if (name == "connection_lost") return "connection lost (reconnecting)";
  if (name == "driver_stopped") return "driver stopped (not running)";
  if (name == "unaccounted") return "unaccounted (not sampled)";
  if (name == "client_cpu") return "client CPU";
  if (name == "client_sleep") return "client think time (asleep)";
  if (name == "client_idle") return "client waiting for other input (not the database)";
  if (name.starts_with("client_blocked:"))
    return "client blocked in " + std::string(name.substr(15));
  if (name.starts_with("server_wait:")) return "server wait " + std::string(name.substr(12));
  if (name.starts_with("path_cpu:")) return "path CPU " + std::string(name.substr(9));
  if (name.starts_with("path_wait:")) return "path wait " + std::string(name.substr(10));
  return std::string(name);
}

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
