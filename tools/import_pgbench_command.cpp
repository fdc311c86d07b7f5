// `stallscope import-pgbench`: pgbench logs (PostgreSQL 15–17 formats) into a
// new run file, so `explain` works on runs stallscope did not drive. The
// formats and their checks: import/pgbench_log.h.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/output.h"
#include "common/printable.h"
#include "common/stop.h"
#include "common/units.h"
#include "import/pgbench_log.h"
#include "schema/pgbench_readers.h"
#include "schema/run_reader.h"
#include "schema/store.h"
#include "tools/commands.h"
#include "tools/session.h"

namespace stallscope::tools {
namespace {

// What the run row needs from the rows imported, gathered chunk by chunk
// (its size grows with the clients, not with the lines).
struct ImportSpan {
  std::optional<std::int64_t> first_ns;  // earliest transaction start, sent or skipped
  std::int64_t end_ns = 0;               // latest transaction end
  std::optional<std::int64_t> first_interval_ns;
  std::map<int, std::pair<std::int64_t, std::int64_t>> seq_span;  // client → min, max seq
  std::int64_t logged = 0;                                        // transactions, sent or skipped
  std::int64_t queries = 0, failed = 0, skipped = 0, intervals = 0, aggregated = 0;

  void see(std::int64_t start_ns, std::int64_t last_ns, int client, std::int64_t seq) {
    first_ns = std::min(first_ns.value_or(start_ns), start_ns);
    end_ns = std::max(end_ns, last_ns);
    auto [it, added] = seq_span.try_emplace(client, seq, seq);
    if (!added) it->second = {std::min(it->second.first, seq), std::max(it->second.second, seq)};
    ++logged;
  }
  void add(const schema::Batch& b) {
    for (const auto& q : b.queries) see(q.start_ns, q.start_ns + q.latency_ns, q.client_id, q.seq);
    for (const auto& q : b.query_skips) see(q.start_ns, q.start_ns + q.lag_ns, q.client_id, q.seq);
    for (const auto& a : b.pgbench_aggregates) {
      first_interval_ns =
          std::min(first_interval_ns.value_or(a.interval_start_ns), a.interval_start_ns);
      aggregated += a.transactions;  // below 2^53 over the import (pgbench_log.h)
    }
    queries += static_cast<std::int64_t>(b.queries.size());
    failed += static_cast<std::int64_t>(b.query_errors.size());
    skipped += static_cast<std::int64_t>(b.query_skips.size());
    intervals += static_cast<std::int64_t>(b.pgbench_aggregates.size());
  }
};

// Two arguments naming one file (a.log and ./a.log): its rows would be
// imported twice. Error(usage) naming both.
void refuse_a_file_given_twice(const std::vector<std::string>& files) {
  for (std::size_t i = 0; i < files.size(); ++i) {
    for (std::size_t k = 0; k < i; ++k) {
      std::error_code ec;
      if (std::filesystem::equivalent(files[k], files[i], ec)) {
        throw_usage(fmt::format("cannot import {}: it is {} again (a log given twice)", files[i],
                                files[k]));
      }
    }
  }
}

// Logs whose names say that different pgbench processes wrote them (two
// runs, or two concurrent ones) would read as one run with their clients
// and transactions merged. Error(usage) naming two of them. Names not of
// pgbench's form (import::parse_log_name) say nothing and pass.
void refuse_logs_of_different_processes(const std::vector<std::string>& files) {
  std::optional<std::pair<std::string, import::LogName>> first;
  for (const auto& path : files) {
    const auto name = import::parse_log_name(path);
    if (!name) continue;
    if (!first) {
      first.emplace(path, *name);
    } else if (name->prefix != first->second.prefix || name->pid != first->second.pid) {
      throw_usage(fmt::format(
          "cannot import {} with {}: their names say different pgbench processes wrote them "
          "({}.{} and {}.{}: two runs, or two at once), whose clients and transactions would be "
          "merged into one run; import each run's logs on its own",
          path, first->first, name->prefix, name->pid, first->second.prefix, first->second.pid));
    }
  }
}

// Whether two aggregate lines carry the same figures (all but file and line).
bool same_figures(const schema::PgbenchAggregateRow& a, const schema::PgbenchAggregateRow& b) {
  const auto figures = [](const schema::PgbenchAggregateRow& r) {
    return std::tie(r.interval_start_ns, r.transactions, r.latency_sum_ns, r.latency_sum2_us2,
                    r.latency_min_ns, r.latency_max_ns, r.lag_sum_ns, r.lag_sum2_us2, r.lag_min_ns,
                    r.lag_max_ns, r.skipped, r.retried, r.retries, r.serialization_failures,
                    r.deadlock_failures);
  };
  return figures(a) == figures(b);
}

// The aggregate intervals of one import: an interval is imported once per
// pgbench thread. `files` are the logs in the order given.
class AggregateIntervals {
 public:
  explicit AggregateIntervals(const std::vector<std::string>& files) {
    for (std::size_t i = 0; i < files.size(); ++i) {
      order_.emplace(files[i], i);
      names_.emplace(files[i], import::parse_log_name(files[i]));
    }
  }

