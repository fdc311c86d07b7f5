#include "support/test_support.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

extern char** environ;

namespace stallscope::test {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "stallscope-test.XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create temp dir");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::function<void(schema::Batch)> Collected::sink() {
  return [this](schema::Batch b) {
    std::lock_guard lock(mu_);
    ++batches_;
    auto move_into = [](auto& into, auto& from) {
      for (auto& row : from) into.push_back(std::move(row));
    };
    move_into(all_.clients, b.clients);
    move_into(all_.queries, b.queries);
    move_into(all_.query_errors, b.query_errors);
    move_into(all_.query_skips, b.query_skips);
    move_into(all_.query_unfinished, b.query_unfinished);
    move_into(all_.ash_ticks, b.ash_ticks);
    move_into(all_.pg_activity, b.pg_activity);
    move_into(all_.pg_stats.settings, b.pg_stats.settings);
    move_into(all_.pg_stats.samples, b.pg_stats.samples);
    move_into(all_.pg_stats.replication, b.pg_stats.replication);
    move_into(all_.pg_stats.statements, b.pg_stats.statements);
    move_into(all_.pg_sessions, b.pg_sessions);
    move_into(all_.pg_session_idles, b.pg_session_idles);
  };
}

int Collected::batches() const {
  std::lock_guard lock(mu_);
  return batches_;
}

std::vector<Transaction> Collected::queries() const {
  std::vector<Transaction> out;
  {
    std::lock_guard lock(mu_);
    std::map<std::tuple<std::int64_t, int, std::int64_t>, const schema::QueryErrorRow*> errors;
    for (const auto& e : all_.query_errors) errors[{e.start_ns, e.client_id, e.seq}] = &e;
    for (const auto& q : all_.queries) {
      Transaction t;
      static_cast<schema::QueryRow&>(t) = q;
      if (auto it = errors.find({q.start_ns, q.client_id, q.seq}); it != errors.end()) {
        t.sqlstate = it->second->sqlstate;
        t.error = it->second->error;
        errors.erase(it);
      }
      out.push_back(std::move(t));
    }
    EXPECT_TRUE(errors.empty()) << errors.size() << " query_error rows without their query";
    for (const auto& k : all_.query_skips) {
      Transaction t;
      t.client_id = k.client_id;
      t.seq = k.seq;
      t.start_ns = k.start_ns;
      t.latency_ns = k.lag_ns;
      t.lag_ns = k.lag_ns;
      t.skipped = true;
      out.push_back(std::move(t));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.client_id != b.client_id ? a.client_id < b.client_id : a.seq < b.seq;
  });
  return out;
}

std::vector<Transaction> Collected::queries(int client_id) const {
  std::vector<Transaction> out;
  for (auto& q : queries()) {
    if (q.client_id == client_id) out.push_back(std::move(q));
  }
  return out;
}

std::map<int, std::vector<Transaction>> Collected::by_client() const {
  std::map<int, std::vector<Transaction>> out;
  for (auto& q : queries()) out[q.client_id].push_back(std::move(q));
  return out;
}

std::vector<schema::ClientRow> Collected::clients() const {
  std::lock_guard lock(mu_);
  return all_.clients;
}

std::vector<schema::QueryUnfinishedRow> Collected::unfinished() const {
  std::lock_guard lock(mu_);
  auto rows = all_.query_unfinished;
  std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
    return std::pair(x.client_id, x.seq) < std::pair(y.client_id, y.seq);
  });
  return rows;
}

std::optional<int> Collected::backend_pid(const schema::QueryRow& q) const {
  if (!q.connection) return std::nullopt;
  std::lock_guard lock(mu_);
  for (const auto& c : all_.clients) {
    if (c.client_id == q.client_id && c.connection == *q.connection) return c.backend_pid;
  }
  return std::nullopt;
}

std::vector<schema::AshTickRow> Collected::ash_ticks() const {
  std::lock_guard lock(mu_);
  return all_.ash_ticks;
}

std::vector<schema::PgActivityRow> Collected::activity() const {
  std::lock_guard lock(mu_);
  return all_.pg_activity;
}

schema::PgStatsRows Collected::pg_stats() const {
  std::lock_guard lock(mu_);
  return all_.pg_stats;
}

std::vector<schema::PgSessionRow> Collected::sessions() const {
  std::lock_guard lock(mu_);
  return all_.pg_sessions;
}

std::vector<schema::PgSessionIdleRow> Collected::idle_stretches() const {
  std::lock_guard lock(mu_);
  return all_.pg_session_idles;
}

std::string scratch_conninfo() {
  const char* file = std::getenv("STALLSCOPE_TEST_CONNINFO_FILE");
#ifdef STALLSCOPE_TEST_CONNINFO_FILE_DEFAULT
  if (!file) file = STALLSCOPE_TEST_CONNINFO_FILE_DEFAULT;
#endif
  if (!file) {
    ADD_FAILURE() << "STALLSCOPE_TEST_CONNINFO_FILE is not set: run integration tests with ctest "
                     "(the scratch_pg fixture starts the server)";
    return "";
  }
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  if (line.empty())
    ADD_FAILURE() << "no conninfo in " << file << ": did scratch_postgres_start fail?";
  return line;
}

std::string stallscope_bin() {
  const char* bin = std::getenv("STALLSCOPE_BIN");
#ifdef STALLSCOPE_BIN_DEFAULT
  if (!bin) bin = STALLSCOPE_BIN_DEFAULT;
#endif
  if (!bin) {
    ADD_FAILURE() << "STALLSCOPE_BIN is not set: run integration tests with ctest";
    return "/nonexistent/stallscope";
  }
  return bin;
}

CommandResult run_command(const std::vector<std::string>& argv) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  CommandResult result;
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    result.err = "cannot spawn " + argv[0];
    return result;
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP))) {
        ssize_t n = read(fds[i].fd, buf, sizeof buf);
        if (n <= 0) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
        } else {
          (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
        }
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string psql(const std::string& conninfo, const std::string& sql) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  std::string value;
  if (PQstatus(conn) != CONNECTION_OK) {
    ADD_FAILURE() << "cannot connect to " << conninfo << ": " << PQerrorMessage(conn);
  } else {
    PGresult* res = PQexec(conn, sql.c_str());
    auto st = PQresultStatus(res);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
      ADD_FAILURE() << "cannot run " << sql << ": " << PQerrorMessage(conn);
    } else if (st == PGRES_TUPLES_OK && PQntuples(res) > 0) {
      value = PQgetvalue(res, 0, 0);
    }
    PQclear(res);
  }
  PQfinish(conn);
  return value;
}

schema::RunInfo run_info(std::int64_t start_ns) {
  // One aggregate initialiser: assigning string literals to the members of a
  // default-constructed RunInfo trips GCC 12's -Werror=restrict false
  // positive at -O3 (Release).
  return schema::RunInfo{.mode = "run",
                         .host = "db1",
                         .kernel = "6.1.0",
                         .cores = 2,
                         .clock_ticks_per_s = 100,
                         .start_ns = start_ns,
                         .command_line = "stallscope run",
                         .tool_version = "0",
                         .hz = 10,
                         .stallscope_pid = 100,
                         .clients = 2,
                         .threads = 1,
                         .protocol = "simple",
                         .sql = "SELECT 1"};
}

int spawn(std::vector<std::string> argv) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  return pid;
}

bool exited_ok(int pid) {
  int status = 0;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace stallscope::test
