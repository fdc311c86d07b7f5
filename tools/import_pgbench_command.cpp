// `stallscope import-pgbench`: pgbench logs (PostgreSQL 15–17 formats) into a
// new run file, so `explain` works on runs stallscope did not drive. The
// formats and their checks: import/pgbench_log.h.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/units.h"
#include "import/pgbench_log.h"
#include "schema/run_reader.h"
#include "schema/store.h"
#include "tools/commands.h"
#include "tools/session.h"

namespace stallscope::tools {

int import_pgbench_command(const ImportPgbenchOptions& o) {
  // Everything is parsed before the run file exists: a malformed line leaves
  // no file behind.
  import::PgbenchLogParser parser;
  for (const auto& path : o.files) {
    std::ifstream in(path);
    if (!in) {
      throw_usage(fmt::format("cannot read pgbench log {}: {}", path, std::strerror(errno)));
    }
    parser.parse_file(in, path);
  }
  schema::Batch batch = parser.take_batch();

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
    // Transaction numbers are below 2^53 (import/pgbench_log.h); the sum
    // over many clients saturates rather than wraps.
    for (const auto& [client, span] : seq_span) {
      if (__builtin_add_overflow(numbered, span.second - span.first + 1, &numbered)) {
        numbered = std::numeric_limits<std::int64_t>::max();
      }
    }
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
    discard_run_file(store, o.output_path);
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
