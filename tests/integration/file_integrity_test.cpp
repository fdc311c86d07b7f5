// explain on files that are damaged, incomplete or cannot be written: a
// damaged page or a dropped table is bad input (exit 2, one line naming the
// file); a file explain cannot write (a read-only file, directory or mount,
// another process's write lock, a WAL with no index beside it) is explained
// all the same — the report, a `warning:` line, exit 0 — and no -wal or -shm
// file is left beside a file that had none. Each on a real run file made by
// `stallscope run` against the scratch server, and the stallscope binary.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <SQLiteCpp/Database.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace stallscope {
namespace {

namespace fs = std::filesystem;
using test::run_command;

constexpr int kNobody = 65534;

// One run file for the whole suite (2 s, 2 clients), and a server record
// file sampled beside it; each test works on copies.
class FileIntegrity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    const auto conninfo = test::scratch_conninfo();
    if (conninfo.empty()) return;
    const auto rec_db = dir_->file("rec.db");
    const int rec = test::spawn(
        {test::stallscope_bin(), "record", "-o", rec_db, "--hz", "10", "-T", "4", "-P", "0"});
    const auto r = run_command({test::stallscope_bin(), "run", "-o", dir_->file("run.db"), conninfo,
                                "-c", "2", "-j", "1", "-T", "2", "-P", "0", "--hz", "10", "--sql",
                                "SELECT count(*) FROM pg_class"});
    const bool rec_ok = test::exited_ok(rec);
    if (r.exit_status != 0 || !rec_ok) {
      ADD_FAILURE() << "cannot make the run files: " << r.err;
      return;
    }
    run_db_ = dir_->file("run.db");
    rec_db_ = rec_db;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_FALSE(run_db_.empty()) << "no run file"; }

  // A copy of the run file in the test's own directory.
  std::string copy_run(const std::string& name = "run.db") const {
    const auto path = tmp_.file(name);
    fs::copy_file(run_db_, path);
    return path;
  }
  static std::int64_t queries_of(const std::string& path) {
    SQLite::Database db(path, SQLite::OPEN_READONLY);
    return db.execAndGet("SELECT count(*) FROM query").getInt64();
  }
  static void sql(const std::string& path, const std::string& statements) {
    SQLite::Database db(path, SQLite::OPEN_READWRITE);
    db.exec(statements);
  }

  static test::TempDir* dir_;
  static std::string run_db_, rec_db_;
  test::TempDir tmp_;
};
test::TempDir* FileIntegrity::dir_ = nullptr;
std::string FileIntegrity::run_db_;
std::string FileIntegrity::rec_db_;

// Runs argv as a user who may not write what root may (root ignores file
// modes): as nobody when the test runs as root (setpriv, util-linux), as is
// otherwise.
test::CommandResult run_unprivileged(std::vector<std::string> argv) {
  if (geteuid() != 0) return run_command(argv);
  std::vector<std::string> a{"setpriv", "--reuid=" + std::to_string(kNobody),
                             "--regid=" + std::to_string(kNobody), "--clear-groups"};
  a.insert(a.end(), argv.begin(), argv.end());
  return run_command(a);
}

// A directory nobody may enter (and, for root's test, nobody's own).
void open_to_nobody(const fs::path& dir) {
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
}

void chown_to_nobody(const fs::path& path) {
  if (geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), kNobody, kNobody), 0) << path;
  }
}

bool has_wal_or_shm(const std::string& db) {
  return fs::exists(db + "-wal") || fs::exists(db + "-shm");
}

