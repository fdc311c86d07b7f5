// save_report: explain's results into the run file (tables finding, stall).
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <fmt/format.h>

#include "common/error.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"

namespace stallscope::correlate {

void save_report(schema::Store& store, const Report& report) {
  using namespace detail;
  auto& db = store.db();
  try {
    SQLite::Transaction tx(db);
    // Files written before these tables existed get them here; the
    // definitions are those of schema/v1.sql.
    db.exec(
        "CREATE TABLE IF NOT EXISTS finding (rank INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
        "score REAL NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, summary TEXT "
        "NOT NULL, evidence TEXT NOT NULL, suggestion TEXT NOT NULL)");
    db.exec(
        "CREATE TABLE IF NOT EXISTS stall (stall_id INTEGER PRIMARY KEY, window_index INTEGER NOT "
        "NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, queries INTEGER NOT NULL, tps "
        "REAL, typical_tps REAL, latency_mean_ms REAL, typical_latency_mean_ms REAL, "
        "latency_max_ms REAL, tps_z REAL, latency_z REAL, cause TEXT NOT NULL, explanation TEXT "
        "NOT NULL, evidence TEXT NOT NULL)");
    db.exec("DELETE FROM finding");
    db.exec("DELETE FROM stall");
    SQLite::Statement f(db, "INSERT INTO finding VALUES (?,?,?,?,?,?,?,?)");
    int rank = 1;
    for (const auto& x : report.findings) {
      f.bind(1, rank++);
      f.bind(2, x.kind);
      f.bind(3, x.score);
      f.bind(4, static_cast<std::int64_t>(x.start_ns));
      f.bind(5, static_cast<std::int64_t>(x.end_ns));
      f.bind(6, x.summary);
      f.bind(7, evidence_json(x.evidence).dump());
      f.bind(8, x.suggestion);
      f.exec();
      f.reset();
    }
    SQLite::Statement s(db, "INSERT INTO stall VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    auto opt = [&](int i, const std::optional<double>& v) {
      if (v) {
        s.bind(i, *v);
      } else {
        s.bind(i);
      }
    };
    int id = 1;
    for (const auto& x : report.stalls) {
      s.bind(1, id++);
      s.bind(2, static_cast<std::int64_t>(x.window_index));
      s.bind(3, static_cast<std::int64_t>(x.start_ns));
      s.bind(4, static_cast<std::int64_t>(x.end_ns));
      s.bind(5, static_cast<std::int64_t>(x.queries));
      opt(6, x.tps);
      opt(7, x.typical_tps);
      opt(8, x.latency_mean_ms);
      opt(9, x.typical_latency_mean_ms);
      opt(10, x.latency_max_ms);
      opt(11, x.tps_z);
      opt(12, x.latency_z);
      s.bind(13, x.cause);
      s.bind(14, x.explanation);
      s.bind(15, evidence_json(x.evidence).dump());
      s.exec();
      s.reset();
    }
    tx.commit();
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite,
                fmt::format("cannot save explain's results into {}: {}", store.path(), e.what()),
                e.getExtendedErrorCode());
  }
}

}  // namespace stallscope::correlate
