// The page's data (report.h Page) and the comparison with a baseline run.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/units.h"
#include "report/detail.h"
#include "report/report.h"
#include "schema/records.h"

namespace stallscope::report {
namespace {

// A part's time per query moved by this share of the mean latency, or its
// share of query time by this many points, is a difference.
constexpr double kMovedShare = 0.05;

// Each part's id → its label in words (correlate/parts.h), into `labels`.
void add_part_labels(const std::vector<correlate::AccountingPart>& parts, nlohmann::json& labels) {
  for (const auto& p : parts) labels[p.name] = correlate::part_label(p.name);
}

nlohmann::json chart_json(const Chart& c) {
  nlohmann::json series = nlohmann::json::array();
  for (const auto& s : c.series) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& v : s.values)
      values.push_back(v ? nlohmann::json(*v) : nlohmann::json(nullptr));
    series.push_back({{"label", s.label}, {"values", std::move(values)}});
  }
  nlohmann::json lines = nlohmann::json::array();
  for (const auto& [label, value] : c.lines) lines.push_back({{"label", label}, {"value", value}});
  return {{"id", c.id},
          {"title", c.title},
          {"unit", c.unit},
          {"y_log", c.y_log},
          {"stacked", c.stacked},
          {"series", std::move(series)},
          {"lines", std::move(lines)},
          {"note", c.note}};
}

// explain's JSON without its per-window rows: the charts carry the timelines.
nlohmann::json report_json(const correlate::Report& r) {
  auto j = correlate::to_json(r);
  j.erase("windows");
  return j;
}

double share_of(const correlate::Report& r, const std::string& part) {
  if (!r.accounting) return 0;
  for (const auto& p : r.accounting->parts)
    if (p.name == part) return p.share;
  return 0;
}

double ms_per_query(const correlate::Report& r, const std::string& part) {
  if (!r.accounting || r.run.queries == 0) return 0;
  for (const auto& p : r.accounting->parts)
    if (p.name == part)
      return static_cast<double>(p.time_ns) / static_cast<double>(r.run.queries) /
             common::kNsPerMsDouble;
  return 0;
}

}  // namespace

Page::Page(const correlate::Report& report, Options options)
    : report_(report), options_(std::move(options)), grid_(grid_for(report, options_.max_bins)) {}

void Page::set_baseline(const correlate::Report& baseline,
                        const correlate::RunComparison& comparison, std::string title) {
  auto b = correlate::to_json(baseline);
  nlohmann::json slim = {{"run", b["run"]},
                         {"accounting", b["accounting"]},
                         {"verdict", b["verdict"]},
                         {"findings", b["findings"]}};
  auto c = correlate::to_json(report_);
  baseline_ = {{"title", std::move(title)},
               {"report", std::move(slim)},
               {"comparison", c.contains("comparison") ? c["comparison"] : nlohmann::json(nullptr)},
               {"differences", differences(report_, baseline, comparison)}};
  if (baseline_["comparison"].is_null())
    baseline_["comparison"] = {{"summary", comparison.summary}};
  if (baseline.accounting) add_part_labels(baseline.accounting->parts, part_labels_);
}

namespace {

// The charts' order on the page: the client's view, the database's, then
// each host's (hosts in the order they were added).
int chart_rank(const std::string& id) {
  static constexpr const char* kOrder[] = {
      "throughput", "latency", "schedule_lag", "aas",         "query_path_cpu",
      "host_cpu:",  "tasks:",  "psi:",         "process_cpu:"};
  for (int i = 0; i < static_cast<int>(std::size(kOrder)); ++i)
    if (id.starts_with(kOrder[i])) return i;
  return static_cast<int>(std::size(kOrder));
}

}  // namespace

nlohmann::json Page::rate_json() const {
  // A record file drives nothing; the rest ran closed loop unless their
  // queries carry a schedule lag (-R).
  if (report_.run.mode == schema::to_string(schema::RunMode::record)) return nullptr;
  const bool fixed = report_.run.rate_tps || report_.run.lag_mean_ms ||
                     (report_.pgbench_aggregate && report_.pgbench_aggregate->lag_mean_ms);
  // The target as run -R stored it (run.rate_tps; none in an imported log,
  // nor in files older than schema version 4).
  nlohmann::json target = nullptr;
  if (report_.run.rate_tps) target = *report_.run.rate_tps;
  return {{"mode", fixed ? "fixed" : "closed loop"}, {"target_tps", target}};
}

