// Move-only RAII owners of libpq handles, shared by the ASH sampler and the
// driver. libpq's own types stay out of this header: `pg_conn` / `pg_result`
// are the struct tags libpq's PGconn / PGresult typedefs name, so .cpp files
// that include <libpq-fe.h> get the real types from .get().
#pragma once

#include <memory>
#include <string>

struct pg_conn;
struct pg_result;

namespace stallscope::pg {

struct ConnDeleter {
  void operator()(pg_conn* c) const noexcept;  // PQfinish
};
struct ResultDeleter {
  void operator()(pg_result* r) const noexcept;  // PQclear
};

// Owns a PGconn; PQfinish on destruction. Moving empties the source.
using Conn = std::unique_ptr<pg_conn, ConnDeleter>;
// Owns a PGresult; PQclear on destruction. Moving empties the source.
using Result = std::unique_ptr<pg_result, ResultDeleter>;

// Opens a blocking connection with PQconnectdb. `conninfo` is anything libpq
// accepts (key=value or URI; empty = PG* environment and defaults).
// `application_name` is set unless empty (it overrides one in conninfo).
// Throws Error(postgres): "cannot connect to <masked conninfo>: <libpq message>".
Conn connect(const std::string& conninfo, const std::string& application_name);

// Runs `sql` with PQexec and returns its result; throws Error(postgres) with
// the SQLSTATE and "cannot run <what>: <message>" unless the status is
// PGRES_COMMAND_OK or PGRES_TUPLES_OK.
Result exec(pg_conn* conn, const std::string& sql, const std::string& what);

// libpq's last error message for `conn`, on one line (trailing newline and
// inner line breaks folded to "; ").
std::string error_message(const pg_conn* conn);

// Server-side pid of the backend serving `conn` (PQbackendPID).
int backend_pid(const pg_conn* conn);

}  // namespace stallscope::pg
