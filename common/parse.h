// Number parsing that cannot turn garbage into 0: the whole text must be one
// number in range, else the result is empty (std::from_chars underneath; no
// locale, no leading '+' or whitespace; hexadecimal only when asked for).
//
//   common::parse_int64("42")     // 42
//   common::parse_int64("4x")     // nullopt
//   common::parse_int64("")       // nullopt
//   common::parse_double("1.5")   // 1.5
//   common::parse_double("1.2.3") // nullopt
#pragma once

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace stallscope::common {

// The integer that `text` spells in `base` (10, or 16 for /proc/net/tcp's
// fields; no "0x"), when all of it does and it fits T.
template <typename T = std::int64_t>
std::optional<T> parse_integer(std::string_view text, int base = 10) noexcept {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, base);
  if (ec != std::errc{} || ptr != end || text.empty()) return std::nullopt;
  return value;
}

inline std::optional<std::int64_t> parse_int64(std::string_view text) noexcept {
  return parse_integer<std::int64_t>(text);
}
inline std::optional<int> parse_int(std::string_view text) noexcept {
  return parse_integer<int>(text);
}

// The decimal number `text` spells (fixed or scientific: "2", "0.5", ".5",
// "1.", "1e-3"; also "inf" and "nan", as std::from_chars reads them), when
// all of it does and it is within double's range.
inline std::optional<double> parse_double(std::string_view text) noexcept {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end || text.empty()) return std::nullopt;
  return value;
}

// The number C's strtod reads from all of `text` — leading white space, a
// sign, "inf", "nan" and hexadecimal accepted, as pgbench reads a variable's
// text — when it is within double's range (not past it, not below its
// smallest normal).
inline std::optional<double> parse_c_double(std::string_view text) {
  const std::string copy(text);
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (errno != 0 || end == copy.c_str() || *end != '\0') return std::nullopt;
  return value;
}

// The integer at the start of `text` as C's atoi reads it (white space, a
// sign, digits; what follows is ignored), clamped to a long; empty when no
// digit starts it.
inline std::optional<long> parse_leading_integer(std::string_view text) {
  const std::string copy(text);
  char* end = nullptr;
  const long value = std::strtol(copy.c_str(), &end, 10);
  if (end == copy.c_str()) return std::nullopt;
  return value;
}

}  // namespace stallscope::common
