// A real backend asleep in the kernel outside any wait event: a scratch
// server whose stderr is a pipe (scratch-postgres --log-pipe) with
// log_statement = 'all', its log reader stopped, so a backend running
// statements blocks writing its log line. The host sampler must see it
// asleep, with its wait channel, at every tick while it sleeps (not only at
// the 10 s heartbeat), and explain must read that time as kernel_wait.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <SQLiteCpp/Database.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/parse.h"
#include "support/test_support.h"

namespace stallscope {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A scratch server with its log in a pipe; stopped (reader resumed first) on
// destruction.
class LogPipeServer {
 public:
  LogPipeServer() {
    auto r = test::run_command({test::source_dir() + "/tools/scratch-postgres", "start",
                                "--log-pipe", "--", "-c", "log_statement=all"});
    if (r.exit_status != 0) {
      ADD_FAILURE() << "cannot start a scratch server: " << r.err;
      return;
    }
    conninfo_ = read_text_of(r.out);
    const auto host = conninfo_.substr(5, conninfo_.find(' ') - 5);  // "host=DIR port=…"
    reader_ =
        common::parse_int(read_text(std::filesystem::path(host) / "log-reader.pid")).value_or(0);
  }
  ~LogPipeServer() {
    if (reader_ > 0) ::kill(reader_, SIGCONT);
    if (!conninfo_.empty())
      test::run_command({test::source_dir() + "/tools/scratch-postgres", "stop", conninfo_});
  }
  const std::string& conninfo() const { return conninfo_; }
  int reader() const { return reader_; }

 private:
  static std::string read_text_of(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }
  std::string conninfo_;
  int reader_ = 0;
};

// A client backend of `conninfo`'s server asleep in a pipe write, or 0.
int backend_in_pipe_write() {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto pid = common::parse_int(entry.path().filename().string());
    if (!pid) continue;
    const auto cmdline = read_text(entry.path() / "cmdline");
    if (!cmdline.starts_with("postgres: postgres postgres")) continue;
    if (read_text(entry.path() / "wchan").find("pipe_write") != std::string::npos) return *pid;
  }
  return 0;
}

TEST(KernelSleep, BackendBlockedOnAFullLogPipeIsSampledAsleepWithItsWchanAtEveryTick) {
  LogPipeServer server;
  ASSERT_FALSE(server.conninfo().empty());
  ASSERT_GT(server.reader(), 0);
  ASSERT_EQ(::kill(server.reader(), SIGSTOP), 0);
  // A client whose statements each log a line: the 64 KiB pipe fills and its
  // backend blocks in the middle of a statement.
  std::thread client([&] {
    test::run_command({"timeout", "30", "sh", "-c",
                       "for i in $(seq 5000); do echo \"SELECT $i, repeat('x', 200);\"; done | "
                       "psql -q -X -o /dev/null '" +
                           server.conninfo() + "'"});
  });
  int backend = 0;
  for (int i = 0; i < 100 && backend == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    backend = backend_in_pipe_write();
  }
  ASSERT_GT(backend, 0) << "no backend blocked writing its log";
  test::TempDir dir;
  const auto db_path = dir.file("pipe.db");
  auto r =
      test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--hz", "10", "-T", "3"});
  ::kill(server.reader(), SIGCONT);
  client.join();
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  const int ticks = db.execAndGet("SELECT count(*) FROM sample").getInt();
  ASSERT_GE(ticks, 20);
  const std::string of_backend = fmt::format(
      "FROM process_sample s JOIN process p USING (process_id) WHERE p.pid = {}", backend);
  // A row at every tick (the heartbeat alone would give one), each asleep
  // on the pipe, none with CPU after the first.
  EXPECT_EQ(db.execAndGet("SELECT count(*) " + of_backend).getInt(), ticks);
  EXPECT_EQ(db.execAndGet("SELECT count(*) " + of_backend +
                          " AND s.state = 'S' AND s.wchan LIKE '%pipe_write%'")
                .getInt(),
            ticks);
  EXPECT_EQ(db.execAndGet("SELECT count(*) " + of_backend + " AND s.cpu_ns > 0").getInt(), 0);
}

}  // namespace
}  // namespace stallscope
