// pgbench-compatible scripts: lexing, parsing and expression evaluation (no
// server). Expected values are what pgbench 15 prints for the same
// expression through debug().
#include "driver/script.h"

#include <gtest/gtest.h>

#include <limits>
#include <string_view>

#include <fmt/format.h>

#include "common/error.h"

namespace stallscope::driver {
namespace {

// The value of `expr` as \set computes it, with `values` for its variables.
Value eval_set(const std::string& expr, Prng& rng,
               const std::vector<std::pair<std::string, std::string>>& texts = {}) {
  Variables vars;
  Script s = parse_script("\\set v " + expr + "\nSELECT 1;\n", "t.sql", vars);
  VariableValues values(vars.names.size());
  for (const auto& [name, text] : texts) {
    if (auto slot = vars.find(name)) values[static_cast<std::size_t>(*slot)].set_text(text);
  }
  return evaluate(*s.commands.at(0).expr, EvalContext{values, vars, rng});
}

std::string shown(const std::string& expr) {
  Prng rng(1);
  const Value v = eval_set(expr, rng);
  return v.type == Value::Type::null ? "null"
                                     : fmt::format("{} {}", type_name(v.type), value_text(v));
}

std::string eval_error(const std::string& expr,
                       const std::vector<std::pair<std::string, std::string>>& texts = {}) {
  Prng rng(1);
  try {
    eval_set(expr, rng, texts);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string parse_error(std::string_view text) {
  Variables vars;
  try {
    parse_script(text, "t.sql", vars);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    return e.what();
  }
  return "no error";
}

TEST(Expr, IntegersDoublesAndPromotionAsPgbench) {
  EXPECT_EQ(shown("1 + 2 * 3"), "int 7");
  EXPECT_EQ(shown("(1 + 2) * 3"), "int 9");
  EXPECT_EQ(shown("-7 / 2"), "int -3");
  EXPECT_EQ(shown("17 % 5 - -1"), "int 3");
  // Decimals stay decimals (they were truncated: 1.5 * 2.0 gave 2).
  EXPECT_EQ(shown("1.5 * 2.0"), "double 3");
  EXPECT_EQ(shown("7 / 2.0"), "double 3.5");
  EXPECT_EQ(shown("2.9"), "double 2.9");
  EXPECT_EQ(shown("1e3"), "double 1000");
  EXPECT_EQ(shown("1.0 / 3"), "double 0.333333333333333");
  EXPECT_EQ(shown("0.1 + 0.2"), "double 0.3");
  EXPECT_EQ(shown("1e300 * 1e300"), "double Infinity");
  // int() rounds to the nearest, as pgbench 15 (rint).
  EXPECT_EQ(shown("int(2.9)"), "int 3");
  EXPECT_EQ(shown("int(-7.9)"), "int -8");
  EXPECT_EQ(shown("double(3)"), "double 3");
  EXPECT_EQ(shown("5 % 3"), "int 2");
  EXPECT_EQ(shown("mod(-7, 3)"), "int -1");
  EXPECT_EQ(shown("abs(-3.5)"), "double 3.5");
  EXPECT_EQ(shown("abs(-4)"), "int 4");
  EXPECT_EQ(shown("greatest(1, 2.5, 3)"), "double 3");
  EXPECT_EQ(shown("least(4, 2)"), "int 2");
  EXPECT_EQ(shown("pi()"), "double 3.14159265358979");
  EXPECT_EQ(shown("sqrt(2)"), "double 1.4142135623731");
  EXPECT_EQ(shown("pow(2, 10)"), "double 1024");
  EXPECT_EQ(shown("power(2, 0.5) * power(2, 0.5)"), "double 2");
  EXPECT_EQ(shown("-9223372036854775808"), "int -9223372036854775808");
}

TEST(Expr, BooleansNullCaseAndBitsAsPgbench) {
  EXPECT_EQ(shown("1 = 1.0"), "boolean true");
  EXPECT_EQ(shown("1 <> 2 and not false"), "boolean true");
  EXPECT_EQ(shown("3 > 2 AND 2 >= 2 AND 1 != 2"), "boolean true");
  EXPECT_EQ(shown("null"), "null");
  EXPECT_EQ(shown("null is null"), "boolean true");
  EXPECT_EQ(shown("1 is null"), "boolean false");
  EXPECT_EQ(shown("true is not true"), "boolean false");
  EXPECT_EQ(shown("null notnull"), "boolean false");
  EXPECT_EQ(shown("1 isnull"), "boolean false");
  EXPECT_EQ(shown("null + 1"), "null");
  EXPECT_EQ(shown("null and false"), "null");
  EXPECT_EQ(shown("false and 1 / 0 = 1"), "boolean false");  // short-circuit
  EXPECT_EQ(shown("true or 1 / 0 = 1"), "boolean true");
  EXPECT_EQ(shown("case when 1 < 2 then 1 else 2.5 end"), "int 1");
  EXPECT_EQ(shown("CASE WHEN false THEN 1 END"), "null");
  EXPECT_EQ(shown("case when 0 then 5 when 2 then 7 end"), "int 7");
  EXPECT_EQ(shown("3 # 5"), "int 6");
  EXPECT_EQ(shown("~0"), "int -1");
  EXPECT_EQ(shown("~1 + 2"), "int -4");  // ~ binds as the bit operators: ~(1 + 2)
  EXPECT_EQ(shown("1 << 62"), "int 4611686018427387904");
  EXPECT_EQ(shown("12 & 10 | 1"), "int 9");
  EXPECT_EQ(shown("-16 >> 2"), "int -4");
}

TEST(Expr, HashesAndPermuteGivePgbenchsValues) {
  EXPECT_EQ(shown("hash(10, 5)"), "int 5862924560876750601");
  EXPECT_EQ(shown("hash_fnv1a(10, 5)"), "int 4876795174170569834");
  EXPECT_EQ(shown("hash_murmur2(-7, 123456789)"), "int 2676269244706528868");
  EXPECT_EQ(shown("hash_fnv1a(0, 0)"), "int -6284781860667377211");
  EXPECT_EQ(shown("permute(3, 10, 5)"), "int 9");
  EXPECT_EQ(shown("permute(0, 1000000, 42)"), "int 443945");
  EXPECT_EQ(shown("permute(-1, 7, -3)"), "int 6");
  EXPECT_EQ(shown("permute(12345, 9223372036854775807, 1)"), "int 7958131549754006117");
  // A permutation: every value once.
  std::vector<int> seen(100);
  for (int i = 0; i < 100; ++i) ++seen.at(static_cast<std::size_t>(permute(i, 100, 7)));
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 100);
}

TEST(Expr, ErrorsAsPgbenchSaysThem) {
  EXPECT_EQ(eval_error("9223372036854775807 + 1"), "bigint add out of range");
  EXPECT_EQ(eval_error("-9223372036854775807 - 2"), "bigint sub out of range");
  EXPECT_EQ(eval_error("4611686018427387904 * 2"), "bigint mul out of range");
  EXPECT_EQ(eval_error("(-9223372036854775807 - 1) / -1"), "bigint div out of range");
  EXPECT_EQ(eval_error("1 / (2 - 2)"), "division by zero");
  EXPECT_EQ(eval_error("not 1"), "cannot coerce int to boolean");
  EXPECT_EQ(eval_error("true + 1"), "cannot coerce boolean to int");
  EXPECT_EQ(eval_error("int(1e30)").rfind("double to int overflow", 0), 0u);
  EXPECT_EQ(eval_error("random(5, 1)"), "empty range given to random");
  EXPECT_EQ(eval_error("random(-9223372036854775808, 9223372036854775807)"),
            "random range is too large");
  EXPECT_EQ(eval_error("random_zipfian(1, 10, 0.5)"),
            "zipfian parameter must be in range [1.001, 1000] (not 0.500000)");
  EXPECT_EQ(eval_error("random_gaussian(1, 10, 1.5)"),
            "gaussian parameter must be at least 2.000000 (not 1.500000)");
  EXPECT_EQ(eval_error("permute(1, 0)", {{"default_seed", "5"}}),
            "permute size parameter must be greater than zero");
  EXPECT_EQ(eval_error(":nosuch + 1"), "undefined variable \"nosuch\"");
  EXPECT_EQ(eval_error(":x + 1", {{"x", "bar"}}), "malformed variable \"x\" value: \"bar\"");
}

// -D and \gset values are text, read as pgbench reads a variable.
TEST(Expr, TextVariablesReadAsPgbench) {
  Prng rng(1);
  const auto read = [&](const std::string& text) {
    const Value v = eval_set(":x", rng, {{"x", text}});
    return v.type == Value::Type::null ? "null"
                                       : fmt::format("{} {}", type_name(v.type), value_text(v));
  };
  EXPECT_EQ(read("42"), "int 42");
  EXPECT_EQ(read(" -7"), "int -7");
  EXPECT_EQ(eval_error(":x", {{"x", "12 "}}), "malformed variable \"x\" value: \"12 \"");
  EXPECT_EQ(read("2.5"), "double 2.5");
  EXPECT_EQ(read("1e3"), "double 1000");
  EXPECT_EQ(read("NULL"), "null");
  EXPECT_EQ(read("t"), "boolean true");
  EXPECT_EQ(read("yes"), "boolean true");
  EXPECT_EQ(read("on"), "boolean true");
  EXPECT_EQ(read("of"), "boolean false");
  EXPECT_EQ(read("n"), "boolean false");
  EXPECT_EQ(eval_error(":x", {{"x", "99999999999999999999"}}),
            "value \"99999999999999999999\" is out of range for type bigint");
  EXPECT_EQ(eval_error(":x", {{"x", ""}}), "malformed variable \"x\" value: \"\"");
}

TEST(Expr, RandomFunctionsStayInRange) {
  Prng rng(7);
  std::int64_t lo_seen = 1'000'000, hi_seen = -1;
  for (int i = 0; i < 2000; ++i) {
    const std::int64_t v = eval_set("random(1, 10)", rng).integer_value;
    lo_seen = std::min(lo_seen, v);
    hi_seen = std::max(hi_seen, v);
    for (const char* f : {"random_exponential(1, 100, 3.0)", "random_gaussian(1, 100, 2.5)",
                          "random_zipfian(1, 100, 1.5)", "random(-5, 94)"}) {
      const Value x = eval_set(f, rng);
      ASSERT_EQ(x.type, Value::Type::integer) << f;
      EXPECT_GE(x.integer_value, f[7] == '-' || f[7] == '(' ? -5 : 1) << f;
      EXPECT_LE(x.integer_value, 100) << f;
    }
  }
  EXPECT_EQ(lo_seen, 1);
  EXPECT_EQ(hi_seen, 10);
  // The same seed, the same sequence.
  Prng a(99), b(99);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next(), b.next());
}

TEST(Expr, ParseErrorsNameWhatWasExpected) {
  EXPECT_EQ(parse_error("\\set a foo(1)\n"),
            "cannot parse t.sql:1: \\set: unexpected function name (foo), at \"foo(1)\"");
  EXPECT_EQ(
      parse_error("\\set a random(1)\n"),
      "cannot parse t.sql:1: \\set: unexpected number of arguments (random), at \"random(1)\"");
  EXPECT_EQ(parse_error("\\set a 1 +\n"),
            "cannot parse t.sql:1: \\set: syntax error: the expression ends too early, at the end "
            "of \"1 +\"");
  EXPECT_EQ(parse_error("\\set a (1\n"),
            "cannot parse t.sql:1: \\set: syntax error: expected ')', found 'end of expression', "
            "at the end of \"(1\"");
  EXPECT_EQ(parse_error("\\set a 9223372036854775808\n"),
            "cannot parse t.sql:1: \\set: syntax error: bigint constant overflow "
            "(9223372036854775808), at "
            "\"9223372036854775808\"");
  EXPECT_EQ(
      parse_error("\\set a 1 < 2 < 3\n").rfind("cannot parse t.sql:1: \\set: syntax error", 0), 0u);
  EXPECT_EQ(parse_error("\\set\n"), "cannot parse t.sql:1: \\set: missing argument");
  EXPECT_EQ(parse_error("\\set 1a 2\n"),
            "cannot parse t.sql:1: \\set: invalid variable name: \"1a\"");
  EXPECT_NE(parse_error("\\set a least()\n").find("at least one argument expected (least)"),
            std::string::npos);
}

TEST(Script, LexesSqlAsPsqlDoes) {
  Variables vars;
  Script s = parse_script(
      "-- a licence header\n"
      "/* and a block /* nested */ comment; */\n"
      "\\set aid random(1, 1000)\n"
      "DO $$ BEGIN PERFORM 1; PERFORM 2; END $$;\n"
      "SELECT $a$ ; $b$ ; $a$, E'\\';', ';''', \"x;y\" FROM t WHERE id = :aid\n"
      "  AND note = ':aid';\n"
      "SELECT 1 \\; SELECT 2;\n"
      "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END;\n"
      "SELECT now()::date, :unknown, '12:30'\n",
      "mix.sql", vars);
  // The block comment before \\set is a command of its own, as pgbench has it.
  ASSERT_EQ(s.commands.size(), 7u);
  EXPECT_EQ(s.sql_commands(), 6);
  EXPECT_EQ(s.commands[0].text.at(0), "/* and a block /* nested */ comment; */");
  EXPECT_EQ(s.commands[0].line, 2);
  EXPECT_EQ(s.commands[1].kind, ScriptCommand::Kind::set);
  EXPECT_EQ(s.commands[1].line, 3);
  EXPECT_EQ(s.commands[2].text.at(0), "DO $$ BEGIN PERFORM 1; PERFORM 2; END $$");
  EXPECT_EQ(s.commands[2].line, 4);
  const auto& sel = s.commands[3];
  EXPECT_EQ(sel.line, 5);
  ASSERT_EQ(sel.vars.size(), 2u);
  EXPECT_EQ(vars.names[static_cast<std::size_t>(sel.vars[0])], "aid");
  EXPECT_EQ(sel.quoted, (std::vector<bool>{false, true}));
  // Outside simple mode a quoted reference stays text; simple mode puts both in place.
  EXPECT_EQ(sel.numbered,
            "SELECT $a$ ; $b$ ; $a$, E'\\';', ';''', \"x;y\" FROM t WHERE id = $1\n"
            "  AND note = ':aid'");
  EXPECT_EQ(s.commands[4].text.at(0), "SELECT 1 ; SELECT 2");  // one compound command
  EXPECT_EQ(s.commands[5].text.at(0),
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END");
  EXPECT_EQ(s.commands[6].numbered, "SELECT now()::date, $1, '12:30'");
  EXPECT_EQ(parse_error("SELECT 'open;\n"), "cannot parse t.sql:1: unterminated quoted string");
  EXPECT_EQ(parse_error("SELECT 1;\nSELECT $x$ ;\n"),
            "cannot parse t.sql:2: unterminated dollar-quoted string");
  EXPECT_EQ(parse_error("/* /* */\n"), "cannot parse t.sql:1: unterminated /* comment");
  EXPECT_EQ(parse_error("-- nothing\n"),
            "cannot parse t.sql: empty command list (no SQL and no meta-command)");
}

TEST(Script, GsetAsetAndConditionalsAsPgbench) {
  Variables vars;
  Script s = parse_script(
      "SELECT 1 AS a \\gset\n"
      "SELECT 2 AS b;\n"
      "\\aset p_\n"
      "\\if :a = 1\n"
      "\\set x 1\n"
      "\\elif :b\n"
      "\\if true\n"
      "\\endif\n"
      "\\else\n"
      "\\set x 3\n"
      "\\endif\n",
      "g.sql", vars);
  ASSERT_EQ(s.commands.size(), 10u);
  EXPECT_EQ(s.commands[0].store, ScriptCommand::Store::gset);
  EXPECT_EQ(s.commands[0].text.at(0), "SELECT 1 AS a");
  EXPECT_EQ(s.commands[1].store, ScriptCommand::Store::aset);
  EXPECT_EQ(s.commands[1].store_prefix, "p_");
  // \if(2) → \elif(4) → \else(7) → \endif(9); the inner \if(5) → \endif(6).
  EXPECT_EQ(s.commands[2].next_branch, 4u);
  EXPECT_EQ(s.commands[4].next_branch, 7u);
  EXPECT_EQ(s.commands[4].endif, 9u);
  EXPECT_EQ(s.commands[7].next_branch, 9u);
  EXPECT_EQ(s.commands[7].endif, 9u);
  EXPECT_EQ(s.commands[5].next_branch, 6u);
  EXPECT_EQ(parse_error("\\gset\nSELECT 1;\n"),
            "cannot parse t.sql:1: \\gset must follow an SQL command");
  EXPECT_EQ(parse_error("\\set a 1\n\\aset\n"),
            "cannot parse t.sql:2: \\aset must follow an SQL command");
  EXPECT_EQ(parse_error("SELECT 1 \\gset\n\\gset\n"),
            "cannot parse t.sql:2: \\gset must follow an SQL command");
  EXPECT_EQ(parse_error("\\else\n"), "cannot parse t.sql:1: \\else without matching \\if");
  EXPECT_EQ(parse_error("\\if 1\n\\else\n\\elif 1\n\\endif\n"),
            "cannot parse t.sql:3: \\elif after \\else");
  EXPECT_EQ(parse_error("\\if 1\nSELECT 1;\n"),
            "cannot parse t.sql:1: \\if without matching \\endif");
  EXPECT_EQ(parse_error("\\if 1\n\\else 2\n\\endif\n"),
            "cannot parse t.sql:2: \\else: unexpected argument");
  EXPECT_EQ(parse_error("\\foo\n"), "cannot parse t.sql:1: invalid command \\foo");
  // Pipelines are checked as they run (an \\if may choose where one ends), as pgbench does.
  EXPECT_EQ(parse_error("\\startpipeline\nSELECT 1;\n"), "no error");
  EXPECT_EQ(parse_error("\\startpipeline\nSELECT 1 \\gset\n\\endpipeline\n"), "no error");
  // Scripts without SQL are scripts.
  EXPECT_EQ(parse_error("\\set a 1\n"), "no error");
}

TEST(Script, SleepTakesAnIntegerOrAVariableAndAUnit) {
  Variables vars;
  Script s = parse_script("\\sleep 2ms\n\\sleep :t us\n\\sleep 3\n\\sleep -1 s\n", "t.sql", vars);
  EXPECT_EQ(s.commands[0].sleep_count, 2);
  EXPECT_EQ(s.commands[0].unit_ns, common::kNsPerMs);
  EXPECT_EQ(vars.names.at(static_cast<std::size_t>(s.commands[1].sleep_var)), "t");
  EXPECT_EQ(s.commands[1].unit_ns, common::kNsPerUs);
  EXPECT_EQ(s.commands[2].unit_ns, common::kNsPerS);
  EXPECT_EQ(s.commands[3].sleep_count, -1);
  EXPECT_EQ(parse_error("\\sleep 1.5\n"),
            "cannot parse t.sql:1: \\sleep: unrecognized time unit, must be us, ms or s (.5)");
  EXPECT_EQ(parse_error("\\sleep foo\n"),
            "cannot parse t.sql:1: \\sleep: invalid sleep time, must be an integer (foo)");
  EXPECT_EQ(parse_error("\\sleep 1 h\n"),
            "cannot parse t.sql:1: \\sleep: unrecognized time unit, must be us, ms or s (h)");
  EXPECT_EQ(parse_error("\\sleep 1 ms x\n"), "cannot parse t.sql:1: \\sleep: too many arguments");
}

// A \sleep whose length in ns passes 64 bits (9300000000 s wrapped to a
// sleep of 0) is an error naming the line, in every unit; a length from a
// variable is checked when it runs (sleep_ns, used by the driver).
TEST(Script, SleepOutOfRangeIsAnErrorNamingTheLine) {
  for (const char* sleep : {"\\sleep 200000000 s", "\\sleep 100000001 s"}) {
    const std::string message = parse_error(std::string("SELECT 1;\n") + sleep + "\n");
    EXPECT_NE(message.find("t.sql:2:"), std::string::npos) << message;
    EXPECT_NE(message.find("out of range"), std::string::npos) << message;
  }
  EXPECT_NE(parse_error("\\sleep 9300000000 s\n").find("must be an integer"), std::string::npos);
  EXPECT_EQ(sleep_ns(100'000'000, common::kNsPerS), kMaxSleepNs);
  EXPECT_EQ(sleep_ns(-5, common::kNsPerS), 0);
  EXPECT_EQ(sleep_ns(7, common::kNsPerMs), 7'000'000);
  EXPECT_THROW(sleep_ns(9'300'000'000'000, common::kNsPerMs), Error);
  EXPECT_THROW(sleep_ns(std::numeric_limits<std::int64_t>::max(), common::kNsPerUs), Error);
}

// "select 1;\0select 2;" ran only the first statement (libpq sends C
// strings) and a file of NUL bytes ran empty queries; a NUL byte and invalid
// UTF-8 are refused, naming the file and line.
TEST(Script, RefusesNulBytesAndInvalidUtf8NamingFileAndLine) {
  using namespace std::string_view_literals;
  EXPECT_EQ(parse_error("select 1;\0select 2;"sv),
            "cannot parse t.sql:1: a NUL byte at byte 10 of the line: a script is text, and "
            "SQL cannot hold one");
  EXPECT_EQ(parse_error("\0\0\0\0"sv).rfind("cannot parse t.sql:1: a NUL byte", 0), 0u);
  EXPECT_EQ(parse_error("SELECT 1;\nSELECT 'caf\xe9';\n"),
            "cannot parse t.sql:2: invalid UTF-8 (byte \\xe9) at byte 12 of the line: a "
            "script must be UTF-8");
  EXPECT_EQ(parse_error("SELECT 1;\n\\sleep 1\n-- \xc0\xaf\n").rfind("cannot parse t.sql:3:", 0),
            0u);
  Variables vars;
  EXPECT_EQ(parse_script("SELECT 'café ✓';\n", "t.sql", vars).sql_commands(), 1);
}

TEST(Script, WeightsAndBuiltins) {
  EXPECT_EQ(split_weight("a.sql@5"), (std::pair<std::string, int>{"a.sql", 5}));
  EXPECT_EQ(split_weight("a.sql"), (std::pair<std::string, int>{"a.sql", 1}));
  EXPECT_THROW(split_weight("a.sql@x"), Error);
  Variables vars;
  Script tpcb = builtin_script("tpcb-like", vars);
  EXPECT_EQ(tpcb.sql_commands(), 7);
  EXPECT_THROW(builtin_script("nope", vars), Error);
  // A unique prefix names a built-in, as with pgbench -b.
  EXPECT_EQ(builtin_script("select", vars).name, "builtin: select-only");
  EXPECT_EQ(builtin_script("simple", vars).sql_commands(), 5);
  EXPECT_EQ(builtin_script("tpcb", vars).sql_commands(), 7);
  EXPECT_THROW(builtin_script("s", vars), Error);  // select-only or simple-update
  EXPECT_THROW(builtin_script("", vars), Error);
}

}  // namespace
}  // namespace stallscope::driver
