// The correlator on hand-made run files with exact numbers (run_fixture.h):
// the text and JSON renderers, escaping, number formats.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/format.h"
#include "correlate/run_fixture.h"
#include "schema/store.h"
#include "support/test_support.h"

namespace stallscope::correlate {
namespace {

using namespace test_run;

TEST(CorrelateRender, JsonHasTheContractShape) {
  Fixture fx;
  fx.host({});
  fx.rows(kDriverId, 100);
  fx.rows(kBackendId[0], 300);
  fx.rows(kBackendId[1], 300);
  fx.ash(kBackendPid[0], "Lock", "tuple", 40);
  auto r = fx.explain();
  auto j = to_json(r);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"accounting", "attribution", "findings", "notes", "run",
                                            "stalls", "verdict", "windows"}));
  EXPECT_EQ(j["run"]["queries"], 20);
  EXPECT_EQ(j["accounting"]["client_ns"], 20 * kS);
  // Back-to-back 1 s queries: the clients were never idle.
  EXPECT_EQ(j["accounting"]["query_ns"], 20 * kS);
  EXPECT_EQ(j["accounting"]["idle_ns"], 0);
  std::int64_t parts_ns = 0;
  for (const auto& p : j["accounting"]["parts"]) parts_ns += p["time_ns"].get<std::int64_t>();
  EXPECT_EQ(parts_ns, 20 * kS);
  EXPECT_EQ(j["windows"][3]["query_time_ns"], 2 * kS);
  // A closed loop's verdict is its first finding.
  EXPECT_EQ(j["verdict"]["kind"], j["findings"][0]["kind"]);
  EXPECT_TRUE(j["verdict"]["reason"].is_null());
  EXPECT_EQ(j["windows"].size(), 10u);
  ASSERT_GE(j["findings"].size(), 2u);
  double prev = 2;
  for (const auto& f : j["findings"]) {
    std::vector<std::string> fk;
    for (auto it = f.begin(); it != f.end(); ++it) fk.push_back(it.key());
    std::sort(fk.begin(), fk.end());
    EXPECT_EQ(fk, (std::vector<std::string>{"culprit", "end_ns", "evidence", "kind", "score",
                                            "start_ns", "suggestion", "summary"}));
    EXPECT_TRUE(f["evidence"].is_object());
    EXPECT_TRUE(f["culprit"].is_null() || f["culprit"].is_string());
    EXPECT_LE(f["score"].get<double>(), prev);
    prev = f["score"].get<double>();
  }
  EXPECT_EQ(j["findings"][0]["kind"], "network_roundtrip");
  EXPECT_EQ(j["findings"][1]["kind"], "server_cpu");
  // No ASH sample caught a backend on CPU with its query: the run's SQL is named.
  EXPECT_EQ(j["findings"][1]["culprit"],
            "SELECT 1 (the run's SQL; ASH caught no backend on CPU with its query)");
  EXPECT_TRUE(j["notes"].is_array());
  EXPECT_FALSE(j["notes"].empty());
  EXPECT_NO_THROW((void)j.dump());
}

TEST(CorrelateRender, TextEscapesControlCharactersInUntrustedNames) {
  Fixture fx;
  fx.host({.user_ms = 1200, .idle_ms = 800});
  fx.rows(kBackendId[0], 100);
  fx.process(30, 300, "pgb\x1b[31mouncer\xff", kT0 - 100 * kS);
  fx.rows(30, 970);
  auto r = fx.explain();
  ASSERT_NE(finding(r, "single_thread"), nullptr);
  std::ostringstream out;
  render_text(r, out);
  const auto text = out.str();
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_NE(text.find("pgb\\x1b[31mouncer"), std::string::npos) << text;
  // The culprit names the process, escaped the same way.
  EXPECT_NE(text.find("culprit: pgb\\x1b[31mouncer"), std::string::npos) << text;
  // JSON stays dumpable: invalid UTF-8 is replaced, ESC is escaped by the dumper.
  auto dumped = to_json(r).dump();
  EXPECT_EQ(dumped.find('\x1b'), std::string::npos);
  EXPECT_NE(dumped.find("\\u001b[31m"), std::string::npos);
}