// The report's signs: its header and verdict on stdout.
void expect_report(const test::CommandResult& r) {
  EXPECT_NE(r.out.find("stallscope explain: host"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("verdict:"), std::string::npos) << r.out;
}

// ---- damage ----------------------------------------------------------------

TEST_F(FileIntegrity, RandomPageOverwritesAreRefusedWithExitTwo) {
  const auto db = copy_run();
  const auto size = fs::file_size(db);
  constexpr std::uintmax_t kPage = 4096;
  ASSERT_GT(size, 8 * kPage);
  // 64 random bytes at four pages past the header page, as a bad disk or a
  // stray write would leave them (dd conv=notrunc).
  std::mt19937_64 rng(15);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    for (int k = 0; k < 4; ++k) {
      const auto page = 1 + rng() % (size / kPage - 1);
      f.seekp(static_cast<std::streamoff>(page * kPage + rng() % (kPage - 64)));
      for (int b = 0; b < 64; ++b) f.put(static_cast<char>(rng()));
    }
  }
  const auto r = run_command({test::stallscope_bin(), "explain", db});
  EXPECT_EQ(r.exit_status, 2) << r.out.substr(0, 600) << r.err;
  EXPECT_NE(r.err.find(db + ": the file is damaged"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(FileIntegrity, QueryRowsThatEndTheScanEarlyAreDamage) {
  // A key SQLite reads as text sorts after every number, so explain's range
  // scan of the query table ended before it: a query silently left out.
  const auto db = copy_run();
  const auto stored = queries_of(db);
  ASSERT_GT(stored, 10);
  sql(db,
      "UPDATE query SET start_ns = 'x' || start_ns WHERE start_ns = (SELECT min(start_ns) "
      "FROM query)");
  const auto r = run_command({test::stallscope_bin(), "explain", db});
  EXPECT_EQ(r.exit_status, 2) << r.out.substr(0, 400) << r.err;
  EXPECT_NE(r.err.find(db + ": the file is damaged (query table: " + std::to_string(stored - 1) +
                       " rows read in key order of " + std::to_string(stored) + " stored)"),
            std::string::npos)
      << r.err;
}

// ---- missing tables ----------------------------------------------------------

TEST_F(FileIntegrity, DroppedTableIsBadInputNamingIt) {
  for (const std::string table : {"ash_tick", "query", "sample"}) {
    const auto db = copy_run(table + ".db");
    sql(db, "DROP TABLE " + table);
    const auto r = run_command({test::stallscope_bin(), "explain", db});
    EXPECT_EQ(r.exit_status, 2) << table << ": " << r.err;
    EXPECT_NE(r.err.find(db + ": it has no table " + table), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // An optional table (older files lack it) stays optional.
  const auto db = copy_run("no_sleep.db");
  sql(db, "DROP TABLE IF EXISTS query_sleep");
  const auto r = run_command({test::stallscope_bin(), "explain", db});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  expect_report(r);
}

// ---- files explain cannot write ----------------------------------------------

TEST_F(FileIntegrity, ReadOnlyFileIsExplainedWithAWarningAndNothingLeftBeside) {
  open_to_nobody(tmp_.path());
  const auto db = copy_run();
  chown_to_nobody(db);
  chown_to_nobody(tmp_.path());
  fs::permissions(db, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const auto r = run_unprivileged({test::stallscope_bin(), "explain", db});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  expect_report(r);
  EXPECT_NE(r.err.find("warning: findings and stalls not saved into " + db + ": " + db +
                       " cannot be written (Permission denied)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(has_wal_or_shm(db));
}

// A run killed before its first checkpoint keeps all its data in its -wal;
// when that cannot be read, the error says so (and its size), not "not a
// stallscope run file".
TEST_F(FileIntegrity, AnUnreadableWalHoldingTheDataIsNamed) {
  open_to_nobody(tmp_.path());
  const auto db = (tmp_.path() / "killed.db").string();
  // A writer that dies without closing: its pages stay in the WAL.
  const pid_t child = ::fork();
  if (child == 0) {
    SQLite::Database w(db, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    w.exec(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; PRAGMA user_version = 3; "
        "CREATE TABLE run (run_id INTEGER PRIMARY KEY); INSERT INTO run VALUES (1);");
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_GT(fs::file_size(db + "-wal"), 0u);
  chown_to_nobody(db);
  chown_to_nobody(db + "-wal");
  if (fs::exists(db + "-shm")) chown_to_nobody(db + "-shm");
  chown_to_nobody(tmp_.path());
  fs::permissions(db + "-wal", fs::perms::none);
  const auto r = run_unprivileged({test::stallscope_bin(), "explain", db});
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_NE(
      r.err.find("cannot read " + db + ": its data (" + std::to_string(fs::file_size(db + "-wal")) +
                 " bytes) is in " + db + "-wal, which cannot be read (Permission denied)"),
      std::string::npos)
      << r.err;
}

TEST_F(FileIntegrity, FileInReadOnlyDirectoryIsExplainedWithAWarning) {
  open_to_nobody(tmp_.path());
  const auto sub = tmp_.path() / "ro";
  fs::create_directory(sub);
  const auto db = (sub / "run.db").string();
  fs::copy_file(run_db_, db);
  chown_to_nobody(db);
  fs::permissions(sub, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                           fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const auto r = run_unprivileged({test::stallscope_bin(), "explain", db});
  fs::permissions(sub, fs::perms::owner_all);
  EXPECT_EQ(r.exit_status, 0) << r.err;
  expect_report(r);
  EXPECT_NE(r.err.find("warning: findings and stalls not saved into " + db), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cannot be written"), std::string::npos) << r.err;
}

TEST_F(FileIntegrity, FileOnReadOnlyMountIsExplainedWithAWarning) {
  const auto src = tmp_.path() / "src", mnt = tmp_.path() / "mnt";
  fs::create_directory(src);
  fs::create_directory(mnt);
  fs::copy_file(run_db_, src / "run.db");
  if (::mount(src.c_str(), mnt.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    GTEST_SKIP() << "cannot bind-mount (not root, or no CAP_SYS_ADMIN)";
  }
  if (::mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    ::umount(mnt.c_str());
    GTEST_SKIP() << "cannot remount read-only";
  }
  const auto db = (mnt / "run.db").string();
  const auto r = run_command({test::stallscope_bin(), "explain", db});
  const auto j = run_command({test::stallscope_bin(), "explain", "--json", db});
  ::umount(mnt.c_str());
  EXPECT_EQ(r.exit_status, 0) << r.err;
  expect_report(r);
  EXPECT_NE(r.err.find("warning: findings and stalls not saved into " + db + ": " + db +
                       " cannot be written (Read-only file system)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(j.exit_status, 0) << j.err;
  EXPECT_NE(j.out.find("\"verdict\""), std::string::npos);
}

TEST_F(FileIntegrity, WriteLockHeldByAnotherProcessGivesTheReportAndAWarning) {
  const auto db = copy_run();
  // This test's process holds the write lock, as a second explain or a
  // sqlite3 shell in a transaction would.
  SQLite::Database holder(db, SQLite::OPEN_READWRITE);
  holder.exec("BEGIN EXCLUSIVE");
  holder.exec("DELETE FROM finding");
  const auto r = run_command({test::stallscope_bin(), "explain", db});
  holder.exec("ROLLBACK");
  EXPECT_EQ(r.exit_status, 0) << r.err;
  expect_report(r);
  EXPECT_NE(r.err.find("warning: findings and stalls not saved: cannot save explain's results "
                       "into " +
                       db + ": database is locked (another process holds its write lock"),
            std::string::npos)
      << r.err;
}

TEST_F(FileIntegrity, HotWalInReadOnlyDirectoryIsReadWithoutItsIndex) {
  open_to_nobody(tmp_.path());
  const auto sub = tmp_.path() / "ro";
  fs::create_directory(sub);
  const auto db = (sub / "run.db").string();
  fs::copy_file(run_db_, db);
  {
    // A writer killed with commits in its WAL: copied while it is open.
    const auto live = tmp_.file("live.db");
    fs::copy_file(run_db_, live);
    SQLite::Database w(live, SQLite::OPEN_READWRITE);
    w.exec("PRAGMA wal_autocheckpoint=0");
    w.exec("DELETE FROM finding");
    fs::copy_file(live + "-wal", db + "-wal", fs::copy_options::overwrite_existing);
    fs::copy_file(live, db, fs::copy_options::overwrite_existing);
  }
  ASSERT_GT(fs::file_size(db + "-wal"), 0u);
  chown_to_nobody(db);
  chown_to_nobody(db + "-wal");
  fs::permissions(sub, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                           fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const auto r = run_unprivileged({test::stallscope_bin(), "explain", db});
  fs::permissions(sub, fs::perms::owner_all);
  EXPECT_EQ(r.exit_status, 0) << r.err;
  expect_report(r);
  EXPECT_NE(r.err.find("warning: findings and stalls not saved into " + db), std::string::npos)
      << r.err;
  // The WAL's commits were read: no warning that they were left out.
  EXPECT_EQ(r.err.find("-wal ("), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(db + "-shm"));
}

// Kills `pid` with SIGKILL and reaps it.
void kill_and_reap(int pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// A run (and a record beside it) killed with SIGKILL leave their rows in
// their -wal files, never checkpointed. Moved without their -shm files to a
// read-only mount, explain reads them whole: it said "not a stallscope run
// file" (or left out the WAL's commits), reading them as immutable files.
TEST_F(FileIntegrity, KilledRunsWalOnAReadOnlyMountWithoutItsShmIsRead) {
  const auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  const auto src = tmp_.path() / "src", mnt = tmp_.path() / "mnt", ref = tmp_.path() / "ref";
  for (const auto& d : {src, mnt, ref}) fs::create_directory(d);
  const auto live = tmp_.path() / "live";
  fs::create_directory(live);
  const auto live_run = (live / "run.db").string(), live_rec = (live / "rec.db").string();
  const int rec = test::spawn(
      {test::stallscope_bin(), "record", "-o", live_rec, "--hz", "10", "-T", "60", "-P", "0"});
  const int run =
      test::spawn({test::stallscope_bin(), "run", "-o", live_run, conninfo, "-c", "2", "-j", "1",
                   "-T", "60", "-P", "0", "--hz", "10", "--sql", "SELECT count(*) FROM pg_class"});
  ASSERT_GT(rec, 0);
  ASSERT_GT(run, 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  kill_and_reap(run);
  kill_and_reap(rec);
  for (const auto& name : {"run.db", "rec.db"}) {
    const auto from = (live / name).string();
    ASSERT_TRUE(fs::exists(from + "-wal")) << from;
    ASSERT_GT(fs::file_size(from + "-wal"), 0u) << from;
    for (const auto& to : {src, ref}) {
      fs::copy_file(from, to / name);
      fs::copy_file(from + "-wal", (to / name).string() + "-wal");
    }
  }
  // The WAL holds what the file alone does not: read as an immutable file
  // (no WAL), the run has fewer queries than through its WAL, or none.
  std::int64_t wal_queries = 0, file_queries = 0;
  {
    SQLite::Database with_wal((ref / "run.db").string(), SQLite::OPEN_READONLY);
    wal_queries = with_wal.execAndGet("SELECT count(*) FROM query").getInt64();
    SQLite::Database file_only("file:" + (src / "run.db").string() + "?immutable=1",
                               SQLite::OPEN_READONLY | SQLite::OPEN_URI);
    if (file_only.tableExists("query")) {
      file_queries = file_only.execAndGet("SELECT count(*) FROM query").getInt64();
    }
  }
  ASSERT_GT(wal_queries, 0);
  ASSERT_LT(file_queries, wal_queries) << "the WAL holds no commit of its own";

  if (::mount(src.c_str(), mnt.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    GTEST_SKIP() << "cannot bind-mount (not root, or no CAP_SYS_ADMIN)";
  }
  if (::mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    ::umount(mnt.c_str());
    GTEST_SKIP() << "cannot remount read-only";
  }
  const auto db = (mnt / "run.db").string(), srv = (mnt / "rec.db").string();
  const auto j = run_command({test::stallscope_bin(), "explain", "--json", db});
  const auto pair = run_command({test::stallscope_bin(), "explain", db, srv});
  const bool shm_left = fs::exists(db + "-shm") || fs::exists(srv + "-shm");
  ::umount(mnt.c_str());
  // The same file read in a writable directory, through its WAL index.
  const auto k =
      run_command({test::stallscope_bin(), "explain", "--json", (ref / "run.db").string()});

  EXPECT_EQ(j.exit_status, 0) << j.err;
  EXPECT_EQ(j.err.find("-wal ("), std::string::npos) << j.err;  // nothing left out
  EXPECT_NE(j.err.find("warning: findings and stalls not saved into " + db), std::string::npos)
      << j.err;
  ASSERT_TRUE(nlohmann::json::accept(j.out)) << j.out.substr(0, 400);
  ASSERT_EQ(k.exit_status, 0) << k.err;
  const auto on_mount = nlohmann::json::parse(j.out)["run"];
  const auto in_place = nlohmann::json::parse(k.out)["run"];
  EXPECT_EQ(on_mount["status"], "running");
  EXPECT_GT(on_mount["queries"].get<std::int64_t>(), 0);
  EXPECT_EQ(on_mount["queries"], in_place["queries"]);
  EXPECT_EQ(on_mount["query_end_ns"], in_place["query_end_ns"]);

  EXPECT_EQ(pair.exit_status, 0) << pair.err;
  expect_report(pair);
  EXPECT_NE(pair.out.find("server "), std::string::npos) << pair.out;
  EXPECT_FALSE(shm_left);
}

TEST_F(FileIntegrity, PairWithServerFileInReadOnlyDirectory) {
  ASSERT_FALSE(rec_db_.empty());
  open_to_nobody(tmp_.path());
  const auto run = copy_run();
  chown_to_nobody(run);
  chown_to_nobody(tmp_.path());
  const auto sub = tmp_.path() / "ro";
  fs::create_directory(sub);
  const auto rec = (sub / "rec.db").string();
  fs::copy_file(rec_db_, rec);
  chown_to_nobody(rec);
  fs::permissions(sub, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                           fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const auto r = run_unprivileged({test::stallscope_bin(), "explain", run, rec});
  fs::permissions(sub, fs::perms::owner_all);
  EXPECT_EQ(r.exit_status, 0) << r.err;
  expect_report(r);
  EXPECT_NE(r.out.find("server "), std::string::npos) << r.out;
  EXPECT_FALSE(has_wal_or_shm(rec));
  // The run file itself could be written: the findings were saved.
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace stallscope
