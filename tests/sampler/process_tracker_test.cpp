// detail::ProcessTracker on a fake /proc tree: which processes get a row,
// with which exact deltas, and how (pid, start_ticks) identity is kept.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/units.h"
#include "sampler/procfs.h"
#include "support/test_support.h"

namespace stallscope::sampler::detail {
namespace {

using namespace std::string_view_literals;

using test::kMs;
constexpr std::int64_t kBootWallNs = 1'700'000'000'000'000'000;

class FakeProc {
 public:
  const std::string& root() const { return root_; }
  void write(int pid, const std::string& file, std::string_view content) const {
    auto path = dir_.path() / std::to_string(pid) / file;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
  }
  void schedstat(int pid, std::int64_t on_cpu_ns, std::int64_t delay_ns,
                 std::int64_t slices) const {
    write(pid, "schedstat",
          std::to_string(on_cpu_ns) + " " + std::to_string(delay_ns) + " " +
              std::to_string(slices) + "\n");
  }
  void switches(int pid, std::int64_t voluntary, std::int64_t nonvoluntary) const {
    write(pid, "status",
          "Name:\tx\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t" + std::to_string(voluntary) +
              "\nnonvoluntary_ctxt_switches:\t" + std::to_string(nonvoluntary) + "\n");
  }

