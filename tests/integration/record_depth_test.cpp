// `stallscope record` sampler depth (threads, stacks, I/O, cgroups) on the real host and the
// scratch server: per-thread rows, D-state tasks, cgroup v1 CPU throttling,
// delay accounting, host memory/PSI/disk tables, ASH depth.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <SQLiteCpp/Database.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace stallscope {
namespace {

using namespace std::chrono_literals;

// A forked child: three sleeping threads and one thread ("spinner") spinning
// for `seconds`; SIGKILLed and reaped on destruction.
class ThreadedSpinner {
 public:
  explicit ThreadedSpinner(int seconds) {
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<std::thread> sleepers;
      for (int i = 0; i < 3; ++i) {
        sleepers.emplace_back([] {
          pthread_setname_np(pthread_self(), "sleeper");
          std::this_thread::sleep_for(std::chrono::hours(1));
        });
      }
      std::thread spinner([seconds] {
        pthread_setname_np(pthread_self(), "spinner");
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        volatile std::uint64_t n = 0;
        while (std::chrono::steady_clock::now() < end) n = n + 1;
      });
      spinner.join();
      ::_exit(0);
    }
  }
  ~ThreadedSpinner() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

TEST(RecordDepth, SpinningThreadInsideAnIdleMultiThreadedProcessIsFoundByDefault) {
  ThreadedSpinner child(6);
  ASSERT_GT(child.pid(), 0);
  test::TempDir dir;
  auto db_path = dir.file("threads.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "-T", "4"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  const std::string of_child = fmt::format(
      "FROM thread_sample t JOIN process p USING (process_id) WHERE p.pid = {}", child.pid());
  // The spinner thread (not the main thread) has rows and about one core.
  SQLite::Statement q(db, "SELECT count(*), min(t.tid), sum(t.cpu_ns), sum(t.span_ns) " + of_child +
                              " AND t.comm = 'spinner' AND t.cpu_ns IS NOT NULL");
  ASSERT_TRUE(q.executeStep());
  EXPECT_GE(q.getColumn(0).getInt(), 10);
  EXPECT_NE(q.getColumn(1).getInt(), child.pid());
  const double cores = q.getColumn(2).getDouble() / q.getColumn(3).getDouble();
  EXPECT_GE(cores, 0.8);
  EXPECT_LE(cores, 1.1);
  // The sleeping threads did nothing: no rows.
  EXPECT_EQ(db.execAndGet("SELECT count(*) " + of_child + " AND t.comm = 'sleeper'").getInt(), 0);
}

// The whole disk (MAJ:MIN) under the file system that holds `dir`: the
// device a blkio cgroup throttles (a partition's bios are its disk's).
std::string whole_disk_of(const std::filesystem::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {};
  const std::string dev = fmt::format("{}:{}", major(st.st_dev), minor(st.st_dev));
  const std::filesystem::path sys = "/sys/dev/block/" + dev;
  std::error_code ec;
  if (!std::filesystem::exists(sys, ec)) return {};  // tmpfs, overlay, 9p: no block device
  if (!std::filesystem::exists(sys / "partition", ec)) return dev;
  std::ifstream in(std::filesystem::canonical(sys, ec).parent_path() / "dev");
  std::string parent;
  in >> parent;
  return parent;
}

// A blkio (cgroup v1) group whose writes to one disk are limited to
// `iops` a second, removed on destruction; empty() when the host has no
// blk-throttle, or not this disk.
class ThrottledBlkioGroup {
 public:
  ThrottledBlkioGroup(const std::string& disk, int iops)
      : path_(fmt::format("/sys/fs/cgroup/blkio/stallscope-test-{}", ::getpid())) {
    if (disk.empty() || ::mkdir(path_.c_str(), 0755) != 0) return;
    made_ = true;
    std::ofstream limit(path_ / "blkio.throttle.write_iops_device");
    limit << disk << ' ' << iops;
    limit.close();
    throttled_ = static_cast<bool>(limit);
  }
  ~ThrottledBlkioGroup() {
    for (int i = 0; made_ && i < 50 && ::rmdir(path_.c_str()) != 0; ++i) {
      std::this_thread::sleep_for(20ms);
    }
  }
  ThrottledBlkioGroup(const ThrottledBlkioGroup&) = delete;
  ThrottledBlkioGroup& operator=(const ThrottledBlkioGroup&) = delete;
  bool empty() const { return !throttled_; }
  std::string procs() const { return (path_ / "cgroup.procs").string(); }

