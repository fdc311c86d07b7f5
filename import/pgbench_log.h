// pgbench logs (PostgreSQL 15–17 formats) parsed into the rows of a run
// file, for `stallscope import-pgbench` (tools/import_pgbench_command.cpp)
// and the fuzz targets (tests/fuzz/). Nothing here touches SQLite or the
// file system: it reads text and fills a schema::Batch.
//
// Per-transaction log (-l), one line per transaction:
//   client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]
// time and schedule_lag are in µs; time may be "skipped" (-R -L), "failed",
// "serialization" or "deadlock"; time_epoch (s) and time_us are when the
// transaction completed. Seven fields are read as schedule_lag (-R), eight
// as schedule_lag and retries. A transaction becomes a QueryRow (start_ns =
// completion − time), a skipped one a QuerySkippedRow (start_ns = when it
// was skipped − schedule_lag), a failed one a QueryRow with latency 0 and a
// QueryErrorRow (SQLSTATE 40001, 40P01 or XX000).
//
// Aggregate log (--aggregate-interval), one line per interval, always 15
// fields (0 where an option was not used), latencies and lags in µs:
//   interval_start num_transactions sum_latency sum_latency_2 min_latency
//   max_latency sum_lag sum_lag_2 min_lag max_lag skipped retried retries
//   serialization_failures deadlock_failures
// Each line becomes a PgbenchAggregateRow (ns; squares stay in µs²).
//
// The kind of a file is decided by its first non-blank line (see
// PgbenchLogParser::parse_line); every later line must be of that kind.
//
// Numbers are checked so that nothing pgbench cannot have written reaches
// the run file, and so that every sum explain takes over the imported rows
// fits in 64 bits (schema/run_reader.cpp sums the aggregate columns):
//   - every count, time, latency and lag is ≥ 0; epoch seconds are in
//     [0, kMaxEpochS]; client_id and script_no fit an int; transaction
//     numbers, counts and retries are below kMaxCount (2^53, exact in a
//     double);
//   - a latency or lag in µs is at most kMaxLatencyUs, and a transaction
//     cannot start before the epoch (completion − time ≥ 0);
//   - an aggregate line with transactions has min ≤ max and
//     n·min ≤ sum ≤ n·max, for latency and lag alike, allowing for pgbench
//     printing each of them rounded to the µs (sums of squares must be
//     finite and ≥ 0); a line with no transactions has 0 in all eight
//     latency and lag statistics (pgbench adds to them only what it counts);
//   - over the whole import (every file): Σ transactions and each Σ of the
//     other counters stay below kMaxCount, and Σ latency and Σ lag in ns
//     below 2^63.
// Anything else is an Error(usage) "cannot import FILE:LINE: <what>" naming
// the field and its text, e.g. "cannot import a.log:3: time '-5' is out of
// range 0..2305843009213693", which main turns into exit status 2.
//
//   import::PgbenchLogParser parser;
//   std::ifstream in(path);
//   parser.parse_file(in, path);       // throws on the first bad line
//   schema::Batch rows = parser.take_batch();
//
// or, in memory bounded by the chunk size rather than the log's length:
//
//   parser.parse_file(in, path, [&](import::Chunk chunk) { store.write(chunk.batch); });
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schema/records.h"

