// `stallscope report` on real files — a `run` beside a hostile process, a
// `record --pg` beside pgbench, an imported pgbench log alone and with that
// record file, a run + record pair, a run against a baseline — each page
// opened in Debian's chromium by tests/report/browser_test.cjs (no console
// error, no network request, no dialog, the expected charts with data and
// findings, untrusted text shown as text). The browser test keeps a PNG of
// each page in STALLSCOPE_REPORT_SCREENSHOTS (default
// <build>/report-screenshots): the test artifact.
#include <signal.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace stallscope {
namespace {

std::string screenshot_dir() {
  const char* dir = std::getenv("STALLSCOPE_REPORT_SCREENSHOTS");
  return dir ? dir : STALLSCOPE_REPORT_SCREENSHOTS_DEFAULT;
}

// This host's name as the run files hold it (run.host: uname's nodename).
std::string host_name() {
  struct utsname u {};
  ::uname(&u);
  return u.nodename;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Starts `path` niced to 19 with argv (argv[0] as given, not the path);
// its pid.
pid_t spawn_niced(const std::string& path, std::vector<std::string> argv) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpriority(PRIO_PROCESS, 0, 19);
    ::execv(path.c_str(), args.data());
    ::_exit(127);
  }
  return pid;
}

// A process killed (SIGKILL) and reaped when this goes out of scope, also
// when the test fails half way.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() { stop(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_;
};

// What the browser test is told to find on a page.
struct Expect {
  std::vector<std::string> charts;
  std::vector<std::string> findings;
  std::vector<std::string> texts;
  bool stall_click = false;
};

// `stallscope report ARGS… -o <dir>/<name>.html`; the page's path ("" when
// the command failed). The run files it reads are left as they were.
std::string write_report(const test::TempDir& dir, const std::string& name,
                         const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  for (const auto& a : args)
    if (a.ends_with(".db")) inputs.push_back(a);
  std::vector<std::string> before;
  for (const auto& f : inputs) before.push_back(slurp(f));
  const auto page = dir.file(name + ".html");
  std::vector<std::string> argv{test::stallscope_bin(), "report"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"-o", page});
  const auto r = test::run_command(argv);
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.err.find("stallscope report: wrote " + page), std::string::npos) << r.err;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(slurp(inputs[i]) == before[i]) << "report changed " << inputs[i];
  return r.exit_status == 0 && std::filesystem::exists(page) ? page : "";
}

// Where the browser test keeps its PNG of `page`.
std::filesystem::path screenshot(const std::string& page) {
  return std::filesystem::path(screenshot_dir()) /
         (std::filesystem::path(page).stem().string() + ".png");
}

// Opens the pages in chromium through tests/report/browser_test.cjs, each
// with its Expect; the test fails unless it exits 0 with an `ok` line per
// page. Returns its output.
std::string browse(const std::vector<std::pair<std::string, Expect>>& pages) {
  std::vector<std::string> argv{
      "node",           test::source_dir() + "/tests/report/browser_test.cjs",
      "--node-modules", test::source_dir() + "/report/web/node_modules",
      "--out-dir",      screenshot_dir()};
  for (const auto& [page, e] : pages) {
    const auto expect_path = page.substr(0, page.size() - 5) + ".expect.json";
    nlohmann::json j = {{"charts", e.charts},
                        {"findings", e.findings},
                        {"texts", e.texts},
                        {"stall_click", e.stall_click}};
    std::ofstream(expect_path) << j.dump();
    argv.push_back(page + ":" + expect_path);
    std::filesystem::remove(screenshot(page));
  }
  const auto r = test::run_command(argv);
  EXPECT_EQ(r.exit_status, 0) << r.out << r.err;
  for (const auto& [page, e] : pages) {
    EXPECT_NE(r.out.find("ok " + page + " ("), std::string::npos) << r.out << r.err;
    EXPECT_TRUE(std::filesystem::exists(screenshot(page))) << screenshot(page);
  }
  return r.out;
}