 private:
  std::filesystem::path path_;
  bool made_ = false;
  bool throttled_ = false;
};

TEST(RecordDepth, BlockedDirectIoTaskAppearsInStateDWithWchanAndStack) {
  // dd with O_DIRECT|O_DSYNC waits for the disk on every 1 MiB write. On a
  // fast virtual disk it is in D too briefly for ticks 50 ms apart to catch
  // it with its wait channel (CI's disk); a blkio group limiting its writes
  // to 4 a second keeps it in D for about 250 ms each. /tmp may be tmpfs;
  // the working directory of the build is on a real disk.
  const auto cwd = std::filesystem::current_path();
  const std::string file = (cwd / fmt::format("dstate-{}.tmp", ::getpid())).string();
  ThrottledBlkioGroup group(whole_disk_of(cwd), 4);
  const std::string enter =
      group.empty() ? std::string() : fmt::format("echo $$ > {} && ", group.procs());
  test::TempDir dir;
  auto db_path = dir.file("d.db");
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--hz", "20",
                              "--stacks", "--delayacct", "--", "sh", "-c",
                              enter + "exec timeout 3 dd if=/dev/zero of=" + file +
                                  " bs=1M count=100000 oflag=direct,dsync"});
  std::filesystem::remove(file);
  ASSERT_EQ(r.exit_status, 124) << r.err;  // timeout's status: dd was still writing
  SQLite::Database db(db_path);
  const int d_rows =
      db.execAndGet(
            "SELECT count(*) FROM process_sample s JOIN process p USING (process_id) "
            "WHERE p.comm = 'dd' AND s.state = 'D' AND s.wchan IS NOT NULL")
          .getInt();
  EXPECT_GE(d_rows, 1) << "blkio throttling: " << (group.empty() ? "none" : "4 writes/s")
                       << "; dd's "
                       << "states: "
                       << db.execAndGet(
                                "SELECT group_concat(state || '=' || n) FROM (SELECT "
                                "s.state, count(*) AS n FROM process_sample s JOIN "
                                "process p USING (process_id) WHERE p.comm = 'dd' GROUP "
                                "BY s.state)")
                              .getString();
  if (::geteuid() == 0) {
    EXPECT_EQ(db.execAndGet("SELECT kernel_stacks FROM run").getString(), "collected");
    EXPECT_GE(db.execAndGet("SELECT count(*) FROM process_sample s JOIN process p USING "
                            "(process_id) WHERE p.comm = 'dd' AND s.state = 'D' AND "
                            "s.kernel_stack IS NOT NULL")
                  .getInt(),
              1);
    // Delay accounting was turned on for the run: dd's block-I/O delay is measured...
    EXPECT_GT(db.execAndGet("SELECT coalesce(sum(blkio_delay_ns), 0) FROM process_sample s "
                            "JOIN process p USING (process_id) WHERE p.comm = 'dd'")
                  .getInt64(),
              0);
    // ...and its bytes written since the previous row.
    EXPECT_GT(db.execAndGet("SELECT coalesce(sum(write_bytes), 0) FROM process_sample s JOIN "
                            "process p USING (process_id) WHERE p.comm = 'dd'")
                  .getInt64(),
              0);
  } else {
    EXPECT_EQ(db.execAndGet("SELECT kernel_stacks FROM run").getString(), "unavailable: not root");
  }
  // ...and restored at exit when stallscope had turned it on.
  if (db.execAndGet("SELECT delayacct_set FROM run").getInt() == 1) {
    std::ifstream in("/proc/sys/kernel/task_delayacct");
    std::string v;
    in >> v;
    EXPECT_EQ(v, "0");
  }
}