namespace stallscope::import {

// A pgbench log line is at most ~300 bytes (15 numbers); a longer one — a
// binary file, /dev/zero — is not a log, and reading it whole would grow
// without bound.
inline constexpr std::size_t kMaxLineBytes = 4096;
// Epoch seconds up to 2096.
inline constexpr std::int64_t kMaxEpochS = 4'000'000'000;
// Counts (transactions, skips, retries, failures) and transaction numbers,
// per line and summed over an import: below 2^53, so a double holds them
// exactly too.
inline constexpr std::int64_t kMaxCount = std::int64_t{1} << 53;
// A latency or lag (or a line's sum of them) in µs that fits in ns four
// times over (about 73 years).
inline constexpr std::int64_t kMaxLatencyUs = INT64_MAX / 4'000;

// Rows a parse_file with a sink hands over at a time (about 2 MB of rows).
inline constexpr std::size_t kChunkRows = 16384;

enum class LogKind { transaction, aggregate };

// Rows parsed from one file since the last chunk, with the line of each
// (pgbench_aggregate rows carry theirs).
struct Chunk {
  std::string file;
  schema::Batch batch;
  std::vector<std::int64_t> query_lines;  // line of batch.queries[i]
  std::vector<std::int64_t> skip_lines;   // line of batch.query_skips[i]
};
using ChunkSink = std::function<void(Chunk)>;

// The whitespace-separated fields of a line (space, tab, CR).
std::vector<std::string_view> split_fields(std::string_view line);

// The kind of a log from the fields of its first line: per-transaction lines
// have 6–8 fields with time_us < 1e6 and an epoch second (9 digits or more)
// in field 5; aggregate lines have 15. nullopt for anything else.
std::optional<LogKind> detect_kind(const std::vector<std::string_view>& fields);

// What pgbench's name for a log says: PREFIX.PID for the log of its first
// thread, PREFIX.PID.N for thread N's (PREFIX: pgbench_log, or
// --log-prefix), PID the pgbench process's.
struct LogName {
  std::string prefix;
  std::int64_t pid = 0;
  std::int64_t thread = 0;
  bool operator==(const LogName&) const = default;
};
// The LogName of the file name of `path` (its directory ignored), e.g.
// "logs/pgbench_log.4242.1" → {"pgbench_log", 4242, 1}; nullopt for a name
// not of that form ("a.log", "pgbench_log.4242.copy"). A prefix that itself
// ends in ".DIGITS" is read as PID (the form cannot tell them apart).
std::optional<LogName> parse_log_name(std::string_view path);

// Sums over everything parsed so far (all files), kept to bound them.
struct ImportTotals {
  std::int64_t transactions = 0;  // Σ num_transactions of aggregate lines
  std::int64_t other_counts = 0;  // Σ skipped + retried + retries + failures of aggregate lines
  std::int64_t latency_ns = 0;    // Σ latency: aggregate sum_latency and per-transaction time
  std::int64_t lag_ns = 0;        // Σ lag: aggregate sum_lag and per-transaction schedule_lag
};

// Parses pgbench logs, file after file, into one schema::Batch.
class PgbenchLogParser {
 public:
  // Parses every line of `in` (named `file` in errors) as the lines of one
  // log. Throws Error(usage) "cannot import FILE:LINE: …" on the first bad
  // line (a line longer than kMaxLineBytes included; the rows of the lines
  // before it stay in the batch), Error(usage) "cannot import FILE: the log
  // is empty" when it has no non-blank line, and Error(usage) "cannot import
  // FILE:LINE: cannot read: <strerror>" on a read error.
  void parse_file(std::istream& in, const std::string& file);
  // The same, handing the rows to `sink` as they are parsed: a chunk each
  // time kChunkRows rows are held, and the rest at the end of the file (none
  // when there are none). The rows of a chunk handed over before a bad line
  // are not taken back.
  void parse_file(std::istream& in, const std::string& file, const ChunkSink& sink);

  // Starts a log named `file`: line numbers restart at 1 and the next
  // non-blank line decides its kind.
  void begin_file(std::string file);
  // Parses the next line of the current file (`text` without its newline);
  // blank lines are skipped. Throws as parse_file does.
  void parse_line(std::string_view text);
  // Ends the current file; throws "the log is empty" when it had no
  // non-blank line.
  void end_file();

  const schema::Batch& batch() const noexcept { return batch_; }
  // The rows parsed so far (since the last take), leaving none.
  schema::Batch take_batch();
  Chunk take_chunk();
  const ImportTotals& totals() const noexcept { return totals_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  std::int64_t integer_in(std::string_view field, const char* name, std::int64_t lo,
                          std::int64_t hi) const;
  double real_at_least_0(std::string_view field, const char* name) const;
  // sum += add, failing with `what` when the result would pass `limit`.
  void add_to_total(std::int64_t& sum, std::int64_t add, std::int64_t limit,
                    const char* what) const;
  // Checks n·min ≤ sum ≤ n·max (min ≤ max) for one aggregate column pair,
  // allowing for pgbench's rounding of each to the µs.
  void check_sum_within(std::int64_t n, std::int64_t sum_us, std::int64_t min_us,
                        std::int64_t max_us, const char* sum_name, const char* min_name,
                        const char* max_name) const;
  void transaction_row(const std::vector<std::string_view>& f);
  void aggregate_row(const std::vector<std::string_view>& f);

  schema::Batch batch_;
  std::vector<std::int64_t> query_lines_;  // line of batch_.queries[i]
  std::vector<std::int64_t> skip_lines_;   // line of batch_.query_skips[i]
  ImportTotals totals_;
  std::string file_;
  std::int64_t line_ = 0;
  std::optional<LogKind> kind_;
};

}  // namespace stallscope::import
