// Move-only RAII owners of libpq handles and the one way to read a result's
// values, shared by the ASH and pooler samplers and the driver. libpq's own types stay out of this
// header: `pg_conn` / `pg_result` are the struct tags libpq's PGconn / PGresult typedefs name, so
// .cpp files that include <libpq-fe.h> get the real types from .get().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/stop.h"
#include "common/units.h"

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

// connect_timeout (s) used when neither the conninfo nor PGCONNECT_TIMEOUT
// sets one: a server that accepts and never answers fails a connect after
// this long instead of holding it for minutes.
inline constexpr int kDefaultConnectTimeoutS = 10;
// How often a connect in progress looks at its stop token and deadline.
inline constexpr std::int64_t kConnectSliceNs = 50 * common::kNsPerMs;

// What may end a connect before libpq does.
struct ConnectControl {
  // Requested (SIGINT/SIGTERM for the global token): the connect ends at
  // once (within kConnectSliceNs).
  StopToken stop = global_stop_token();
  // CLOCK_MONOTONIC ns: the caller's own limit (e.g. record's -T end).
  std::optional<std::int64_t> deadline_mono_ns;
};

// Opens a connection (PQconnectStartParams, then PQconnectPoll with poll()
// in slices of kConnectSliceNs, so a stop request or the deadline ends it at
// once). `conninfo` is anything libpq accepts (key=value or URI; empty = PG*
// environment and defaults). `application_name` is set unless empty (it
// overrides one in conninfo). connect_timeout is kDefaultConnectTimeoutS
// unless the conninfo or PGCONNECT_TIMEOUT sets it (≤ 0: no limit; 1 counts
// as 2, as in libpq); it bounds the whole connect (all hosts of a multi-host
// conninfo together).
// Throws Error(postgres) "cannot connect to <masked conninfo>: <libpq
// message>" (or "…: timeout expired after N s (connect_timeout)"), and
// Error(runtime) "cannot connect to <masked conninfo>: interrupted" when
// `control` ended it.
Conn connect(const std::string& conninfo, const std::string& application_name,
             const ConnectControl& control = {});

// Shuts `conn`'s socket down (shutdown(2), both ways), so that a call
// blocked on it in another thread — PQexec waiting for a server that stopped
// answering — fails at once ("server closed the connection unexpectedly");
// the connection is unusable after. For stop() of a polling thread; the
// caller keeps `conn` alive meanwhile (a lock against its owner's PQfinish).
void abort_socket(pg_conn* conn) noexcept;

// Runs `sql` with PQexec and returns its result; throws Error(postgres) with
// the SQLSTATE and "cannot run <what>: <message>" unless the status is
// PGRES_COMMAND_OK or PGRES_TUPLES_OK.
Result exec(pg_conn* conn, const std::string& sql, const std::string& what);

// libpq's last error message for `conn`, on one line (trailing newline and
// inner line breaks folded to "; ").
std::string error_message(const pg_conn* conn);

// Server-side pid of the backend serving `conn` (PQbackendPID).
int backend_pid(const pg_conn* conn);

// The one way to read a result value that may be NULL. `col` < 0 (e.g. a
// PQfnumber miss: a column this server version lacks) reads as NULL too.
//
//   auto pid = pg::int64_or_null(res.get(), row, 0);   // nullopt: NULL or not an integer
//   auto name = pg::text_or_null(res.get(), row, 1);
//
// The text of the value, or nullopt when it is NULL.
std::optional<std::string> text_or_null(const pg_result* res, int row, int col);
// The integer the whole value spells (common/parse.h), or nullopt when it is
// NULL or not an integer — never 0 for garbage.
std::optional<std::int64_t> int64_or_null(const pg_result* res, int row, int col);
// Rows a command affected (PQcmdTuples), or nullopt for a command that
// reports none (e.g. CREATE TABLE, whose PQcmdTuples is "").
std::optional<std::int64_t> affected_rows(const pg_result* res);

}  // namespace stallscope::pg
