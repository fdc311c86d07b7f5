// The query path: the processes whose time is query time (the driver and
// this run's backends, and the poolers between them), how the queries are
// tied to their backends, the path's cgroups and the checkpointer.
#include <iterator>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "correlate/passes.h"

namespace stallscope::correlate::detail {
namespace {

// The driver (the stallscope process) and the backends that served the
// driver's connections (client.backend_pid), matched by pid and a start time
// no later than the run's or connection's start (+ kBackendStartSlackNs).
QueryPath find_driver_and_backends(const ProcessLookups& file, const RunRow& run) {
  QueryPath qp;
  qp.driver_process_id = file.find_driver_process(run.stallscope_pid, run.stallscope_start_ticks,
                                                  run.summary.start_ns + kBackendStartSlackNs);
  for (const auto& c : file.driver_backends()) {
    qp.backend_pids.insert(c.backend_pid);
    std::optional<std::int64_t> started_by;
    if (c.connect_ns) started_by = *c.connect_ns + kBackendStartSlackNs;
    if (auto id = file.latest_with_pid(c.backend_pid, started_by))
      qp.backend_process_ids.insert(*id);
  }
  return qp;
}

// Behind a pooler the driver's backend pids are the pooler's. This run's
// backends are the client backends (cmdline "postgres: USER DB HOST…") of the
// postmaster whose processes ASH saw, sampled during the queries.
void find_backends_behind_pooler(const ProcessLookups& file, QueryPath& qp, Span span,
                                 std::vector<std::string>& notes) {
  qp.backend_pids.clear();
  for (const auto& p : file.pooled_client_backends(span.start_ns, span.end_ns)) {
    qp.backend_process_ids.insert(p.process_id);
    qp.backend_pids.insert(p.pid);
  }
  notes.push_back(
      "Behind a pooler: this run's backends are the client backends (by command line) of the "
      "server whose processes ASH sampled.");
}

// Poolers and proxies on the query path (see ExplainOptions), and — when the
// driver's backend pids were a pooler's — the server's client backends seen
// by ASH in the span as this run's backends.
void find_middle_processes(const ProcessLookups& file, const ExplainOptions& opt, QueryPath& qp,
                           Span span, std::vector<std::string>& notes) {
  std::vector<std::string> names = opt.path_process_names;
  const bool auto_detect =
      names.empty() && !qp.backend_pids.empty() && qp.backend_process_ids.empty();
  if (auto_detect) names.assign(std::begin(kPoolerComms), std::end(kPoolerComms));
  std::set<std::string> found;
  for (const auto& name : names) {
    for (auto& p : file.sampled_processes_named(name, span.start_ns, span.end_ns)) {
      qp.middle_processes.emplace(p.process_id, std::move(p.comm));
      found.insert(name);
    }
  }
  for (const auto& name : opt.path_process_names) {
    if (!found.contains(name)) {
      notes.push_back(fmt::format(
          "--path-process {}: no process of that name was sampled during the queries.", name));
    }
  }
  if (auto_detect && !found.empty()) {
    notes.push_back(fmt::format(
        "The driver's backend pids match no sampled process, so it talked to a pooler: {} taken "
        "as part of the query path (use --path-process to name it).",
        fmt::join(found, ", ")));
  }
  if (qp.middle_processes.empty() || !qp.backend_process_ids.empty()) return;
  find_backends_behind_pooler(file, qp, span, notes);
}

}  // namespace

QueryPath find_query_path(const ProcessLookups& file, const QueryPathInputs& in,
                          std::vector<std::string>& notes) {
  auto qp = find_driver_and_backends(file, in.run);
  // Client + server: the driver ran on the client host; its figures come
  // from the client pass, never from the server file's processes — except
  // for an imported pgbench log, whose file holds no samples: pgbench and its
  // backends are looked for in the server (record) file.
  if (in.pair) qp.driver_process_id.reset();
  if (in.pair && in.run.imported) find_pgbench(file, in.span, in.run.summary.clients, qp, notes);
  qp.driver_backends_unsampled = qp.backend_process_ids.empty();
  if (in.has_queries) find_middle_processes(file, in.options, qp, in.span, notes);
  return qp;
}

// Per-query attribution (attribution.h) where each query's backend is known;
// for an imported pgbench log whose backends were found by application_name,
// behind a pooler (its pids are the pooler's) or without backend pids (an
// imported pgbench log alone), host-wide figures.
Attribution choose_attribution(const RunRow& run, std::int64_t queries, const QueryPath& qp,
                               const BackendMap& backends) {
  Attribution att;
  att.queries = queries;
  if (qp.pgbench && !qp.pgbench->backend_pids.empty() && qp.middle_processes.empty()) {
    att.method = AttributionMethod::host_wide;
    att.reason = fmt::format(
        "an imported pgbench log does not say which backend served which transaction: every "
        "sample of pgbench's {} backends (application_name '{}' in ASH, or started as pgbench "
        "connected) counts over the whole query span",
        qp.pgbench->backend_pids.size(), qp.pgbench->application_name);
  } else if (qp.driver_backends_unsampled && !qp.middle_processes.empty()) {
    att.method = AttributionMethod::host_wide;
    att.reason =
        "behind a pooler a query's server backend is not known: every client backend of the "
        "server counts over the whole query span";
  } else if (backends.empty()) {
    att.method = AttributionMethod::host_wide;
    att.reason = fmt::format(
        "the file has no backend identity{}: every client backend's samples count over the "
        "whole query span",
        run.imported ? " (imported pgbench log)"
                     : " (no driver connection recorded a backend pid)");
  } else if (!backends.queries_name_connections()) {
    att.method = AttributionMethod::host_wide;
    att.reason =
        "the queries do not name their driver connection (query.connection): every sample of "
        "the run's backends counts over the whole query span";
  } else {
    att.method = AttributionMethod::per_query;
  }
  return att;
}

// cgroup cpu.stat of the query path's cgroups (cgroup_sample, where the
// sampler recorded it): marks path processes whose cgroup was throttled in
// the span and keeps the most throttled cgroup's figures as evidence.
void add_cgroups(const CgroupInputs& in, QueryPath& qp, Facts& f) {
  std::map<std::string, std::vector<std::int64_t>> path_cgroups;
  for (const auto& p : in.process_cgroups) {
    if (qp.is_path(p.process_id)) path_cgroups[p.cgroup].push_back(p.process_id);
  }
  for (const auto& [cgroup, ids] : path_cgroups) {
    const auto t = in.sums_in_span(cgroup);
    if (t.rows == 0) continue;
    f.cgroup_data = true;
    if (t.nr_throttled > 0) qp.throttled_process_ids.insert(ids.begin(), ids.end());
    if (t.nr_throttled > 0 && t.throttled_ns >= f.cgroup_throttled_ns) {
      f.throttled_cgroup = cgroup;
      f.cgroup_throttled_ns = t.throttled_ns;
      f.cgroup_nr_throttled = t.nr_throttled;
      f.cgroup_nr_periods = t.nr_periods;
    }
  }
}

}  // namespace stallscope::correlate::detail
