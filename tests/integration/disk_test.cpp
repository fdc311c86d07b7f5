// A run file that cannot grow (full disks and write errors), and
// every end of a run stated as it happened: the real stallscope binary
// against the scratch PostgreSQL.
//
// The write error is always available: RLIMIT_FSIZE on the stallscope
// process (bash's `ulimit -f`, SIGXFSZ ignored so that write() fails with
// EFBIG). The full disk is a real one where the machine allows it: an 8 MiB
// tmpfs mounted in a temp dir, as root (skipped otherwise).
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace stallscope {
namespace {

using test::run_command;

constexpr std::int64_t kNsPerS = 1'000'000'000;

std::int64_t count(SQLite::Database& db, const std::string& sql) {
  return db.execAndGet(sql).getInt64();
}

// `argv` run under a file-size limit of `limit_kib` KiB with SIGXFSZ ignored.
std::vector<std::string> with_file_size_limit(int limit_kib, std::vector<std::string> argv) {
  std::vector<std::string> out{
      "bash", "-c", "trap '' XFSZ; ulimit -f " + std::to_string(limit_kib) + "; exec \"$@\"",
      "bash"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

// An 8 MiB tmpfs mounted at `dir`/mnt for the life of the object; mounted()
// is false when this process may not mount (not root, no CAP_SYS_ADMIN).
class SmallTmpfs {
 public:
  explicit SmallTmpfs(const test::TempDir& dir) : path_(dir.file("mnt")) {
    std::filesystem::create_directory(path_);
    mounted_ = ::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=8m") == 0;
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  bool mounted() const { return mounted_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `name` until the file system is full.
  void fill(const std::string& name) const {
    std::FILE* f = std::fopen(file(name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::vector<char> block(64 * 1024, 'x');
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size()) {
    }
    std::fclose(f);
  }

 private:
  std::string path_;
  bool mounted_ = false;
};

// What every run cut short by its file must show: exit 1 with one stderr
// line naming the file and the error, the summary, a file that opens with
// the committed queries, 'failed' with the reason, stopped well before -T.
void expect_cut_short(const test::CommandResult& r, const std::string& path,
                      const std::string& error, const std::string& reason_prefix,
                      double duration_s) {
  EXPECT_EQ(r.exit_status, 1) << r.err;
  // SQLite's message, then the system error when SQLite kept one.
  const std::regex line("stallscope run: " + path + ": " + error +
                        R"(( \([^)]*\))? at [0-9.]+ s: stopped driving; the [0-9.]+ s committed )"
                        R"(are kept\n)");
  EXPECT_TRUE(std::regex_search(r.err, line)) << r.err;
  EXPECT_NE(r.out.find("transactions: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" — " + reason_prefix + " at "), std::string::npos) << r.out;

  SQLite::Database db(path);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "failed");
  const std::string reason = db.execAndGet("SELECT end_reason FROM run").getString();
  EXPECT_TRUE(reason.starts_with(reason_prefix + " at ")) << reason;
  EXPECT_NE(reason.find(" s: " + error), std::string::npos) << reason;
  EXPECT_GT(count(db, "SELECT count(*) FROM query"), 100);
  const std::int64_t lasted_ns = count(db, "SELECT end_ns - start_ns FROM run");
  // It stopped at the failed commit, not at -T (how soon the disk fills
  // depends on the host's speed: no tighter bound).
  EXPECT_LT(lasted_ns, static_cast<std::int64_t>((duration_s - 2) * kNsPerS))
      << "drove on after the failed commit";
}

// The time kept, as the stderr line of a run or record cut short by its
// file gives it ("the 18.0 s committed are kept": "18.0"); "" without one.
std::string committed_figure(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(; the ([0-9.]+) s committed are kept\n)")))
    return {};
  return m[1].str();
}

// The same figure from the file itself: how far its newest query end or
// sample tick is from the run's start, 0.0 when it has neither.
std::string kept_in_file(const std::string& path) {
  SQLite::Database db(path);
  const std::int64_t kept_ns =
      count(db,
            "SELECT coalesce(max(coalesce((SELECT max(start_ns + latency_ns) FROM query), (SELECT "
            "max(time_ns) FROM sample)), coalesce((SELECT max(time_ns) FROM sample), (SELECT "
            "max(start_ns + latency_ns) FROM query))) - start_ns, 0) FROM run");
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(kept_ns) / kNsPerS);
  return text;
}

// explain on `path`: exit 0 and the note that the run was cut short, which
// states the time kept as the run's own stderr (`err`) did, and as the file
// holds it.
void expect_explained_as_cut_short(const std::string& path, const std::string& reason_prefix,
                                   const std::string& err) {
  const auto e = run_command({test::stallscope_bin(), "explain", path});
  EXPECT_EQ(e.exit_status, 0) << e.err;
  EXPECT_NE(e.out.find("The run was cut short: its file could not be written (" + reason_prefix),
            std::string::npos)
      << e.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(e.out, m,
                                std::regex(R"(kept what it had committed: its first ([0-9.]+) s)")))
      << e.out;
  const std::string said = committed_figure(err);
  EXPECT_FALSE(said.empty()) << err;
  EXPECT_EQ(m[1].str(), said) << "explain: " << e.out << "\nstderr: " << err;
  EXPECT_EQ(kept_in_file(path), said);
}

TEST(WriteError, RunStopsDrivingAtTheFirstFailedCommitAndKeepsWhatItCommitted) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  const auto path = dir.file("run.db");
  // 2 MiB: the WAL reaches it within seconds (before its 4 MiB checkpoint).
  const auto r =
      run_command(with_file_size_limit(2048, {test::stallscope_bin(), "run", "-o", path, conninfo,
                                              "-c", "2", "-T", "30", "--sql", "SELECT 1"}));
  expect_cut_short(r, path, "disk I/O error", "write failed", 30);
  expect_explained_as_cut_short(path, "write failed at ", r.err);
}

TEST(WriteError, RecordStopsAndEndsItsCommand) {
  test::TempDir dir;
  const auto path = dir.file("record.db");
  const auto r =
      run_command(with_file_size_limit(1024, {test::stallscope_bin(), "record", "-o", path, "--hz",
                                              "100", "--threads", "--", "sleep", "30"}));
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("stallscope record: " + path +
                        R"(: disk I/O error( \([^)]*\))? at [0-9.]+ s: stopped recording, )"
                        R"(sent the command SIGTERM; the [0-9.]+ s committed are kept\n)")))
      << r.err;
  SQLite::Database db(path);
  EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "failed");
  EXPECT_TRUE(
      db.execAndGet("SELECT end_reason FROM run").getString().starts_with("write failed at "));
  EXPECT_EQ(count(db, "SELECT command_exit_status FROM run"), 128 + SIGTERM);
  EXPECT_GT(count(db, "SELECT count(*) FROM sample"), 0);
  EXPECT_LT(count(db, "SELECT end_ns - start_ns FROM run"),
            28 * kNsPerS);  // not the command's 30 s
  expect_explained_as_cut_short(path, "write failed at ", r.err);
}

TEST(FullDisk, RunStopsDrivingKeepsWhatItCommittedAndExplainSaysSo) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  SmallTmpfs disk(dir);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const auto path = disk.file("run.db");
  const auto r = run_command({test::stallscope_bin(), "run", "-o", path, conninfo, "-c", "2", "-T",
                              "30", "--sql", "SELECT 1"});
  expect_cut_short(r, path, "database or disk is full", "disk full", 30);
  // explain writes its findings back: on a copy, off the full disk.
  for (const char* suffix : {"", "-wal"}) {
    if (std::filesystem::exists(path + suffix)) {
      std::filesystem::copy_file(path + suffix, dir.file("copy.db") + suffix);
    }
  }
  expect_explained_as_cut_short(dir.file("copy.db"), "disk full at ", r.err);
}

// A record whose disk fills as it starts: its stderr line and explain's
// note state the same time kept, the file's (stderr said "0.0 s committed"
// from the time of its last good commit while explain said "0.3 s kept",
// the run's start to its end, when no sample had been committed).
TEST(FullDisk, RecordStatesTheTimeKeptAsExplainDoes) {
  test::TempDir dir;
  SmallTmpfs disk(dir);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const auto path = disk.file("record.db");
  test::CommandResult r;
  std::thread record([&] {
    r = run_command(
        {test::stallscope_bin(), "record", "-o", path, "--hz", "100", "--threads", "-T", "20"});
  });
  // The disk fills once the run row is stored and the writer started (its
  // first commit comes 250 ms later).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      SQLite::Database db(path, SQLite::OPEN_READONLY);
      if (count(db, "SELECT count(*) FROM run") == 1) break;
    } catch (const SQLite::Exception&) {
      // Not made yet.
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  disk.fill("filler");
  record.join();
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("stallscope record: " + path +
                        R"(: database or disk is full( \([^)]*\))? at [0-9.]+ s: stopped )"
                        R"(recording; the [0-9.]+ s committed are kept\n)")))
      << r.err;
  // explain writes its findings back: on a copy, off the full disk.
  for (const char* suffix : {"", "-wal"}) {
    if (std::filesystem::exists(path + suffix)) {
      std::filesystem::copy_file(path + suffix, dir.file("copy.db") + suffix);
    }
  }
  {
    SQLite::Database db(dir.file("copy.db"));
    EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "failed");
  }
  expect_explained_as_cut_short(dir.file("copy.db"), "disk full at ", r.err);
}

