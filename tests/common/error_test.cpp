#include "common/error.h"

#include <string>

#include <gtest/gtest.h>

namespace stallscope {
namespace {

// Issue 27: an import error quoting a field with a NUL byte was cut there
// (what() is a C string). The NUL is kept as the text \x00 and the rest of
// the message follows.
TEST(Error, KeepsTheMessagePastANulByte) {
  const Error e(ErrorKind::usage, std::string("cannot import t.log:2: 'a\0b' is not a number", 44));
  EXPECT_STREQ(e.what(), "cannot import t.log:2: 'a\\x00b' is not a number");
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_STREQ(Error(ErrorKind::io, "plain").what(), "plain");
}

}  // namespace
}  // namespace stallscope
