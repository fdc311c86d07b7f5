// errors: failed queries are the answer, not a bottleneck. The server's own
// errors (a SQLSTATE outside a lost connection, which connection_lost
// explains) by code, with a message and the statement; when most
// transactions failed the finding is ranked first and is the verdict, since
// the throughput and latency of the few that succeeded say nothing of the
// workload. docs/findings.md, "errors".
#include <algorithm>

#include <fmt/format.h>

#include "correlate/detail.h"
#include "correlate/format.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {

ErrorFacts error_facts(const schema::QueryErrors& errors) {
  ErrorFacts e;
  e.failed = errors.total.queries;
  e.failed_ns = errors.total.latency_ns;
  for (const auto& c : errors.top) e.top.push_back({c.sqlstate, c.queries, c.error});
  return e;
}

std::optional<Finding> errors_finding(const Report& r, const Facts& f) {
  const auto& e = f.errors;
  if (e.failed <= 0 || r.run.queries <= 0) return std::nullopt;
  const double failed_share = double(e.failed) / double(r.run.queries);
  const auto query_ns = r.accounting ? r.accounting->query_ns : 0;
  const double time_share =
      query_ns > 0 ? std::min(1.0, double(e.failed_ns) / double(query_ns)) : failed_share;
  const bool most = failed_share >= kErrorsVerdictMinShare;
  Finding x;
  x.kind = FindingKind::errors;
  x.score = round4(std::clamp(most ? failed_share : time_share, 0.0, 1.0));
  if (x.score < kMinScore) return std::nullopt;
  x.start_ns = f.span.start_ns;
  x.end_ns = f.span.end_ns;
  std::string codes;
  for (const auto& c : e.top) {
    codes += fmt::format("{}{} ×{}", codes.empty() ? "" : ", ", c.sqlstate, c.queries);
  }
  const auto& top = e.top.front();
  const std::string message =
      top.error.empty() ? std::string() : fmt::format(" \"{}\"", sql_one_line(top.error, 160));
  const std::int64_t answered = r.run.queries - r.run.errors;
  // "SQLSTATE 42703 \"column … does not exist\"" for one code; else the
  // codes and the most frequent one's message.
  const std::string codes_text =
      e.top.size() == 1 ? fmt::format("all SQLSTATE {}{}", top.sqlstate, message)
                        : fmt::format("{}; the most frequent, {}{}", codes, top.sqlstate, message);
  x.summary =
      most ? fmt::format(
                 "{} of {} transactions failed ({}), {} answered: the failures, not a bottleneck, "
                 "are the answer — {}.",
                 e.failed, r.run.queries, share_pct_text(failed_share), answered, codes_text)
           : fmt::format("{} of {} transactions failed ({}) and took {} of query time: {}.",
                         e.failed, r.run.queries, share_pct_text(failed_share),
                         share_pct_text(time_share), codes_text);
  x.culprit = fmt::format("SQLSTATE {}{}", top.sqlstate, message);
  if (r.run.sql && !r.run.sql->empty()) {
    x.culprit += fmt::format(" from {}", sql_one_line(*r.run.sql, 100));
    x.evidence.emplace_back("statement", sql_one_line(*r.run.sql, 200));
  }
  x.evidence.emplace_back("failed", e.failed);
  x.evidence.emplace_back("transactions", r.run.queries);
  x.evidence.emplace_back("failed_share", round4(failed_share));
  x.evidence.emplace_back("failed_time_share", round4(time_share));
  x.evidence.emplace_back("sqlstates", codes);
  if (!top.error.empty()) x.evidence.emplace_back("message", sql_one_line(top.error, 300));
  x.suggestion =
      most ? "Fix the failure first (the message and the statement above; the run file's "
             "query_error table has every one): the throughput and latency of the few answered "
             "transactions say nothing about the workload."
           : "The failed transactions' time is in the accounting like any other: find why they "
             "fail (query_error in the run file); retried work counts again.";
  return x;
}

}  // namespace stallscope::correlate::detail
