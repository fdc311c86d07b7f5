#include "common/pg.h"

#include <libpq-fe.h>

#include <vector>

#include <fmt/format.h>

#include "common/conninfo.h"
#include "common/error.h"
#include "common/parse.h"

namespace stallscope::pg {

void ConnDeleter::operator()(pg_conn* c) const noexcept {
  PQfinish(c);
}
void ResultDeleter::operator()(pg_result* r) const noexcept {
  PQclear(r);
}

std::string error_message(const pg_conn* conn) {
  return fold_lines(conn ? PQerrorMessage(conn) : "out of memory");
}

int backend_pid(const pg_conn* conn) {
  return PQbackendPID(conn);
}

std::optional<std::string> text_or_null(const pg_result* res, int row, int col) {
  if (col < 0 || PQgetisnull(res, row, col)) return std::nullopt;
  return std::string(PQgetvalue(res, row, col),
                     static_cast<std::size_t>(PQgetlength(res, row, col)));
}

std::optional<std::int64_t> int64_or_null(const pg_result* res, int row, int col) {
  if (col < 0 || PQgetisnull(res, row, col)) return std::nullopt;
  return common::parse_int64(PQgetvalue(res, row, col));
}

std::optional<std::int64_t> affected_rows(const pg_result* res) {
  // PQcmdTuples takes a non-const PGresult* but does not modify it.
  return common::parse_int64(PQcmdTuples(const_cast<pg_result*>(res)));
}

Conn connect(const std::string& conninfo, const std::string& application_name) {
  std::vector<const char*> keys{"dbname"};
  std::vector<const char*> values{conninfo.c_str()};
  if (!application_name.empty()) {
    keys.push_back("application_name");
    values.push_back(application_name.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  // expand_dbname=1: the first dbname value is parsed as a full conninfo/URI.
  Conn conn(PQconnectdbParams(keys.data(), values.data(), 1));
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    std::string shown = conninfo.empty() ? std::string("the default server (PG* environment)")
                                         : fmt::format("'{}'", mask_conninfo(conninfo));
    throw Error(ErrorKind::postgres,
                fmt::format("cannot connect to {}: {}", shown, error_message(conn.get())));
  }
  return conn;
}

Result exec(pg_conn* conn, const std::string& sql, const std::string& what) {
  Result res(PQexec(conn, sql.c_str()));
  auto status = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    const char* state = res ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE) : nullptr;
    throw Error(ErrorKind::postgres, fmt::format("cannot run {}: {}", what, error_message(conn)), 0,
                state ? state : "");
  }
  return res;
}

}  // namespace stallscope::pg