 private:
  test::TempDir dir_;
  std::string root_ = dir_.path().string();
};

TickInfo tick(std::int64_t sample_id, std::int64_t mono_ns) {
  return {
      .sample_id = sample_id, .mono_ns = mono_ns, .boot_wall_ns = kBootWallNs, .ticks_per_s = 100};
}

ProcessObservation sleeper(int pid, std::int64_t start_ticks) {
  return {.pid = pid,
          .start_ticks = start_ticks,
          .ppid = 1,
          .state = 'S',
          .comm = "postgres",
          .utime_ticks = 10,
          .stime_ticks = 5,
          .majflt = 2,
          .rss_bytes = 8192};
}

void expect_no_deltas(const schema::ProcessSampleRow& r) {
  EXPECT_FALSE(r.cpu_ns.has_value());
  EXPECT_FALSE(r.run_delay_ns.has_value());
  EXPECT_FALSE(r.utime_ticks.has_value());
  EXPECT_FALSE(r.stime_ticks.has_value());
  EXPECT_FALSE(r.majflt.has_value());
  EXPECT_FALSE(r.voluntary_ctxt_switches.has_value());
  EXPECT_FALSE(r.nonvoluntary_ctxt_switches.has_value());
  EXPECT_FALSE(r.span_ns.has_value());
}

TEST(HostProcessTracker, FirstSightGivesProcessRowAndSampleWithoutDeltas) {
  FakeProc proc;
  proc.schedstat(100, 5'000'000, 70'000, 40);
  proc.switches(100, 30, 4);
  proc.write(100, "wchan", "do_epoll_wait");
  proc.write(100, "cmdline", "psql\0host=db password=s3cret\0"sv);
  ProcessTracker tracker(proc.root(), 10'000 * kMs);

  schema::Batch out;
  tracker.observe(tick(1, 0), {sleeper(100, 12'345)}, out);

  ASSERT_EQ(out.processes.size(), 1u);
  const auto& p = out.processes[0];
  EXPECT_EQ(p.process_id, 1);
  EXPECT_EQ(p.pid, 100);
  EXPECT_EQ(p.start_ticks, 12'345);
  EXPECT_EQ(p.start_ns, kBootWallNs + 123'450'000'000);  // 12,345 ticks at 100 Hz
  EXPECT_EQ(p.ppid, 1);
  EXPECT_EQ(p.comm, "postgres");
  EXPECT_EQ(p.cmdline, "psql host=db password=***");
  EXPECT_EQ(p.first_sample_id, 1);

  ASSERT_EQ(out.process_samples.size(), 1u);
  const auto& s = out.process_samples[0];
  EXPECT_EQ(s.sample_id, 1);
  EXPECT_EQ(s.process_id, 1);
  EXPECT_EQ(s.state, 'S');
  EXPECT_EQ(s.wchan, "do_epoll_wait");
  EXPECT_EQ(s.rss_bytes, 8192);
  expect_no_deltas(s);
  EXPECT_EQ(tracker.tracked(), 1u);
}

TEST(HostProcessTracker, IdleProcessGetsNoRowAndActiveOneGetsExactDeltas) {
  FakeProc proc;
  proc.schedstat(100, 5'000'000, 70'000, 40);
  proc.switches(100, 30, 4);
  proc.write(100, "wchan", "do_epoll_wait");
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  schema::Batch out;
  tracker.observe(tick(1, 0), {sleeper(100, 7)}, out);

  // Nothing moved: no row.
  schema::Batch idle;
  tracker.observe(tick(2, 100 * kMs), {sleeper(100, 7)}, idle);
  EXPECT_TRUE(idle.process_samples.empty());
  EXPECT_TRUE(idle.processes.empty());

  // It ran: deltas since its previous row (tick 1), not since tick 2.
  proc.schedstat(100, 7'500'000, 90'000, 43);
  proc.switches(100, 32, 5);
  auto obs = sleeper(100, 7);
  obs.utime_ticks = 11;
  obs.majflt = 5;
  obs.rss_bytes = 16384;
  schema::Batch active;
  tracker.observe(tick(3, 200 * kMs), {obs}, active);
  ASSERT_EQ(active.process_samples.size(), 1u);
  const auto& s = active.process_samples[0];
  EXPECT_TRUE(active.processes.empty());
  EXPECT_EQ(s.sample_id, 3);
  EXPECT_EQ(s.process_id, 1);
  EXPECT_EQ(s.cpu_ns, 2'500'000);
  EXPECT_EQ(s.run_delay_ns, 20'000);
  EXPECT_EQ(s.utime_ticks, 1);
  EXPECT_EQ(s.stime_ticks, 0);
  EXPECT_EQ(s.majflt, 3);
  EXPECT_EQ(s.voluntary_ctxt_switches, 2);
  EXPECT_EQ(s.nonvoluntary_ctxt_switches, 1);
  EXPECT_EQ(s.span_ns, 200 * kMs);
  EXPECT_EQ(s.rss_bytes, 16384);
  EXPECT_EQ(s.wchan, "do_epoll_wait");
}

TEST(HostProcessTracker, ContextSwitchWithoutCpuTimeIsActivity) {
  FakeProc proc;
  proc.schedstat(100, 5'000'000, 0, 40);
  proc.switches(100, 30, 4);
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  schema::Batch out;
  tracker.observe(tick(1, 0), {sleeper(100, 7)}, out);
  proc.schedstat(100, 5'000'000, 0, 41);  // scheduled in once, no measurable CPU
  proc.switches(100, 31, 4);
  schema::Batch next;
  tracker.observe(tick(2, 100 * kMs), {sleeper(100, 7)}, next);
  ASSERT_EQ(next.process_samples.size(), 1u);
  EXPECT_EQ(next.process_samples[0].cpu_ns, 0);
  EXPECT_EQ(next.process_samples[0].voluntary_ctxt_switches, 1);
}

TEST(HostProcessTracker, RunnableOrBlockedProcessAlwaysGetsRowWithWchanOnlyWhenNotRunning) {
  FakeProc proc;
  proc.schedstat(100, 1'000, 0, 1);
  proc.switches(100, 1, 0);
  proc.write(100, "wchan", "folio_wait_bit_common");
  proc.schedstat(200, 1'000, 0, 1);
  proc.switches(200, 1, 0);
  proc.write(200, "wchan", "0");
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  auto blocked = sleeper(100, 1);
  blocked.state = 'D';
  auto running = sleeper(200, 1);
  running.state = 'R';
  schema::Batch out;
  tracker.observe(tick(1, 0), {blocked, running}, out);
  schema::Batch next;
  tracker.observe(tick(2, 100 * kMs), {blocked, running}, next);  // no counter moved
  ASSERT_EQ(next.process_samples.size(), 2u);
  EXPECT_EQ(next.process_samples[0].state, 'D');
  EXPECT_EQ(next.process_samples[0].wchan, "folio_wait_bit_common");
  EXPECT_EQ(next.process_samples[0].cpu_ns, 0);
  EXPECT_EQ(next.process_samples[1].state, 'R');
  EXPECT_FALSE(next.process_samples[1].wchan.has_value());
}

TEST(HostProcessTracker, HeartbeatGivesIdleProcessARowWithZeroDeltas) {
  FakeProc proc;
  proc.schedstat(100, 5'000'000, 70'000, 40);
  proc.switches(100, 30, 4);
  ProcessTracker tracker(proc.root(), 250 * kMs);
  schema::Batch out;
  tracker.observe(tick(1, 0), {sleeper(100, 7)}, out);
  schema::Batch b2, b3, b4;
  tracker.observe(tick(2, 100 * kMs), {sleeper(100, 7)}, b2);
  tracker.observe(tick(3, 200 * kMs), {sleeper(100, 7)}, b3);
  tracker.observe(tick(4, 300 * kMs), {sleeper(100, 7)}, b4);
  EXPECT_TRUE(b2.process_samples.empty());
  EXPECT_TRUE(b3.process_samples.empty());
  ASSERT_EQ(b4.process_samples.size(), 1u);
  const auto& s = b4.process_samples[0];
  EXPECT_EQ(s.span_ns, 300 * kMs);
  EXPECT_EQ(s.cpu_ns, 0);
  EXPECT_EQ(s.run_delay_ns, 0);
  EXPECT_EQ(s.utime_ticks, 0);
  EXPECT_EQ(s.voluntary_ctxt_switches, 0);
  EXPECT_EQ(s.nonvoluntary_ctxt_switches, 0);
}

// A process asleep on a full pipe (or any wait channel that is not an idle
// one) gets a row every tick while it sleeps, its state and wchan in each;
// one asleep in epoll does not (heartbeat only), nor does a kernel thread.
TEST(HostProcessTracker, HeldUpSleeperGetsARowEveryTickWithItsWchan) {
  FakeProc proc;
  proc.schedstat(100, 5'000'000, 70'000, 40);
  proc.switches(100, 30, 4);
  proc.write(100, "wchan", "anon_pipe_write");
  proc.schedstat(101, 1'000'000, 0, 10);
  proc.switches(101, 3, 0);
  proc.write(101, "wchan", "do_epoll_wait");
  proc.schedstat(102, 1'000'000, 0, 10);
  proc.switches(102, 3, 0);
  proc.write(102, "wchan", "worker_thread");
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  auto kthread = sleeper(102, 9);
  kthread.ppid = 2;
  const std::vector<ProcessObservation> all = {sleeper(100, 7), sleeper(101, 8), kthread};
  schema::Batch first;
  tracker.observe(tick(1, 0), all, first);
  ASSERT_EQ(first.process_samples.size(), 3u);
  // The wchan file is gone: later rows cannot have read it again.
  std::filesystem::remove(std::filesystem::path(proc.root()) / "100" / "wchan");
  for (int i = 2; i <= 5; ++i) {
    schema::Batch b;
    tracker.observe(tick(i, (i - 1) * 100 * kMs), all, b);
    ASSERT_EQ(b.process_samples.size(), 1u) << "tick " << i;
    const auto& s = b.process_samples[0];
    EXPECT_EQ(s.process_id, 1);
    EXPECT_EQ(s.state, 'S');
    EXPECT_EQ(s.wchan, "anon_pipe_write");
    EXPECT_EQ(s.span_ns, 100 * kMs);
    EXPECT_EQ(s.cpu_ns, 0);
  }
  // It runs again and sleeps in epoll: back to rows only when it moves.
  proc.schedstat(100, 6'000'000, 70'000, 41);
  proc.write(100, "wchan", "do_epoll_wait");
  schema::Batch woke, quiet;
  tracker.observe(tick(6, 500 * kMs), all, woke);
  ASSERT_EQ(woke.process_samples.size(), 1u);
  EXPECT_EQ(woke.process_samples[0].wchan, "do_epoll_wait");
  EXPECT_EQ(woke.process_samples[0].cpu_ns, 1'000'000);
  tracker.observe(tick(7, 600 * kMs), all, quiet);
  EXPECT_TRUE(quiet.process_samples.empty());
}

TEST(HostProcessTracker, ReusedPidIsNewProcessWithoutDeltas) {
  FakeProc proc;
  proc.schedstat(100, 900'000'000, 0, 500);
  proc.switches(100, 400, 20);
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  schema::Batch out;
  tracker.observe(tick(1, 0), {sleeper(100, 7)}, out);

  // Same pid, later start: a new process. Its counters are smaller than the
  // old one's; no delta must come out of the pair.
  proc.schedstat(100, 1'000, 0, 1);
  proc.switches(100, 1, 0);
  auto reused = sleeper(100, 9'000);
  reused.utime_ticks = 0;
  schema::Batch next;
  tracker.observe(tick(2, 100 * kMs), {reused}, next);
  ASSERT_EQ(next.processes.size(), 1u);
  EXPECT_EQ(next.processes[0].process_id, 2);
  EXPECT_EQ(next.processes[0].start_ticks, 9'000);
  ASSERT_EQ(next.process_samples.size(), 1u);
  EXPECT_EQ(next.process_samples[0].process_id, 2);
  expect_no_deltas(next.process_samples[0]);
  EXPECT_EQ(tracker.tracked(), 1u);  // the old (100, 7) is forgotten
}

TEST(HostProcessTracker, VanishedProcessesAreForgottenAndIdsNeverReused) {
  FakeProc proc;
  for (int pid : {100, 101, 102}) {
    proc.schedstat(pid, 1'000, 0, 1);
    proc.switches(pid, 1, 0);
  }
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  schema::Batch out;
  tracker.observe(tick(1, 0), {sleeper(100, 1), sleeper(101, 1), sleeper(102, 1)}, out);
  EXPECT_EQ(tracker.tracked(), 3u);
  schema::Batch next;
  tracker.observe(tick(2, 100 * kMs), {sleeper(101, 1)}, next);
  EXPECT_EQ(tracker.tracked(), 1u);
  schema::Batch later;
  tracker.observe(tick(3, 200 * kMs), {sleeper(101, 1), sleeper(103, 5)}, later);
  ASSERT_EQ(later.processes.size(), 1u);
  EXPECT_EQ(later.processes[0].process_id, 4);
  EXPECT_EQ(later.processes[0].first_sample_id, 3);
}

TEST(HostProcessTracker, VanishedFilesGiveNullsNotErrors) {
  FakeProc proc;  // no files at all: the process exited after the reap
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  schema::Batch out;
  tracker.observe(tick(1, 0), {sleeper(100, 1)}, out);
  ASSERT_EQ(out.processes.size(), 1u);
  EXPECT_FALSE(out.processes[0].cmdline.has_value());
  ASSERT_EQ(out.process_samples.size(), 1u);
  EXPECT_FALSE(out.process_samples[0].wchan.has_value());

  // Without schedstat, utime/stime decide; context switches stay NULL.
  auto obs = sleeper(100, 1);
  obs.stime_ticks += 1;
  schema::Batch next;
  tracker.observe(tick(2, 100 * kMs), {obs}, next);
  ASSERT_EQ(next.process_samples.size(), 1u);
  EXPECT_FALSE(next.process_samples[0].cpu_ns.has_value());
  EXPECT_EQ(next.process_samples[0].stime_ticks, 1);
  EXPECT_FALSE(next.process_samples[0].voluntary_ctxt_switches.has_value());
}

}  // namespace
}  // namespace stallscope::sampler::detail

namespace stallscope::sampler::detail {
namespace {

TEST(HostProcessTracker, ExecUpdatesTheProcessRowInPlace) {
  FakeProc proc;
  proc.schedstat(300, 1'000, 0, 1);
  proc.write(300, "cmdline", "stallscope\0record\0"sv);
  ProcessTracker tracker(proc.root(), 10'000 * kMs);
  auto obs = sleeper(300, 9);
  obs.comm = "stallscope";
  schema::Batch first;
  tracker.observe(tick(1, 0), {obs}, first);
  ASSERT_EQ(first.processes.size(), 1u);

  // Same (pid, start) after exec: new comm and cmdline, no CPU moved.
  proc.write(300, "cmdline",
             "sleep\0"
             "2\0"sv);
  obs.comm = "sleep";
  schema::Batch second;
  tracker.observe(tick(2, 100 * kMs), {obs}, second);
  ASSERT_EQ(second.processes.size(), 1u);
  EXPECT_EQ(second.processes[0].process_id, first.processes[0].process_id);
  EXPECT_EQ(second.processes[0].comm, "sleep");
  EXPECT_EQ(second.processes[0].cmdline, "sleep 2");
  EXPECT_EQ(second.processes[0].first_sample_id, 1);
  ASSERT_EQ(second.process_samples.size(), 1u);
  EXPECT_EQ(second.process_samples[0].cpu_ns, 0);  // a delta, not NULL: not a new process

  // Nothing changed since: no row.
  schema::Batch third;
  tracker.observe(tick(3, 200 * kMs), {obs}, third);
  EXPECT_TRUE(third.processes.empty());
  EXPECT_TRUE(third.process_samples.empty());
}

}  // namespace
}  // namespace stallscope::sampler::detail