// The stored form behind process_sample (wchan by id, the I/O columns in
// process_io_sample only when not 0) read back through the view: each task's
// own wait channel by name (sleep in a nanosleep, dd writing in D state), dd's
// bytes written, and 0 bytes — not NULL, and no process_io_sample row — for a
// spinning process that writes nothing.
TEST(RecordDepth, WchanNamesAndWriteBytesComeBackThroughTheView) {
  const std::string file =
      (std::filesystem::current_path() / fmt::format("view-{}.tmp", ::getpid())).string();
  test::TempDir dir;
  auto db_path = dir.file("view.db");
  // 1 MiB direct, synchronous writes: dd spends much of its time in D.
  auto r = test::run_command(
      {test::stallscope_bin(), "record", "-o", db_path, "--hz", "20", "--", "sh", "-c",
       fmt::format("sleep 5 & timeout 2 sh -c 'while :; do :; done' & exec timeout 2 dd "
                   "if=/dev/zero of={} bs=1M count=100000 oflag=direct,dsync",
                   file)});
  std::filesystem::remove(file);
  ASSERT_EQ(r.exit_status, 124) << r.err;
  SQLite::Database db(db_path);
  // Each name once; every stored id names one.
  EXPECT_EQ(db.execAndGet("SELECT count(*) - count(DISTINCT name) FROM wchan").getInt(), 0);
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM process_tick t LEFT JOIN wchan w USING "
                          "(wchan_id) WHERE t.wchan_id IS NOT NULL AND w.name IS NULL")
                .getInt(),
            0);
  // Each task has its own wait channel, not another task's.
  const std::string of_sleep =
      "FROM process_sample s JOIN process p USING (process_id) WHERE p.comm = 'sleep'";
  EXPECT_GE(db.execAndGet("SELECT count(*) " + of_sleep).getInt(), 1);
  EXPECT_EQ(
      db.execAndGet("SELECT count(*) " + of_sleep + " AND s.wchan NOT LIKE '%sleep%'").getInt(), 0);
  // dd's rows with a wait channel (blocked in its writes) name another
  // function than sleep's. Not required to exist: a D task that is running
  // again by the time its wchan is read gives none, which on a fast virtual
  // disk happened at every tick of a CI run; BlockedDirectIoTask… checks D.
  const std::string dd_d =
      "FROM process_sample s JOIN process p USING (process_id) WHERE p.comm = 'dd' AND "
      "s.wchan IS NOT NULL";
  EXPECT_EQ(db.execAndGet("SELECT count(*) " + dd_d +
                          " AND (s.wchan LIKE '%sleep%' OR s.wchan GLOB '*.*' OR s.wchan = '')")
                .getInt(),
            0);
  // dd wrote: bytes through the view, from process_io_sample rows.
  EXPECT_GT(db.execAndGet("SELECT coalesce(sum(s.write_bytes), 0) FROM process_sample s JOIN "
                          "process p USING (process_id) WHERE p.comm = 'dd'")
                .getInt64(),
            0);
  EXPECT_GE(db.execAndGet("SELECT count(*) FROM process_io_sample i JOIN process p USING "
                          "(process_id) WHERE p.comm = 'dd' AND i.write_bytes > 0")
                .getInt(),
            1);
  // The spinner (the sh child running the loop) wrote nothing: 0 after its
  // first row, NULL on it, and no process_io_sample row.
  const std::string spin =
      "FROM process_sample s JOIN process p USING (process_id) WHERE p.comm = 'sh' AND "
      "p.cmdline LIKE '%while%'";
  EXPECT_GE(db.execAndGet("SELECT count(*) " + spin + " AND s.span_ns IS NOT NULL").getInt(), 10);
  EXPECT_EQ(db.execAndGet("SELECT count(*) " + spin +
                          " AND s.span_ns IS NOT NULL AND (s.write_bytes IS NOT 0 OR "
                          "s.read_bytes IS NOT 0)")
                .getInt(),
            0);
  EXPECT_EQ(db.execAndGet("SELECT count(*) " + spin +
                          " AND s.span_ns IS NULL AND s.write_bytes IS NOT NULL")
                .getInt(),
            0);
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM process_io_sample i JOIN process p USING "
                          "(process_id) WHERE p.comm = 'sh' AND p.cmdline LIKE '%while%'")
                .getInt(),
            0);
  // Its rows a tick apart have the tick's interval as span_ns.
  EXPECT_GE(db.execAndGet("SELECT count(*) " + spin +
                          " AND s.span_ns = (SELECT interval_ns FROM sample x WHERE x.sample_id = "
                          "s.sample_id)")
                .getInt(),
            10);
}