  // Refuses (Error(usage) "cannot import FILE:LINE: …") the first aggregate
  // line of `chunk`, already written, whose interval an earlier line (an
  // earlier file, or an earlier line of its own) already holds: one of the
  // same log (a repeated line), of a log with the same pgbench name (the
  // same thread's log twice, from two directories), or, when either name is
  // not pgbench's, a line with the same figures and transactions (a copy
  // under another name; pgbench's threads each log their own intervals, so
  // two named logs share interval starts and, rarely, figures).
  void refuse_repeated(schema::Store& store, const import::Chunk& chunk) const {
    for (const auto& row : chunk.batch.pgbench_aggregates) {
      const auto here = std::pair(order_.at(row.file), row.line);
      for (const auto& earlier : schema::pgbench_aggregates_at(store, row.interval_start_ns)) {
        if (std::pair(order_.at(earlier.file), earlier.line) >= here) continue;
        if (!repeats(earlier, row)) continue;
        throw_usage(fmt::format(
            "cannot import {}:{}: the interval starting at {} s is already imported from {}:{} "
            "(a line repeated, or a log given twice or copied)",
            row.file, row.line, row.interval_start_ns / common::kNsPerS, earlier.file,
            earlier.line));
      }
    }
  }

 private:
  bool repeats(const schema::PgbenchAggregateRow& earlier,
               const schema::PgbenchAggregateRow& row) const {
    if (earlier.file == row.file) return true;
    const auto& a = names_.at(earlier.file);
    const auto& b = names_.at(row.file);
    if (a && b) return *a == *b;
    return row.transactions > 0 && same_figures(earlier, row);
  }

