// printable(), valid_utf8(): untrusted text for terminals and for JSON.
#include "common/printable.h"

#include <cstdint>

#include <fmt/format.h>

namespace stallscope::common {

std::size_t utf8_sequence_bytes(std::string_view text) {
  if (text.empty()) return 0;
  const auto c = static_cast<unsigned char>(text[0]);
  const std::size_t len = c < 0x80           ? 1
                          : (c >> 5) == 0x6  ? 2
                          : (c >> 4) == 0xe  ? 3
                          : (c >> 3) == 0x1e ? 4
                                             : 0;
  if (len <= 1) return len;
  if (text.size() < len) return 0;
  std::uint32_t cp = c & (0x7fU >> len);
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[k]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3fU);
  }
  // Overlong forms, surrogates and code points above U+10FFFF are invalid.
  static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t len = utf8_sequence_bytes(text.substr(i));
    // C0 and DEL (one byte), C1 (U+0080–U+009F: 0xc2 0x80–0x9f).
    const bool control = (len == 1 && (c < 0x20 || c == 0x7f)) ||
                         (len == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f);
    if (len == 0 || control) {
      const std::size_t n = len == 0 ? 1 : len;
      for (std::size_t k = 0; k < n; ++k) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + k]));
      }
      i += n;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t len = utf8_sequence_bytes(text.substr(i));
    if (len == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace stallscope::common
