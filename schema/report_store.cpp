// Writing explain's findings and stalls into the run file.
#include "schema/report_store.h"

#include <stdexcept>
#include <string_view>

#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <SQLiteCpp/VariadicBind.h>

#include "schema/bind.h"
#include "schema/schema_sql.h"

namespace stallscope::schema {
using detail::bind_opt;
namespace {

// The tables explain writes are the last statements of schema/v1.sql, each
// CREATE TABLE IF NOT EXISTS: that tail of the schema, applied again, gives
// files written before they existed the same tables.
std::string_view report_tables_sql() {
  constexpr std::string_view schema = kSchemaV1Sql;
  const auto at = schema.find("CREATE TABLE IF NOT EXISTS finding");
  if (at == std::string_view::npos) {
    throw std::logic_error("schema/v1.sql has no CREATE TABLE IF NOT EXISTS finding");
  }
  return schema.substr(at);
}

void replace_rows(SQLite::Database& db, std::span<const FindingRow> findings,
                  std::span<const StallRow> stalls) {
  SQLite::Transaction tx(db);
  // Derived rows, replaced whole: dropped and created again, so a file
  // explained by an older stallscope gets today's columns.
  db.exec("DROP TABLE IF EXISTS finding");
  db.exec("DROP TABLE IF EXISTS stall");
  db.exec(std::string(report_tables_sql()));
  SQLite::Statement f(db,
                      "INSERT INTO finding ("
                      "rank, kind, score, start_ns, end_ns, summary, evidence,"
                      " suggestion, culprit) VALUES (?,?,?,?,?,?,?,?,?)");
  int rank = 1;
  for (const auto& x : findings) {
    SQLite::bind(f, rank++, x.kind, x.score, x.start_ns, x.end_ns, x.summary, x.evidence_json,
                 x.suggestion);
    bind_opt(f, 9, x.culprit);
    f.exec();
    f.reset();
  }
  SQLite::Statement s(db,
                      "INSERT INTO stall ("
                      "stall_id, window_index, start_ns, end_ns, queries, tps,"
                      " typical_tps, latency_mean_ms, typical_latency_mean_ms,"
                      " latency_max_ms, tps_z, latency_z, cause, explanation,"
                      " evidence, culprit) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  int id = 1;
  for (const auto& x : stalls) {
    s.bind(1, id++);
    s.bind(2, x.window_index);
    s.bind(3, x.start_ns);
    s.bind(4, x.end_ns);
    s.bind(5, x.queries);
    bind_opt(s, 6, x.tps);
    bind_opt(s, 7, x.typical_tps);
    bind_opt(s, 8, x.latency_mean_ms);
    bind_opt(s, 9, x.typical_latency_mean_ms);
    bind_opt(s, 10, x.latency_max_ms);
    bind_opt(s, 11, x.tps_z);
    bind_opt(s, 12, x.latency_z);
    s.bind(13, x.cause);
    s.bind(14, x.explanation);
    s.bind(15, x.evidence_json);
    bind_opt(s, 16, x.culprit);
    s.exec();
    s.reset();
  }
  tx.commit();
}

}  // namespace

void replace_findings_and_stalls(Store& store, std::span<const FindingRow> findings,
                                 std::span<const StallRow> stalls) {
  detail::sqlite_call([&] { replace_rows(store.db(), findings, stalls); });
}

void set_busy_timeout(Store& store, int timeout_ms) {
  detail::sqlite_call([&] { store.db().setBusyTimeout(timeout_ms); });
}

}  // namespace stallscope::schema
