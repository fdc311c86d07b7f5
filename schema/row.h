// A prepared statement for long streaming scans, read column by column
// without SQLite::Column objects (each copies the statement's shared_ptr and
// checks the row) — the cost that dominates a scan of millions of rows — and
// without <sqlite3.h> outside schema/.
//
//   schema::Cursor q(db, "SELECT start_ns, latency_ns, rows FROM query WHERE start_ns >= ?1");
//   q.bind(1, from_ns);
//   while (q.step()) total_ns += q.int64(1), failed += q.is_null(2);
//
// Column indexes are 0-based and not checked (an index past the last column
// reads as NULL); parameters are 1-based as in SQL. Errors (bad SQL, a failed
// step) throw schema::SqliteError (store.h). Move-only; the destructor
// finalises the statement (before its connection closes).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>

#include "schema/store.h"

struct sqlite3_stmt;

namespace stallscope::schema {

class Cursor {
 public:
  Cursor(SQLite::Database& db, const char* sql);
  Cursor(Cursor&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }
  Cursor& operator=(Cursor&&) = delete;
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;
  ~Cursor();

  void bind(int parameter, std::int64_t value);
  // The text is copied (SQLITE_TRANSIENT).
  void bind(int parameter, std::string_view value);
  void bind_null(int parameter);
  // Next row; false when done.
  bool step();
  // Back to before the first row; bindings stay.
  void reset();

  bool is_null(int column) const;
  // The value as an integer; 0 for NULL (use opt_int64 where NULL matters).
  std::int64_t int64(int column) const;
  std::optional<std::int64_t> opt_int64(int column) const;
  std::optional<int> opt_int(int column) const;  // narrowed: pids, ports, counts
  double real(int column) const;
  // The text, valid until the next step or reset; empty for NULL.
  std::string_view text(int column) const;
  // A copy of the text; nullopt for NULL.
  std::optional<std::string> opt_text(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

namespace detail {

// Runs `f` (SQLiteCpp calls) and turns a SQLite::Exception into the
// SqliteError schema's readers throw, so that no caller outside schema/
// needs SQLiteCpp's types.
template <class F>
decltype(auto) sqlite_call(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const SQLite::Exception& e) {
    throw SqliteError(e.what(), e.getExtendedErrorCode());
  }
}

// Whether the file has `table`: readers of tables added after a file was
// written read a file without them as one without their rows.
inline bool table_exists(Store& store, const char* table) {
  return sqlite_call([&] { return store.db().tableExists(table); });
}

// Whether `table` has `column` (a column added to a table after files were
// written with it): readers read a file without it as one without its values.
inline bool column_exists(Store& store, const char* table, const char* column) {
  return sqlite_call([&] {
    SQLite::Statement st(store.db(), "SELECT 1 FROM pragma_table_info(?) WHERE name = ?");
    st.bind(1, table);
    st.bind(2, column);
    return st.executeStep();
  });
}

}  // namespace detail

}  // namespace stallscope::schema
