// The sampler's deeper readers on hand-made /proc- and cgroup-style inputs: PSI,
// /proc/PID/io, /proc/PID/cgroup, cgroup cpu.stat (v1 and v2), task stat,
// kernel stacks, the cgroup throttle tracker and the tracker's io / blkio /
// per-thread deltas (first sight and pid reuse give no delta).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/units.h"
#include "sampler/procfs.h"
#include "support/test_support.h"

namespace stallscope::sampler::detail {
namespace {

using namespace std::string_view_literals;

using test::kMs;

void write_file(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

TEST(HostDepthParse, PressureGivesSomeAndFullTotals) {
  auto p = parse_pressure(
      "some avg10=1.50 avg60=0.20 avg300=0.00 total=7900392\n"
      "full avg10=0.00 avg60=0.02 avg300=0.05 total=5779890\n");
  EXPECT_EQ(p.some_us, 7900392);
  EXPECT_EQ(p.full_us, 5779890);
  // cpu before Linux 5.13 has no "full" line: that column is NULL, not 0.
  auto cpu = parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n");
  EXPECT_EQ(cpu.some_us, 42);
  EXPECT_FALSE(cpu.full_us.has_value());
  EXPECT_FALSE(parse_pressure("some avg10=0.00 total=x\n").some_us.has_value());
}

TEST(HostDepthParse, PressureFileAbsentIsNullopt) {
  test::TempDir dir;
  EXPECT_FALSE(read_pressure(dir.path().string(), "io").has_value());
  write_file(dir.path() / "pressure" / "io", "some avg10=0 avg60=0 avg300=0 total=9\n");
  auto io = read_pressure(dir.path().string(), "io");
  ASSERT_TRUE(io.has_value());
  EXPECT_EQ(io->some_us, 9);
}

TEST(HostDepthParse, IoGivesStorageBytesNotCharBytes) {
  auto io = parse_io(
      "rchar: 111\nwchar: 222\nsyscr: 3\nsyscw: 4\nread_bytes: 8192\nwrite_bytes: 40960\n"
      "cancelled_write_bytes: 4096\n");
  ASSERT_TRUE(io.has_value());
  EXPECT_EQ(io->read_bytes, 8192);
  EXPECT_EQ(io->write_bytes, 40960);
  EXPECT_FALSE(parse_io("rchar: 1\nwchar: 2\n").has_value());
}

TEST(HostDepthParse, CgroupPrefersTheV1CpuHierarchyElseV2) {
  auto v1 = parse_cgroup(
      "9:name=systemd:/user.slice\n4:memory:/m\n3:cpu,cpuacct:/bench/pg\n0::/unified/x\n");
  ASSERT_TRUE(v1.has_value());
  EXPECT_EQ(v1->path, "/bench/pg");
  EXPECT_TRUE(v1->v1);
  // "cpuset" is not "cpu".
  auto v2 = parse_cgroup("5:cpuset:/s\n0::/system.slice/postgresql.service\n");
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->path, "/system.slice/postgresql.service");
  EXPECT_FALSE(v2->v1);
  EXPECT_FALSE(parse_cgroup("").has_value());
}

TEST(HostDepthParse, CpuStatV1NanosecondsAndV2Microseconds) {
  auto v1 = parse_cpu_stat(
      "nr_periods 120\nnr_throttled 96\nthrottled_time 3822446570\nnr_bursts 0\n"
      "burst_time 0\n");
  EXPECT_EQ(v1.nr_periods, 120);
  EXPECT_EQ(v1.nr_throttled, 96);
  EXPECT_EQ(v1.throttled_ns, 3822446570);
  auto v2 = parse_cpu_stat(
      "usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 7\nnr_throttled 5\n"
      "throttled_usec 1234\n");
  EXPECT_EQ(v2.nr_periods, 7);
  EXPECT_EQ(v2.nr_throttled, 5);
  EXPECT_EQ(v2.throttled_ns, 1'234'000);
  // v2 without the cpu controller: usage only, throttling unknown.
  auto bare = parse_cpu_stat("usage_usec 100\nuser_usec 60\nsystem_usec 40\n");
  EXPECT_FALSE(bare.nr_throttled.has_value());
  EXPECT_FALSE(bare.throttled_ns.has_value());
}

TEST(HostDepthParse, CpuThrottleFoundUnderEachLayout) {
  test::TempDir dir;
  const auto root = dir.path();
  write_file(root / "cpu,cpuacct" / "a" / "cpu.stat",
             "nr_periods 1\nnr_throttled 1\nthrottled_time 10\n");
  write_file(root / "cpu" / "b" / "cpu.stat", "nr_periods 2\nnr_throttled 2\nthrottled_time 20\n");
  write_file(root / "c" / "cpu.stat", "nr_periods 3\nnr_throttled 3\nthrottled_usec 30\n");
  auto a = read_cpu_throttle(root.string(), {.path = "/a", .v1 = true});
  auto b = read_cpu_throttle(root.string(), {.path = "/b", .v1 = true});
  auto c = read_cpu_throttle(root.string(), {.path = "/c", .v1 = false});
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->throttled_ns, 10);
  EXPECT_EQ(b->throttled_ns, 20);
  EXPECT_EQ(c->throttled_ns, 30'000);
  EXPECT_FALSE(read_cpu_throttle(root.string(), {.path = "/none", .v1 = true}).has_value());
}

TEST(HostDepthParse, TaskStatKeepsAWholeCommWithParenthesesAndSpaces) {
  std::string text =
      "4321 (my (odd) name) D 1 4321 4321 0 -1 4194560 10 0 0 0 5 6 0 0 20 0 1 0 "
      "987654 1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 77 "
      "0 0\n";
  auto t = parse_task_stat(text);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->comm, "my (odd) name");
  EXPECT_EQ(t->state, 'D');
  EXPECT_EQ(t->start_ticks, 987654);
  EXPECT_EQ(t->blkio_ticks, 77);
  EXPECT_FALSE(parse_task_stat("12 (x) S 1 2").has_value());
}

TEST(HostDepthParse, AFieldWithTrailingGarbageIsMalformedNotItsDigits) {
  const std::string head = "4321 (x) S 1 4321 4321 0 -1 4194560 10 0 0 0 5 6 0 0 20 0 1 0 ";
  const std::string tail =
      " 1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 77 0 0\n";
  ASSERT_TRUE(parse_task_stat(head + "987654" + tail).has_value());
  ASSERT_TRUE(parse_pid_stat(head + "987654" + tail).has_value());
  EXPECT_FALSE(parse_task_stat(head + "987654x" + tail).has_value());
  EXPECT_FALSE(parse_pid_stat(head + "987654x" + tail).has_value());
  EXPECT_FALSE(parse_schedstat("10 20x 3\n").has_value());
  EXPECT_FALSE(parse_io("read_bytes: 12kB\nwrite_bytes: 3\n").has_value());
}

TEST(HostDepthParse, KernelStackDropsAddressPrefixes) {
  test::TempDir dir;
  auto path = dir.path() / "stack";
  write_file(path, "[<0>] submit_bio_wait+0x5e/0x90\n[<0>] blkdev_issue_flush+0x1c/0x30\n");
  EXPECT_EQ(read_kernel_stack(path.string()),
            "submit_bio_wait+0x5e/0x90\nblkdev_issue_flush+0x1c/0x30");
  EXPECT_FALSE(read_kernel_stack((dir.path() / "missing").string()).has_value());
}

TEST(HostDepthCgroups, FirstSightHasNoDeltaThenExactThrottling) {
  test::TempDir dir;
  const auto stat = dir.path() / "cpu" / "q" / "cpu.stat";
  write_file(stat, "nr_periods 10\nnr_throttled 4\nthrottled_time 5000000\n");
  CgroupThrottleTracker tracker(dir.path().string());
  const std::vector<CgroupRef> refs{{.path = "/q", .v1 = true}};
  schema::Batch out;
  tracker.observe(1, 100 * kMs, refs, out);
  ASSERT_EQ(out.cgroup_samples.size(), 1u);
  EXPECT_EQ(out.cgroup_samples[0].cgroup, "/q");
  EXPECT_FALSE(out.cgroup_samples[0].nr_throttled.has_value());
  EXPECT_FALSE(out.cgroup_samples[0].span_ns.has_value());

  write_file(stat, "nr_periods 11\nnr_throttled 5\nthrottled_time 5080000\n");
  tracker.observe(2, 200 * kMs, refs, out);
  ASSERT_EQ(out.cgroup_samples.size(), 2u);
  const auto& r = out.cgroup_samples[1];
  EXPECT_EQ(r.nr_periods, 1);
  EXPECT_EQ(r.nr_throttled, 1);
  EXPECT_EQ(r.throttled_ns, 80'000);
  EXPECT_EQ(r.span_ns, 100 * kMs);

  // A recreated cgroup (counters went back) gives no delta, not a negative one.
  write_file(stat, "nr_periods 1\nnr_throttled 0\nthrottled_time 0\n");
  tracker.observe(3, 300 * kMs, refs, out);
  EXPECT_FALSE(out.cgroup_samples[2].throttled_ns.has_value());
  // Forgotten after 60 s unseen.
  tracker.observe(4, 61'000 * kMs, {}, out);
  EXPECT_EQ(tracker.tracked(), 0u);
}

// --- ProcessTracker depth --------------------------------------------------

class FakeProc {
 public:
  const std::string& root() const { return root_; }
  void write(int pid, const std::string& file, std::string_view content) const {
    write_file(dir_.path() / std::to_string(pid) / file, content);
  }
  void remove(int pid) const { std::filesystem::remove_all(dir_.path() / std::to_string(pid)); }

 private:
  test::TempDir dir_;
  std::string root_ = dir_.path().string();
};

TickInfo tick(std::int64_t sample_id, std::int64_t mono_ns, bool delayacct = true) {
  return {.sample_id = sample_id,
          .mono_ns = mono_ns,
          .boot_wall_ns = 0,
          .ticks_per_s = 100,
          .delayacct_on = delayacct};
}

ProcessObservation busy(int pid, std::int64_t start_ticks, std::int64_t blkio_ticks,
                        int threads = 1) {
  return {.pid = pid,
          .start_ticks = start_ticks,
          .ppid = 1,
          .state = 'D',
          .comm = "dd",
          .threads = threads,
          .blkio_ticks = blkio_ticks};
}

std::string io_text(std::int64_t r, std::int64_t w) {
  return "rchar: 0\nwchar: 0\nread_bytes: " + std::to_string(r) +
         "\nwrite_bytes: " + std::to_string(w) + "\n";
}

TEST(HostDepthTracker, IoBlkioAndCgroupDeltasStartAtSecondSight) {
  FakeProc proc;
  proc.write(50, "schedstat", "100 0 1\n");
  proc.write(50, "io", io_text(4096, 1'000'000));
  proc.write(50, "cgroup", "1:cpu:/bench\n0::/\n");
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  schema::Batch out;
  tracker.observe(tick(1, 0), {busy(50, 777, 300)}, out);
  ASSERT_EQ(out.process_samples.size(), 1u);
  ASSERT_EQ(out.processes.size(), 1u);
  EXPECT_EQ(out.processes[0].cgroup, "/bench");
  // First sight: the lifetime counters are not a delta.
  EXPECT_FALSE(out.process_samples[0].read_bytes.has_value());
  EXPECT_FALSE(out.process_samples[0].write_bytes.has_value());
  EXPECT_FALSE(out.process_samples[0].blkio_delay_ns.has_value());
  ASSERT_EQ(tracker.active_cgroups().size(), 1u);
  EXPECT_EQ(tracker.active_cgroups()[0].path, "/bench");

  proc.write(50, "schedstat", "200 0 2\n");
  proc.write(50, "io", io_text(8192, 1'065'536));
  proc.write(50, "cgroup", "1:cpu:/bench/moved\n0::/\n");
  // A cgroup change is confirmed by stat, read again: the process lives on.
  proc.write(50, "stat", "50 (dd) D 1 50 50 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 777 0 5\n");
  tracker.observe(tick(2, 100 * kMs), {busy(50, 777, 303)}, out);
  ASSERT_EQ(out.process_samples.size(), 2u);
  const auto& s = out.process_samples[1];
  EXPECT_EQ(s.read_bytes, 4096);
  EXPECT_EQ(s.write_bytes, 65536);
  EXPECT_EQ(s.blkio_delay_ns, 30 * kMs);  // 3 ticks at 100 Hz
  // Moving cgroup re-stores the process row with the new path.
  ASSERT_EQ(out.processes.size(), 2u);
  EXPECT_EQ(out.processes[1].process_id, out.processes[0].process_id);
  EXPECT_EQ(out.processes[1].cgroup, "/bench/moved");

  // Delay accounting switched off: NULL, not 0; and no stale baseline after.
  tracker.observe(tick(3, 200 * kMs, false), {busy(50, 777, 303)}, out);
  EXPECT_FALSE(out.process_samples[2].blkio_delay_ns.has_value());
  tracker.observe(tick(4, 300 * kMs, true), {busy(50, 777, 310)}, out);
  EXPECT_FALSE(out.process_samples[3].blkio_delay_ns.has_value());

  // Pid reused (new start time) with bigger lifetime counters: no delta.
  proc.write(50, "io", io_text(1'000'000'000, 1'000'000'000));
  tracker.observe(tick(5, 400 * kMs), {busy(50, 999, 50'000)}, out);
  const auto& reused = out.process_samples.back();
  EXPECT_NE(reused.process_id, s.process_id);
  EXPECT_FALSE(reused.read_bytes.has_value());
  EXPECT_FALSE(reused.blkio_delay_ns.has_value());
}

TEST(HostDepthTracker, ThreadRowsWithExactDeltasForEveryThreadMode) {
  FakeProc proc;
  auto task = [&](int tid, char state, std::int64_t start, const std::string& schedstat,
                  const std::string& comm) {
    proc.write(70, "task/" + std::to_string(tid) + "/stat",
               std::to_string(tid) + " (" + comm + ") " + state +
                   " 1 70 70 0 -1 0 0 0 0 0 1 1 0 0 20 0 3 0 " + std::to_string(start) +
                   " 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
    proc.write(70, "task/" + std::to_string(tid) + "/schedstat", schedstat);
    proc.write(70, "task/" + std::to_string(tid) + "/wchan", "futex_wait_queue");
  };
  task(70, 'S', 500, "1000 0 5\n", "app");
  task(71, 'R', 510, "2000000 100 9\n", "spinner");
  task(72, 'S', 520, "3000 0 2\n", "sleeper");
  proc.write(70, "schedstat", "1000 0 5\n");
  ProcessTracker tracker(proc.root(), 10'000 * kMs, TrackerDepth{.all_threads = true});
  ProcessObservation app{.pid = 70, .start_ticks = 500, .state = 'S', .comm = "app", .threads = 3};
  schema::Batch out;
  tracker.observe(tick(1, 0), {app}, out);
  // First sight: only the runnable thread, without deltas.
  ASSERT_EQ(out.thread_samples.size(), 1u);
  EXPECT_EQ(out.thread_samples[0].tid, 71);
  EXPECT_EQ(out.thread_samples[0].comm, "spinner");
  EXPECT_FALSE(out.thread_samples[0].cpu_ns.has_value());
  EXPECT_FALSE(out.thread_samples[0].span_ns.has_value());

  task(71, 'R', 510, "92000000 300 19\n", "spinner");
  tracker.observe(tick(2, 100 * kMs), {app}, out);
  // The sleeper did nothing: no row. The spinner: exact deltas.
  ASSERT_EQ(out.thread_samples.size(), 2u);
  const auto& r = out.thread_samples[1];
  EXPECT_EQ(r.tid, 71);
  EXPECT_EQ(r.cpu_ns, 90'000'000);
  EXPECT_EQ(r.run_delay_ns, 200);
  EXPECT_EQ(r.span_ns, 100 * kMs);
  EXPECT_FALSE(r.wchan.has_value());  // running

  // Tid reused by a new thread (new start time): first sight again.
  task(71, 'D', 600, "999999999 0 1\n", "spinner2");
  tracker.observe(tick(3, 200 * kMs), {app}, out);
  ASSERT_EQ(out.thread_samples.size(), 3u);
  EXPECT_EQ(out.thread_samples[2].comm, "spinner2");
  EXPECT_FALSE(out.thread_samples[2].cpu_ns.has_value());
  EXPECT_EQ(out.thread_samples[2].wchan, "futex_wait_queue");
}

TEST(HostDepthTracker, AllThreadsFindsAThreadInDInsideAQuietProcess) {
  FakeProc proc;
  auto task = [&](int tid, char state) {
    proc.write(90, "task/" + std::to_string(tid) + "/stat",
               std::to_string(tid) + " (io) " + state +
                   " 1 90 90 0 -1 0 0 0 0 0 1 1 0 0 20 0 2 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
                   "0 0 0 0 0\n");
    proc.write(90, "task/" + std::to_string(tid) + "/schedstat", "10 0 1\n");
    proc.write(90, "task/" + std::to_string(tid) + "/wchan", "io_schedule");
  };
  task(90, 'S');
  task(91, 'S');
  ProcessTracker tracker(proc.root(), 10'000 * kMs, TrackerDepth{.all_threads = true});
  ProcessObservation p{.pid = 90, .start_ticks = 5, .state = 'S', .comm = "app", .threads = 2};
  schema::Batch out;
  tracker.observe(tick(1, 0), {p}, out);
  EXPECT_TRUE(out.thread_samples.empty());
  // Thread 91 blocks in D; no CPU moves, so the process itself gets no row...
  task(91, 'D');
  tracker.observe(tick(2, 100 * kMs), {p}, out);
  EXPECT_EQ(out.process_samples.size(), 1u);  // the first-sight row only
  // ...but its blocked thread does.
  ASSERT_EQ(out.thread_samples.size(), 1u);
  EXPECT_EQ(out.thread_samples[0].tid, 91);
  EXPECT_EQ(out.thread_samples[0].state, 'D');
  EXPECT_EQ(out.thread_samples[0].wchan, "io_schedule");
  EXPECT_EQ(out.thread_samples[0].cpu_ns, 0);
  EXPECT_EQ(out.thread_samples[0].span_ns, 100 * kMs);
}

TEST(HostDepthTracker, ByDefaultOnlyAProcessUsingHalfACoreIsSampledPerThread) {
  FakeProc proc;
  auto task = [&](int tid, const std::string& schedstat) {
    proc.write(80, "task/" + std::to_string(tid) + "/stat",
               std::to_string(tid) +
                   " (t) R 1 80 80 0 -1 0 0 0 0 0 1 1 0 0 20 0 2 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
                   "0 0 0 0 0 0 0\n");
    proc.write(80, "task/" + std::to_string(tid) + "/schedstat", schedstat);
  };
  task(80, "0 0 1\n");
  task(81, "0 0 1\n");
  ProcessTracker tracker(proc.root(), 10'000 * kMs);  // default depth
  ProcessObservation p{.pid = 80, .start_ticks = 5, .state = 'R', .comm = "p", .threads = 2};
  schema::Batch out;
  // A multi-threaded process's CPU is the sum over task/*/schedstat.
  // 0.3 cores over the first second: not per thread.
  tracker.observe(tick(1, 0), {p}, out);
  task(81, "300000000 0 2\n");
  tracker.observe(tick(2, 1000 * kMs), {p}, out);
  EXPECT_TRUE(out.thread_samples.empty());
  // 0.6 cores over the next second: per thread from then on.
  task(81, "900000000 0 3\n");
  tracker.observe(tick(3, 2000 * kMs), {p}, out);
  EXPECT_EQ(out.thread_samples.size(), 2u);  // both R, first sight
}

// A backend that exits while a tick reads it: under cgroup v1 its
// /proc/PID/cgroup says "/" from do_exit() on (and its cmdline is empty). The
// process row keeps the cgroup it lived in, or cpu_throttle loses the run
// delay the process had while throttled.
TEST(HostDepthTracker, AnExitingProcessKeepsTheCgroupItLivedIn) {
  FakeProc proc;
  // /proc/50/stat of the same process (start 777) with the given flags.
  auto stat = [&](char state, unsigned flags) {
    proc.write(
        50, "stat",
        fmt::format("50 (dd) {} 1 50 50 0 -1 {} 0 0 0 0 1 1 0 0 20 0 1 0 777 0 5\n", state, flags));
  };
  stat('D', 0x400000);
  proc.write(50, "schedstat", "100 0 1\n");
  proc.write(50, "cgroup", "4:cpu,cpuacct:/quota\n");
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  schema::Batch out;
  tracker.observe(tick(1, 0), {busy(50, 777, 0)}, out);
  ASSERT_EQ(out.processes.size(), 1u);
  EXPECT_EQ(out.processes[0].cgroup, "/quota");

  // Listed as exiting: its cgroup file is not read.
  proc.write(50, "schedstat", "200 0 2\n");
  proc.write(50, "cgroup", "4:cpu,cpuacct:/\n");
  auto exiting = busy(50, 777, 0);
  exiting.exiting = true;
  tracker.observe(tick(2, 100 * kMs), {exiting}, out);
  EXPECT_EQ(out.processes.size(), 1u);  // not re-stored with "/"
  EXPECT_EQ(out.process_samples.size(), 2u);

  // Listed alive, exiting by the time its cgroup is read: stat, read again,
  // says so.
  stat('R', 0x400004);
  proc.write(50, "schedstat", "300 0 3\n");
  tracker.observe(tick(3, 200 * kMs), {busy(50, 777, 0)}, out);
  EXPECT_EQ(out.processes.size(), 1u);

  // A live process that really moves to the root is re-stored.
  stat('D', 0x400000);
  proc.write(50, "schedstat", "400 0 4\n");
  tracker.observe(tick(4, 300 * kMs), {busy(50, 777, 0)}, out);
  ASSERT_EQ(out.processes.size(), 2u);
  EXPECT_EQ(out.processes[1].cgroup, "/");
}

TEST(HostDepthScanner, FlagsWithPfExitingOrAZombieStateMarkTheProcessExiting) {
  FakeProc proc;
  proc.write(42, "stat",
             "42 (p) R 1 42 42 0 -1 4194564 0 0 0 0 1 1 0 0 20 0 1 0 500 0 5\n");  // 0x400104
  proc.write(42, "schedstat", "1 1 1\n");
  proc.write(43, "stat", "43 (p) Z 1 43 43 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 501 0 0\n");
  proc.write(43, "schedstat", "1 1 1\n");
  proc.write(44, "stat", "44 (p) R 1 44 44 0 -1 4194560 0 0 0 0 1 1 0 0 20 0 1 0 502 0 5\n");
  proc.write(44, "schedstat", "1 1 1\n");
  ProcScanner scanner(proc.root());
  std::vector<ProcessObservation> obs;
  ASSERT_TRUE(scanner.scan(obs, 4096));
  ASSERT_EQ(obs.size(), 3u);
  std::sort(obs.begin(), obs.end(), [](auto& a, auto& b) { return a.pid < b.pid; });
  EXPECT_TRUE(obs[0].exiting);
  EXPECT_TRUE(obs[1].exiting);
  EXPECT_FALSE(obs[2].exiting);
}

TEST(HostDepthScanner, ReadsStatAndSchedstatOfEveryProcessAndReopensForANewProcess) {
  FakeProc proc;
  const std::string stat =
      "42 (post gres) S 1 42 42 0 -1 4194560 10 0 7 0 150 25 0 0 20 0 1 0 123456 1000 300 "
      "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 9 0 0\n";
  proc.write(42, "stat", stat);
  proc.write(42, "schedstat", "5000 60 7\n");
  proc.write(43, "stat", "43 (t) S 1 43 43 0 -1 0 0 0 0 0 1 1 0 0 20 0 4 0 99 0 5\n");
  proc.write(43, "schedstat", "1 1 1\n");
  write_file(std::filesystem::path(proc.root()) / "self" / "stat", "not a process");
  ProcScanner scanner(proc.root());
  std::vector<ProcessObservation> obs;
  ASSERT_TRUE(scanner.scan(obs, 4096));
  ASSERT_EQ(obs.size(), 2u);
  std::sort(obs.begin(), obs.end(), [](auto& a, auto& b) { return a.pid < b.pid; });
  EXPECT_EQ(obs[0].comm, "post gres");
  EXPECT_EQ(obs[0].state, 'S');
  EXPECT_EQ(obs[0].ppid, 1);
  EXPECT_EQ(obs[0].majflt, 7);
  EXPECT_EQ(obs[0].utime_ticks, 150);
  EXPECT_EQ(obs[0].stime_ticks, 25);
  EXPECT_EQ(obs[0].start_ticks, 123456);
  EXPECT_EQ(obs[0].rss_bytes, 300 * 4096);
  EXPECT_EQ(obs[0].blkio_ticks, 9);
  EXPECT_FALSE(obs[0].exiting);  // flags 0x400100: no PF_EXITING
  ASSERT_TRUE(obs[0].schedstat.has_value());
  EXPECT_EQ(obs[0].schedstat->on_cpu_ns, 5000);
  // Multi-threaded: schedstat is left to the tracker (sum over task/*).
  EXPECT_EQ(obs[1].threads, 4);
  EXPECT_FALSE(obs[1].schedstat.has_value());
  // schedstat is opened before stat tells the thread count: 2 files each.
  EXPECT_EQ(scanner.open_files(), 4u);

  // 43 exits: its file is closed. 42's kept file is read again from offset 0.
  proc.remove(43);
  proc.write(42, "schedstat", "9000 60 8\n");
  ASSERT_TRUE(scanner.scan(obs, 4096));
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_EQ(obs[0].schedstat->on_cpu_ns, 9000);
  EXPECT_EQ(scanner.open_files(), 2u);
}

// A /proc/PID/stat line with the fields the scanner uses.
std::string stat_line(int pid, char state, std::int64_t utime, int threads, std::int64_t start,
                      std::int64_t rss_pages) {
  return fmt::format(
      "{} (p) {} 1 {} {} 0 -1 0 0 0 0 0 {} 0 0 0 20 0 {} 0 {} 1000 {} 18446744073709551615 1 1 0 "
      "0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
      pid, state, pid, pid, utime, threads, start, rss_pages);
}

TEST(HostDepthScanner, SleeperWhoseSchedstatDidNotMoveReusesItsLastStatRead) {
  FakeProc proc;
  proc.write(42, "stat", stat_line(42, 'S', 150, 1, 1000, 300));
  proc.write(42, "schedstat", "5000 60 7\n");
  proc.write(43, "stat", stat_line(43, 'R', 10, 1, 1001, 5));
  proc.write(43, "schedstat", "1 1 1\n");
  ProcScanner scanner(proc.root());
  std::vector<ProcessObservation> obs;
  auto by_pid = [&](int pid) {
    auto it = std::find_if(obs.begin(), obs.end(), [&](auto& o) { return o.pid == pid; });
    EXPECT_NE(it, obs.end());
    return *it;
  };
  ASSERT_TRUE(scanner.scan(obs, 4096));
  EXPECT_FALSE(by_pid(42).stat_cached);
  EXPECT_EQ(by_pid(42).utime_ticks, 150);
  // stat changes but schedstat does not: 42 (S) has not run, its last read
  // is reused; 43 (R) is read again whatever its schedstat says.
  proc.write(42, "stat", stat_line(42, 'S', 999, 1, 1000, 1));
  proc.write(43, "stat", stat_line(43, 'R', 20, 1, 1001, 5));
  ASSERT_TRUE(scanner.scan(obs, 4096));
  EXPECT_TRUE(by_pid(42).stat_cached);
  EXPECT_EQ(by_pid(42).utime_ticks, 150);
  EXPECT_EQ(by_pid(42).rss_bytes, 300 * 4096);
  EXPECT_FALSE(by_pid(43).stat_cached);
  EXPECT_EQ(by_pid(43).utime_ticks, 20);
  // Its schedstat moves (it ran): stat is read again.
  proc.write(42, "schedstat", "5000 60 8\n");
  ASSERT_TRUE(scanner.scan(obs, 4096));
  EXPECT_FALSE(by_pid(42).stat_cached);
  EXPECT_EQ(by_pid(42).utime_ticks, 999);
  EXPECT_EQ(by_pid(42).rss_bytes, 4096);
  // A multi-threaded process is never cached (its other threads' runs do
  // not show in /proc/PID/schedstat).
  proc.write(42, "stat", stat_line(42, 'S', 1001, 2, 1000, 1));
  proc.write(42, "schedstat", "5000 60 9\n");
  ASSERT_TRUE(scanner.scan(obs, 4096));
  proc.write(42, "stat", stat_line(42, 'S', 1002, 2, 1000, 1));
  ASSERT_TRUE(scanner.scan(obs, 4096));
  EXPECT_FALSE(by_pid(42).stat_cached);
  EXPECT_EQ(by_pid(42).utime_ticks, 1002);
}

TEST(HostDepthScanner, ListsProcOnlyWhenAPidWasAllocatedSinceTheLastListing) {
  FakeProc proc;
  write_file(std::filesystem::path(proc.root()) / "loadavg", "0.10 0.20 0.30 1/80 500\n");
  proc.write(42, "stat", stat_line(42, 'S', 1, 1, 1000, 1));
  proc.write(42, "schedstat", "1 0 1\n");
  ProcScanner scanner(proc.root());
  std::vector<ProcessObservation> obs;
  ASSERT_TRUE(scanner.scan(obs, 4096));
  EXPECT_EQ(scanner.listings(), 1);
  ASSERT_EQ(obs.size(), 1u);
  // A new directory without a new pid in loadavg is not looked for...
  proc.write(44, "stat", stat_line(44, 'S', 1, 1, 1002, 1));
  proc.write(44, "schedstat", "1 0 1\n");
  ASSERT_TRUE(scanner.scan(obs, 4096));
  EXPECT_EQ(scanner.listings(), 1);
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_EQ(obs[0].pid, 42);
  // ...a moved last pid makes the scanner list again.
  write_file(std::filesystem::path(proc.root()) / "loadavg", "0.10 0.20 0.30 1/81 501\n");
  ASSERT_TRUE(scanner.scan(obs, 4096));
  EXPECT_EQ(scanner.listings(), 2);
  EXPECT_EQ(obs.size(), 2u);
}

TEST(HostDepthTracker, HeartbeatOfACachedObservationReadsStatAgain) {
  FakeProc proc;
  proc.write(61, "schedstat", "100 0 1\n");
  proc.write(61, "stat", stat_line(61, 'S', 7, 1, 3, 50));
  ProcessTracker tracker(proc.root(), 250 * kMs);
  ProcessObservation idle{.pid = 61,
                          .start_ticks = 3,
                          .state = 'S',
                          .comm = "p",
                          .utime_ticks = 7,
                          .rss_bytes = 50 * 4096};
  schema::Batch out;
  tracker.observe(tick(1, 0), {idle}, out);
  // The scanner reuses its old read (rss 50 pages); the file says 20 now.
  proc.write(61, "stat", stat_line(61, 'S', 7, 1, 3, 20));
  idle.stat_cached = true;
  tracker.observe(tick(2, 100 * kMs), {idle}, out);
  EXPECT_EQ(out.process_samples.size(), 1u);  // no row: not active, no heartbeat yet
  tracker.observe(tick(3, 300 * kMs), {idle}, out);
  ASSERT_EQ(out.process_samples.size(), 2u);
  EXPECT_EQ(out.process_samples[1].rss_bytes, 20 * 4096);
  EXPECT_EQ(out.process_samples[1].utime_ticks, 0);
}

TEST(HostDepthScanner, RealProcListsThisProcessWithItsStartTime) {
  ProcScanner scanner("/proc");
  std::vector<ProcessObservation> obs;
  ASSERT_TRUE(scanner.scan(obs, 4096));
  ASSERT_TRUE(scanner.scan(obs, 4096));  // second pass: kept files
  std::string text;
  ASSERT_TRUE(read_proc_file("/proc/self/stat", text));
  auto self = parse_pid_stat(text);
  ASSERT_TRUE(self.has_value());
  auto it = std::find_if(obs.begin(), obs.end(), [&](auto& o) { return o.pid == ::getpid(); });
  ASSERT_NE(it, obs.end());
  EXPECT_EQ(it->start_ticks, self->start_ticks);
  EXPECT_EQ(it->comm, self->comm);
}

TEST(HostDepthTracker, QuietHeartbeatReusesStatusIoAndWchanWithoutReading) {
  FakeProc proc;
  proc.write(60, "schedstat", "100 0 1\n");
  proc.write(60, "status", "voluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t1\n");
  proc.write(60, "io", io_text(10, 20));
  proc.write(60, "wchan", "do_epoll_wait");
  ProcessTracker tracker(proc.root(), 250 * kMs);
  ProcessObservation idle{.pid = 60, .start_ticks = 3, .state = 'S', .comm = "idle"};
  schema::Batch out;
  tracker.observe(tick(1, 0), {idle}, out);
  // The files vanish; a task that did not run cannot have changed them.
  proc.write(60, "status", "");
  proc.write(60, "io", "");
  proc.write(60, "wchan", "");
  tracker.observe(tick(2, 100 * kMs), {idle}, out);
  tracker.observe(tick(3, 300 * kMs), {idle}, out);
  ASSERT_EQ(out.process_samples.size(), 2u);
  const auto& hb = out.process_samples[1];
  EXPECT_EQ(hb.voluntary_ctxt_switches, 0);
  EXPECT_EQ(hb.read_bytes, 0);
  EXPECT_EQ(hb.wchan, "do_epoll_wait");
  EXPECT_EQ(hb.span_ns, 300 * kMs);
}

}  // namespace
}  // namespace stallscope::sampler::detail
