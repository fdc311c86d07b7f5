// The hand-written /proc readers and the libproc2 handle owner, on fake /proc
// trees with exact expected values.
#include "sampler/procfs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace stallscope::sampler::detail {
namespace {

void write_file(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << content;
}

// A realistic /proc/PID/status (kernel 6.x), trimmed in the middle.
constexpr std::string_view kStatus =
    "Name:\tpostgres\n"
    "Umask:\t0077\n"
    "State:\tS (sleeping)\n"
    "Tgid:\t4242\n"
    "Pid:\t4242\n"
    "PPid:\t4200\n"
    "VmRSS:\t   18232 kB\n"
    "Threads:\t1\n"
    "Cpus_allowed_list:\t0-1\n"
    "Mems_allowed_list:\t0\n"
    "voluntary_ctxt_switches:\t123456\n"
    "nonvoluntary_ctxt_switches:\t789\n";

TEST(HostProcfs, ParsesSchedstatFields) {
  test::TempDir dir;
  write_file(dir.path() / "4242" / "schedstat", "1234567890 98765 4321\n");
  auto s = read_schedstat(dir.path().string(), 4242);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->on_cpu_ns, 1234567890);
  EXPECT_EQ(s->run_delay_ns, 98765);
  EXPECT_EQ(s->timeslices, 4321);
}

TEST(HostProcfs, SchedstatOfAllThreadsSumsTaskFiles) {
  test::TempDir dir;
  write_file(dir.path() / "77/schedstat", "100 10 1\n");  // main thread only
  write_file(dir.path() / "77/task/77/schedstat", "100 10 1\n");
  write_file(dir.path() / "77/task/78/schedstat", "2000 200 20\n");
  write_file(dir.path() / "77/task/79/schedstat", "garbage\n");  // skipped
  auto s = read_schedstat_all_threads(dir.path().string(), 77);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->on_cpu_ns, 2100);
  EXPECT_EQ(s->run_delay_ns, 210);
  EXPECT_EQ(s->timeslices, 21);
  EXPECT_FALSE(read_schedstat_all_threads(dir.path().string(), 78));
}

TEST(HostProcfs, SchedstatMissingFileIsNullopt) {
  test::TempDir dir;
  EXPECT_FALSE(read_schedstat(dir.path().string(), 4242).has_value());
  std::filesystem::create_directories(dir.path() / "4242");
  EXPECT_FALSE(read_schedstat(dir.path().string(), 4242).has_value());
}

TEST(HostProcfs, MalformedSchedstatIsNullopt) {
  EXPECT_FALSE(parse_schedstat("").has_value());
  EXPECT_FALSE(parse_schedstat("12 34\n").has_value());        // a field missing
  EXPECT_FALSE(parse_schedstat("12 abc 56\n").has_value());    // not a number
  EXPECT_FALSE(parse_schedstat("12 34x 56\n").has_value());    // trailing junk in a field
  EXPECT_FALSE(parse_schedstat("12 34 56 78\n").has_value());  // an extra field
  EXPECT_FALSE(parse_schedstat("-12 34 56\n").has_value());    // negative
  test::TempDir dir;
  write_file(dir.path() / "7" / "schedstat", "garbage\n");
  EXPECT_FALSE(read_schedstat(dir.path().string(), 7).has_value());
  // Without a trailing newline it is still fine.
  auto s = parse_schedstat("0 0 0");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->timeslices, 0);
}

TEST(HostProcfs, ParsesContextSwitchesFromStatus) {
  test::TempDir dir;
  write_file(dir.path() / "4242" / "status", kStatus);
  auto cs = read_context_switches(dir.path().string(), 4242);
  ASSERT_TRUE(cs.has_value());
  EXPECT_EQ(cs->voluntary, 123456);
  EXPECT_EQ(cs->nonvoluntary, 789);
}

TEST(HostProcfs, StatusMissingOrMalformedIsNullopt) {
  test::TempDir dir;
  EXPECT_FALSE(read_context_switches(dir.path().string(), 4242).has_value());
  // Only one of the two lines.
  EXPECT_FALSE(parse_status_context_switches("voluntary_ctxt_switches:\t5\n").has_value());
  EXPECT_FALSE(
      parse_status_context_switches("voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n")
          .has_value());
  EXPECT_FALSE(parse_status_context_switches(
                   "voluntary_ctxt_switches:\t5 kB\nnonvoluntary_ctxt_switches:\t1\n")
                   .has_value());
  // "nonvoluntary_..." must not be taken for "voluntary_...".
  EXPECT_FALSE(parse_status_context_switches("nonvoluntary_ctxt_switches:\t1\n").has_value());
}

