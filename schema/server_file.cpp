// A server record file attached to a client run file's connection, its
// tables shadowed by clock-shifted temporary views.
#include "schema/server_file.h"

#include "schema/row.h"

#include <sqlite3.h>

#include <functional>
#include <set>
#include <string>
#include <string_view>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>

namespace stallscope::schema {
namespace {

// Tables (and views) of the server file that explain reads; each is shadowed
// by a temporary view of the attached file while the server-side pass runs.
constexpr const char* kServerTables[] = {
    "sample", "host_sample", "process", "process_sample", "pg_activity_sample", "ash_tick",
    "cgroup_sample", "pg_query_text", "thread_sample", "host_memory_sample", "disk_sample",
    // The stored forms behind the process_sample and thread_sample views,
    // which explain's process scan (schema/process_scan.h) reads directly.
    "process_tick", "process_io_sample", "wchan", "thread_tick", "thread_comm"};

// Wall-clock columns of the server tables (points in time, not durations):
// the views shift these to the client's clock.
bool is_time_column(std::string_view table, std::string_view column) {
  if (table == "sample" || table == "ash_tick") return column == "time_ns";
  if (table == "process") return column == "start_ns";
  if (table == "pg_query_text") return column == "first_time_ns";
  if (table == "pg_activity_sample") {
    return column == "time_ns" || column == "backend_start_ns" || column == "xact_start_ns" ||
           column == "query_start_ns" || column == "state_change_ns";
  }
  return false;
}

// `shift` as SQL over `column` (NULL stays NULL).
std::string shifted_sql(const ClockShift& shift, const std::string& column) {
  const auto& m = shift.boundaries_ns;
  const auto& o = shift.offsets_ns;
  if (o.empty()) return column;
  if (o.size() == 1) return fmt::format("({} - ({}))", column, o[0]);
  std::string sql = "(CASE";
  for (std::size_t i = 0; i < m.size(); ++i) {
    sql += fmt::format(" WHEN {0} < {1} THEN {0} - ({2})", column, m[i], o[i]);
  }
  sql += fmt::format(" ELSE {} - ({}) END)", column, o.back());
  return sql;
}

}  // namespace

std::vector<ClockOffset> clock_offsets(Store& store) {
  std::vector<ClockOffset> out;
  Cursor st(store.db(),
            "SELECT time_ns, offset_ns, uncertainty_ns FROM main.clock_offset ORDER BY time_ns");
  while (st.step()) out.push_back({st.int64(0), st.int64(1), st.int64(2)});
  return out;
}

AttachedServerFile::AttachedServerFile(Store& store, const std::string& path) : store_(store) {
  // Read-only, as Store::open_readonly reads a file: nothing is written
  // into it, and no -wal or -shm file is left beside it.
  auto attach = [&](const std::string& uri) {
    SQLite::Statement st(store_.db(), "ATTACH DATABASE ?1 AS srv");
    st.bind(1, uri);
    st.exec();
    // The first read opens the WAL index, if any.
    store_.db().execAndGet("SELECT count(*) FROM srv.sqlite_master");
  };
  auto detach = [&] {
    try {
      store_.db().exec("DETACH DATABASE srv");
    } catch (const SQLite::Exception&) {
    }
  };
  detail::sqlite_call([&] {
    try {
      attach(detail::readonly_uri(path));
      return;
    } catch (const SQLite::Exception& e) {
      if (!detail::is_place_error(e.getErrorCode())) throw;
      detach();
    }
    // Its WAL read through an index in the connection's memory, as
    // Store::open_readonly does: srv is in EXCLUSIVE locking mode from its
    // first read (ATTACH reads its schema), the default for databases
    // attached later; the run file's own mode is kept.
    auto& db = store_.db();
    const std::string main_mode = db.execAndGet("PRAGMA main.locking_mode").getString();
    try {
      db.exec("PRAGMA locking_mode=EXCLUSIVE");
      db.exec(fmt::format("PRAGMA main.locking_mode={}", main_mode));
      attach(detail::private_wal_index_uri(path));
      db.exec(fmt::format("PRAGMA locking_mode={}", main_mode));  // srv's cannot change now
      return;
    } catch (const SQLite::Exception& e) {
      db.exec(fmt::format("PRAGMA locking_mode={}", main_mode));
      if (!detail::is_place_error(e.getErrorCode())) throw;
      detach();
    }
    // The -wal file cannot be read either: immutable, without its commits.
    attach(detail::immutable_uri(path));
  });
}

AttachedServerFile::~AttachedServerFile() {
  auto& db = store_.db();
  for (const char* t : kServerTables) {
    try {
      db.exec(fmt::format("DROP VIEW IF EXISTS temp.{}", t));
    } catch (...) {
    }
  }
  try {
    db.exec("DETACH DATABASE srv");
  } catch (...) {
  }
}

std::optional<SampleSpan> AttachedServerFile::sample_span() {
  Cursor st(store_.db(), "SELECT min(time_ns), max(time_ns) FROM srv.sample");
  if (!st.step() || st.is_null(0)) return std::nullopt;
  return SampleSpan{st.int64(0), st.int64(1)};
}

std::string AttachedServerFile::host() {
  return detail::sqlite_call(
      [&] { return store_.db().execAndGet("SELECT host FROM srv.run").getString(); });
}

std::string AttachedServerFile::kernel() {
  return detail::sqlite_call(
      [&] { return store_.db().execAndGet("SELECT kernel FROM srv.run").getString(); });
}

int AttachedServerFile::cores() {
  return detail::sqlite_call([&] {
    return static_cast<int>(store_.db().execAndGet("SELECT cores FROM srv.run").getInt64());
  });
}

void AttachedServerFile::shadow_tables(const ClockShift& shift) {
  detail::sqlite_call([&] { shadow_tables_sqlite(shift); });
}

void AttachedServerFile::shadow_tables_sqlite(const ClockShift& shift) {
  auto& db = store_.db();
  std::set<std::string, std::less<>> present;  // srv's tables and views
  SQLite::Statement names(db, "SELECT name FROM srv.sqlite_master WHERE type IN ('table', 'view')");
  while (names.executeStep()) present.insert(names.getColumn(0).getString());
  for (const char* t : kServerTables) {
    if (!present.contains(std::string_view(t))) continue;
    std::string columns;
    SQLite::Statement info(db, "SELECT name FROM pragma_table_info(?1, 'srv') ORDER BY cid");
    info.bind(1, t);
    while (info.executeStep()) {
      const auto name = info.getColumn(0).getString();
      if (!columns.empty()) columns += ", ";
      columns += is_time_column(t, name)
                     ? fmt::format("{} AS \"{}\"", shifted_sql(shift, "\"" + name + "\""), name)
                     : "\"" + name + "\"";
    }
    db.exec(fmt::format("CREATE TEMP VIEW {0} AS SELECT {1} FROM srv.{0}", t, columns));
  }
}

}  // namespace stallscope::schema
