// pgbench logs into rows: the formats and the checks are in pgbench_log.h.
#include "import/pgbench_log.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "common/error.h"
#include "common/parse.h"
#include "common/units.h"

namespace stallscope::import {
namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

// The next line of `in` into `text` (without its newline); false at the end.
// `too_long` is set (and false returned) for a line longer than
// kMaxLineBytes.
bool read_line(std::istream& in, std::string& text, bool& too_long) {
  std::array<char, kMaxLineBytes + 1> buf;
  in.getline(buf.data(), static_cast<std::streamsize>(buf.size()));
  const auto n = static_cast<std::size_t>(in.gcount());
  too_long = false;
  if (in.fail() && !in.bad()) {
    if (n == 0 && in.eof()) return false;
    if (!in.eof()) {
      too_long = true;
      return false;
    }
  }
  if (in.bad()) return false;
  // The newline was extracted (and counted) unless the file ended first.
  text.assign(buf.data(), in.eof() ? n : n - 1);
  return true;
}

}  // namespace

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_blank(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::optional<LogKind> detect_kind(const std::vector<std::string_view>& f) {
  if (f.size() >= 6 && f.size() <= 8) {
    const auto us = common::parse_int64(f[5]);
    const bool epoch4 =
        f[4].size() >= 9 && f[4].find_first_not_of("0123456789") == std::string_view::npos;
    if (us && *us >= 0 && *us < common::kUsPerS && epoch4 && f[0].size() < 9) {
      return LogKind::transaction;
    }
  }
  if (f.size() == 15) return LogKind::aggregate;
  return std::nullopt;
}

namespace {
// The number a run of 1 to 18 decimal digits spells; nullopt otherwise.
std::optional<std::int64_t> decimal(std::string_view text) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return common::parse_int64(text);
}
}  // namespace

std::optional<LogName> parse_log_name(std::string_view path) {
  if (const auto slash = path.rfind('/'); slash != std::string_view::npos) {
    path.remove_prefix(slash + 1);
  }
  const auto last_dot = path.rfind('.');
  if (last_dot == std::string_view::npos || last_dot == 0) return std::nullopt;
  const auto last = decimal(path.substr(last_dot + 1));
  if (!last) return std::nullopt;
  const std::string_view head = path.substr(0, last_dot);
  if (const auto dot = head.rfind('.'); dot != std::string_view::npos && dot > 0) {
    if (const auto pid = decimal(head.substr(dot + 1))) {
      return LogName{.prefix = std::string(head.substr(0, dot)), .pid = *pid, .thread = *last};
    }
  }
  return LogName{.prefix = std::string(head), .pid = *last, .thread = 0};
}

void PgbenchLogParser::fail(const std::string& what) const {
  throw_usage(fmt::format("cannot import {}:{}: {}", file_, line_, what));
}

std::int64_t PgbenchLogParser::integer_in(std::string_view field, const char* name, std::int64_t lo,
                                          std::int64_t hi) const {
  const auto v = common::parse_int64(field);
  if (!v) fail(fmt::format("{} '{}' is not an integer", name, field));
  if (*v < lo || *v > hi) fail(fmt::format("{} '{}' is out of range {}..{}", name, field, lo, hi));
  return *v;
}

double PgbenchLogParser::real_at_least_0(std::string_view field, const char* name) const {
  const auto v = common::parse_double(field);
  if (!v) fail(fmt::format("{} '{}' is not a number", name, field));
  if (!std::isfinite(*v) || *v < 0) {
    fail(fmt::format("{} '{}' is not a finite number ≥ 0", name, field));
  }
  return *v;
}

void PgbenchLogParser::add_to_total(std::int64_t& sum, std::int64_t add, std::int64_t limit,
                                    const char* what) const {
  std::int64_t result = 0;
  if (__builtin_add_overflow(sum, add, &result) || result > limit) {
    fail(fmt::format("{} over the files imported passes {}: not a pgbench log", what, limit));
  }
  sum = result;
}

void PgbenchLogParser::check_sum_within(std::int64_t n, std::int64_t sum_us, std::int64_t min_us,
                                        std::int64_t max_us, const char* sum_name,
                                        const char* min_name, const char* max_name) const {
  if (n == 0) return;
  if (min_us > max_us) {
    fail(fmt::format("{} {} is greater than {} {}", min_name, min_us, max_name, max_us));
  }
  // pgbench prints the sum, min and max each rounded to the µs (%.0f of a
  // double), so the sum may be off by half a µs per transaction, plus the
  // double's own rounding.
  using real = long double;
  const real slack = real(n) / 2 + 1;
  const real lo = real(n) * real(min_us) - slack;
  const real hi = real(n) * real(max_us) + slack;
  const real s = real(sum_us);
  if (s < lo * (1 - 1e-12L) || s > hi * (1 + 1e-12L)) {
    fail(fmt::format("{} {} is not between num_transactions × {} and × {} ({} × {}..{})", sum_name,
                     sum_us, min_name, max_name, n, min_us, max_us));
  }
}

