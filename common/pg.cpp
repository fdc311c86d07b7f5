#include "common/pg.h"

#include <libpq-fe.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/units.h"

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

namespace {

// How the conninfo is named in errors: masked, or the environment's server.
std::string shown_conninfo(const std::string& conninfo) {
  return conninfo.empty() ? std::string("the default server (PG* environment)")
                          : fmt::format("'{}'", mask_conninfo(conninfo));
}

// The connect_timeout libpq settled on for `conn` (conninfo, else
// PGCONNECT_TIMEOUT, else ours), s; 0 = none.
int effective_connect_timeout_s(PGconn* conn) {
  int timeout_s = 0;
  if (PQconninfoOption* opts = PQconninfo(conn)) {
    for (PQconninfoOption* o = opts; o->keyword; ++o) {
      if (std::strcmp(o->keyword, "connect_timeout") == 0 && o->val && *o->val) {
        timeout_s = static_cast<int>(common::parse_int64(o->val).value_or(0));
      }
    }
    PQconninfoFree(opts);
  }
  if (timeout_s <= 0) return 0;
  return std::max(timeout_s, 2);  // libpq: "a value of 1 is interpreted as 2"
}

}  // namespace

Conn connect(const std::string& conninfo, const std::string& application_name,
             const ConnectControl& control) {
  std::vector<const char*> keys;
  std::vector<const char*> values;
  const char* env_timeout = std::getenv("PGCONNECT_TIMEOUT");
  const std::string default_timeout = std::to_string(kDefaultConnectTimeoutS);
  if (!conninfo_value(conninfo, "connect_timeout") && (!env_timeout || !*env_timeout)) {
    keys.push_back("connect_timeout");
    values.push_back(default_timeout.c_str());
  }
  keys.push_back("dbname");
  values.push_back(conninfo.c_str());
  if (!application_name.empty()) {
    keys.push_back("application_name");
    values.push_back(application_name.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  // expand_dbname=1: the dbname value is parsed as a full conninfo/URI.
  Conn conn(PQconnectStartParams(keys.data(), values.data(), 1));
  auto failed = [&](const std::string& why, ErrorKind kind = ErrorKind::postgres) {
    return Error(kind, fmt::format("cannot connect to {}: {}", shown_conninfo(conninfo),
                                   mask_conninfo_message(why, conninfo)));
  };
  if (!conn || PQstatus(conn.get()) == CONNECTION_BAD) throw failed(error_message(conn.get()));
  const int timeout_s = effective_connect_timeout_s(conn.get());
  const std::int64_t start_ns = mono_now_ns();
  // As libpq's own loop: after PQconnectStart, poll as if it said WRITING.
  PostgresPollingStatusType state = PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK) {
    if (state == PGRES_POLLING_FAILED) throw failed(error_message(conn.get()));
    pollfd pfd{.fd = PQsocket(conn.get()),
               .events = static_cast<short>(state == PGRES_POLLING_READING ? POLLIN : POLLOUT),
               .revents = 0};
    if (pfd.fd < 0) throw failed(error_message(conn.get()));
    for (;;) {
      if (control.stop.stop_requested()) throw failed("interrupted", ErrorKind::runtime);
      const std::int64_t now_ns = mono_now_ns();
      if (control.deadline_mono_ns && now_ns >= *control.deadline_mono_ns) {
        throw failed("interrupted", ErrorKind::runtime);
      }
      if (timeout_s > 0 && now_ns - start_ns >= timeout_s * common::kNsPerS) {
        throw failed(fmt::format("timeout expired after {} s (connect_timeout)", timeout_s));
      }
      const int ready = ::poll(&pfd, 1, static_cast<int>(kConnectSliceNs / common::kNsPerMs));
      if (ready > 0) break;
      if (ready < 0 && errno != EINTR) throw failed(std::strerror(errno));
    }
    state = PQconnectPoll(conn.get());
  }
  return conn;
}

void abort_socket(pg_conn* conn) noexcept {
  if (const int fd = conn ? PQsocket(conn) : -1; fd >= 0) ::shutdown(fd, SHUT_RDWR);
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