TEST(RecordDepth, BusyProcessInACgroupV1QuotaOf20PercentShowsThrottling) {
  const std::filesystem::path cpu_root = "/sys/fs/cgroup/cpu";
  const std::string name = fmt::format("stallscope-test-{}", ::getpid());
  const auto cg = cpu_root / name;
  if (::mkdir(cg.c_str(), 0755) != 0) {
    std::string why = fmt::format("cannot create cgroup {}: {}", cg.string(), std::strerror(errno));
    fmt::print("{}\n", why);
    GTEST_SKIP() << why;
  }
  struct Remove {
    std::filesystem::path p;
    ~Remove() {
      for (int i = 0; i < 50 && ::rmdir(p.c_str()) != 0; ++i) std::this_thread::sleep_for(20ms);
    }
  } remove{cg};
  {
    std::ofstream(cg / "cpu.cfs_period_us") << "100000";
    std::ofstream quota(cg / "cpu.cfs_quota_us");
    quota << "20000";
    quota.close();
    ASSERT_TRUE(quota) << "cannot set the quota";
  }
  test::TempDir dir;
  auto db_path = dir.file("cg.db");
  // The shell moves itself into the cgroup, then becomes a busy loop.
  auto r = test::run_command(
      {test::stallscope_bin(), "record", "-o", db_path, "--", "sh", "-c",
       fmt::format("echo $$ > {}/cgroup.procs && exec timeout 3 sh -c 'while :; do :; done'",
                   cg.string())});
  ASSERT_EQ(r.exit_status, 124) << r.err;
  SQLite::Database db(db_path);
  const std::string path = "/" + name;
  EXPECT_GE(
      db.execAndGet(fmt::format("SELECT count(*) FROM process WHERE cgroup = '{}'", path)).getInt(),
      1);
  SQLite::Statement q(db,
                      "SELECT count(*), sum(nr_throttled), sum(throttled_ns), sum(span_ns) FROM "
                      "cgroup_sample WHERE cgroup = ? AND span_ns IS NOT NULL");
  q.bind(1, path);
  ASSERT_TRUE(q.executeStep());
  EXPECT_GE(q.getColumn(0).getInt(), 10);
  EXPECT_GE(q.getColumn(1).getInt64(), 10);  // ~10 periods a second, nearly all throttled
  // Allowed 20 % of a core, it wanted 100 %: throttled most of the time.
  const double throttled_share = q.getColumn(2).getDouble() / q.getColumn(3).getDouble();
  EXPECT_GT(throttled_share, 0.4);
  // And its CPU stayed near the quota, not a whole core.
  SQLite::Statement cpu(db,
                        "SELECT sum(s.cpu_ns) * 1.0 / sum(s.span_ns) FROM process_sample s JOIN "
                        "process p USING (process_id) WHERE p.cgroup = ? AND p.comm = 'sh' AND "
                        "s.cpu_ns IS NOT NULL");
  cpu.bind(1, path);
  ASSERT_TRUE(cpu.executeStep());
  EXPECT_LT(cpu.getColumn(0).getDouble(), 0.35);
}

TEST(RecordDepth, HostMemoryPressureAndDiskTablesFill) {
  test::TempDir dir;
  auto db_path = dir.file("host.db");
  // Direct writes to a file on a real disk (the build's working directory;
  // /tmp may be tmpfs), so some device is busy while the record runs.
  const std::string file =
      (std::filesystem::current_path() / fmt::format("disk-{}.tmp", ::getpid())).string();
  auto r = test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--", "timeout", "1",
                              "dd", "if=/dev/zero", "of=" + file, "bs=64k", "count=100000",
                              "oflag=direct"});
  std::filesystem::remove(file);
  ASSERT_EQ(r.exit_status, 124) << r.err;  // timeout's status: dd was still writing
  SQLite::Database db(db_path);
  const int ticks = db.execAndGet("SELECT count(*) FROM sample").getInt();
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM host_memory_sample").getInt(), ticks);
  // First tick: no previous value, so the deltas are NULL; gauges are there.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM host_memory_sample WHERE sample_id = 1 AND "
                          "major_faults IS NULL AND mem_available_bytes > 0")
                .getInt(),
            1);
  // Later ticks have vmstat deltas, and PSI deltas where the kernel has PSI.
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM host_memory_sample WHERE sample_id > 1 AND "
                          "major_faults IS NULL")
                .getInt(),
            0);
  if (std::filesystem::exists("/proc/pressure/io")) {
    EXPECT_EQ(db.execAndGet("SELECT count(*) FROM host_memory_sample WHERE sample_id > 1 AND "
                            "psi_io_some_us IS NULL")
                  .getInt(),
              0);
  }
  // Disks: rows for the device dd wrote to, never for an idle device, each
  // covering one tick.
  EXPECT_GE(db.execAndGet("SELECT count(*) FROM disk_sample WHERE writes > 0").getInt(), 1);
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM disk_sample WHERE reads = 0 AND writes = 0 AND "
                          "busy_ns = 0 AND in_flight = 0")
                .getInt(),
            0);
  EXPECT_EQ(db.execAndGet("SELECT count(*) FROM disk_sample d JOIN sample s USING (sample_id) "
                          "WHERE d.span_ns != s.interval_ns")
                .getInt(),
            0);
}