void PgbenchLogParser::transaction_row(const std::vector<std::string_view>& f) {
  if (f.size() < 6 || f.size() > 8) {
    fail(
        fmt::format("{} fields, expected 6 to 8 (client_id transaction_no time script_no "
                    "time_epoch time_us [schedule_lag] [retries])",
                    f.size()));
  }
  schema::QueryRow q;
  q.client_id = static_cast<int>(integer_in(f[0], "client_id", 0, kMaxInt));
  q.seq = integer_in(f[1], "transaction_no", 0, kMaxCount);
  integer_in(f[3], "script_no", 0, kMaxInt);
  const std::int64_t end_ns =
      integer_in(f[4], "time_epoch", 0, kMaxEpochS) * common::kNsPerS +
      integer_in(f[5], "time_us", 0, common::kUsPerS - 1) * common::kNsPerUs;
  if (f.size() >= 7) {
    q.lag_ns = integer_in(f[6], "schedule_lag", 0, kMaxLatencyUs) * common::kNsPerUs;
  }
  if (f.size() == 8) integer_in(f[7], "retries", 0, kMaxCount);
  const std::int64_t lag_ns = q.lag_ns.value_or(0);
  add_to_total(totals_.lag_ns, lag_ns, kMaxInt64, "the sum of schedule_lag in ns");
  if (f[2] == "skipped") {
    // Never sent: time_epoch is when it was skipped, schedule_lag how late.
    if (lag_ns > end_ns) {
      fail(fmt::format("schedule_lag '{}' µs reaches back before the epoch", f[6]));
    }
    batch_.query_skips.push_back(schema::QuerySkippedRow{
        .client_id = q.client_id, .seq = q.seq, .start_ns = end_ns - lag_ns, .lag_ns = lag_ns});
    skip_lines_.push_back(line_);
    return;
  }
  if (f[2] == "failed" || f[2] == "serialization" || f[2] == "deadlock") {
    // pgbench logs no latency for a failed transaction.
    q.latency_ns = 0;
    q.start_ns = end_ns;
    batch_.query_errors.push_back(schema::QueryErrorRow{
        .client_id = q.client_id,
        .seq = q.seq,
        .start_ns = q.start_ns,
        .sqlstate = f[2] == "serialization" ? "40001"
                    : f[2] == "deadlock"    ? "40P01"
                                            : "XX000",
        .error = fmt::format("pgbench logged the transaction as {}", f[2]),
    });
  } else {
    q.latency_ns = integer_in(f[2], "time", 0, kMaxLatencyUs) * common::kNsPerUs;
    if (q.latency_ns > end_ns) {
      fail(fmt::format("time '{}' µs starts before the epoch (it ended at {}.{:06})", f[2], f[4],
                       end_ns / common::kNsPerUs % common::kUsPerS));
    }
    add_to_total(totals_.latency_ns, q.latency_ns, kMaxInt64, "the sum of time in ns");
    q.start_ns = end_ns - q.latency_ns;
  }
  batch_.queries.push_back(std::move(q));
  query_lines_.push_back(line_);
}

