// Text from other users of the host (process names, command lines, SQL
// text, application names, wait events, server messages) made safe to show.
//
//   common::printable("psql\x1b[2J")     // "psql\\x1b[2J"   (terminal escape shown)
//   common::printable("caf\xc3\xa9")     // "café"            (valid UTF-8 kept)
//   common::printable("bad\xff")         // "bad\\xff"        (invalid byte shown)
//   common::valid_utf8("bad\xff")        // "bad\uFFFD"       (for JSON)
#pragma once

#include <string>
#include <string_view>

namespace stallscope::common {

// For text output (terminals, logs): valid UTF-8 is kept as it is, except
// the control characters — C0 (U+0000–U+001F, tab and newline included),
// DEL and C1 (U+0080–U+009F) — which are shown as \xNN of their bytes; each
// byte that is not part of a valid UTF-8 sequence (a stray continuation
// byte, a truncated sequence, an overlong form, a surrogate, a code point
// above U+10FFFF) is shown as \xNN. The result is valid UTF-8 without
// control characters. A backslash in the input is kept as it is.
std::string printable(std::string_view text);

// For JSON and other UTF-8-only output: each byte that is not part of a
// valid UTF-8 sequence becomes U+FFFD; everything else is kept (JSON
// escapes control characters itself).
std::string valid_utf8(std::string_view text);

// Length in bytes of the valid UTF-8 sequence at the start of `text`: 1–4,
// or 0 when `text` is empty or does not start with one.
std::size_t utf8_sequence_bytes(std::string_view text);

}  // namespace stallscope::common
