#include "driver/connection.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>

#include "common/conninfo.h"
#include "common/error.h"
#include "common/pg.h"

namespace stallscope::driver::detail {
namespace {

// Error for a statement the server would not prepare, raised by connect().
Error prepare_error(const PGresult* res, const PGconn* conn, Protocol protocol) {
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string message = result_message(res, conn);
  if (!state || PQstatus(conn) == CONNECTION_BAD) {
    return Error(ErrorKind::postgres, fmt::format("cannot prepare SQL: {}", message));
  }
  if (message.find("multiple commands") != std::string::npos) {
    return Error(ErrorKind::usage,
                 fmt::format("cannot prepare SQL: the {} protocol cannot run several statements "
                             "in one string (use -M simple): {}",
                             protocol_name(protocol), message),
                 0, state);
  }
  return Error(ErrorKind::usage, fmt::format("cannot prepare SQL: {}", message), 0, state);
}

}  // namespace

void prepare(PGconn* conn, const char* name, const std::string& sql, Protocol protocol) {
  pg::Result res(PQprepare(conn, name, sql.c_str(), 0, nullptr));
  if (!res || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
    throw prepare_error(res.get(), conn, protocol);
  }
}

void discard_notice(void*, const char*) {}

std::string result_message(const PGresult* res, const PGconn* conn) {
  if (res) {
    if (const char* primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY)) {
      return fold_lines(primary);
    }
    const char* msg = PQresultErrorMessage(res);
    if (msg && *msg) return fold_lines(msg);
  }
  return pg::error_message(conn);
}

void check_sql(PGconn* conn, const std::string& sql, Protocol protocol) {
  prepare(conn, "", sql, protocol);
  pg::Result desc(PQdescribePrepared(conn, ""));
  if (!desc || PQresultStatus(desc.get()) != PGRES_COMMAND_OK) {
    throw prepare_error(desc.get(), conn, protocol);
  }
  if (int n = PQnparams(desc.get()); n > 0) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot prepare SQL: it has {} parameter(s) ($1 …), which the driver "
                            "does not supply",
                            n));
  }
}

void prepare_statements(PGconn* conn, const DriverOptions& o) {
  // A script's commands are prepared on their first use, as pgbench's
  // (Worker::prepare_command): one may need a table an earlier one makes,
  // or sit in an \if branch that never runs. --pipeline sends without
  // waiting, so its one command is prepared here.
  if (!o.scripts.empty() && o.pipeline == 0) return;
  if (o.scripts.empty()) {
    try {
      prepare(conn, kStatementName, o.sql, o.protocol);
    } catch (const Error& e) {
      if (o.sql_origin.empty()) throw;
      throw Error(e.kind(), fmt::format("{}: {}", o.sql_origin, e.what()), 0, e.sqlstate());
    }
    return;
  }
  for (std::size_t s = 0; s < o.scripts.size(); ++s) {
    const auto& cmds = o.scripts[s].commands;
    for (std::size_t k = 0; k < cmds.size(); ++k) {
      if (cmds[k].kind != ScriptCommand::Kind::sql) continue;
      try {
        prepare(conn, script_statement(s, k).c_str(), cmds[k].numbered, o.protocol);
      } catch (const Error& e) {
        throw Error(e.kind(), fmt::format("{}:{}: {}", o.scripts[s].name, cmds[k].line, e.what()),
                    0, e.sqlstate());
      }
    }
  }
}

std::int64_t script_scale(PGconn* conn, const DriverOptions& o) {
  if (o.scale) return *o.scale;
  bool builtin = std::any_of(o.scripts.begin(), o.scripts.end(),
                             [](const Script& s) { return s.name.starts_with("builtin: "); });
  if (!builtin) return 1;
  pg::Result res(PQexec(conn, "SELECT count(*) FROM pgbench_branches"));
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    throw_usage(
        fmt::format("cannot run a built-in script: {} (create the tables with "
                    "'pgbench -i' first)",
                    result_message(res.get(), conn)));
  }
  // count(*) is a bigint, never NULL.
  const std::int64_t n = pg::int64_or_null(res.get(), 0, 0).value_or(0);
  if (n < 1) throw_usage("cannot run a built-in script: pgbench_branches is empty");
  return n;
}

std::optional<LocalAddress> local_address(const pg_conn* conn) {
  const int fd = PQsocket(conn);
  if (fd < 0) return std::nullopt;
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return std::nullopt;
  std::array<char, INET6_ADDRSTRLEN> text{};
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    if (!::inet_ntop(AF_INET, &in.sin_addr, text.data(), text.size())) return std::nullopt;
    return LocalAddress{text.data(), ntohs(in.sin_port)};
  }
  if (addr.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
    if (!::inet_ntop(AF_INET6, &in6.sin6_addr, text.data(), text.size())) return std::nullopt;
    return LocalAddress{text.data(), ntohs(in6.sin6_port)};
  }
  return std::nullopt;  // a Unix socket
}

}  // namespace stallscope::driver::detail
