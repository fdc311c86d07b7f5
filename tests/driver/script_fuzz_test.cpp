// Inputs the script fuzz target (tests/fuzz/script_fuzz.cpp) found, kept as
// regression tests.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "driver/script.h"

namespace stallscope::driver {
namespace {

// A form feed or vertical tab before an SQL command's first character left
// the command at line 0 (the white space of the line tracking was " \t\r\n",
// std::isspace's is wider), so its errors and -r rows named FILE:0.
TEST(ScriptFuzz, CommandAfterAFormFeedKeepsItsLine) {
  Variables v;
  const Script s = parse_script("\r\r\r\fSELECT 1 + 1;\n\n\vSELECT 2", "t.sql", v);
  ASSERT_EQ(s.commands.size(), 2u);
  EXPECT_EQ(s.commands[0].line, 1);
  EXPECT_EQ(s.commands[0].text.front(), "SELECT 1 + 1");
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

// The message parse_script throws for `text`; "" when it parses.
std::string parse_error(const std::string& text) {
  Variables v;
  try {
    parse_script(text, "t.sql", v);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    return e.what();
  }
  return "";
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// A \set of 4,000 unary minus signs overflowed the fuzz target's stack in
// the parser's recursion (ASan: stack-overflow in ExprParser::unary); a
// longer one does the same in a normal build, and so would evaluating or
// freeing a tree that deep ("1+1+…+1" parses in a loop but evaluates
// recursively). Nesting is now bounded: a usage error naming the line.
TEST(ScriptFuzz, DeeplyNestedExpressionsAreAnErrorNotAStackOverflow) {
  const auto deep = [](const std::string& text) {
    const std::string message = parse_error(text);
    return message.rfind(
               "cannot parse t.sql:1: \\set: the expression nests deeper than 1024 levels", 0) ==
               0 &&
           message.size() < 200;
  };
  EXPECT_TRUE(deep("\\set y " + std::string(100'000, '-') + "1\nSELECT 1;\n"));
  EXPECT_TRUE(deep("\\set y " + std::string(100'000, '+') + "1\nSELECT 1;\n"));
  EXPECT_TRUE(deep("\\set y " + std::string(100'000, '(') + "1" + std::string(100'000, ')') +
                   "\nSELECT 1;\n"));
  EXPECT_TRUE(deep("\\set y 1" + repeat(" + 1", 100'000) + "\nSELECT 1;\n"));
  EXPECT_TRUE(deep("\\set y 1" + repeat(" * 1", 100'000) + "\nSELECT 1;\n"));
  EXPECT_TRUE(deep("\\set y " + repeat("random(1, ", 100'000) + "1" + repeat(")", 100'000) +
                   "\nSELECT 1;\n"));
}

// The value of expression `e` with no variables.
Value value_of(const Expr& e, const Variables& names, Prng& rng) {
  const VariableValues values(names.names.size());
  return evaluate(e, EvalContext{values, names, rng});
}

// Below the bound, deep expressions still parse and evaluate: among them a
// flat sum of 1,000 terms, which pgbench runs too.
TEST(ScriptFuzz, NestingBelowTheBoundStillEvaluates) {
  Variables v;
  const Script s = parse_script("\\set a " + std::string(200, '-') + "7\n\\set b 1" +
                                    repeat(" + 1", 999) + "\n\\set c " + std::string(100, '(') +
                                    "3" + std::string(100, ')') + "\nSELECT 1;\n",
                                "t.sql", v);
  Prng rng(1);
  EXPECT_EQ(value_of(*s.commands.at(0).expr, v, rng).integer_value, 7);
  EXPECT_EQ(value_of(*s.commands.at(1).expr, v, rng).integer_value, 1000);
  EXPECT_EQ(value_of(*s.commands.at(2).expr, v, rng).integer_value, 3);
}

// The message evaluating `\set v EXPR` throws; "" when it evaluates.
std::string eval_error(const std::string& expr) {
  Variables v;
  const Script s = parse_script("\\set v " + expr + "\nSELECT 1;\n", "t.sql", v);
  Prng rng(1);
  try {
    for (int i = 0; i < 1000; ++i) value_of(*s.commands.at(0).expr, v, rng);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    return e.what();
  }
  return "";
}

// Found by the script fuzz target: a decimal number past a bigint made an
// integer of INT64_MIN on x86 (UBSan: 3.33333e+37 is outside the range of
// 'long'). A decimal now stays a double; int() of one past a bigint is
// pgbench's "double to int overflow".
TEST(ScriptFuzz, DecimalPastABigintIsAnErrorOnlyAsAnInteger) {
  EXPECT_EQ(eval_error("33333333333333333333333333333333333333.3"), "");
  EXPECT_EQ(
      eval_error("int(33333333333333333333333333333333333333.3)")
          .rfind("double to int overflow for 33333333333333332582936607818678009856.000000", 0),
      0u);
  EXPECT_EQ(eval_error("int(9223372036854775808.0)").rfind("double to int overflow", 0), 0u);
  EXPECT_EQ(eval_error("int(-4611686018427387904.0)"), "");
  EXPECT_EQ(eval_error("2.9 * 2"), "");
}

// random*(lo, hi) with hi − lo + 1 past a bigint: hi − lo overflowed (and
// random_exponential's result with it); pgbench refuses the range.
TEST(ScriptFuzz, RandomRangePastABigintIsAnError) {
  for (const std::string f :
       {"random", "random_exponential", "random_gaussian", "random_zipfian"}) {
    const std::string extra = f == "random" ? "" : ", 2.5";
    EXPECT_EQ(eval_error(f + "(-9223372036854775807 - 1, 9223372036854775807" + extra + ")"),
              "random range is too large");
    EXPECT_EQ(eval_error(f + "(0, 9223372036854775807" + extra + ")"), "random range is too large");
    EXPECT_EQ(eval_error(f + "(1, 9223372036854775807" + extra + ")"), "") << f;
    EXPECT_EQ(eval_error(f + "(-9223372036854775807 - 1, -2" + extra + ")"), "") << f;
  }
}

// The widest accepted ranges stay within [lo, hi].
TEST(ScriptFuzz, WidestRandomRangesStayWithinBounds) {
  for (const std::string f : {"random_exponential", "random_gaussian", "random_zipfian"}) {
    Variables v;
    const Script s =
        parse_script("\\set v " + f + "(1, 9223372036854775807, 2.5)\nSELECT 1;\n", "t.sql", v);
    Prng rng(7);
    for (int i = 0; i < 10000; ++i) {
      const Value x = value_of(*s.commands.at(0).expr, v, rng);
      ASSERT_GE(x.integer_value, 1) << f;
    }
  }
}

}  // namespace
}  // namespace stallscope::driver
