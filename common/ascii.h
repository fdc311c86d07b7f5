// ASCII case folding, locale-free (std::tolower depends on the C locale and
// takes an int): SQL keywords, conninfo and option names, pgbench's words.
//
//   common::to_lower('Q')               // 'q'
//   common::lowered("--Client-Secret")  // "--client-secret"
//   common::iequals("NotNull", "notnull")  // true
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace stallscope::common {

constexpr char to_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

inline std::string lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_lower(c);
  return out;
}

// Equal but for the case of ASCII letters.
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return to_lower(x) == to_lower(y);
         });
}

}  // namespace stallscope::common