TEST(HostProcfs, ReadsWchanAndTreatsNoSymbolAsNullopt) {
  test::TempDir dir;
  const std::string root = dir.path().string();
  write_file(dir.path() / "1" / "wchan", "do_epoll_wait");
  write_file(dir.path() / "2" / "wchan", "0");
  write_file(dir.path() / "3" / "wchan", "-");
  write_file(dir.path() / "4" / "wchan", "");
  EXPECT_EQ(read_wchan(root, 1), std::optional<std::string>("do_epoll_wait"));
  EXPECT_FALSE(read_wchan(root, 2).has_value());
  EXPECT_FALSE(read_wchan(root, 3).has_value());
  EXPECT_FALSE(read_wchan(root, 4).has_value());
  EXPECT_FALSE(read_wchan(root, 5).has_value());  // missing
}

TEST(HostProcfs, WchanLosesItsCompilerCloneSuffix) {
  EXPECT_EQ(parse_wchan("poll_schedule_timeout.constprop.0"),
            std::optional<std::string>("poll_schedule_timeout"));
  EXPECT_EQ(parse_wchan("do_select.isra.0\n"), std::optional<std::string>("do_select"));
  EXPECT_EQ(parse_wchan("io_schedule\n"), std::optional<std::string>("io_schedule"));
  EXPECT_FALSE(parse_wchan(".part.0").has_value());
}

TEST(HostProcfs, SplitsCmdlineAndDropsTitlePadding) {
  using namespace std::string_view_literals;
  EXPECT_EQ(split_cmdline("psql\0-h\0db\0"sv), (std::vector<std::string>{"psql", "-h", "db"}));
  EXPECT_EQ(split_cmdline("postgres: checkpointer \0\0\0\0"sv),
            (std::vector<std::string>{"postgres: checkpointer "}));
  EXPECT_EQ(split_cmdline("a\0\0b\0"sv), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_TRUE(split_cmdline(""sv).empty());

  test::TempDir dir;
  write_file(dir.path() / "9" / "cmdline",
             "sleep\0"
             "30\0"sv);
  write_file(dir.path() / "10" / "cmdline", ""sv);  // kernel thread
  EXPECT_EQ(read_cmdline(dir.path().string(), 9), (std::vector<std::string>{"sleep", "30"}));
  EXPECT_FALSE(read_cmdline(dir.path().string(), 10).has_value());
  EXPECT_FALSE(read_cmdline(dir.path().string(), 11).has_value());
}

TEST(HostProcfs, UnreadableFileIsNullopt) {
  if (geteuid() == 0) {
    // root reads mode-000 files: use a directory in the file's place instead,
    // which open() accepts but read() refuses (EISDIR).
    test::TempDir dir;
    std::filesystem::create_directories(dir.path() / "5" / "schedstat");
    EXPECT_FALSE(read_schedstat(dir.path().string(), 5).has_value());
    return;
  }
  test::TempDir dir;
  write_file(dir.path() / "5" / "schedstat", "1 2 3\n");
  ::chmod((dir.path() / "5" / "schedstat").c_str(), 0);
  EXPECT_FALSE(read_schedstat(dir.path().string(), 5).has_value());
}

TEST(HostProcfs, ReadsRealProcOfThisProcess) {
  // A sleep is a voluntary context switch: a process just started may have
  // had none yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto s = read_schedstat("/proc", getpid());
  ASSERT_TRUE(s.has_value());
  EXPECT_GT(s->on_cpu_ns, 0);
  EXPECT_GT(s->timeslices, 0);
  auto cs = read_context_switches("/proc", getpid());
  ASSERT_TRUE(cs.has_value());
  EXPECT_GT(cs->voluntary + cs->nonvoluntary, 0);
}

// --- Proc2Handle ----------------------------------------------------------

// Stands in for a libproc2 context: the handle only ever calls unref on it.
struct FakeInfo {
  int unrefs = 0;
};
int fake_unref(FakeInfo** p) {
  ++(*p)->unrefs;
  *p = nullptr;  // as procps_*_unref does
  return 0;
}
using FakeHandle = Proc2Handle<FakeInfo, fake_unref>;

TEST(HostProc2Handle, MoveEmptiesSourceAndReleasesOnce) {
  FakeInfo info;
  {
    FakeHandle a(&info);
    FakeHandle b(std::move(a));
    EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move): tested on purpose
    EXPECT_EQ(b.get(), &info);
    FakeHandle c;
    c = std::move(b);
    EXPECT_EQ(b.get(), nullptr);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(c.get(), &info);
    EXPECT_EQ(info.unrefs, 0);
  }
  EXPECT_EQ(info.unrefs, 1);
}

TEST(HostProc2Handle, OutAndMoveAssignReleaseTheOldHandle) {
  FakeInfo first, second, third;
  FakeHandle a(&first);
  *a.out() = &second;  // out() released the first one
  EXPECT_EQ(first.unrefs, 1);
  FakeHandle b(&third);
  b = std::move(a);  // b's old handle released, a's taken over
  EXPECT_EQ(third.unrefs, 1);
  EXPECT_EQ(second.unrefs, 0);
  b.reset();
  EXPECT_EQ(second.unrefs, 1);
  EXPECT_FALSE(b);
  EXPECT_EQ(first.unrefs + second.unrefs + third.unrefs, 3);
}

}  // namespace
}  // namespace stallscope::sampler::detail