nlohmann::json Page::data() const {
  std::vector<const Chart*> ordered;
  for (const auto& c : charts_) ordered.push_back(&c);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Chart* a, const Chart* b) {
    const bool a_host = chart_rank(a->id) >= 5, b_host = chart_rank(b->id) >= 5;
    // Host charts stay grouped by host: only the charts before them move.
    if (a_host && b_host) return false;
    return chart_rank(a->id) < chart_rank(b->id);
  });
  nlohmann::json charts = nlohmann::json::array();
  for (const auto* c : ordered) charts.push_back(chart_json(*c));
  auto report = report_json(report_);
  auto tables = tables_;
  tables["lock_chains"] =
      report.contains("lock_chains") ? report["lock_chains"] : nlohmann::json(nullptr);
  if (!tables.contains("processes")) {
    tables["processes"] = nlohmann::json::array();
    tables["processes_note"] = "no process samples in the analysed span";
  }
  for (const char* t : {"wait_events", "sql"})
    if (!tables.contains(t)) tables[t] = nlohmann::json::array();
  // The hosts whose samples were read; without any (an imported log alone),
  // the run's own host.
  nlohmann::json hosts = nlohmann::json::array();
  for (const auto& h : hosts_)
    hosts.push_back({{"role", h.role}, {"host", h.name}, {"kernel", h.kernel}, {"cores", h.cores}});
  if (hosts.empty()) {
    hosts.push_back({{"role", ""},
                     {"host", report_.run.host},
                     {"kernel", report_.run.kernel},
                     {"cores", report_.run.cores}});
  }
  // The accounting parts' ids in words (correlate/parts.h), for the page's
  // legend and tooltips.
  nlohmann::json part_labels = part_labels_;
  if (report_.accounting) add_part_labels(report_.accounting->parts, part_labels);
  if (report_.host_accounting) add_part_labels(report_.host_accounting->parts, part_labels);
  return {
      {"title", options_.title},
      {"generated_by", "stallscope " STALLSCOPE_VERSION},
      {"part_labels", std::move(part_labels)},
      {"files",
       {{"run", options_.run_path},
        {"server",
         options_.server_path ? nlohmann::json(*options_.server_path) : nlohmann::json(nullptr)},
        {"baseline", options_.baseline_path ? nlohmann::json(*options_.baseline_path)
                                            : nlohmann::json(nullptr)}}},
      {"facts",
       {{"command_line", command_line_}, {"hosts", std::move(hosts)}, {"rate", rate_json()}}},
      {"report", std::move(report)},
      {"timeline",
       {{"start_ns", grid_.start_ns()},
        {"end_ns", grid_.end_ns()},
        {"bin_ns", grid_.bin_ns},
        {"fine_bin_ns", grid_.fine_bin_ns},
        {"bins", grid_.bins()},
        // Every bin's edges when some are shorter (around stalls).
        {"edges_ns", grid_.fine_bin_ns ? nlohmann::json(grid_.edges_ns) : nlohmann::json(nullptr)},
        {"charts", std::move(charts)}}},
      {"tables", std::move(tables)},
      {"baseline", baseline_}};
}

std::vector<std::string> differences(const correlate::Report& run,
                                     const correlate::Report& baseline,
                                     const correlate::RunComparison& comparison) {
  std::vector<std::string> out;
  if (!comparison.summary.empty()) out.push_back(comparison.summary);
  if (run.run.latency_mean_ms && baseline.run.latency_mean_ms) {
    out.push_back(fmt::format(
        "Mean latency {:.3g} ms against {:.3g} ms; p99 {} against {}.", *run.run.latency_mean_ms,
        *baseline.run.latency_mean_ms,
        run.run.latency_p99_ms ? fmt::format("{:.3g} ms", *run.run.latency_p99_ms) : "-",
        baseline.run.latency_p99_ms ? fmt::format("{:.3g} ms", *baseline.run.latency_p99_ms)
                                    : "-"));
  }
  if (!run.accounting || !baseline.accounting) return out;
  std::map<std::string, int> names;
  for (const auto& p : run.accounting->parts) names.emplace(p.name, 0);
  for (const auto& p : baseline.accounting->parts) names.emplace(p.name, 0);
  // A part moved when its time per query changed by kMovedShare of the
  // slower run's mean latency, or its share of query time by kMovedShare.
  const double scale_ms =
      std::max(run.run.latency_mean_ms.value_or(0), baseline.run.latency_mean_ms.value_or(0));
  std::vector<std::pair<double, std::string>> moved;
  for (const auto& [name, unused] : names) {
    const double a = share_of(run, name), b = share_of(baseline, name);
    const double a_ms = ms_per_query(run, name), b_ms = ms_per_query(baseline, name);
    const double d_ms = std::fabs(a_ms - b_ms);
    if (std::fabs(a - b) < kMovedShare && !(scale_ms > 0 && d_ms >= kMovedShare * scale_ms))
      continue;
    moved.emplace_back(
        scale_ms > 0 ? d_ms / scale_ms : std::fabs(a - b),
        fmt::format("{} {} from {:.3g} to {:.3g} ms a query ({:.0f}% → {:.0f}% of query time).",
                    name, a_ms >= b_ms ? "rose" : "fell", b_ms, a_ms, 100 * b, 100 * a));
  }
  std::sort(moved.begin(), moved.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  for (auto& [d, text] : moved) out.push_back(std::move(text));
  if (moved.empty()) {
    out.push_back(
        "No part of the query time moved by 5% of the mean latency or 5 points of its share.");
  }
  if (run.verdict.kind != baseline.verdict.kind) {
    const auto kind = [](const correlate::Report& r) {
      return r.verdict.kind ? std::string(correlate::to_string(*r.verdict.kind))
                            : std::string("no bottleneck");
    };
    out.push_back(
        fmt::format("The verdict changed: {} (baseline: {}).", kind(run), kind(baseline)));
  }
  return out;
}

}  // namespace stallscope::report
