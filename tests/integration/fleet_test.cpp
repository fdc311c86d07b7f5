// docs/fleet.md's SQLite recipe, run as written (the ```sh fleet.sh block)
// on real run files, against explain's figures and against the union of the
// files' query rows read here.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace stallscope {
namespace {

// The lines between "```sh fleet.sh" and the next "```" in docs/fleet.md.
std::string recipe() {
  std::ifstream in(test::source_dir() + "/docs/fleet.md");
  std::string line, out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line == "```sh fleet.sh") {
      inside = true;
    } else if (inside && line == "```") {
      break;
    } else if (inside) {
      out += line + "\n";
    }
  }
  return out;
}

// The latencies of the answered queries (no query_error row), ns.
std::vector<std::int64_t> answered_latencies(const std::string& path) {
  SQLite::Database db(path);
  SQLite::Statement st(db,
                       "SELECT latency_ns FROM query q WHERE NOT EXISTS (SELECT 1 FROM query_error "
                       "e WHERE e.start_ns = q.start_ns AND e.client_id = q.client_id AND e.seq = "
                       "q.seq)");
  std::vector<std::int64_t> out;
  while (st.executeStep()) out.push_back(st.getColumn(0).getInt64());
  return out;
}

// Nearest rank: the ⌈q·n⌉-th smallest.
double percentile_ms(std::vector<std::int64_t> v, int percent) {
  std::sort(v.begin(), v.end());
  const auto rank = (static_cast<std::size_t>(percent) * v.size() + 99) / 100;
  return double(v[rank - 1]) / 1e6;
}

// Every JSON array sqlite3 -json printed (one per statement with rows).
std::vector<nlohmann::json> json_arrays(const std::string& out) {
  std::vector<nlohmann::json> all;
  std::istringstream in(out);
  while ((in >> std::ws) && in.peek() != EOF) {
    nlohmann::json j;
    in >> j;
    all.push_back(std::move(j));
  }
  return all;
}

const nlohmann::json* array_with(const std::vector<nlohmann::json>& arrays, const char* key) {
  for (const auto& a : arrays)
    if (a.is_array() && !a.empty() && a[0].contains(key)) return &a;
  return nullptr;
}

TEST(Fleet, TheDocumentedSqliteRecipeGivesExplainsFiguresAndTheUnionsP99) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  // Two runs of different shapes (clients, statement), each explained once
  // (explain writes its finding and stall rows into the file).
  const std::vector<std::string> files{dir.file("c1.db"), dir.file("c2.db")};
  const std::vector<std::vector<std::string>> shapes{
      {"-c", "1", "--sql", "SELECT 1"},
      {"-c", "3", "--sql", "SELECT count(*) FROM generate_series(1, 2000)"}};
  std::vector<nlohmann::json> explained;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::vector<std::string> argv{
        test::stallscope_bin(), "run", "-o", files[i], conninfo, "-T", "2", "-P", "0"};
    argv.insert(argv.end(), shapes[i].begin(), shapes[i].end());
    const auto r = test::run_command(argv);
    ASSERT_EQ(r.exit_status, 0) << r.err;
    const auto e = test::run_command({test::stallscope_bin(), "explain", "--json", files[i]});
    ASSERT_EQ(e.exit_status, 0) << e.err;
    explained.push_back(nlohmann::json::parse(e.out));
  }
  const auto script = dir.file("fleet.sh");
  std::ofstream(script) << recipe();
  const auto r = test::run_command({"env", "MODE=json", "bash", script, files[0], files[1]});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  const auto arrays = json_arrays(r.out);
  const auto* latency = array_with(arrays, "p99_ms");
  ASSERT_NE(latency, nullptr) << r.out;
  ASSERT_EQ(latency->size(), 3u) << r.out;  // each file, then all together

  std::vector<std::int64_t> all;
  std::vector<double> p99_ms;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& row = (*latency)[i];
    const auto& run = explained[i]["run"];
    EXPECT_EQ(row["file"], files[i]);
    EXPECT_EQ(row["answered"].get<std::int64_t>(),
              run["queries"].get<std::int64_t>() - run["errors"].get<std::int64_t>());
    // explain's p99: the exact one, or above it by at most its histogram
    // bucket (1/512 of a power of two); the recipe rounds to 0.001 ms.
    const double sql_p99 = row["p99_ms"].get<double>();
    const double explain_p99 = run["latency_p99_ms"].get<double>();
    EXPECT_GE(explain_p99, sql_p99 - 0.0006) << files[i];
    EXPECT_LE(explain_p99, sql_p99 * (1 + 1.0 / 512) + 0.0006) << files[i];
    const auto mine = answered_latencies(files[i]);
    EXPECT_NEAR(sql_p99, percentile_ms(mine, 99), 0.0006) << files[i];
    p99_ms.push_back(percentile_ms(mine, 99));
    all.insert(all.end(), mine.begin(), mine.end());
  }
  // All files together: the union's count and exact p99, not an average.
  const auto& fleet = (*latency)[2];
  EXPECT_EQ(fleet["file"], "(all files)");
  EXPECT_EQ(fleet["answered"].get<std::size_t>(), all.size());
  EXPECT_NEAR(fleet["p99_ms"].get<double>(), percentile_ms(all, 99), 0.0006);
  EXPECT_NEAR(fleet["p50_ms"].get<double>(), percentile_ms(all, 50), 0.0006);

  // One row per file: explain's first finding, or null without one.
  const auto* firsts = array_with(arrays, "first_finding");
  ASSERT_NE(firsts, nullptr) << r.out;
  ASSERT_EQ(firsts->size(), files.size()) << r.out;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& row = (*firsts)[i];
    EXPECT_EQ(row["file"], files[i]);
    const auto& findings = explained[i]["findings"];
    EXPECT_EQ(row["first_finding"], findings.empty() ? nlohmann::json() : findings[0]["kind"])
        << files[i];
  }
  // Against the first file (the baseline): the first changes by nothing.
  const auto* change = array_with(arrays, "p99_change_pct");
  ASSERT_NE(change, nullptr) << r.out;
  ASSERT_EQ(change->size(), 2u);
  EXPECT_EQ((*change)[0]["p99_change_pct"].get<double>(), 0.0);
  EXPECT_NEAR((*change)[1]["p99_change_pct"].get<double>(), 100 * p99_ms[1] / p99_ms[0] - 100,
              0.051);
}

// A file it cannot read is named, with exit status 2.
TEST(Fleet, TheRecipeNamesAFileItCannotRead) {
  test::TempDir dir;
  const auto script = dir.file("fleet.sh");
  std::ofstream(script) << recipe();
  const auto r = test::run_command({"bash", script, dir.file("missing.db")});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_NE(r.err.find("cannot read " + dir.file("missing.db")), std::string::npos) << r.err;
}

}  // namespace
}  // namespace stallscope
