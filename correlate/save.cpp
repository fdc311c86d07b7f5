// save_report: explain's results into the run file (tables finding, stall,
// written by schema/report_store.h).
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "schema/report_store.h"

namespace stallscope::correlate {
namespace {
std::optional<std::string> culprit_or_null(const std::string& culprit) {
  if (culprit.empty()) return std::nullopt;
  return culprit;
}
}  // namespace

void save_report(schema::Store& store, const Report& report) {
  using namespace detail;
  std::vector<schema::FindingRow> findings;
  findings.reserve(report.findings.size());
  for (const auto& x : report.findings) {
    findings.push_back({std::string(to_string(x.kind)), x.score, x.start_ns, x.end_ns, x.summary,
                        evidence_json(x.evidence).dump(), x.suggestion,
                        culprit_or_null(x.culprit)});
  }
  std::vector<schema::StallRow> stalls;
  stalls.reserve(report.stalls.size());
  for (const auto& x : report.stalls) {
    stalls.push_back({static_cast<std::int64_t>(x.window_index), x.start_ns, x.end_ns, x.queries,
                      x.tps, x.typical_tps, x.latency_mean_ms, x.typical_latency_mean_ms,
                      x.latency_max_ms, x.tps_z, x.latency_z, std::string(to_string(x.cause)),
                      x.explanation, evidence_json(x.evidence).dump(), culprit_or_null(x.culprit)});
  }
  try {
    schema::replace_findings_and_stalls(store, findings, stalls);
  } catch (const schema::SqliteError& e) {
    throw Error(ErrorKind::sqlite,
                fmt::format("cannot save explain's results into {}: {}", store.path(), e.what()),
                e.code());
  }
}

}  // namespace stallscope::correlate
