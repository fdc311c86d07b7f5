// explain's results in the run file: schema/report_store.h.
#include <string>
#include <vector>

#include <SQLiteCpp/Statement.h>
#include <gtest/gtest.h>

#include "schema/report_store.h"
#include "schema/store.h"

namespace stallscope::schema {
namespace {

// Column name, type, NOT NULL and primary key position, one line per column.
std::string columns(Store& store, const std::string& table) {
  SQLite::Statement st(store.db(), "SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1)");
  st.bind(1, table);
  std::string out;
  while (st.executeStep()) {
    out += st.getColumn(0).getString() + " " + st.getColumn(1).getString() + " " +
           st.getColumn(2).getString() + " " + st.getColumn(3).getString() + "\n";
  }
  return out;
}

TEST(ReportStore, GivesFilesWithoutTheTablesThoseOfTheSchema) {
  auto fresh = Store::create(":memory:");
  auto old = Store::create(":memory:");
  old.db().exec("DROP TABLE finding; DROP TABLE stall");
  ASSERT_EQ(columns(old, "finding"), "");
  const std::vector<FindingRow> findings{
      {"io_wait", 0.5, 10, 20, "summary", R"({"a":1})", "suggestion"}};
  const std::vector<StallRow> stalls{{.window_index = 3,
                                      .start_ns = 10,
                                      .end_ns = 20,
                                      .queries = 7,
                                      .tps = 1.5,
                                      .cause = "lock_wait",
                                      .explanation = "explanation",
                                      .evidence_json = "{}"}};
  replace_findings_and_stalls(old, findings, stalls);
  EXPECT_EQ(columns(old, "finding"), columns(fresh, "finding"));
  EXPECT_EQ(columns(old, "stall"), columns(fresh, "stall"));
  EXPECT_NE(columns(fresh, "stall"), "");
  EXPECT_EQ(old.db().execAndGet("SELECT kind FROM finding WHERE rank = 1").getString(), "io_wait");
  EXPECT_EQ(old.db().execAndGet("SELECT count(*) FROM stall WHERE typical_tps IS NULL").getInt(),
            1);
}

TEST(ReportStore, ReplacesTheRowsOfAnEarlierSave) {
  auto store = Store::create(":memory:");
  const std::vector<FindingRow> two{{"a", 0.5, 0, 1, "", "{}", ""}, {"b", 0.4, 0, 1, "", "{}", ""}};
  replace_findings_and_stalls(store, two, {});
  replace_findings_and_stalls(store, std::vector<FindingRow>(two.begin() + 1, two.end()), {});
  EXPECT_EQ(store.db().execAndGet("SELECT count(*) FROM finding").getInt(), 1);
  EXPECT_EQ(store.db().execAndGet("SELECT kind FROM finding WHERE rank = 1").getString(), "b");
}

}  // namespace
}  // namespace stallscope::schema
