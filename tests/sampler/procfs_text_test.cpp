// The string-taking /proc parsers the sampler and the procfs fuzz target
// (tests/fuzz/procfs_fuzz.cpp) share: kernel stacks, loadavg, /proc/net/tcp.
#include <gtest/gtest.h>

#include "sampler/procfs.h"

namespace stallscope::sampler::detail {
namespace {

TEST(ProcfsText, KernelStackKeepsOneFunctionPerLine) {
  EXPECT_EQ(parse_kernel_stack("[<0>] do_wait+0x1c5/0x240\n[<0>] kernel_wait4+0xa6/0x140\n"),
            "do_wait+0x1c5/0x240\nkernel_wait4+0xa6/0x140");
  EXPECT_EQ(parse_kernel_stack("\n\n"), std::nullopt);
  EXPECT_EQ(parse_kernel_stack("[<0>] "), std::nullopt);
}

TEST(ProcfsText, LoadavgLastPid) {
  EXPECT_EQ(parse_loadavg_last_pid("0.00 0.01 0.05 1/123 4567\n"), 4567);
  EXPECT_EQ(parse_loadavg_last_pid("0.00 0.01 0.05 1/123 -1\n"), std::nullopt);
  EXPECT_EQ(parse_loadavg_last_pid("4567"), std::nullopt);
}

TEST(ProcfsText, TcpTableGivesTheSocketsOfAPortPair) {
  const std::string table =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n"
      "   0: 0100007F:1538 0100007F:D431 01 00000000:00000000 00:00000000 00000000   105        "
      "0 4242 1 0000000000000000 20 4 30 10 -1\n"
      "   1: 0100007F:1538 0100007F:D432 01 00000000:00000000 00:00000000 00000000   105        "
      "0 4343 1 0000000000000000 20 4 30 10 -1\n"
      "   2: 0100007F:1538 0100007F:D431 06 00000000:00000000 03:00000000 00000000     0        "
      "0 0 3 0000000000000000\n"
      "   3: 0100007F:1538 0100007F:D431 01 short\n"
      "   4: 0100007F:XYZ 0100007F:D431 01 00000000:00000000 00:00000000 00000000 0 0 99\n";
  // The links of the sockets with a port pair, as tcp_socket_owner looks
  // for them: malformed lines and inode 0 are skipped.
  const auto links = [](std::string_view text, int local, int remote) {
    std::vector<std::string> out;
    for (const auto& s : parse_tcp_sockets(text)) {
      if (s.local_port == local && s.remote_port == remote)
        out.push_back("socket:[" + std::to_string(s.inode) + "]");
    }
    return out;
  };
  EXPECT_EQ(links(table, 5432, 54321), std::vector<std::string>{"socket:[4242]"});
  EXPECT_EQ(links(table, 5432, 54322), std::vector<std::string>{"socket:[4343]"});
  EXPECT_TRUE(links(table, 80, 54321).empty());
  // The header alone, or nothing.
  EXPECT_TRUE(links(table.substr(0, table.find('\n') + 1), 5432, 54321).empty());
  EXPECT_TRUE(links("", 5432, 54321).empty());
}

TEST(ProcfsText, TcpTableGivesEverySocketWithItsPortsAndListenState) {
  const std::string table =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n"
      "   0: 00000000:1920 00000000:0000 0A 00000000:00000000 00:00000000 00000000   105        "
      "0 777 1 0000000000000000 100 0 0 10 0\n"
      "   1: 0100007F:D431 0100007F:1920 01 00000000:00000000 00:00000000 00000000  1000        "
      "0 888 1 0000000000000000 20 4 30 10 -1\n"
      "   2: 0100007F:1538 0100007F:D431 06 00000000:00000000 03:00000000 00000000     0        "
      "0 0 3 0000000000000000\n";
  const auto sockets = parse_tcp_sockets(table);
  ASSERT_EQ(sockets.size(), 2u);  // inode 0 (TIME_WAIT) left out
  EXPECT_EQ(sockets[0].inode, 777u);
  EXPECT_EQ(sockets[0].local_port, 6432);
  EXPECT_EQ(sockets[0].remote_port, 0);
  EXPECT_TRUE(sockets[0].listening);
  EXPECT_EQ(sockets[1].inode, 888u);
  EXPECT_EQ(sockets[1].local_port, 54321);
  EXPECT_EQ(sockets[1].remote_port, 6432);
  EXPECT_FALSE(sockets[1].listening);
}

// Found by the procfs fuzz target: a cgroup v2 cpu.stat with a
// throttled_usec past 2^63 ns overflowed its conversion to ns (UBSan:
// signed integer overflow); it is left out, as a field that is not a count.
TEST(ProcfsText, CpuStatThrottledUsecPastInt64NsIsLeftOut) {
  const auto t =
      parse_cpu_stat("nr_periods 10\nnr_throttled 2\nthrottled_usec 67440737095516150\n");
  EXPECT_EQ(t.nr_periods, 10);
  EXPECT_EQ(t.nr_throttled, 2);
  EXPECT_EQ(t.throttled_ns, std::nullopt);
  EXPECT_EQ(parse_cpu_stat("throttled_usec 9223372036854775\n").throttled_ns,
            9'223'372'036'854'775'000);
}

}  // namespace
}  // namespace stallscope::sampler::detail