void PgbenchLogParser::aggregate_row(const std::vector<std::string_view>& f) {
  if (f.size() != 15) {
    fail(fmt::format("{} fields, expected the 15 of a pgbench 15–17 aggregate log line", f.size()));
  }
  schema::PgbenchAggregateRow r;
  r.file = file_;
  r.line = line_;
  r.interval_start_ns = integer_in(f[0], "interval_start", 0, kMaxEpochS) * common::kNsPerS;
  const std::int64_t n = integer_in(f[1], "num_transactions", 0, kMaxCount);
  r.transactions = n;
  const std::int64_t sum_us = integer_in(f[2], "sum_latency", 0, kMaxLatencyUs);
  r.latency_sum2_us2 = real_at_least_0(f[3], "sum_latency_2");
  // pgbench prints 0 for both when the interval had no transaction.
  const std::int64_t min_us = integer_in(f[4], "min_latency", 0, kMaxLatencyUs);
  const std::int64_t max_us = integer_in(f[5], "max_latency", 0, kMaxLatencyUs);
  check_sum_within(n, sum_us, min_us, max_us, "sum_latency", "min_latency", "max_latency");
  r.latency_sum_ns = sum_us * common::kNsPerUs;
  if (n > 0) {
    r.latency_min_ns = min_us * common::kNsPerUs;
    r.latency_max_ns = max_us * common::kNsPerUs;
  }
  const std::int64_t lag_sum_us = integer_in(f[6], "sum_lag", 0, kMaxLatencyUs);
  r.lag_sum2_us2 = real_at_least_0(f[7], "sum_lag_2");
  const std::int64_t lag_min_us = integer_in(f[8], "min_lag", 0, kMaxLatencyUs);
  const std::int64_t lag_max_us = integer_in(f[9], "max_lag", 0, kMaxLatencyUs);
  check_sum_within(n, lag_sum_us, lag_min_us, lag_max_us, "sum_lag", "min_lag", "max_lag");
  r.lag_sum_ns = lag_sum_us * common::kNsPerUs;
  r.lag_min_ns = lag_min_us * common::kNsPerUs;
  r.lag_max_ns = lag_max_us * common::kNsPerUs;
  if (n == 0) {
    // pgbench adds a transaction's latency and lag to an interval's sums,
    // squares, minimum and maximum only when it counts it: with none
    // counted, all of them are 0.
    const std::array<std::pair<const char*, double>, 8> stats{{
        {"sum_latency", double(sum_us)},
        {"sum_latency_2", r.latency_sum2_us2},
        {"min_latency", double(min_us)},
        {"max_latency", double(max_us)},
        {"sum_lag", double(lag_sum_us)},
        {"sum_lag_2", *r.lag_sum2_us2},
        {"min_lag", double(lag_min_us)},
        {"max_lag", double(lag_max_us)},
    }};
    for (std::size_t k = 0; k < stats.size(); ++k) {
      if (stats[k].second != 0) {
        fail(fmt::format("{} '{}' is not 0 in an interval of num_transactions 0", stats[k].first,
                         f[2 + k]));
      }
    }
  }
  r.skipped = integer_in(f[10], "skipped", 0, kMaxCount);
  r.retried = integer_in(f[11], "retried", 0, kMaxCount);
  r.retries = integer_in(f[12], "retries", 0, kMaxCount);
  r.serialization_failures = integer_in(f[13], "serialization_failures", 0, kMaxCount);
  r.deadlock_failures = integer_in(f[14], "deadlock_failures", 0, kMaxCount);
  add_to_total(totals_.transactions, n, kMaxCount, "the sum of num_transactions");
  add_to_total(
      totals_.other_counts,
      *r.skipped + *r.retried + *r.retries + *r.serialization_failures + *r.deadlock_failures,
      kMaxCount, "the sum of skipped, retried, retries and failures");
  add_to_total(totals_.latency_ns, r.latency_sum_ns, kMaxInt64, "the sum of sum_latency in ns");
  add_to_total(totals_.lag_ns, *r.lag_sum_ns, kMaxInt64, "the sum of sum_lag in ns");
  batch_.pgbench_aggregates.push_back(std::move(r));
}

void PgbenchLogParser::begin_file(std::string file) {
  file_ = std::move(file);
  line_ = 0;
  kind_.reset();
}

void PgbenchLogParser::parse_line(std::string_view text) {
  ++line_;
  if (text.size() > kMaxLineBytes) {
    fail(fmt::format("the line is longer than {} bytes: not a pgbench log", kMaxLineBytes));
  }
  const auto f = split_fields(text);
  if (f.empty()) return;
  if (!kind_) {
    kind_ = detect_kind(f);
    if (!kind_) {
      fail(fmt::format("{} fields: neither a pgbench per-transaction nor an aggregate log line",
                       f.size()));
    }
  }
  if (*kind_ == LogKind::transaction) {
    transaction_row(f);
  } else {
    aggregate_row(f);
  }
}

void PgbenchLogParser::end_file() {
  if (!kind_) throw_usage(fmt::format("cannot import {}: the log is empty", file_));
}

schema::Batch PgbenchLogParser::take_batch() {
  return take_chunk().batch;
}

Chunk PgbenchLogParser::take_chunk() {
  return Chunk{.file = file_,
               .batch = std::exchange(batch_, {}),
               .query_lines = std::exchange(query_lines_, {}),
               .skip_lines = std::exchange(skip_lines_, {})};
}

void PgbenchLogParser::parse_file(std::istream& in, const std::string& file) {
  parse_file(in, file, ChunkSink());
}

void PgbenchLogParser::parse_file(std::istream& in, const std::string& file,
                                  const ChunkSink& sink) {
  const auto held = [this] {
    return batch_.queries.size() + batch_.query_skips.size() + batch_.pgbench_aggregates.size();
  };
  begin_file(file);
  std::string text;
  for (;;) {
    bool too_long = false;
    if (!read_line(in, text, too_long)) {
      if (too_long || in.bad()) {
        ++line_;
        if (too_long) {
          fail(fmt::format("the line is longer than {} bytes: not a pgbench log", kMaxLineBytes));
        }
        fail(fmt::format("cannot read: {}", std::strerror(errno)));
      }
      break;
    }
    parse_line(text);
    if (sink && held() >= kChunkRows) sink(take_chunk());
  }
  end_file();
  if (sink && held() > 0) sink(take_chunk());
}

}  // namespace stallscope::import
