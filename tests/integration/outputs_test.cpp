// What the commands write, as a user names it: an output that is one of the inputs is refused, a
// FIFO is written in place, a symlink planted at the temporary name is not followed, the report is
// 0600; every write to standard output is checked; a reader of stdout or stderr that goes away ends
// `run` and `record` as SIGINT does. The real binary, on an imported log and on runs against the
// scratch server.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include <SQLiteCpp/Database.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace stallscope {
namespace {

namespace fs = std::filesystem;
using test::run_command;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `argv` run by bash with `redirect` after it (e.g. "> /dev/full", ">&-",
// "2>&1 | head -1"); the exit status is stallscope's (PIPESTATUS[0]).
test::CommandResult run_redirected(const std::vector<std::string>& argv,
                                   const std::string& redirect) {
  std::vector<std::string> sh{"bash", "-c", "\"$@\" " + redirect + "; exit ${PIPESTATUS[0]}", "_"};
  sh.insert(sh.end(), argv.begin(), argv.end());
  return run_command(sh);
}

class Outputs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string log;
    for (int i = 0; i < 50; ++i)
      log += fmt::format("{} {} 900 0 1700000000 {}\n", i % 2, i, i * 1000);
    std::ofstream(dir_.file("t.log")) << log;
    const auto imp = run_command(
        {test::stallscope_bin(), "import-pgbench", "-o", dir_.file("run.db"), dir_.file("t.log")});
    ASSERT_EQ(imp.exit_status, 0) << imp.err;
    fs::copy_file(dir_.file("run.db"), dir_.file("base.db"));
  }
  test::TempDir dir_;
};