TEST(CorrelateRender, TextEscapesInvalidUtf8InUntrustedNames) {
  Fixture fx;
  fx.host({.user_ms = 1200, .idle_ms = 800});
  fx.rows(kBackendId[0], 100);
  // A comm with bytes that are not UTF-8 (prctl(PR_SET_NAME) takes any).
  fx.process(30, 300, "pgb\xff\xfeouncer", kT0 - 100 * kS);
  fx.rows(30, 970);
  auto r = fx.explain();
  ASSERT_NE(finding(r, "single_thread"), nullptr);
  std::ostringstream out;
  render_text(r, out);
  const auto text = out.str();
  EXPECT_EQ(text.find('\xff'), std::string::npos) << "raw byte reached the text output";
  EXPECT_NE(text.find("culprit: pgb\\xff\\xfeouncer"), std::string::npos) << text;
  EXPECT_EQ(common::valid_utf8(text), text);
  // JSON: the same name with U+FFFD for each invalid byte.
  const auto dumped = to_json(r).dump();
  EXPECT_NE(dumped.find("pgb\xef\xbf\xbd\xef\xbf\xbdouncer"), std::string::npos);
}

TEST(CorrelateRender, TextHasHeaderWindowsAccountingAndRankedFindings) {
  Fixture fx;
  fx.host({});
  fx.rows(kBackendId[0], 100);
  fx.ash(kBackendPid[0], "Lock", "transactionid", 90);
  fx.ash(kBackendPid[1], "Lock", "transactionid", 90);
  auto r = fx.explain();
  std::ostringstream out;
  render_text(r, out);
  const auto text = out.str();
  EXPECT_NE(text.find("host db1"), std::string::npos);
  EXPECT_NE(text.find("queries   20 (0 errors)"), std::string::npos) << text;
  EXPECT_NE(text.find("time accounting: 20.000 s of query time (Σ latency); 2 clients x 10.000 s "
                      "= 20.000 s of client time, 100.0% of it in queries"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("verdict: lock_wait"), std::string::npos) << text;
  EXPECT_NE(text.find("server wait Lock"), std::string::npos);
  EXPECT_NE(text.find("  1. lock_wait"), std::string::npos) << text;
  EXPECT_NE(text.find("probability"), std::string::npos);  // the ASH sampling note
}

TEST(CorrelateRender, EscapeTextReplacesC0AndC1Controls) {
  EXPECT_EQ(detail::escape_text("a\tb\x7f"), "a\\x09b\\x7f");
  EXPECT_EQ(detail::escape_text("x\xc2\x9b"
                                "1m"),
            "x\\xc2\\x9b1m");
  EXPECT_EQ(detail::escape_text("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(detail::valid_utf8("ok\xff"), "ok\xef\xbf\xbd");
}

TEST(CorrelateFormat, GroupedTextSeparatesThousands) {
  using detail::grouped_text;
  EXPECT_EQ(grouped_text(9840.4), "9,840");
  EXPECT_EQ(grouped_text(999.6), "1,000");
  EXPECT_EQ(grouped_text(12), "12");
  EXPECT_EQ(grouped_text(1234567), "1,234,567");
  EXPECT_EQ(grouped_text(-12345), "-12,345");
  EXPECT_EQ(grouped_text(-0.2), "0");
}

TEST(CorrelateFormat, SqlOneLineCollapsesBlanksAndCutsAtACharacterBoundary) {
  using detail::sql_one_line;
  EXPECT_EQ(sql_one_line("  SELECT *\n\tFROM  t\r\n WHERE id = 1;  "),
            "SELECT * FROM t WHERE id = 1;");
  EXPECT_EQ(sql_one_line("SELECT 1", 8), "SELECT 1");
  EXPECT_EQ(sql_one_line("SELECT 12", 8), "SELECT 1…");
  // "é" is two bytes (C3 A9): a cut inside it goes back to its first byte.
  EXPECT_EQ(sql_one_line("SELECT 'é'", 9), "SELECT '…");
  EXPECT_EQ(sql_one_line("SELECT 'é'", 10), "SELECT 'é…");
  EXPECT_EQ(sql_one_line(" \n "), "");
}

}  // namespace
}  // namespace stallscope::correlate
