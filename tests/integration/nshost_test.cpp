// tools/nshost: two hosts on this machine (network, UTS and PID namespaces),
// each running `stallscope run` against a private scratch server that
// listens on their veth addresses. Needs root (skipped otherwise).
#include <unistd.h>

#include <string>
#include <vector>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace stallscope {
namespace {

// Host `name` (tools/nshost up NAME INDEX), removed on destruction.
class NsHost {
 public:
  NsHost(std::string name, int index, const std::vector<std::string>& extra = {})
      : name_(std::move(name)) {
    std::vector<std::string> argv{tool(), "up", name_, std::to_string(index)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = test::run_command(argv);
    up_ = r.exit_status == 0;
    error_ = r.err;
    if (up_) server_side_ = r.out.substr(0, r.out.find('\n'));
  }
  ~NsHost() { test::run_command({tool(), "down", name_}); }
  NsHost(const NsHost&) = delete;
  NsHost& operator=(const NsHost&) = delete;

  bool up() const { return up_; }
  const std::string& error() const { return error_; }
  const std::string& name() const { return name_; }
  // This machine's end of the host's veth pair: where the server is reached.
  const std::string& server_side() const { return server_side_; }
  std::vector<std::string> exec(const std::vector<std::string>& argv) const {
    std::vector<std::string> all{tool(), "exec", name_, "--"};
    all.insert(all.end(), argv.begin(), argv.end());
    return all;
  }

 private:
  static std::string tool() { return test::source_dir() + "/tools/nshost"; }
  std::string name_;
  bool up_ = false;
  std::string error_;
  std::string server_side_;
};

// A private scratch server (tools/scratch-postgres start ARGS…), stopped on
// destruction.
class PrivateServer {
 public:
  explicit PrivateServer(const std::vector<std::string>& args) {
    std::vector<std::string> argv{test::source_dir() + "/tools/scratch-postgres", "start"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = test::run_command(argv);
    error_ = r.err;
    if (r.exit_status == 0) conninfo_ = r.out.substr(0, r.out.find('\n'));
  }
  ~PrivateServer() {
    if (!conninfo_.empty())
      test::run_command({test::source_dir() + "/tools/scratch-postgres", "stop", conninfo_});
  }
  PrivateServer(const PrivateServer&) = delete;
  PrivateServer& operator=(const PrivateServer&) = delete;
  const std::string& conninfo() const { return conninfo_; }
  const std::string& error() const { return error_; }

 private:
  std::string conninfo_, error_;
};

TEST(NsHosts, EachHostRunsAgainstTheServerUnderItsOwnNameAndProcessTable) {
  if (::geteuid() != 0) GTEST_SKIP() << "tools/nshost needs root";
  const std::string tag = std::to_string(::getpid() % 100000);
  NsHost a("ta" + tag, 201), b("tb" + tag, 202, {"--cpu-quota", "30"});
  ASSERT_TRUE(a.up()) << a.error();
  ASSERT_TRUE(b.up()) << b.error();
  EXPECT_EQ(a.server_side(), "10.231.201.1");
  const PrivateServer server({"--listen", a.server_side(), "--listen", b.server_side()});
  ASSERT_FALSE(server.conninfo().empty()) << server.error();
  const std::string& conninfo = server.conninfo();
  const std::string port =
      conninfo.substr(conninfo.find("port=") + 5,
                      conninfo.find(' ', conninfo.find("port=")) - (conninfo.find("port=") + 5));
  test::TempDir dir;
  // The server sees each host's connections from its own address.
  const auto over = [&](const NsHost& h) {
    return "host=" + h.server_side() + " port=" + port + " user=postgres dbname=postgres";
  };
  const auto addr = test::run_command(a.exec({"psql", over(a), "-XAtc",
                                              "SELECT host(inet_client_addr()) || ' ' || "
                                              "current_setting('listen_addresses')"}));
  EXPECT_EQ(addr.exit_status, 0) << addr.err;
  EXPECT_EQ(addr.out.substr(0, addr.out.find(' ')), "10.231.201.2") << addr.out;
  // Both hosts drive the server at once, each sampled from inside.
  const auto file_a = dir.file("a.db"), file_b = dir.file("b.db");
  const int pid_a = test::spawn(a.exec({test::stallscope_bin(), "run", "-o", file_a, over(a), "-T",
                                        "2", "-c", "2", "-P", "0", "--sql", "SELECT 1"}));
  const int pid_b = test::spawn(b.exec({test::stallscope_bin(), "run", "-o", file_b, over(b), "-T",
                                        "2", "-c", "2", "-P", "0", "--sql", "SELECT 1"}));
  EXPECT_TRUE(test::exited_ok(pid_a));
  EXPECT_TRUE(test::exited_ok(pid_b));
  for (const auto& [file, host] : {std::pair{file_a, &a}, std::pair{file_b, &b}}) {
    SQLite::Database db(file);
    EXPECT_EQ(db.execAndGet("SELECT host FROM run").getString(), host->name()) << file;
    EXPECT_GT(db.execAndGet("SELECT count(*) FROM query").getInt64(), 0) << file;
    // Its own /proc: the server's processes are not its host's.
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM process WHERE comm = 'postgres'").getInt64(), 0)
        << file;
    EXPECT_GT(db.execAndGet("SELECT count(*) FROM process WHERE comm = 'stallscope'").getInt64(), 0)
        << file;
  }
  // The host under a CPU quota: its processes in its cgroup.
  SQLite::Database db(file_b);
  EXPECT_GT(db.execAndGet("SELECT count(*) FROM process WHERE comm = 'stallscope' AND cgroup "
                          "LIKE '%/stallscope-" +
                          b.name() + "'")
                .getInt64(),
            0);
}

// Bad usage is named, exit status 2; an unknown host is an error.
TEST(NsHosts, BadUsageAndAnUnknownHostAreNamed) {
  const auto tool = test::source_dir() + "/tools/nshost";
  const auto bad = test::run_command({tool, "up", "Bad_Name", "1"});
  EXPECT_EQ(bad.exit_status, 2);
  EXPECT_NE(bad.err.find("host name 'Bad_Name'"), std::string::npos) << bad.err;
  const auto index = test::run_command({tool, "up", "ok", "300"});
  EXPECT_EQ(index.exit_status, 2);
  EXPECT_NE(index.err.find("INDEX: a number 1…254"), std::string::npos) << index.err;
  const auto unknown = test::run_command({tool, "exec", "nosuchhost", "--", "true"});
  EXPECT_EQ(unknown.exit_status, 1);
  EXPECT_NE(unknown.err.find("no host nosuchhost"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace stallscope