// `report X.db -o X.db` turned the run file into HTML, exit 0; `--baseline
// B.db -o B.db` the baseline. Every writer of a -o now refuses one of its
// inputs (same device and inode, under any name), exit 2, one line naming
// both, and the input is untouched.
TEST_F(Outputs, AnOutputThatIsAnInputIsRefused) {
  const std::string run_db = dir_.file("run.db");
  const std::string base_db = dir_.file("base.db");
  fs::create_hard_link(run_db, dir_.file("alias.db"));
  const std::string run_bytes = slurp(run_db);
  const std::string base_bytes = slurp(base_db);
  const std::string bin = test::stallscope_bin();
  std::ofstream(dir_.file("one.sql")) << "SELECT 1;\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{bin, "report", run_db, "-o", run_db}, run_db + ": it is the input " + run_db},
      {{bin, "report", run_db, "-o", dir_.file("alias.db")},
       dir_.file("alias.db") + ": it is the input " + run_db},
      {{bin, "report", run_db, "--baseline", base_db, "-o", base_db},
       base_db + ": it is the input " + base_db},
      {{bin, "import-pgbench", "-o", dir_.file("t.log"), dir_.file("t.log")},
       dir_.file("t.log") + ": it is the input " + dir_.file("t.log")},
      {{bin, "run", "-o", dir_.file("one.sql"), "-f", dir_.file("one.sql"), "-T", "1"},
       dir_.file("one.sql") + ": it is the input " + dir_.file("one.sql")},
  };
  for (const auto& [argv, message] : cases) {
    const auto r = run_command(argv);
    EXPECT_EQ(r.exit_status, 2) << argv[1] << ": " << r.err;
    EXPECT_NE(r.err.find("cannot write " + message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_EQ(slurp(run_db), run_bytes);
  EXPECT_EQ(slurp(base_db), base_bytes);
  EXPECT_EQ(slurp(dir_.file("one.sql")), "SELECT 1;\n");
}

// The page went to OUT.tmp (O_CREAT|O_TRUNC, a planted symlink followed)
// and was renamed over OUT (a device or FIFO replaced by a regular file);
// the page was 0644 while the run file is 0600.
TEST_F(Outputs, ReportIs0600NeverFollowsATemporarySymlinkAndWritesAFifoInPlace) {
  std::ofstream(dir_.file("victim")) << "precious";
  fs::create_symlink(dir_.file("victim"), dir_.file("out.html.tmp"));
  const auto r = run_command(
      {test::stallscope_bin(), "report", dir_.file("run.db"), "-o", dir_.file("out.html")});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(slurp(dir_.file("victim")), "precious");
  struct stat st {};
  ASSERT_EQ(::stat(dir_.file("out.html").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600);
  EXPECT_NE(slurp(dir_.file("out.html")).find("<html"), std::string::npos);

  const std::string fifo = dir_.file("page.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto reader = std::async(std::launch::async, [&] { return slurp(fifo); });
  const auto f = run_command({test::stallscope_bin(), "report", dir_.file("run.db"), "-o", fifo});
  EXPECT_EQ(f.exit_status, 0) << f.err;
  EXPECT_NE(reader.get().find("<html"), std::string::npos);
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// Errors writing standard output were ignored (exit 0, and report said
// "wrote standard output"). Now: exit 1, one line naming it.
// An input that is no regular file: a FIFO (explain would block reading it
// for ever) or a device is refused with one line naming it.
TEST_F(Outputs, AnInputThatIsNoRegularFileIsRefusedNotWaitedOn) {
  const auto fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& input : {fifo, std::string("/dev/null")}) {
    for (const char* command : {"explain", "report"}) {
      std::vector<std::string> argv{test::stallscope_bin(), command, input};
      if (std::string_view(command) == "report") {
        argv.push_back("-o");
        argv.push_back(dir_.file("report.html"));
      }
      const auto r = test::run_command(argv);
      EXPECT_EQ(r.exit_status, 2) << r.err;
      EXPECT_EQ(r.err, fmt::format("stallscope {}: cannot open {}: not a regular file (a run file "
                                   "is one)\n",
                                   command, input));
    }
  }
}

// `stallscope foo`: the unknown command is named, with the commands there are.
TEST_F(Outputs, AnUnknownCommandIsNamed) {
  const auto r = test::run_command({test::stallscope_bin(), "explian", "run.db"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.err,
            "stallscope: unknown command 'explian' (commands: run, record, import-pgbench, "
            "explain, report; see 'stallscope --help')\n");
}

TEST_F(Outputs, AFailedWriteToStandardOutputIsAnError) {
  const std::string bin = test::stallscope_bin();
  const std::string run_db = dir_.file("run.db");
  const std::vector<std::tuple<std::vector<std::string>, std::string, std::string>> cases{
      {{bin, "explain", "--json", run_db}, "> /dev/full", "No space left on device"},
      {{bin, "explain", run_db}, "> /dev/full", "No space left on device"},
      {{bin, "explain", run_db}, ">&-", "Bad file descriptor"},
      {{bin, "report", run_db, "-o", "-"}, "> /dev/full", "No space left on device"},
      {{bin, "report", run_db, "-o", "-"}, ">&-", "Bad file descriptor"},
      {{bin, "import-pgbench", "-o", dir_.file("again.db"), dir_.file("t.log")},
       "> /dev/full",
       "No space left on device"},
  };
  for (const auto& [argv, redirect, reason] : cases) {
    const auto r = run_redirected(argv, redirect);
    EXPECT_EQ(r.exit_status, 1) << argv[1] << " " << redirect << ": " << r.err;
    EXPECT_NE(r.err.find(fmt::format("stallscope {}: cannot write standard output: {}\n", argv[1],
                                     reason)),
              std::string::npos)
        << argv[1] << " " << redirect << ": " << r.err;
    EXPECT_EQ(r.err.find("wrote standard output"), std::string::npos) << r.err;
  }
  // The same commands with a standard output that takes the text: exit 0.
  EXPECT_EQ(run_redirected({bin, "explain", "--json", run_db}, "> /dev/null").exit_status, 0);
  EXPECT_EQ(run_redirected({bin, "report", run_db, "-o", "-"}, "> /dev/null").exit_status, 0);
}

// With a server: `run`'s summary is on standard output.
TEST_F(Outputs, RunWhoseSummaryCannotBeWrittenExits1WithItsFileComplete) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  const auto r = run_redirected({test::stallscope_bin(), "run", "-o", dir_.file("full.db"),
                                 conninfo, "-T", "1", "-P", "0", "--sql", "SELECT 1"},
                                "> /dev/full");
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find("stallscope run: cannot write standard output: No space left on device"),
            std::string::npos)
      << r.err;
  SQLite::Database db(dir_.file("full.db"));
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "complete");
}

// SIGPIPE killed `run … -P 0.5 2>&1 | head -1` (exit 141, no summary, the
// file left `running`). It ends as on SIGINT: the file complete up to then,
// marked interrupted by the broken pipe. Its summary goes to the same
// broken pipe: exit 1. With stdout elsewhere, the summary is there, exit 0.
TEST_F(Outputs, RunWhoseOutputReaderWentAwayEndsAsOnSigint) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  for (const bool stdout_too : {true, false}) {
    const std::string db_path = dir_.file(stdout_too ? "both.db" : "stderr.db");
    const std::string summary = dir_.file("summary.txt");
    const auto r =
        run_redirected({test::stallscope_bin(), "run", "-o", db_path, conninfo, "-T", "60", "-P",
                        "0.2", "--sql", "SELECT 1"},
                       stdout_too ? "2>&1 | head -1" : "2>&1 > " + summary + " | head -1");
    EXPECT_EQ(r.exit_status, stdout_too ? 1 : 0) << r.err;
    EXPECT_NE(r.out.find("progress:"), std::string::npos) << r.out;
    SQLite::Database db(db_path);
    EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "interrupted");
    EXPECT_EQ(db.execAndGet("SELECT end_reason FROM run").getString(),
              "broken pipe (standard output or error closed)");
    EXPECT_FALSE(db.execAndGet("SELECT end_ns FROM run").isNull());
    EXPECT_GT(db.execAndGet("SELECT count(*) FROM query").getInt64(), 0);
    if (!stdout_too) {
      EXPECT_NE(slurp(summary).find("interrupted by broken pipe"), std::string::npos)
          << slurp(summary);
    }
  }
}

