// libpq set-up that every driver connection shares: checking and preparing
// the SQL, the value of :scale, the message of a failed result, and the
// names and SQLSTATEs the driver uses. Internal to driver/; libpq's types
// appear only by their struct tags (pg_conn, pg_result), as in common/pg.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "driver/driver.h"

struct pg_conn;
struct pg_result;

namespace stallscope::driver::detail {

// Prepared mode: the name of the single --sql statement.
inline constexpr const char* kStatementName = "stallscope";

// SQLSTATEs for failures libpq reports without one.
inline constexpr const char* kConnectionFailure = "08006";
inline constexpr const char* kInternalError = "XX000";
inline constexpr const char* kQueryCanceled = "57014";
// The failures --max-tries retries, as pgbench's.
inline constexpr const char* kSerializationFailure = "40001";
inline constexpr const char* kDeadlockDetected = "40P01";

// Prepared mode: the name of SQL command `command` of script `script`
// (inline: formatted for each such command sent).
inline std::string script_statement(std::size_t script, std::size_t command) {
  return fmt::format("stallscope_{}_{}", script, command);
}

// A PQnoticeProcessor that drops server notices (e.g. "there is no
// transaction in progress"), which would go to stderr once per transaction.
void discard_notice(void*, const char*);

// The message of a failed result: the server's primary message when there is
// one, else libpq's text, else the connection's last error.
std::string result_message(const pg_result* res, const pg_conn* conn);

// Checks once, before the run, that the extended protocol can run `sql`
// without parameters: parses it as the unnamed statement and describes it.
// Throws Error(usage) (or Error(postgres) for a lost connection).
void check_sql(pg_conn* conn, const std::string& sql, Protocol protocol);

// Prepares `sql` as statement `name` on `conn`. Throws Error with the
// server's SQLSTATE (kind usage: the SQL was refused; postgres: the
// connection failed), "cannot prepare SQL: …".
void prepare(pg_conn* conn, const char* name, const std::string& sql, Protocol protocol);

// Prepared mode: prepares what each transaction runs on `conn` before the
// run — the single SQL, or with --pipeline every SQL command of every script
// (named "FILE:LINE: " in the error); a script's commands are otherwise
// prepared on their first use (Worker::prepare_command). Throws as check_sql.
void prepare_statements(pg_conn* conn, const DriverOptions& o);

// The client end of a connection's TCP socket: its address (inet_ntop:
// "10.231.1.2", "::1") and port, what the server's pg_stat_activity shows
// as client_addr and client_port. nullopt for a Unix socket, or when
// getsockname fails.
struct LocalAddress {
  std::string addr;
  int port = 0;
};
std::optional<LocalAddress> local_address(const pg_conn* conn);

// The value of :scale: -s if given; for pgbench's built-in scripts the
// number of pgbench_branches rows (as pgbench finds it); else 1. Throws
// Error(usage) when the built-ins' tables are missing or empty.
std::int64_t script_scale(pg_conn* conn, const DriverOptions& o);

}  // namespace stallscope::driver::detail
