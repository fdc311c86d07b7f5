// The host's TCP counters (sampler/tcp_counters.h).
#include "sampler/tcp_counters.h"

#include <array>
#include <optional>
#include <vector>

#include "common/parse.h"
#include "sampler/procfs.h"

namespace stallscope::sampler::detail {
namespace {

// The blank-separated fields of one line.
std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    out.push_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return out;
}

constexpr std::size_t kCounters = std::size(kTcpStackCounters);

}  // namespace

std::map<std::string, std::int64_t, std::less<>> parse_net_counters(std::string_view text) {
  std::map<std::string, std::int64_t, std::less<>> out;
  const auto all = lines(text);
  for (std::size_t i = 0; i + 1 < all.size(); ++i) {
    const auto names = fields(all[i]);
    const auto values = fields(all[i + 1]);
    if (names.size() < 2 || names.size() != values.size() || !names[0].ends_with(':') ||
        names[0] != values[0]) {
      continue;
    }
    // The value line of a pair is no header of the next one: a header's
    // second field is a name, never a number.
    if (common::parse_int64(names[1])) continue;
    const std::string_view prefix = names[0];
    for (std::size_t k = 1; k < names.size(); ++k) {
      if (auto v = common::parse_int64(values[k])) {
        out.insert_or_assign(std::string(prefix) + std::string(names[k]), *v);
      }
    }
    ++i;  // the value line is consumed
  }
  return out;
}

void TcpStackTracker::observe(std::int64_t sample_id, std::int64_t mono_ns, schema::Batch& out) {
  if (last_read_mono_ns_ && mono_ns - *last_read_mono_ns_ < period_ns_) return;
  std::map<std::string, std::int64_t, std::less<>> now;
  bool read_any = false;
  for (const char* file : {"/net/netstat", "/net/snmp"}) {
    if (!read_proc_file(root_ + file, text_, 256 * 1024)) continue;
    read_any = true;
    for (auto& [name, value] : parse_net_counters(text_)) now.insert_or_assign(name, value);
  }
  if (!read_any) {
    prev_.clear();
    last_read_mono_ns_.reset();
    return;
  }
  std::array<std::optional<std::int64_t>, kCounters> d;
  for (std::size_t i = 0; i < kCounters; ++i) {
    const auto cur = now.find(kTcpStackCounters[i]);
    const auto prev = prev_.find(kTcpStackCounters[i]);
    if (cur != now.end() && prev != prev_.end() && cur->second >= prev->second) {
      d[i] = cur->second - prev->second;
    }
  }
  prev_ = std::move(now);
  schema::TcpStackSampleRow row{.sample_id = sample_id};
  if (last_read_mono_ns_) row.span_ns = mono_ns - *last_read_mono_ns_;
  last_read_mono_ns_ = mono_ns;
  std::optional<std::int64_t>* cols[kCounters] = {&row.delayed_acks,
                                                  &row.delayed_ack_locked,
                                                  &row.delayed_ack_lost,
                                                  &row.timeouts,
                                                  &row.loss_probes,
                                                  &row.slow_start_retrans,
                                                  &row.fast_retrans,
                                                  &row.syn_retrans,
                                                  &row.zero_window_drop,
                                                  &row.to_zero_window_adv,
                                                  &row.want_zero_window_adv,
                                                  &row.rcvq_drop,
                                                  &row.listen_overflows,
                                                  &row.listen_drops,
                                                  &row.retrans_segs,
                                                  &row.out_segs,
                                                  &row.in_segs,
                                                  &row.in_errs,
                                                  &row.out_rsts};
  for (std::size_t i = 0; i < kCounters; ++i) *cols[i] = d[i];
  out.tcp_stack_samples.push_back(row);
}

}  // namespace stallscope::sampler::detail
