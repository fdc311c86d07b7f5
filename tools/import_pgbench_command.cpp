// `stallscope import-pgbench`: pgbench logs (PostgreSQL 15–17 formats) into a
// new run file, so `explain` works on runs stallscope did not drive.
//
// Per-transaction log (-l), one line per transaction:
//   client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]
// time (µs) may be "skipped" (-R -L), "failed", "serialization" or
// "deadlock"; time_epoch/time_us are when the transaction completed. Seven
// fields are read as schedule_lag (-R), eight as schedule_lag and retries.
// Aggregate log (--aggregate-interval), one line per interval, always 15
// fields (0 where an option was not used):
//   interval_start num_transactions sum_latency sum_latency_2 min_latency
//   max_latency sum_lag sum_lag_2 min_lag max_lag skipped retried retries
//   serialization_failures deadlock_failures
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/units.h"
#include "schema/run_reader.h"
#include "schema/store.h"
#include "tools/commands.h"
#include "tools/session.h"

namespace stallscope::tools {
namespace {

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

struct LineError {
  std::string file;
  std::int64_t line;
  [[noreturn]] void fail(const std::string& what) const {
    throw_usage(fmt::format("cannot import {}:{}: {}", file, line, what));
  }
  std::int64_t integer(std::string_view field, const char* name) const {
    const auto v = common::parse_int64(field);
    if (!v) fail(fmt::format("{} '{}' is not an integer", name, field));
    return *v;
  }
  // An integer in [lo, hi].
  std::int64_t integer_in(std::string_view field, const char* name, std::int64_t lo,
                          std::int64_t hi) const {
    const auto v = integer(field, name);
    if (v < lo || v > hi) fail(fmt::format("{} '{}' is out of range {}..{}", name, field, lo, hi));
    return v;
  }
  double real(std::string_view field, const char* name) const {
    const auto v = common::parse_double(field);
    if (!v) fail(fmt::format("{} '{}' is not a number", name, field));
    return *v;
  }
};

enum class LogKind { transaction, aggregate };

// The kind of a log from its first line: per-transaction lines have 6–8
// fields with time_us < 1e6 and an epoch second in field 5; aggregate
// lines have 15.
LogKind detect(const std::vector<std::string_view>& f, const LineError& at) {
  if (f.size() >= 6 && f.size() <= 8) {
    const auto us = common::parse_int64(f[5]);
    bool epoch4 = f[4].size() >= 9 && f[4].find_first_not_of("0123456789") == std::string::npos;
    if (us && *us >= 0 && *us < common::kUsPerS && epoch4 && f[0].size() < 9) {
      return LogKind::transaction;
    }
  }
  if (f.size() == 15) return LogKind::aggregate;
  at.fail(fmt::format("{} fields: neither a pgbench per-transaction nor an aggregate log line",
                      f.size()));
}

void transaction_row(const std::vector<std::string_view>& f, const LineError& at,
                     schema::Batch& out) {
  if (f.size() < 6 || f.size() > 8) {
    at.fail(
        fmt::format("{} fields, expected 6 to 8 (client_id transaction_no time script_no "
                    "time_epoch time_us [schedule_lag] [retries])",
                    f.size()));
  }
  schema::QueryRow q;
  q.client_id = static_cast<int>(at.integer(f[0], "client_id"));
  q.seq = at.integer(f[1], "transaction_no");
  at.integer(f[3], "script_no");
  // Durations in µs that fit in ns; epoch seconds up to 2096.
  constexpr std::int64_t kMaxUs = std::numeric_limits<std::int64_t>::max() / 4'000;
  std::int64_t end_ns = at.integer_in(f[4], "time_epoch", 0, 4'000'000'000) * common::kNsPerS +
                        at.integer_in(f[5], "time_us", 0, common::kUsPerS - 1) * common::kNsPerUs;
  if (f.size() >= 7) q.lag_ns = at.integer_in(f[6], "schedule_lag", 0, kMaxUs) * common::kNsPerUs;
  if (f.size() == 8) at.integer(f[7], "retries");
  if (f[2] == "skipped") {
    // Never sent: time_epoch is when it was skipped, schedule_lag how late.
    const std::int64_t lag_ns = q.lag_ns.value_or(0);
    out.query_skips.push_back(schema::QuerySkippedRow{
        .client_id = q.client_id, .seq = q.seq, .start_ns = end_ns - lag_ns, .lag_ns = lag_ns});
    return;
  }
  if (f[2] == "failed" || f[2] == "serialization" || f[2] == "deadlock") {
    // pgbench logs no latency for a failed transaction.
    q.latency_ns = 0;
    q.start_ns = end_ns;
    out.query_errors.push_back(schema::QueryErrorRow{
        .client_id = q.client_id,
        .seq = q.seq,
        .start_ns = q.start_ns,
        .sqlstate = f[2] == "serialization" ? "40001"
                    : f[2] == "deadlock"    ? "40P01"
                                            : "XX000",
        .error = fmt::format("pgbench logged the transaction as {}", f[2]),
    });
  } else {
    q.latency_ns = at.integer_in(f[2], "time", 0, kMaxUs) * common::kNsPerUs;
    q.start_ns = end_ns - q.latency_ns;
  }
  out.queries.push_back(std::move(q));
}

void aggregate_row(const std::vector<std::string_view>& f, const LineError& at,
                   schema::Batch& out) {
  if (f.size() != 15) {
    at.fail(
        fmt::format("{} fields, expected the 15 of a pgbench 15–17 aggregate log line", f.size()));
  }
  schema::PgbenchAggregateRow r;
  r.file = at.file;
  r.line = at.line;
  r.interval_start_ns = at.integer(f[0], "interval_start") * common::kNsPerS;
  r.transactions = at.integer(f[1], "num_transactions");
  r.latency_sum_ns = at.integer(f[2], "sum_latency") * common::kNsPerUs;
  r.latency_sum2_us2 = at.real(f[3], "sum_latency_2");
  if (r.transactions > 0) {
    r.latency_min_ns = at.integer(f[4], "min_latency") * common::kNsPerUs;
    r.latency_max_ns = at.integer(f[5], "max_latency") * common::kNsPerUs;
  }
  r.lag_sum_ns = at.integer(f[6], "sum_lag") * common::kNsPerUs;
  r.lag_sum2_us2 = at.real(f[7], "sum_lag_2");
  r.lag_min_ns = at.integer(f[8], "min_lag") * common::kNsPerUs;
  r.lag_max_ns = at.integer(f[9], "max_lag") * common::kNsPerUs;
  r.skipped = at.integer(f[10], "skipped");
  r.retried = at.integer(f[11], "retried");
  r.retries = at.integer(f[12], "retries");
  r.serialization_failures = at.integer(f[13], "serialization_failures");
  r.deadlock_failures = at.integer(f[14], "deadlock_failures");
  out.pgbench_aggregates.push_back(std::move(r));
}

// A pgbench log line is at most ~300 bytes (15 numbers); a longer one — a
// binary file, /dev/zero — is not a log, and reading it whole would grow
// without bound.
constexpr std::size_t kMaxLineBytes = 4096;

// The next line of `in` into `text` (without its newline); false at the end.
// A line longer than kMaxLineBytes is an error naming the file and line.
bool read_line(std::istream& in, std::string& text, const LineError& at) {
  std::array<char, kMaxLineBytes + 1> buf;
  in.getline(buf.data(), static_cast<std::streamsize>(buf.size()));
  const auto n = static_cast<std::size_t>(in.gcount());
  if (in.bad()) at.fail(fmt::format("cannot read: {}", std::strerror(errno)));
  if (in.fail()) {
    if (n == 0 && in.eof()) return false;
    if (!in.eof()) {
      at.fail(fmt::format("the line is longer than {} bytes: not a pgbench log", kMaxLineBytes));
    }
  }
  // The newline was extracted (and counted) unless the file ended first.
  text.assign(buf.data(), in.eof() ? n : n - 1);
  return true;
}

}  // namespace

int import_pgbench_command(const ImportPgbenchOptions& o) {
  // Everything is parsed before the run file exists: a malformed line leaves
  // no file behind.
  schema::Batch batch;
  for (const auto& path : o.files) {
    std::ifstream in(path);
    if (!in) {
      throw_usage(fmt::format("cannot read pgbench log {}: {}", path, std::strerror(errno)));
    }
    std::string text;
    std::optional<LogKind> kind;
    LineError at{path, 0};
    for (;;) {
      ++at.line;
      if (!read_line(in, text, at)) break;
      auto f = split_fields(text);
      if (f.empty()) continue;
      if (!kind) kind = detect(f, at);
      if (*kind == LogKind::transaction) {
        transaction_row(f, at, batch);
      } else {
        aggregate_row(f, at, batch);
      }
    }
    if (!kind) throw_usage(fmt::format("cannot import {}: the log is empty", path));
  }

  auto store = schema::Store::create(o.output_path);
  std::string sampled_note;
  try {
    schema::RunInfo info = make_run_info("import-pgbench", o.argv, std::nullopt, 0);
    // The run spans the transactions, sent or skipped. pgbench
    // --sampling-rate logs a random share of them, and says so nowhere but
    // in the gaps of each client's transaction_no.
    std::optional<std::int64_t> first_ns;
    std::int64_t end_ns = 0;
    std::map<int, std::pair<std::int64_t, std::int64_t>> seq_span;  // client → min, max seq
    std::int64_t logged = 0;
    auto see = [&](std::int64_t start_ns, std::int64_t last_ns, int client, std::int64_t seq) {
      first_ns = std::min(first_ns.value_or(start_ns), start_ns);
      end_ns = std::max(end_ns, last_ns);
      auto [it, added] = seq_span.try_emplace(client, seq, seq);
      if (!added) it->second = {std::min(it->second.first, seq), std::max(it->second.second, seq)};
      ++logged;
    };
    for (const auto& q : batch.queries)
      see(q.start_ns, q.start_ns + q.latency_ns, q.client_id, q.seq);
    for (const auto& q : batch.query_skips)
      see(q.start_ns, q.start_ns + q.lag_ns, q.client_id, q.seq);
    if (!seq_span.empty()) info.clients = static_cast<int>(seq_span.size());
    // pgbench writes one log per thread (-j): PREFIX.PID, PREFIX.PID.1, ...
    info.threads = static_cast<int>(o.files.size());
    if (first_ns) {
      info.start_ns = *first_ns;
    } else if (!batch.pgbench_aggregates.empty()) {
      info.start_ns =
          std::min_element(batch.pgbench_aggregates.begin(), batch.pgbench_aggregates.end(),
                           [](const auto& x, const auto& y) {
                             return x.interval_start_ns < y.interval_start_ns;
                           })
              ->interval_start_ns;
    }
    std::int64_t numbered = 0;
    for (const auto& [client, span] : seq_span) numbered += span.second - span.first + 1;
    std::string reason = "imported";
    if (logged > 0 && logged < numbered) {
      sampled_note = fmt::format(
          "sampled log: {} of {} transaction numbers present (about {:.1f} %, as with pgbench "
          "--sampling-rate); counts and tps cover the logged transactions only",
          logged, numbered, 100.0 * static_cast<double>(logged) / static_cast<double>(numbered));
      reason += "; " + sampled_note;
    }
    store.begin_run(info);
    store.write(batch);  // one SQLite transaction
    // Aggregate intervals only: the run ends with the last interval.
    if (!first_ns) {
      if (auto span = schema::pgbench_aggregate_span(store)) end_ns = span->end_ns;
    }
    store.end_run(std::max(end_ns, info.start_ns), "complete", reason);
  } catch (...) {
    store = schema::Store::create(":memory:");
    remove_run_file(o.output_path);
    throw;
  }
  std::int64_t aggregated_transactions = 0;
  for (const auto& a : batch.pgbench_aggregates) aggregated_transactions += a.transactions;
  const std::string aggregated =
      batch.pgbench_aggregates.empty()
          ? std::string()
          : fmt::format(" (of {} transactions)", aggregated_transactions);
  fmt::print("run file: {}\n", o.output_path);
  fmt::print(
      "imported: {} transactions ({} failed, {} skipped), {} aggregate intervals{} from {} "
      "file(s)\n",
      batch.queries.size() + batch.query_skips.size(), batch.query_errors.size(),
      batch.query_skips.size(), batch.pgbench_aggregates.size(), aggregated, o.files.size());
  if (!sampled_note.empty()) fmt::print("note: {}\n", sampled_note);
  fmt::print("next: stallscope explain {}\n", o.output_path);
  return 0;
}

}  // namespace stallscope::tools
