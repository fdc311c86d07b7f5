// pgbench compatibility suite: every script of tests/compat/scripts/ is run
// by pgbench and by `stallscope run` with the same flags (a first line
// `-- compat: FLAGS` adds some) against the scratch server, and the two must
// agree on:
//   - refused or run: a script pgbench refuses, stallscope refuses (exit 2)
//     for pgbench's reason (its words in stallscope's message);
//   - the values the script computes: the debug() lines, in order (sorted
//     when several clients print);
//   - how many transactions succeed, and whether some failed: pgbench
//     aborts a client at its first error, where stallscope fails the
//     transaction and goes on (pgbench 18's --continue-on-error), so for a
//     script that fails both must fail, and stallscope's stored error must
//     hold pgbench's reason; a script that fails in every transaction may
//     instead be refused before the run, for pgbench's reason.
// docs/pgbench-compat.md lists the scripts and the differences left out.
#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/test_support.h"

namespace stallscope {
namespace {

std::string scripts_dir() {
  const char* dir = std::getenv("STALLSCOPE_SOURCE_DIR");
  return std::string(dir ? dir : STALLSCOPE_SOURCE_DIR_DEFAULT) + "/tests/compat/scripts";
}

std::vector<std::string> script_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(scripts_dir())) {
    if (e.path().extension() == ".sql") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The flags of a script's `-- compat: FLAGS` line (-t 1 unless it sets -t).
std::vector<std::string> script_flags(const std::string& path) {
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  std::vector<std::string> flags;
  const std::string tag = "-- compat: ";
  if (first.rfind(tag, 0) == 0) {
    std::istringstream words(first.substr(tag.size()));
    for (std::string w; words >> w;) flags.push_back(w);
  }
  if (std::find(flags.begin(), flags.end(), "-t") == flags.end()) {
    flags.insert(flags.end(), {"-t", "1"});
  }
  return flags;
}

struct Outcome {
  bool refused = false;
  std::string message;  // refused: why
  std::int64_t succeeded = 0;
  bool some_failed = false;
  std::vector<std::string> debug;   // debug() values, "int 3"
  std::vector<std::string> errors;  // why transactions failed
};

// The values of the debug() lines: "debug(script=0,command=2): int 3" → "int 3".
std::vector<std::string> debug_values(const std::string& err) {
  std::vector<std::string> values;
  for (const auto& line : lines_of(err)) {
    if (line.rfind("debug(", 0) != 0) continue;
    const auto at = line.find("): ");
    values.push_back(at == std::string::npos ? line : line.substr(at + 3));
  }
  return values;
}

// pgbench's reason for a refusal: "f.sql:1: unexpected function name (foo)
// in command "set"" → "unexpected function name (foo)".
std::string refusal_reason(const std::string& err) {
  for (auto line : lines_of(err)) {
    const std::string prefix = "pgbench: error: ";
    if (line.rfind(prefix, 0) != 0) continue;
    line = line.substr(prefix.size());
    if (line.rfind("condition error", 0) == 0) return line.substr(line.rfind(": ") + 2);
    if (line.rfind("empty command list", 0) == 0) return "empty command list";
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(.*?:\d+: (.*?)( in command "[^"]*")?)"))) {
      return m[1];
    }
    return line;
  }
  return "(no reason)";
}

// pgbench's reason for a failed transaction, without the client and
// command it names: "bigint add out of range", "expected one row, got 2".
std::string failure_reason(const std::string& err) {
  std::vector<std::string> reasons;
  for (auto line : lines_of(err)) {
    const std::string prefix = "pgbench: error: ";
    if (line.rfind(prefix, 0) != 0) continue;
    line = line.substr(prefix.size());
    if (std::regex_search(line, std::regex(R"(^client \d+ aborted in command \d+ \(\w+\))")) ||
        line.rfind("Run was aborted", 0) == 0) {
      continue;
    }
    line = std::regex_replace(
        line,
        std::regex(
            R"(^client \d+ (script \d+ )?(aborted in command \d+ query \d+|command \d+ query \d+|aborted): )"),
        "");
    line = std::regex_replace(line, std::regex(R"(^ERROR:  )"), "");
    line = std::regex_replace(line, std::regex(R"(^[a-z]+: )"), "");
    // An SQL syntax error's position differs: pgbench sends the ';'.
    line = line.substr(
        0, std::min({line.find(" ("), line.find(" at or near "), line.find(" at end of input")}));
    reasons.push_back(line);
  }
  return reasons.empty() ? "" : reasons.front();
}