// `explain --json` of copies of the files (explain saves its findings and
// stalls into the first file; the report must not need that).
nlohmann::json explain_copy(const test::TempDir& dir, const std::vector<std::string>& files,
                            const std::vector<std::string>& options = {}) {
  std::vector<std::string> argv{test::stallscope_bin(), "explain", "--json"};
  argv.insert(argv.end(), options.begin(), options.end());
  for (const auto& f : files) {
    const auto copy = dir.file("explained-" + std::filesystem::path(f).filename().string());
    std::filesystem::copy_file(f, copy, std::filesystem::copy_options::overwrite_existing);
    argv.push_back(copy);
  }
  const auto r = test::run_command(argv);
  EXPECT_EQ(r.exit_status, 0) << r.err;
  return r.exit_status == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

// The page's data (its <script type="application/json">).
nlohmann::json page_data(const std::string& page) {
  const auto html = slurp(page);
  const std::string open = "id=\"stallscope-data\">";
  const auto from = html.find(open);
  const auto to = html.find("</script>", from);
  if (from == std::string::npos || to == std::string::npos) {
    ADD_FAILURE() << "no stallscope-data in " << page;
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(html.substr(from + open.size(), to - from - open.size()));
}

// The timeline charts whose id starts with `prefix` and that hold a value.
int charts_with_data(const nlohmann::json& data, const std::string& prefix) {
  int n = 0;
  for (const auto& c : data["timeline"]["charts"]) {
    if (!c["id"].get<std::string>().starts_with(prefix)) continue;
    bool any = false;
    for (const auto& series : c["series"])
      for (const auto& v : series["values"]) any = any || (v.is_number() && v.get<double>() != 0);
    n += any;
  }
  return n;
}

// Whether explain found stalls (then the browser test clicks the first).
bool has_stalls(const nlohmann::json& j) {
  return j.contains("stalls") && !j["stalls"].empty();
}

std::vector<std::string> finding_kinds(const nlohmann::json& j) {
  std::vector<std::string> kinds;
  if (j.contains("findings"))
    for (const auto& f : j["findings"]) kinds.push_back(f["kind"].get<std::string>());
  return kinds;
}

std::vector<std::string> host_charts(const std::string& host) {
  return {"host_cpu:" + host, "tasks:" + host, "process_cpu:" + host};
}

class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    conninfo_ = test::scratch_conninfo();
    ASSERT_FALSE(conninfo_.empty());
    host_ = host_name();
  }
  std::string conninfo_;
  std::string host_;
  test::TempDir dir_;
};

// A process named `<img src=x onerror=alert(1)>` (the system shell started
// through a symlink of that name: its comm is the first 15 bytes) spins
// beside a run whose SQL holds `</script><script>…`: both are shown as text,
// nothing runs.
TEST_F(Report, RunBesideAHostileProcessShowsItsNameAndSqlAsText) {
  const std::string hostile_name = "<img src=x onerror=alert(1)>";
  const std::string comm = hostile_name.substr(0, 15);
  ASSERT_EQ(comm, "<img src=x oner");
  const auto bin_dir = dir_.path() / "bin";
  std::filesystem::create_directory(bin_dir);
  std::filesystem::create_symlink("/bin/sh", bin_dir / hostile_name);
  // comm is the name of the file executed; the command line starts with
  // argv[0], the whole name.
  Child hostile(
      spawn_niced((bin_dir / hostile_name).string(), {hostile_name, "-c", "while :; do :; done"}));
  ASSERT_GT(hostile.pid(), 0);
  const std::string sql = "SELECT '</script><script>alert(1)</script>' AS x, pg_sleep(0.005);";
  std::ofstream(dir_.file("hostile.sql")) << sql << "\n";
  const auto run_db = dir_.file("hostile-run.db");
  const auto r = test::run_command({test::stallscope_bin(), "run", "-o", run_db, conninfo_, "-c",
                                    "4", "-T", "4", "-P", "0", "-f", dir_.file("hostile.sql")});
  hostile.stop();
  ASSERT_EQ(r.exit_status, 0) << r.err;

  const auto page = write_report(dir_, "report-run-hostile", {run_db});
  ASSERT_FALSE(page.empty());
  const auto html = slurp(page);
  // The raw page never holds the names as markup: the data is escaped
  // inside its <script type="application/json">.
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);

  const auto j = explain_copy(dir_, {run_db});
  Expect e{.charts = {"throughput", "latency", "aas", "query_path_cpu"},
           .findings = finding_kinds(j),
           .texts = {comm, hostile_name, "</script><script>alert(1)</script>"},
           .stall_click = has_stalls(j)};
  for (const auto& c : host_charts(host_)) e.charts.push_back(c);
  browse({{page, e}});
}

