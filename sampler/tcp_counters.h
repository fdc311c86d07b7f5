// Private to sampler/: the host's TCP counters, read by the host sampler each
// tick into tcp_stack_sample rows (schema/v1.sql).
//
// /proc/net/netstat and /proc/net/snmp hold pairs of lines, a header of names
// and a line of values under the same prefix:
//
//   TcpExt: SyncookiesSent DelayedACKs ...
//   TcpExt: 0 1234 ...
//
// parse_net_counters reads every pair; TcpStackTracker keeps the previous
// tick's values and turns them into deltas. Both files belong to the network
// namespace of the reading process: the counters are the namespace's, every
// socket in it counted. Missing or unreadable files (a kernel without them,
// a fake tree) are data: the row's fields stay empty; nothing here throws.
//
//   detail::TcpStackTracker tcp("/proc");
//   tcp.observe(sample_id, mono_ns, batch);  // a TcpStackSampleRow once a second
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/units.h"
#include "schema/records.h"

namespace stallscope::sampler::detail {

// "Prefix:Name" → value (e.g. "TcpExt:DelayedACKs", "Tcp:RetransSegs") for
// every header/value line pair of `text` whose two lines start with the same
// prefix and have as many fields. A value that is not an integer (in range)
// is left out; negative values are kept (Tcp MaxConn is -1).
std::map<std::string, std::int64_t, std::less<>> parse_net_counters(std::string_view text);

// The counters a tcp_stack_sample row holds, each "Prefix:Name" as the kernel
// spells it, in the row's column order.
inline constexpr std::string_view kTcpStackCounters[] = {"TcpExt:DelayedACKs",
                                                         "TcpExt:DelayedACKLocked",
                                                         "TcpExt:DelayedACKLost",
                                                         "TcpExt:TCPTimeouts",
                                                         "TcpExt:TCPLossProbes",
                                                         "TcpExt:TCPSlowStartRetrans",
                                                         "TcpExt:TCPFastRetrans",
                                                         "TcpExt:TCPSynRetrans",
                                                         "TcpExt:TCPZeroWindowDrop",
                                                         "TcpExt:TCPToZeroWindowAdv",
                                                         "TcpExt:TCPWantZeroWindowAdv",
                                                         "TcpExt:TCPRcvQDrop",
                                                         "TcpExt:ListenOverflows",
                                                         "TcpExt:ListenDrops",
                                                         "Tcp:RetransSegs",
                                                         "Tcp:OutSegs",
                                                         "Tcp:InSegs",
                                                         "Tcp:InErrs",
                                                         "Tcp:OutRsts"};

// The host sampler reads the counters at most this often: the kernel sums
// every counter over all CPUs for each read of the files (about 0.1 ms), and
// explain reads them over spans of seconds.
inline constexpr std::int64_t kTcpStackPeriodNs = common::kNsPerS;

// At a tick at least period_ns after its last read, the deltas of
// kTcpStackCounters since that read, from <proc_root>/net/netstat and
// <proc_root>/net/snmp. A counter's delta is absent on the first read, when
// it is missing at this read or was at the previous one, and when it went
// backwards.
class TcpStackTracker {
 public:
  explicit TcpStackTracker(std::string proc_root, std::int64_t period_ns = kTcpStackPeriodNs)
      : root_(std::move(proc_root)), period_ns_(period_ns) {}
  // At a tick (CLOCK_MONOTONIC mono_ns) period_ns or more after the last
  // read (or the first), reads both files and appends one row for
  // `sample_id` to out.tcp_stack_samples; appends nothing between reads and
  // when neither file can be read.
  void observe(std::int64_t sample_id, std::int64_t mono_ns, schema::Batch& out);

 private:
  std::string root_;
  std::int64_t period_ns_;
  std::optional<std::int64_t> last_read_mono_ns_;  // of the last read with a file
  std::string text_;                               // file buffer (reused)
  std::map<std::string, std::int64_t, std::less<>> prev_;
};

}  // namespace stallscope::sampler::detail