Outcome pgbench(const std::string& path, const std::vector<std::string>& flags,
                const std::string& conninfo) {
  std::vector<std::string> argv{"pgbench", "-n"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-f", path, conninfo});
  const auto r = test::run_command(argv);
  Outcome o;
  if (r.exit_status == 1 && r.out.find("transaction type") == std::string::npos) {
    o.refused = true;
    o.message = refusal_reason(r.err);
    return o;
  }
  std::smatch m;
  if (std::regex_search(r.out, m,
                        std::regex(R"(number of transactions actually processed: (\d+)/(\d+))"))) {
    o.succeeded = std::stoll(m[1]);
    o.some_failed = o.succeeded < std::stoll(m[2]);
  }
  if (r.err.find("aborted") != std::string::npos) {
    o.some_failed = true;
    // A transaction counted as processed before its client was aborted
    // (a script that ends inside a transaction) did not succeed.
    if (r.err.find("end of script reached") != std::string::npos) o.succeeded = 0;
  }
  o.debug = debug_values(r.err);
  if (o.some_failed) o.errors.push_back(failure_reason(r.err));
  return o;
}

Outcome stallscope_run(const std::string& path, const std::vector<std::string>& flags,
                       const std::string& conninfo, const test::TempDir& dir) {
  const std::string db = dir.file("run.db");
  std::vector<std::string> argv{test::stallscope_bin(), "run", "-o", db, "-P", "0", conninfo};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-f", path});
  const auto r = test::run_command(argv);
  Outcome o;
  if (r.exit_status == 2) {
    o.refused = true;
    o.message = r.err;
    return o;
  }
  EXPECT_TRUE(r.exit_status == 0 || r.exit_status == 1) << r.err;
  std::smatch m;
  if (std::regex_search(r.out, m, std::regex(R"(transactions: (\d+) \((\d+) failed\))"))) {
    o.succeeded = std::stoll(m[1]) - std::stoll(m[2]);
    o.some_failed = std::stoll(m[2]) > 0;
  } else {
    ADD_FAILURE() << "no transaction count in: " << r.out << r.err;
  }
  o.debug = debug_values(r.err);
  SQLite::Database file(db, SQLite::OPEN_READONLY);
  SQLite::Statement q(file, "SELECT DISTINCT error FROM query_error WHERE error IS NOT NULL");
  while (q.executeStep()) o.errors.push_back(q.getColumn(0).getString());
  return o;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "\n  " + s;
  return out;
}

class PgbenchCompat : public ::testing::TestWithParam<std::string> {};

TEST_P(PgbenchCompat, AgreesWithPgbench) {
  const auto conninfo = test::scratch_conninfo();
  test::psql(conninfo, "DROP FUNCTION IF EXISTS compat_atomic()");
  test::TempDir dir;
  const std::string path = scripts_dir() + "/" + GetParam() + ".sql";
  const auto flags = script_flags(path);
  const Outcome want = pgbench(path, flags, conninfo);
  const Outcome got = stallscope_run(path, flags, conninfo, dir);
  if (want.refused) {
    ASSERT_TRUE(got.refused) << "pgbench refuses it (" << want.message << "), stallscope ran it";
    // pgbench 15 names \gset where it means \aset too.
    const std::string said = std::regex_replace(got.message, std::regex(R"(\\aset)"), "\\gset");
    const std::string bare = want.message.substr(0, want.message.find(" ("));
    EXPECT_TRUE(said.find(want.message) != std::string::npos ||
                said.find(bare) != std::string::npos)
        << "pgbench: " << want.message << "\nstallscope: " << got.message;
    return;
  }
  if (got.refused && want.succeeded == 0 && want.some_failed) {
    // A script that fails every time it runs is refused before the run, for
    // the reason pgbench fails it (docs/pgbench-compat.md: stricter when
    // reading the script).
    for (const auto& reason : want.errors) {
      EXPECT_NE(got.message.find(reason), std::string::npos)
          << "pgbench failed with: " << reason << "\nstallscope refused with: " << got.message;
    }
    return;
  }
  ASSERT_FALSE(got.refused) << "pgbench runs it, stallscope refuses it: " << got.message;
  EXPECT_EQ(got.some_failed, want.some_failed) << joined(got.errors);
  if (!want.some_failed) {
    EXPECT_EQ(got.succeeded, want.succeeded);
  }
  std::vector<std::string> want_debug = want.debug, got_debug = got.debug;
  if (std::find(flags.begin(), flags.end(), "-c") != flags.end()) {
    std::sort(want_debug.begin(), want_debug.end());
    std::sort(got_debug.begin(), got_debug.end());
  }
  // pgbench stops a client at its first failure, stallscope runs them all.
  if (!want.some_failed) {
    EXPECT_EQ(got_debug, want_debug);
  }
  for (const auto& reason : want.errors) {
    EXPECT_TRUE(
        std::any_of(got.errors.begin(), got.errors.end(),
                    [&](const std::string& e) { return e.find(reason) != std::string::npos; }))
        << "pgbench failed with: " << reason << "\nstallscope with:" << joined(got.errors);
  }
}

INSTANTIATE_TEST_SUITE_P(Scripts, PgbenchCompat, ::testing::ValuesIn(script_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace stallscope