TEST(FullDisk, OutputThatCannotBeCreatedLeavesNoFileAndARetryWorks) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  SmallTmpfs disk(dir);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  disk.fill("filler");
  const auto path = disk.file("run.db");
  const std::vector<std::string> argv{
      test::stallscope_bin(), "run", "-o", path, conninfo, "-T", "1", "--sql", "SELECT 1"};
  const auto r = run_command(argv);
  EXPECT_EQ(r.exit_status, 1) << r.err;
  EXPECT_NE(r.err.find("cannot create " + path + ": database or disk is full"), std::string::npos)
      << r.err;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    EXPECT_FALSE(std::filesystem::exists(path + suffix)) << path + suffix;
  }
  std::filesystem::remove(disk.file("filler"));
  const auto retry = run_command(argv);
  EXPECT_EQ(retry.exit_status, 0) << retry.err;
}

// explain on a file whose disk is full: the report all the same, one
// warning saying the file system is full, exit 0, and no -wal or -shm left
// beside it (it exited 2, "disk I/O error", leaving both).
TEST(FullDisk, ExplainOnAFullDiskReportsAndWarns) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  SmallTmpfs disk(dir);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const auto made = dir.file("run.db");
  ASSERT_EQ(run_command({test::stallscope_bin(), "run", "-o", made, conninfo, "-T", "1", "--sql",
                         "SELECT 1", "-P", "0"})
                .exit_status,
            0);
  const auto path = disk.file("run.db");
  std::filesystem::copy_file(made, path);
  disk.fill("filler");
  const auto e = run_command({test::stallscope_bin(), "explain", path});
  EXPECT_EQ(e.exit_status, 0) << e.err;
  EXPECT_NE(e.out.find("time accounting"), std::string::npos) << e.out;
  EXPECT_NE(e.err.find("warning: findings and stalls not saved into " + path +
                       ": the file system under " + path + " is full"),
            std::string::npos)
      << e.err;
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
}

