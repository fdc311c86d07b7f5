// Inputs the script fuzz target (tests/fuzz/script_fuzz.cpp) found, kept as
// regression tests.
#include <gtest/gtest.h>

#include "driver/script.h"

namespace stallscope::driver {
namespace {

// A form feed or vertical tab before an SQL command's first character left
// the command at line 0 (the white space of the line tracking was " \t\r\n",
// std::isspace's is wider), so its errors and -r rows named FILE:0.
TEST(ScriptFuzz, CommandAfterAFormFeedKeepsItsLine) {
  Variables v;
  const Script s = parse_script("\r\r\r\f\\3et y + 1;\n\n\vSELECT 2", "t.sql", v);
  ASSERT_EQ(s.commands.size(), 2u);
  EXPECT_EQ(s.commands[0].line, 1);
  EXPECT_EQ(s.commands[0].text.front(), "\\3et y + 1");
  EXPECT_EQ(s.commands[1].line, 3);
  EXPECT_EQ(s.commands[1].text.front(), "SELECT 2");
}

// A command of nothing but white space is no command.
TEST(ScriptFuzz, FormFeedAloneIsNoCommand) {
  Variables v;
  const Script s = parse_script("\f;\nSELECT 1;\n", "t.sql", v);
  ASSERT_EQ(s.commands.size(), 1u);
  EXPECT_EQ(s.commands[0].line, 2);
}

}  // namespace
}  // namespace stallscope::driver