// A record --pg file beside pgbench (started by record), pgbench's log of
// that same run imported: the record file, the log alone, and the log with
// the record file as a client + server pair each render. The recording is
// made once per test program (ctest runs each test in its own, so once per
// test there).
class ReportPgbench : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    const auto conninfo = test::scratch_conninfo();
    if (conninfo.empty()) return;
    // A database of this test program's own: the suite's tests run side by
    // side, each in its own program.
    test::psql(conninfo, "DROP DATABASE IF EXISTS " + database());
    test::psql(conninfo, "CREATE DATABASE " + database());
    const auto db = conninfo + " dbname=" + database();
    const auto init = test::run_command({"pgbench", "-i", "-s", "1", "-q", db});
    if (init.exit_status != 0) {
      setup_error_ = "pgbench -i: " + init.err;
      return;
    }
    const auto rec = test::run_command({test::stallscope_bin(), "record", "-o", rec_db(), "--pg",
                                        db, "-T", "4", "--", "pgbench", "-n", "-c", "4", "-T", "3",
                                        "-l", "--log-prefix=" + dir_->file("pb"), db});
    if (rec.exit_status != 0) {
      setup_error_ = "record -- pgbench: " + rec.err;
      return;
    }
    std::vector<std::string> argv{test::stallscope_bin(), "import-pgbench", "-o", imp_db()};
    for (const auto& f : std::filesystem::directory_iterator(dir_->path()))
      if (f.path().filename().string().starts_with("pb.")) argv.push_back(f.path().string());
    const auto imp = test::run_command(argv);
    if (imp.exit_status != 0) setup_error_ = "import-pgbench: " + imp.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
    const auto conninfo = test::scratch_conninfo();
    if (!conninfo.empty()) test::psql(conninfo, "DROP DATABASE IF EXISTS " + database());
  }
  static std::string database() { return "stallscope_report_" + std::to_string(::getpid()); }
  void SetUp() override {
    ASSERT_FALSE(test::scratch_conninfo().empty());
    ASSERT_EQ(setup_error_, "");
    host_ = host_name();
  }
  static std::string rec_db() { return dir_->file("pgbench-rec.db"); }
  static std::string imp_db() { return dir_->file("pgbench-log.db"); }
  static test::TempDir* dir_;
  static std::string setup_error_;
  std::string host_;
};
test::TempDir* ReportPgbench::dir_ = nullptr;
std::string ReportPgbench::setup_error_;

TEST_F(ReportPgbench, RecordFileBesidePgbenchRenders) {
  const auto page = write_report(*dir_, "report-record-pgbench", {rec_db()});
  ASSERT_FALSE(page.empty());
  const auto j = explain_copy(*dir_, {rec_db()});
  browse({{page,
           {.charts = {"aas", "host_cpu:" + host_, "tasks:" + host_},
            .findings = finding_kinds(j),
            .stall_click = has_stalls(j)}}});
}

TEST_F(ReportPgbench, ImportedPgbenchLogRendersAlone) {
  const auto page = write_report(*dir_, "report-pgbench-log", {imp_db()});
  ASSERT_FALSE(page.empty());
  const auto j = explain_copy(*dir_, {imp_db()});
  browse({{page,
           {.charts = {"throughput", "latency"},
            .findings = finding_kinds(j),
            .stall_click = has_stalls(j)}}});
}

TEST_F(ReportPgbench, ImportedPgbenchLogWithItsRecordFileRendersAsAPair) {
  const auto page = write_report(*dir_, "report-pgbench-log-pair", {imp_db(), rec_db()});
  ASSERT_FALSE(page.empty());
  const auto j = explain_copy(*dir_, {imp_db(), rec_db()});
  browse({{page,
           {.charts = {"throughput", "latency", "aas", "host_cpu:server"},
            .findings = finding_kinds(j),
            .stall_click = has_stalls(j)}}});
}