// -R far below 1/-T: the schedule's next transaction falls after the
// deadline, and the run still drives until -T (it ended after the first
// transaction, ~1 s, saying "duration reached").
TEST(RunEnd, SlowRateDrivesForTheWholeDuration) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  const auto path = dir.file("run.db");
  const auto r = run_command({test::stallscope_bin(), "run", "-o", path, conninfo, "-R", "0.5",
                              "-T", "3", "--sql", "SELECT 1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(path);
  EXPECT_EQ(db.execAndGet("SELECT status || '|' || end_reason FROM run").getString(),
            "complete|duration reached");
  EXPECT_GE(count(db, "SELECT end_ns - start_ns FROM run"), 2'900'000'000);
  // The summary's time is the driven time, not the queries' span.
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.out, m, std::regex(R"(transactions: \d+ \(\d+ failed\) in ([0-9.]+) s)")))
      << r.out;
  EXPECT_GE(std::stod(m[1].str()), 2.9) << r.out;
}

// -t with -R: every client does its -t transactions on the schedule, and the
// run says so.
TEST(RunEnd, TransactionsWithARateAreAllDone) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  const auto path = dir.file("run.db");
  const auto r = run_command({test::stallscope_bin(), "run", "-o", path, conninfo, "-c", "2", "-R",
                              "20", "-t", "5", "--sql", "SELECT 1"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(path);
  EXPECT_EQ(db.execAndGet("SELECT status || '|' || end_reason FROM run").getString(),
            "complete|transactions done");
  EXPECT_EQ(count(db, "SELECT count(*) FROM query"), 10);
  EXPECT_EQ(count(db, "SELECT count(*) FROM query WHERE lag_ns IS NULL"), 0);
  // The rate asked for is data in the run row, and explain --json gives it.
  EXPECT_DOUBLE_EQ(db.execAndGet("SELECT rate_tps FROM run").getDouble(), 20.0);
  const auto e = run_command({test::stallscope_bin(), "explain", "--json", path});
  ASSERT_EQ(e.exit_status, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  EXPECT_DOUBLE_EQ(j["run"]["rate_tps"].get<double>(), 20.0);
  // The host's identity beside its name: this machine's ids, in the file
  // and in the JSON.
  std::string machine_id, boot_id;
  std::getline(std::ifstream("/etc/machine-id"), machine_id);
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot_id);
  ASSERT_EQ(boot_id.size(), 36u);
  EXPECT_EQ(db.execAndGet("SELECT boot_id FROM run").getString(), boot_id);
  EXPECT_EQ(j["run"]["boot_id"], boot_id);
  if (!machine_id.empty()) {
    EXPECT_EQ(j["run"]["machine_id"], machine_id);
  }
}

// SIGKILL: the file stays 'running' with no end, holds all but the last
// commit interval, and explain says the run did not end.
TEST(RunEnd, KilledRunIsExplainedAsNotEnded) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::TempDir dir;
  const auto path = dir.file("run.db");
  const int pid = test::spawn({test::stallscope_bin(), "run", "-o", path, conninfo, "-c", "2", "-T",
                               "10", "--sql", "SELECT 1", "-P", "0"});
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  kill(pid, SIGKILL);
  EXPECT_FALSE(test::exited_ok(pid));
  {
    SQLite::Database db(path);
    EXPECT_EQ(db.execAndGet("SELECT status FROM run").getString(), "running");
    EXPECT_EQ(count(db, "SELECT count(*) FROM run WHERE end_ns IS NULL AND end_reason IS NULL"), 1);
    EXPECT_EQ(count(db, "SELECT count(*) FROM run WHERE rate_tps IS NULL"), 1);  // closed loop
    EXPECT_GT(count(db, "SELECT count(*) FROM query"), 0);
  }
  const auto e = run_command({test::stallscope_bin(), "explain", path});
  EXPECT_EQ(e.exit_status, 0) << e.err;
  EXPECT_NE(e.out.find("The run did not end: its status is still 'running'"), std::string::npos)
      << e.out;
}

}  // namespace
}  // namespace stallscope