TEST(RecordDepth, AshDepthBlockingPidsTimesAndQueryTextOnce) {
  auto conninfo = test::scratch_conninfo();
  ASSERT_FALSE(conninfo.empty());
  test::psql(conninfo, "CREATE TABLE IF NOT EXISTS depth_lock_t (x int)");
  test::TempDir dir;
  auto db_path = dir.file("ash.db");
  // A holder keeps an exclusive lock for 2 s; a waiter queues behind it.
  const std::string script =
      "psql \"$1\" -qAtc \"BEGIN; LOCK TABLE depth_lock_t IN ACCESS EXCLUSIVE MODE; SELECT "
      "pg_sleep(2); COMMIT;\" >/dev/null & sleep 0.5; psql \"$1\" -qAtc \"SELECT count(*) FROM "
      "depth_lock_t\" >/dev/null; wait";
  auto r =
      test::run_command({test::stallscope_bin(), "record", "-o", db_path, "--pg", conninfo, "--hz",
                         "5", "--ash-hz", "50", "--", "sh", "-c", script, "sh", conninfo});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  SQLite::Database db(db_path);
  // --ash-hz is independent of --hz.
  EXPECT_GT(db.execAndGet("SELECT count(*) FROM ash_tick").getInt(),
            4 * db.execAndGet("SELECT count(*) FROM sample").getInt());
  // The holder's text is stored once per distinct query_id (its
  // multi-statement string has one per statement; once in all when the
  // server computes none) although sampled in many polls.
  const int texts =
      db.execAndGet("SELECT count(*) FROM pg_query_text WHERE query LIKE '%pg_sleep(2)%'").getInt();
  const int ids = db.execAndGet(
                        "SELECT count(DISTINCT coalesce(a.query_id, 0)) FROM pg_activity_sample a "
                        "JOIN pg_query_text q USING (query_text_id) WHERE q.query LIKE "
                        "'%pg_sleep(2)%'")
                      .getInt();
  EXPECT_GE(texts, 1);
  EXPECT_EQ(texts, ids);
  EXPECT_LE(texts, 2);
  const int holder = db.execAndGet(
                           "SELECT DISTINCT a.pid FROM pg_activity_sample a JOIN pg_query_text q "
                           "USING (query_text_id) WHERE q.query LIKE '%pg_sleep(2)%'")
                         .getInt();
  EXPECT_GT(db.execAndGet("SELECT count(*) FROM pg_activity_sample a JOIN pg_query_text q USING "
                          "(query_text_id) WHERE q.query LIKE '%pg_sleep(2)%' AND a.state = "
                          "'active'")
                .getInt(),
            20);
  // The waiter waits on Lock and names the holder as its blocker (a poll
  // that caught the lock being granted between reading pg_stat_activity and
  // pg_blocking_pids() has no blocker left: '').
  SQLite::Statement w(db,
                      "SELECT count(*), min(blocking_pids), max(blocking_pids) FROM "
                      "pg_activity_sample WHERE wait_event_type = 'Lock' AND blocking_pids <> ''");
  ASSERT_TRUE(w.executeStep());
  EXPECT_GE(w.getColumn(0).getInt(), 10);
  EXPECT_EQ(w.getColumn(1).getString(), std::to_string(holder));
  EXPECT_EQ(w.getColumn(2).getString(), std::to_string(holder));
  // Times are wall-clock ns within the run; the backend started before its
  // transaction, which started before (or at) its query (the same rows).
  SQLite::Statement t(db,
                      "SELECT count(*) FROM pg_activity_sample a, run r WHERE a.wait_event_type = "
                      "'Lock' AND a.blocking_pids <> '' AND a.application_name = 'psql' AND "
                      "a.client_port IS NOT NULL AND "
                      "a.backend_start_ns <= a.xact_start_ns AND a.xact_start_ns <= "
                      "a.query_start_ns AND a.query_start_ns <= a.time_ns AND "
                      "a.backend_start_ns > r.start_ns - 60000000000 AND a.state_change_ns <= "
                      "a.time_ns");
  ASSERT_TRUE(t.executeStep());
  EXPECT_EQ(t.getColumn(0).getInt(), w.getColumn(0).getInt());
}

}  // namespace
}  // namespace stallscope