// `record -T 60 -- sleep 120` whose output reader goes away at once (it
// writes nothing until its end): the watch sees the broken pipe, the
// command is sent SIGTERM and ends, and the file says why.
TEST_F(Outputs, RecordWhoseOutputReaderWentAwayEndsItsCommand) {
  const auto r = run_redirected({test::stallscope_bin(), "record", "-o", dir_.file("rec.db"), "-T",
                                 "60", "--hz", "10", "--", "sleep", "120"},
                                "2>&1 | true");
  EXPECT_EQ(r.exit_status, 128 + SIGTERM) << r.err;
  SQLite::Database db(dir_.file("rec.db"));
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "interrupted");
  const std::string reason = db.execAndGet("SELECT end_reason FROM run").getString();
  EXPECT_NE(reason.find("command exited with status 143; record sent it SIGTERM: broken pipe"),
            std::string::npos)
      << reason;
  const auto pid = db.execAndGet("SELECT pid FROM record_client WHERE source = 'command'").getInt();
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(fs::exists(fmt::format("/proc/{}", pid))) << "sleep still running";
}

// `record` without -T or a command whose progress reader goes away: a
// broken pipe is no normal end (as SIGINT is for an unlimited record), so
// the file says interrupted.
TEST_F(Outputs, UnlimitedRecordEndedByABrokenPipeIsInterrupted) {
  run_redirected({test::stallscope_bin(), "record", "-o", dir_.file("unlimited.db"), "-P", "0.2"},
                 "2>&1 | head -1");
  SQLite::Database db(dir_.file("unlimited.db"));
  EXPECT_EQ(db.execAndGet("SELECT status || '|' || end_reason FROM run").getString(),
            "interrupted|broken pipe (standard output or error closed)");
}

}  // namespace
}  // namespace stallscope