  std::map<std::string, std::size_t> order_;
  std::map<std::string, std::optional<import::LogName>> names_;
};

// A chunk SQLite refused for a key already in its table: its rows again,
// one at a time in line order, until the first that is refused, named by
// its line. Throws Error(usage) "cannot import FILE:LINE: …"; returns when
// no row is refused (the caller rethrows SQLite's error).
void name_the_duplicate(schema::Store& store, const import::Chunk& chunk) {
  enum class Kind { query, skip, aggregate };
  std::vector<std::tuple<std::int64_t, Kind, std::size_t>> rows;  // line, kind, index
  for (std::size_t i = 0; i < chunk.batch.queries.size(); ++i)
    rows.emplace_back(chunk.query_lines.at(i), Kind::query, i);
  for (std::size_t i = 0; i < chunk.batch.query_skips.size(); ++i)
    rows.emplace_back(chunk.skip_lines.at(i), Kind::skip, i);
  for (std::size_t i = 0; i < chunk.batch.pgbench_aggregates.size(); ++i)
    rows.emplace_back(chunk.batch.pgbench_aggregates[i].line, Kind::aggregate, i);
  std::sort(rows.begin(), rows.end());
  for (const auto& [line, kind, i] : rows) {
    schema::Batch one;
    std::string what;
    if (kind == Kind::query) {
      const auto& q = chunk.batch.queries[i];
      one.queries.push_back(q);
      what = fmt::format("transaction_no {} of client {}", q.seq, q.client_id);
    } else if (kind == Kind::skip) {
      const auto& q = chunk.batch.query_skips[i];
      one.query_skips.push_back(q);
      what = fmt::format("skipped transaction_no {} of client {}", q.seq, q.client_id);
    } else {
      one.pgbench_aggregates.push_back(chunk.batch.pgbench_aggregates[i]);
      what = "this interval";
    }
    try {
      store.write(one);
    } catch (const Error& e) {
      if (!schema::is_duplicate_key(e)) throw;
      throw_usage(fmt::format(
          "cannot import {}:{}: {} is already imported, with the same time (a line repeated, or "
          "a log given twice)",
          chunk.file, line, what));
    }
  }
}

// Writes one chunk in one SQLite transaction; a duplicate key is named.
void write_chunk(schema::Store& store, const import::Chunk& chunk) {
  try {
    store.write(chunk.batch);
  } catch (const Error& e) {
    if (schema::is_duplicate_key(e)) name_the_duplicate(store, chunk);
    throw;
  }
}

// The run row of the import, once every row is written.
schema::RunInfo import_run_info(const ImportPgbenchOptions& o, const ImportSpan& span,
                                std::string& sampled_note) {
  schema::RunInfo info = make_run_info("import-pgbench", o.argv, std::nullopt, 0);
  if (!span.seq_span.empty()) info.clients = static_cast<int>(span.seq_span.size());
  // pgbench writes one log per thread (-j): PREFIX.PID, PREFIX.PID.1, ...
  info.threads = static_cast<int>(o.files.size());
  if (span.first_ns) {
    info.start_ns = *span.first_ns;
  } else if (span.first_interval_ns) {
    info.start_ns = *span.first_interval_ns;
  }
  // pgbench --sampling-rate logs a random share of the transactions, and
  // says so nowhere but in the gaps of each client's transaction_no.
  std::int64_t numbered = 0;
  // Transaction numbers are below 2^53 (import/pgbench_log.h); the sum
  // over many clients saturates rather than wraps.
  for (const auto& [client, seqs] : span.seq_span) {
    if (__builtin_add_overflow(numbered, seqs.second - seqs.first + 1, &numbered)) {
      numbered = std::numeric_limits<std::int64_t>::max();
    }
  }
  if (span.logged > 0 && span.logged < numbered) {
    sampled_note = fmt::format(
        "sampled log: {} of {} transaction numbers present (about {:.1f} %, as with pgbench "
        "--sampling-rate); counts and tps cover the logged transactions only",
        span.logged, numbered,
        100.0 * static_cast<double>(span.logged) / static_cast<double>(numbered));
  }
  return info;
}

}  // namespace

int import_pgbench_command(const ImportPgbenchOptions& o) {
  // Every log is opened, and a log named twice refused, before the run file
  // exists.
  common::refuse_output_that_is_an_input(o.output_path, o.files);
  refuse_logs_of_different_processes(o.files);
  std::vector<std::ifstream> logs;
  for (const auto& path : o.files) {
    logs.emplace_back(path);
    if (!logs.back()) {
      throw_usage(fmt::format("cannot read pgbench log {}: {}", path, std::strerror(errno)));
    }
  }
  refuse_a_file_given_twice(o.files);

  // The rows go into the file chunk by chunk as they are parsed (memory
  // bounded by import::kChunkRows, not by the logs' length); the run row
  // follows them, so a file whose import did not finish has none. A bad
  // line, a duplicate key, a failed write or SIGINT/SIGTERM/SIGHUP removes
  // the file again.
  install_stop_handlers();
  auto store = schema::Store::create(o.output_path);
  ImportSpan span;
  std::string sampled_note;
  const AggregateIntervals intervals(o.files);
  const auto stop_if_asked = [] {
    if (stop_requested()) {
      throw Error(ErrorKind::runtime,
                  fmt::format("cannot import: interrupted by {} (the run file was removed)",
                              stop_signal_name()));
    }
  };
  try {
    import::PgbenchLogParser parser;
    for (std::size_t i = 0; i < o.files.size(); ++i) {
      parser.parse_file(logs[i], o.files[i], [&](import::Chunk chunk) {
        stop_if_asked();
        span.add(chunk.batch);
        write_chunk(store, chunk);
        intervals.refuse_repeated(store, chunk);
      });
      stop_if_asked();
    }
    schema::RunInfo info = import_run_info(o, span, sampled_note);
    std::string reason = "imported";
    if (!sampled_note.empty()) reason += "; " + sampled_note;
    store.begin_run(info);
    std::int64_t end_ns = span.end_ns;
    // Aggregate intervals only: the run ends with the last interval.
    if (!span.first_ns) {
      if (auto interval_span = schema::pgbench_aggregate_span(store))
        end_ns = interval_span->end_ns;
    }
    stop_if_asked();
    store.end_run(std::max(end_ns, info.start_ns), "complete", reason);
  } catch (...) {
    discard_run_file(store, o.output_path);
    throw;
  }
  const std::string aggregated =
      span.intervals == 0 ? std::string() : fmt::format(" (of {} transactions)", span.aggregated);
  fmt::print("run file: {}\n", common::printable(o.output_path));
  fmt::print(
      "imported: {} transactions ({} failed, {} skipped), {} aggregate intervals{} from {} "
      "file(s)\n",
      span.queries + span.skipped, span.failed, span.skipped, span.intervals, aggregated,
      o.files.size());
  if (!sampled_note.empty()) fmt::print("note: {}\n", sampled_note);
  fmt::print("next: stallscope explain {}\n", common::printable(o.output_path));
  return 0;
}

}  // namespace stallscope::tools