// `run` on the client and `record --pg` on the server (here one host),
// recorded at the same time, the run's table locked for a second in its
// middle: the client's view, the database's load and the host charts on one
// page, and the stall (in 500 ms windows) zooms the charts when clicked.
TEST_F(Report, RunWithAConcurrentRecordRendersAsAPair) {
  test::psql(conninfo_, "CREATE TABLE IF NOT EXISTS report_lock (x int)");
  const auto run_db = dir_.file("pair-run.db"), rec_db = dir_.file("pair-rec.db");
  const pid_t rec =
      test::spawn({test::stallscope_bin(), "record", "-o", rec_db, "--pg", conninfo_, "-T", "6"});
  ASSERT_GT(rec, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  std::thread locker([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    test::psql(conninfo_, "BEGIN; LOCK TABLE report_lock; SELECT pg_sleep(1); COMMIT; SELECT 1");
  });
  const auto r =
      test::run_command({test::stallscope_bin(), "run", "-o", run_db, conninfo_, "-c", "2", "-T",
                         "4", "-P", "0", "--sql", "SELECT count(*) FROM report_lock, pg_class"});
  locker.join();
  const bool rec_ok = test::exited_ok(rec);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  ASSERT_TRUE(rec_ok);

  const auto page =
      write_report(dir_, "report-run-record-pair", {run_db, rec_db, "--window", "500ms"});
  ASSERT_FALSE(page.empty());
  const auto j = explain_copy(dir_, {run_db, rec_db}, {"--window", "500ms"});
  ASSERT_EQ(j["hosts"].size(), 2u) << j.dump();
  ASSERT_TRUE(has_stalls(j)) << "the lock held for 1 s is a stall";
  Expect e{.charts = {"throughput", "latency", "aas"},
           .findings = finding_kinds(j),
           .stall_click = true};
  // Each host's charts, the client's (run.db) and the server's (rec.db), by
  // role: the two are one host here.
  for (const char* role : {"client", "server"})
    for (const auto& c : host_charts(role)) e.charts.push_back(c);
  browse({{page, e}});
  const auto data = page_data(page);
  for (const char* prefix : {"host_cpu:", "tasks:", "process_cpu:"})
    EXPECT_EQ(charts_with_data(data, prefix), 2) << prefix;
}

// --baseline: two runs of the same workload at 1 and 4 clients; the page
// states the comparison explain gives for the pair.
TEST_F(Report, BaselineComparisonIsStatedOnThePage) {
  const auto one = dir_.file("base-c1.db"), four = dir_.file("base-c4.db");
  for (const auto& [file, clients] : {std::pair{four, "4"}, std::pair{one, "1"}}) {
    const auto r =
        test::run_command({test::stallscope_bin(), "run", "-o", file, conninfo_, "-c", clients,
                           "-T", "2", "-P", "0", "--sql", "SELECT pg_sleep(0.002)"});
    ASSERT_EQ(r.exit_status, 0) << r.err;
  }
  const auto page = write_report(dir_, "report-baseline", {four, "--baseline", one});
  ASSERT_FALSE(page.empty());
  const auto j = explain_copy(dir_, {four, one});
  ASSERT_TRUE(j.contains("comparison")) << j.dump();
  const auto summary = j["comparison"]["summary"].get<std::string>();
  ASSERT_FALSE(summary.empty());
  // explain's summary names the copies; the page's names the files given.
  std::string expected = summary;
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"explained-base-c4.db", "base-c4.db"},
        {"explained-base-c1.db", "base-c1.db"}}) {
    for (auto at = expected.find(from); at != std::string::npos; at = expected.find(from, at))
      expected.replace(at, from.size(), to);
  }
  browse({{page,
           {.charts = {"throughput", "latency", "aas"},
            .findings = finding_kinds(j),
            .texts = {expected},
            .stall_click = has_stalls(j)}}});
}

TEST_F(Report, MissingRunFileIsAOneLineErrorAndNoPage) {
  const auto missing = dir_.file("missing.db"), page = dir_.file("x.html");
  const auto r = test::run_command({test::stallscope_bin(), "report", missing, "-o", page});
  EXPECT_EQ(r.exit_status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(page));
  EXPECT_FALSE(std::filesystem::exists(missing)) << "report created the run file";
}

// Another user's run file in a directory that user may not write (a
// colleague's results, a read-only mount): report reads it — SQLite cannot
// create its WAL index there, so it is read as an immutable file — and
// leaves nothing beside it.
TEST_F(Report, AnotherUsersRunFileInAReadOnlyDirectoryIsRead) {
  if (::geteuid() != 0 || ::access("/usr/sbin/runuser", X_OK) != 0) {
    GTEST_SKIP() << "needs root and runuser to read the file as another user";
  }
  namespace fs = std::filesystem;
  const fs::path ro = dir_.path() / "ro", out = dir_.path() / "out";
  fs::create_directories(ro);
  fs::create_directories(out);
  const auto run_db = (ro / "run.db").string(), page = (out / "page.html").string();
  const auto r = test::run_command({test::stallscope_bin(), "run", "-o", run_db, conninfo_, "-c",
                                    "1", "-T", "1", "-P", "0", "--sql", "SELECT 1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  // root's directory and file, readable by all, writable by root alone.
  fs::permissions(dir_.path(),
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  fs::permissions(ro, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                          fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(run_db, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                              fs::perms::others_read);
  fs::permissions(out, fs::perms::all);
  const auto before = slurp(run_db);
  const auto as_nobody = test::run_command({"/usr/sbin/runuser", "-u", "nobody", "--",
                                            test::stallscope_bin(), "report", run_db, "-o", page});
  if (as_nobody.exit_status == 126 || as_nobody.exit_status == 127) {
    GTEST_SKIP() << "nobody cannot run " << test::stallscope_bin() << ": " << as_nobody.err;
  }
  EXPECT_EQ(as_nobody.exit_status, 0) << as_nobody.err;
  EXPECT_TRUE(fs::exists(page));
  EXPECT_EQ(slurp(run_db), before);
  EXPECT_FALSE(fs::exists(run_db + "-wal"));
  EXPECT_FALSE(fs::exists(run_db + "-shm"));
}

}  // namespace
}  // namespace stallscope
