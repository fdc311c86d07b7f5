// pgbench-compatible scripts: parsing and expression evaluation (no server).
#include "driver/script.h"

#include <gtest/gtest.h>

#include <limits>
#include <string_view>

#include "common/error.h"

namespace stallscope::driver {
namespace {

std::int64_t eval_set(const std::string& expr, std::mt19937_64& rng) {
  Variables vars;
  Script s = parse_script("\\set v " + expr + "\nSELECT 1;\n", "t.sql", vars);
  std::vector<std::optional<std::int64_t>> values(vars.names.size());
  return evaluate(*s.commands.at(0).expr, values, rng);
}

TEST(Script, IntegerArithmeticFollowsPrecedenceAndTruncates) {
  std::mt19937_64 rng(1);
  EXPECT_EQ(eval_set("1 + 2 * 3", rng), 7);
  EXPECT_EQ(eval_set("(1 + 2) * 3", rng), 9);
  EXPECT_EQ(eval_set("-7 / 2", rng), -3);
  EXPECT_EQ(eval_set("17 % 5 - -1", rng), 3);
  EXPECT_THROW(eval_set("1 / (2 - 2)", rng), Error);
}

// Overflow is an error naming the operation, as pgbench's, not a wrapped
// value (\set y :x + 1 at 2^63 − 1 gave −2^63).
TEST(Script, IntegerOverflowIsAnErrorNotAWrappedValue) {
  std::mt19937_64 rng(1);
  const auto message = [&](const std::string& expr) {
    try {
      eval_set(expr, rng);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("9223372036854775807 + 1"),
            "cannot evaluate a \\set expression: bigint add out of range");
  EXPECT_EQ(message("-9223372036854775807 - 2"),
            "cannot evaluate a \\set expression: bigint subtract out of range");
  EXPECT_EQ(message("4611686018427387904 * 2"),
            "cannot evaluate a \\set expression: bigint multiply out of range");
  EXPECT_EQ(message("(-9223372036854775807 - 1) / -1"),
            "cannot evaluate a \\set expression: bigint divide out of range");
  EXPECT_EQ(message("-(-9223372036854775807 - 1)"),
            "cannot evaluate a \\set expression: bigint negation out of range");
  EXPECT_EQ(eval_set("9223372036854775806 + 1", rng), 9223372036854775807);
  EXPECT_EQ(eval_set("(-9223372036854775807 - 1) % -1", rng), 0);
  EXPECT_EQ(eval_set("7 / -1", rng), -7);
}

TEST(Script, RandomFunctionsStayInRange) {
  std::mt19937_64 rng(7);
  std::int64_t lo_seen = 1'000'000, hi_seen = -1;
  for (int i = 0; i < 2000; ++i) {
    auto v = eval_set("random(1, 10)", rng);
    lo_seen = std::min(lo_seen, v);
    hi_seen = std::max(hi_seen, v);
    auto e = eval_set("random_exponential(1, 100, 3.0)", rng);
    EXPECT_GE(e, 1);
    EXPECT_LE(e, 100);
    auto g = eval_set("random_gaussian(1, 100, 2.5)", rng);
    EXPECT_GE(g, 1);
    EXPECT_LE(g, 100);
  }
  EXPECT_EQ(lo_seen, 1);
  EXPECT_EQ(hi_seen, 10);
}

TEST(Script, SplitsCommandsAndSubstitutesKnownVariablesOnly) {
  Variables vars;
  Script s = parse_script(
      "-- a comment\n"
      "\\set aid random(1, 1000)\n"
      "BEGIN;\n"
      "UPDATE t SET v = v + 1\n  WHERE id = :aid AND note = ':aid';\n"
      "SELECT now()::date, :unknown;\n"
      "\\sleep 5 ms\n"
      "END\n",
      "mix.sql", vars);
  ASSERT_EQ(s.commands.size(), 6u);
  EXPECT_EQ(s.sql_commands(), 4);
  const auto& upd = s.commands[2];
  EXPECT_EQ(upd.line, 4);
  ASSERT_EQ(upd.vars.size(), 1u);
  EXPECT_EQ(vars.names[static_cast<std::size_t>(upd.vars[0])], "aid");
  EXPECT_EQ(upd.numbered, "UPDATE t SET v = v + 1\n  WHERE id = $1 AND note = ':aid'");
  EXPECT_EQ(s.commands[3].numbered, "SELECT now()::date, :unknown");  // not a script variable
  EXPECT_EQ(s.commands[4].kind, ScriptCommand::Kind::sleep);
  EXPECT_EQ(s.commands[4].unit_ns, 1'000'000);
  EXPECT_EQ(s.commands[5].numbered, "END");
}

TEST(Script, UnsupportedMetaCommandNamesFileAndLine) {
  Variables vars;
  try {
    parse_script("SELECT 1;\n\n\\gset\n", "bench.sql", vars);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_EQ(
        std::string(e.what()).rfind("cannot parse bench.sql:3: unsupported meta-command \\gset", 0),
        0u)
        << e.what();
  }
}

// A \sleep whose length in ns passes 64 bits (9300000000 s wrapped to a
// sleep of 0) is an error naming the line, in every unit; a length from a
// variable is checked when it runs (sleep_ns, used by the driver).
TEST(Script, SleepOutOfRangeIsAnErrorNamingTheLine) {
  for (const char* sleep :
       {"\\sleep 9300000000 s", "\\sleep 9300000000000 ms", "\\sleep 9300000000000000 us",
        "\\sleep 100000001 s", "\\sleep 9300000000.5 s"}) {
    Variables vars;
    try {
      parse_script(std::string("SELECT 1;\n") + sleep + "\n", "t.sql", vars);
      ADD_FAILURE() << sleep << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
      EXPECT_NE(std::string(e.what()).find("t.sql:2:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
  Variables vars;
  Script s = parse_script("\\sleep 100000000 s\n\\sleep :x ms\nSELECT 1;\n", "t.sql", vars);
  EXPECT_EQ(sleep_ns(100'000'000, common::kNsPerS), kMaxSleepNs);
  EXPECT_EQ(sleep_ns(-5, common::kNsPerS), 0);
  EXPECT_EQ(sleep_ns(7, common::kNsPerMs), 7'000'000);
  EXPECT_THROW(sleep_ns(9'300'000'000'000, s.commands.at(1).unit_ns), Error);
  EXPECT_THROW(sleep_ns(std::numeric_limits<std::int64_t>::max(), common::kNsPerUs), Error);
}

// Issue 27: "select 1;\0select 2;" ran only the first statement (libpq
// sends C strings) and a file of NUL bytes ran empty queries; a NUL byte
// and invalid UTF-8 are refused, naming the file and line.
TEST(Script, RefusesNulBytesAndInvalidUtf8NamingFileAndLine) {
  const auto message = [](std::string_view text) {
    Variables vars;
    try {
      parse_script(text, "bench.sql", vars);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using namespace std::string_view_literals;
  EXPECT_EQ(message("select 1;\0select 2;"sv),
            "cannot parse bench.sql:1: a NUL byte at byte 10 of the line: a script is text, and "
            "SQL cannot hold one");
  EXPECT_EQ(message("\0\0\0\0"sv).rfind("cannot parse bench.sql:1: a NUL byte", 0), 0u);
  EXPECT_EQ(message("SELECT 1;\nSELECT 'caf\xe9';\n"),
            "cannot parse bench.sql:2: invalid UTF-8 (byte \\xe9) at byte 12 of the line: a "
            "script must be UTF-8");
  EXPECT_EQ(message("SELECT 1;\n\\sleep 1\n-- \xc0\xaf\n").rfind("cannot parse bench.sql:3:", 0),
            0u);
  // Valid UTF-8 passes.
  Variables vars;
  EXPECT_EQ(parse_script("SELECT 'café ✓';\n", "bench.sql", vars).sql_commands(), 1);
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
