// Cursor: sqlite3_prepare_v2 / sqlite3_step / sqlite3_column_* directly.
#include "schema/row.h"

#include <sqlite3.h>

namespace stallscope::schema {
namespace {

[[noreturn]] void throw_error(sqlite3* db) {
  throw SqliteError(sqlite3_errmsg(db), sqlite3_extended_errcode(db));
}

}  // namespace

Cursor::Cursor(SQLite::Database& db, const char* sql) : db_(db.getHandle()) {
  const int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt_, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt_);
    stmt_ = nullptr;
    throw_error(db_);
  }
}

Cursor::~Cursor() {
  sqlite3_finalize(stmt_);  // a no-op on nullptr (moved from)
}

void Cursor::bind(int parameter, std::int64_t value) {
  if (const int rc = sqlite3_bind_int64(stmt_, parameter, value); rc != SQLITE_OK) throw_error(db_);
}

void Cursor::bind(int parameter, std::string_view value) {
  if (const int rc = sqlite3_bind_text(stmt_, parameter, value.data(),
                                       static_cast<int>(value.size()), SQLITE_TRANSIENT);
      rc != SQLITE_OK)
    throw_error(db_);
}

void Cursor::bind_null(int parameter) {
  if (const int rc = sqlite3_bind_null(stmt_, parameter); rc != SQLITE_OK) throw_error(db_);
}

bool Cursor::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_error(db_);
}

void Cursor::reset() {
  sqlite3_reset(stmt_);
}

bool Cursor::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::int64_t Cursor::int64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

std::optional<std::int64_t> Cursor::opt_int64(int column) const {
  if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(stmt_, column);
}

std::optional<int> Cursor::opt_int(int column) const {
  if (auto v = opt_int64(column)) return static_cast<int>(*v);
  return std::nullopt;
}

double Cursor::real(int column) const {
  return sqlite3_column_double(stmt_, column);
}

std::string_view Cursor::text(int column) const {
  const auto* p = sqlite3_column_text(stmt_, column);
  if (p == nullptr) return {};
  return {reinterpret_cast<const char*>(p),
          static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column))};
}

std::optional<std::string> Cursor::opt_text(int column) const {
  if (is_null(column)) return std::nullopt;
  return std::string(text(column));
}

}  // namespace stallscope::schema
