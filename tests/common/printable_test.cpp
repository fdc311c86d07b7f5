// common::printable and common::valid_utf8: untrusted text for terminals and JSON.
#include "common/printable.h"

#include <string>

#include <gtest/gtest.h>

namespace stallscope::common {
namespace {

TEST(Printable, KeepsValidUtf8) {
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x90\x98 pgbench"),
            "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x90\x98 pgbench");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, EscapesInvalidBytes) {
  // A lone byte ≥ 0x80, a stray continuation byte, a truncated sequence.
  EXPECT_EQ(printable("bad\xff"), "bad\\xff");
  EXPECT_EQ(printable("\x80x"), "\\x80x");
  EXPECT_EQ(printable("ab\xe2\x80"), "ab\\xe2\\x80");
  // An overlong '/', a UTF-16 surrogate, a code point above U+10FFFF.
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  // A valid character right after an invalid byte is kept.
  EXPECT_EQ(printable("\xfe\xc3\xa9"), "\\xfe\xc3\xa9");
}

TEST(Printable, EscapesControlCharacters) {
  EXPECT_EQ(printable("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(printable("line\nnext\ttab\r"), "line\\x0anext\\x09tab\\x0d");
  EXPECT_EQ(printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(printable("del\x7f"), "del\\x7f");
  // C1 controls (U+0080–U+009F) in UTF-8; U+00A0 is not one.
  EXPECT_EQ(printable("csi\xc2\x9b"
                      "31m"),
            "csi\\xc2\\x9b31m");
  EXPECT_EQ(printable("nbsp\xc2\xa0"), "nbsp\xc2\xa0");
}

TEST(Printable, ResultIsValidUtf8WithoutControls) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const auto out = printable(all);
  EXPECT_EQ(valid_utf8(out), out);
  for (const char c : out) {
    const auto u = static_cast<unsigned char>(c);
    EXPECT_FALSE(u < 0x20 || u == 0x7f) << int(u);
  }
}

TEST(ValidUtf8, ReplacesInvalidBytesOnly) {
  EXPECT_EQ(valid_utf8("ok\xff"), "ok\xef\xbf\xbd");
  EXPECT_EQ(valid_utf8("caf\xc3\xa9\x1b"), "caf\xc3\xa9\x1b");
  EXPECT_EQ(valid_utf8("\xe2\x80"), "\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(Utf8SequenceBytes, LengthOfTheFirstCharacter) {
  EXPECT_EQ(utf8_sequence_bytes("a"), 1u);
  EXPECT_EQ(utf8_sequence_bytes("\xc3\xa9x"), 2u);
  EXPECT_EQ(utf8_sequence_bytes("\xe2\x80\x94"), 3u);
  EXPECT_EQ(utf8_sequence_bytes("\xf0\x9f\x90\x98"), 4u);
  EXPECT_EQ(utf8_sequence_bytes("\xff"), 0u);
  EXPECT_EQ(utf8_sequence_bytes(""), 0u);
}

}  // namespace
}  // namespace stallscope::common
