// The host's TCP counters: parsing /proc/net/netstat and /proc/net/snmp, and
// the per-tick deltas of TcpStackTracker on a fake /proc tree with exact
// expected values.
#include "sampler/tcp_counters.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/units.h"
#include "support/test_support.h"

namespace stallscope::sampler::detail {
namespace {

void write_file(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << content;
}

// /proc/net/netstat as Linux 6.x writes it, trimmed to a few names per line.
std::string netstat(std::int64_t delayed_acks, std::int64_t timeouts, std::int64_t zero_adv) {
  return "TcpExt: SyncookiesSent DelayedACKs DelayedACKLocked DelayedACKLost ListenOverflows "
         "ListenDrops TCPTimeouts TCPLossProbes TCPSlowStartRetrans TCPFastRetrans "
         "TCPSynRetrans TCPToZeroWindowAdv TCPWantZeroWindowAdv TCPZeroWindowDrop "
         "TCPRcvQDrop\n"
         "TcpExt: 0 " +
         std::to_string(delayed_acks) + " 3 4 5 6 " + std::to_string(timeouts) + " 8 9 10 11 " +
         std::to_string(zero_adv) +
         " 13 14 15\n"
         "IpExt: InNoRoutes InTruncatedPkts\n"
         "IpExt: 0 0\n";
}

std::string snmp(std::int64_t retrans_segs, std::int64_t out_segs) {
  return "Ip: Forwarding DefaultTTL\n"
         "Ip: 1 64\n"
         "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens InSegs OutSegs RetransSegs InErrs "
         "OutRsts\n"
         "Tcp: 1 200 120000 -1 4138 19866375 " +
         std::to_string(out_segs) + " " + std::to_string(retrans_segs) +
         " 0 1340\n"
         "Udp: InDatagrams NoPorts\n"
         "Udp: 10 2\n";
}

TEST(TcpCounters, ParsesEveryHeaderValuePair) {
  const auto c = parse_net_counters(netstat(1997, 4, 12) + snmp(47, 19866117));
  EXPECT_EQ(c.at("TcpExt:DelayedACKs"), 1997);
  EXPECT_EQ(c.at("TcpExt:TCPTimeouts"), 4);
  EXPECT_EQ(c.at("TcpExt:TCPToZeroWindowAdv"), 12);
  EXPECT_EQ(c.at("TcpExt:TCPRcvQDrop"), 15);
  EXPECT_EQ(c.at("IpExt:InNoRoutes"), 0);
  EXPECT_EQ(c.at("Tcp:MaxConn"), -1);  // signed, kept
  EXPECT_EQ(c.at("Tcp:RetransSegs"), 47);
  EXPECT_EQ(c.at("Tcp:OutSegs"), 19866117);
  EXPECT_EQ(c.at("Tcp:OutRsts"), 1340);
  EXPECT_EQ(c.at("Udp:NoPorts"), 2);
  EXPECT_FALSE(c.contains("Tcp:Tcp"));
}

TEST(TcpCounters, SkipsMismatchedAndMalformedLines) {
  // A value line with a field short, a non-number, a prefix that differs.
  const auto c = parse_net_counters(
      "TcpExt: A B C\nTcpExt: 1 2\n"
      "Tcp: X Y\nTcp: 7 x9\n"
      "Udp: P\nIp: 3\n");
  EXPECT_FALSE(c.contains("TcpExt:A"));
  EXPECT_EQ(c.at("Tcp:X"), 7);
  EXPECT_FALSE(c.contains("Tcp:Y"));
  EXPECT_FALSE(c.contains("Udp:P"));
  EXPECT_TRUE(parse_net_counters("").empty());
}

using test::kS;

TEST(TcpCounters, TrackerGivesDeltasAndNothingForACounterThatWentBack) {
  test::TempDir dir;
  const auto root = dir.path();
  TcpStackTracker tracker(root.string());
  schema::Batch batch;
  // No files: no row.
  tracker.observe(1, 0, batch);
  EXPECT_TRUE(batch.tcp_stack_samples.empty());

  write_file(root / "net/netstat", netstat(100, 4, 10));
  write_file(root / "net/snmp", snmp(47, 1000));
  tracker.observe(2, 1 * kS, batch);
  ASSERT_EQ(batch.tcp_stack_samples.size(), 1u);
  const auto& first = batch.tcp_stack_samples[0];
  EXPECT_EQ(first.sample_id, 2);
  EXPECT_FALSE(first.span_ns);
  EXPECT_FALSE(first.delayed_acks);  // first read: no delta
  EXPECT_FALSE(first.retrans_segs);

  write_file(root / "net/netstat", netstat(130, 6, 10));
  write_file(root / "net/snmp", snmp(50, 1600));
  // Ticks within a second of the last read read nothing.
  tracker.observe(3, 1 * kS + kS / 10, batch);
  tracker.observe(4, 1 * kS + 9 * kS / 10, batch);
  EXPECT_EQ(batch.tcp_stack_samples.size(), 1u);
  tracker.observe(5, 2 * kS + kS / 100, batch);
  ASSERT_EQ(batch.tcp_stack_samples.size(), 2u);
  const auto& d = batch.tcp_stack_samples[1];
  EXPECT_EQ(d.sample_id, 5);
  EXPECT_EQ(d.span_ns, kS + kS / 100);
  EXPECT_EQ(d.delayed_acks, 30);
  EXPECT_EQ(d.timeouts, 2);
  EXPECT_EQ(d.to_zero_window_adv, 0);
  EXPECT_EQ(d.delayed_ack_locked, 0);
  EXPECT_EQ(d.retrans_segs, 3);
  EXPECT_EQ(d.out_segs, 600);
  EXPECT_EQ(d.out_rsts, 0);
  EXPECT_EQ(d.rcvq_drop, 0);

  // DelayedACKs went backwards (a namespace reset): no value, not a negative one.
  write_file(root / "net/netstat", netstat(5, 7, 10));
  tracker.observe(6, 4 * kS, batch);
  const auto& back = batch.tcp_stack_samples[2];
  EXPECT_FALSE(back.delayed_acks);
  EXPECT_EQ(back.timeouts, 1);
  EXPECT_EQ(back.retrans_segs, 0);

  // snmp gone: its counters are absent, netstat's still count.
  std::filesystem::remove(root / "net/snmp");
  write_file(root / "net/netstat", netstat(9, 7, 11));
  tracker.observe(7, 5 * kS, batch);
  const auto& half = batch.tcp_stack_samples[3];
  EXPECT_EQ(half.delayed_acks, 4);
  EXPECT_EQ(half.to_zero_window_adv, 1);
  EXPECT_FALSE(half.retrans_segs);
  EXPECT_FALSE(half.out_segs);
}

TEST(TcpCounters, ReadsTheRealProcFiles) {
  TcpStackTracker tracker("/proc", 0);  // every tick
  schema::Batch batch;
  tracker.observe(1, 0, batch);
  tracker.observe(2, 1, batch);
  ASSERT_EQ(batch.tcp_stack_samples.size(), 2u);
  // Every Linux since 2.6 has these two.
  EXPECT_TRUE(batch.tcp_stack_samples[1].delayed_acks.has_value());
  EXPECT_TRUE(batch.tcp_stack_samples[1].out_segs.has_value());
  EXPECT_GE(*batch.tcp_stack_samples[1].out_segs, 0);
}

}  // namespace
}  // namespace stallscope::sampler::detail
