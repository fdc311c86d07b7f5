// The JSON renderer (correlate.h to_json): the same Report as render_text
// shows, as the document `explain --json` prints and the HTML report reads
// (its fields are documented in docs/findings.md).
#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "correlate/format.h"

namespace stallscope::correlate {
namespace detail {

nlohmann::json evidence_json(const Evidence& evidence) {
  nlohmann::json ev = nlohmann::json::object();
  for (const auto& [name, value] : evidence) {
    const std::string key = valid_utf8(name);
    std::visit(
        [&](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
            ev[key] = valid_utf8(v);
          } else {
            ev[key] = v;
          }
        },
        value);
  }
  return ev;
}

nlohmann::json stall_json(const Stall& s) {
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return {{"window_index", s.window_index},
          {"start_ns", s.start_ns},
          {"end_ns", s.end_ns},
          {"queries", s.queries},
          {"tps", opt(s.tps)},
          {"typical_tps", opt(s.typical_tps)},
          {"latency_mean_ms", opt(s.latency_mean_ms)},
          {"typical_latency_mean_ms", opt(s.typical_latency_mean_ms)},
          {"latency_max_ms", opt(s.latency_max_ms)},
          {"tps_z", opt(s.tps_z)},
          {"latency_z", opt(s.latency_z)},
          {"cause", std::string(to_string(s.cause))},
          {"explanation", valid_utf8(s.explanation)},
          {"evidence", evidence_json(s.evidence)},
          {"culprit",
           s.culprit.empty() ? nlohmann::json(nullptr) : nlohmann::json(valid_utf8(s.culprit))}};
}

namespace {

nlohmann::json sessions_json(const SessionView& v) {
  auto parts_json = [](const std::vector<SessionPart>& parts) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& p : parts)
      j.push_back(
          {{"name", valid_utf8(p.name)}, {"time_ns", p.time_ns}, {"share", round4(p.share)}});
    return j;
  };
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : v.groups) {
    groups.push_back({{"application_name", valid_utf8(g.application_name)},
                      {"client_addr", valid_utf8(g.client_addr)},
                      {"user", valid_utf8(g.user)},
                      {"database", valid_utf8(g.database)},
                      {"sessions", g.sessions},
                      {"session_ns", g.session_ns},
                      {"idle_share", round4(g.idle_share)},
                      {"parts", parts_json(g.parts)},
                      {"client_pids", g.client_pids}});
  }
  nlohmann::json clients = nlohmann::json::array();
  for (const auto& c : v.client_processes) {
    nlohmann::json j = {{"pid", c.pid},
                        {"comm", valid_utf8(c.comm)},
                        {"found_by", c.found_by},
                        {"cpu_ns", c.cpu_ns},
                        {"run_delay_ns", c.run_delay_ns},
                        {"cores", round4(c.cores)},
                        {"hottest_thread_cores", round4(c.hottest_thread_cores)},
                        {"hottest_thread_demand_cores", round4(c.hottest_thread_demand_cores)},
                        {"threads_sampled", c.threads_sampled},
                        {"sessions", c.sessions},
                        {"sessions_idle_share", round4(c.sessions_idle_share)}};
    j["top_thread_cores"] =
        c.top_thread_cores ? nlohmann::json(round4(*c.top_thread_cores)) : nlohmann::json(nullptr);
    clients.push_back(std::move(j));
  }
  nlohmann::json others = nlohmann::json::array();
  for (const auto& g : v.other_groups) {
    others.push_back({{"application_name", valid_utf8(g.application_name)},
                      {"client_addr", valid_utf8(g.client_addr)},
                      {"user", valid_utf8(g.user)},
                      {"database", valid_utf8(g.database)},
                      {"sessions", g.sessions},
                      {"session_ns", g.session_ns},
                      {"client_pids", g.client_pids}});
  }
  return {{"ash_period_ns", v.ash_period_ns},
          {"polls", v.polls},
          {"sessions", v.sessions},
          {"session_ns", v.session_ns},
          {"parts", parts_json(v.parts)},
          {"groups", std::move(groups)},
          {"client_processes", std::move(clients)},
          {"other_load",
           {{"sessions", v.other_sessions},
            {"session_ns", v.other_session_ns},
            {"groups", std::move(others)}}},
          {"idle_pooled_sessions", v.idle_pooled_sessions}};
}

// JSON helpers: units live in the key names.
nlohmann::json str(const std::string& s) {
  return valid_utf8(s);
}
template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
  if (!v) return nullptr;
  if constexpr (std::is_same_v<T, std::string>) {
    return valid_utf8(*v);
  } else {
    return *v;
  }
}

nlohmann::json accounting_json(const Accounting& a) {
  nlohmann::json j;
  j["clients"] = a.clients;
  j["wall_ns"] = a.wall_ns;
  j["client_ns"] = a.client_ns;
  j["query_ns"] = a.query_ns;
  j["idle_ns"] = a.idle_ns;
  j["client_busy_share"] = a.client_busy_share;
  j["schedule_lag_ns"] = a.schedule_lag_ns;
  j["driver_cpu_ns"] = a.driver_cpu_ns;
  j["sampler_cpu_ns"] = a.sampler_cpu_ns;
  j["server_cpu_ns"] = a.server_cpu_ns;
  j["path_cpu_ns"] = a.path_cpu_ns;
  j["path_cpu_by_comm_ns"] = nlohmann::json::object();
  for (const auto& [comm, ns] : a.path_cpu_by_comm_ns)
    j["path_cpu_by_comm_ns"][valid_utf8(comm)] = ns;
  j["path_wait_ns"] = a.path_wait_ns ? nlohmann::json(*a.path_wait_ns) : nlohmann::json(nullptr);
  j["server_wait_ns"] = a.server_wait_ns;
  j["server_wait_by_class_ns"] = nlohmann::json::object();
  for (const auto& [cls, ns] : a.server_wait_by_class_ns)
    j["server_wait_by_class_ns"][valid_utf8(cls)] = ns;
  j["run_delay_ns"] = a.run_delay_ns;
  j["driver_run_delay_ns"] = a.driver_run_delay_ns;
  j["backend_d_state_ns"] = a.backend_d_state_ns;
  j["server_d_state_ns"] = a.server_d_state_ns;
  j["server_d_state_by_wchan_ns"] = nlohmann::json::object();
  for (const auto& [wchan, ns] : a.server_d_state_by_wchan_ns)
    j["server_d_state_by_wchan_ns"][valid_utf8(wchan)] = ns;
  j["kernel_wait_ns"] = a.kernel_wait_ns;
  j["kernel_wait_by_wchan_ns"] = nlohmann::json::object();
  for (const auto& [wchan, ns] : a.kernel_wait_by_wchan_ns)
    j["kernel_wait_by_wchan_ns"][valid_utf8(wchan)] = ns;
  j["cannot_account"] =
      a.cannot_account ? nlohmann::json(valid_utf8(*a.cannot_account)) : nlohmann::json(nullptr);
  if (a.cannot_account) {
    // Unknown, not 0.
    auto has_part = [&](Part part) {
      return std::any_of(a.parts.begin(), a.parts.end(),
                         [&](const auto& p) { return p.kind() == part; });
    };
    for (const char* k : {"path_cpu_ns", "run_delay_ns", "excess_ns"}) j[k] = nullptr;
    if (!has_part(Part::server_cpu)) j["server_cpu_ns"] = nullptr;
    if (!has_part(Part::driver_cpu)) j["driver_cpu_ns"] = j["driver_run_delay_ns"] = nullptr;
    j["remainder_ns"] = nullptr;
  } else {
    j["remainder_ns"] = a.remainder_ns;
  }
  j["excess_ns"] = a.excess_ns;
  j["parts"] = nlohmann::json::array();
  for (const auto& p : a.parts) {
    j["parts"].push_back(
        {{"part", valid_utf8(p.name)},
         {"time_ns", p.time_ns},
         {"query_time_share", p.share},
         {"host", p.host.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.host)}});
  }
  return j;
}

nlohmann::json run_json(const Report& r) {
  nlohmann::json run;
  const auto& s = r.run;
  run["host"] = str(s.host);
  run["kernel"] = str(s.kernel);
  run["machine_id"] = opt(s.machine_id);
  run["boot_id"] = opt(s.boot_id);
  run["cores"] = s.cores;
  run["mode"] = str(s.mode);
  run["status"] = str(s.status);
  run["start_ns"] = s.start_ns;
  run["end_ns"] = opt(s.end_ns);
  run["duration_ns"] = opt(s.duration_ns);
  run["clients"] = opt(s.clients);
  run["threads"] = opt(s.threads);
  run["protocol"] = opt(s.protocol);
  run["rate_tps"] = opt(s.rate_tps);
  run["sql"] = opt(s.sql);
  run["server_version"] = opt(s.server_version);
  run["end_reason"] = opt(s.end_reason);
  run["hz"] = s.hz;
  run["queries"] = s.queries;
  run["errors"] = s.errors;
  run["skipped"] = s.skipped;
  run["unfinished"] = s.unfinished;
  run["connect_failures"] = s.connect_failures;
  run["unfinished_max_s"] = double(s.unfinished_max_ns) / kNsPerS;
  run["query_start_ns"] = opt(s.query_start_ns);
  run["query_end_ns"] = opt(s.query_end_ns);
  run["queries_until_ns"] = opt(s.queries_until_ns);
  run["tps"] = opt(s.tps);
  run["latency_mean_ms"] = opt(s.latency_mean_ms);
  run["latency_p50_ms"] = opt(s.latency_p50_ms);
  run["latency_p99_ms"] = opt(s.latency_p99_ms);
  run["latency_max_ms"] = opt(s.latency_max_ms);
  run["lag_mean_ms"] = opt(s.lag_mean_ms);
  run["lag_max_ms"] = opt(s.lag_max_ms);
  run["window_ns"] = opt(r.window_ns);
  run["every_queries"] = opt(r.every_queries);
  run["ash_period_ns"] = opt(r.ash_period_ns);

  if (const auto& a = r.pgbench_aggregate) {
    run["pgbench_aggregate"] = {{"intervals", a->intervals},
                                {"interval_ns", a->interval_ns},
                                {"transactions", a->transactions},
                                {"failures", a->failures},
                                {"skipped", a->skipped},
                                {"start_ns", a->start_ns},
                                {"end_ns", a->end_ns},
                                {"tps", opt(a->tps)},
                                {"latency_mean_ms", opt(a->latency_mean_ms)},
                                {"latency_min_ms", opt(a->latency_min_ms)},
                                {"latency_max_ms", opt(a->latency_max_ms)},
                                {"lag_mean_ms", opt(a->lag_mean_ms)}};
  } else {
    run["pgbench_aggregate"] = nullptr;
  }
  return run;
}

nlohmann::json window_json(const Window& w) {
  nlohmann::json j;
  j["start_ns"] = w.start_ns;
  j["end_ns"] = w.end_ns;
  j["start_offset_s"] = w.start_offset_s;
  j["duration_s"] = w.duration_s;
  j["queries"] = w.queries;
  j["errors"] = w.errors;
  j["query_time_ns"] = w.query_time_ns;
  j["schedule_lag_ns"] = w.schedule_lag_ns;
  j["tps"] = opt(w.tps);
  j["latency_min_ms"] = opt(w.latency_min_ms);
  j["latency_max_ms"] = opt(w.latency_max_ms);
  j["latency_mean_ms"] = opt(w.latency_mean_ms);
  j["latency_stddev_ms"] = opt(w.latency_stddev_ms);
  j["latency_p99_ms"] = opt(w.latency_p99_ms);
  j["cpu_busy_pct"] = opt(w.cpu_busy_pct);
  j["cpu_idle_pct"] = opt(w.cpu_idle_pct);
  j["cpu_iowait_pct"] = opt(w.cpu_iowait_pct);
  j["cpu_steal_pct"] = opt(w.cpu_steal_pct);
  j["procs_running_max"] = opt(w.procs_running_max);
  j["processes_d_state_max"] = opt(w.processes_d_state_max);
  j["top_wait_event"] = opt(w.top_wait_event);
  j["top_wait_event_samples"] = w.top_wait_event_samples;
  j["sampler_core_share"] = opt(w.sampler_core_share);
  j["perturbed"] = w.perturbed;
  j["ash_blind_ns"] = w.ash_blind_ns;
  j["accounting"] = w.accounting ? accounting_json(*w.accounting) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json finding_json(const Finding& f) {
  return {{"kind", std::string(to_string(f.kind))},
          {"score", f.score},
          {"start_ns", f.start_ns},
          {"end_ns", f.end_ns},
          {"summary", valid_utf8(f.summary)},
          {"evidence", evidence_json(f.evidence)},
          {"suggestion", valid_utf8(f.suggestion)},
          {"culprit",
           f.culprit.empty() ? nlohmann::json(nullptr) : nlohmann::json(valid_utf8(f.culprit))}};
}

nlohmann::json attribution_json(const std::optional<Attribution>& attribution) {
  if (!attribution) return nullptr;
  const auto& t = *attribution;
  return {
      {"method", std::string(to_string(t.method))},
      {"queries", t.queries},
      {"joined_queries", t.joined_queries},
      {"reason", t.reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(valid_utf8(t.reason))},
      {"backend_cpu_outside_ns", t.backend_cpu_outside_ns},
      {"ash_samples_outside", t.ash_samples_outside}};
}

nlohmann::json host_json(const HostSummary& h) {
  return {{"role", h.role},
          {"host", valid_utf8(h.host)},
          {"cores", h.cores},
          {"cpu_busy_pct", opt(h.cpu_busy_pct)},
          {"cpu_iowait_pct", opt(h.cpu_iowait_pct)},
          {"cpu_steal_pct", opt(h.cpu_steal_pct)}};
}

nlohmann::json comparison_json(const RunComparison& c) {
  auto side = [&](const RunComparison::Side& x) {
    return nlohmann::json{{"path", valid_utf8(x.path)},
                          {"label", valid_utf8(x.label)},
                          {"queries", x.queries},
                          {"clients", opt(x.clients)},
                          {"tps", opt(x.tps)},
                          {"latency_mean_ms", opt(x.latency_mean_ms)},
                          {"latency_p99_ms", opt(x.latency_p99_ms)}};
  };
  return {{"run", side(c.run)},
          {"baseline", side(c.baseline)},
          {"tps_ratio", opt(c.tps_ratio)},
          {"tps_change_pct", opt(c.tps_change_pct)},
          {"summary", valid_utf8(c.summary)}};
}

nlohmann::json pgbench_json(const PgbenchDriver& d) {
  return {{"pid", opt(d.pid)},
          {"start_ns", opt(d.start_ns)},
          {"found_by", d.found_by.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.found_by)},
          {"processes", d.processes},
          {"cpu_ns", opt(d.cpu_ns)},
          {"run_delay_ns", opt(d.run_delay_ns)},
          {"application_name", valid_utf8(d.application_name)},
          {"backend_pids", d.backend_pids},
          {"backends_by_application_name", d.backends_by_application_name},
          {"backends_by_start", d.backends_by_start},
          {"backend_processes", d.backend_processes},
          {"note", valid_utf8(d.note)}};
}

nlohmann::json clock_json(const ClockAlignment& c) {
  return {{"estimates", c.estimates},
          {"applied", c.offset_ns.has_value()},
          {"offset_ns", opt(c.offset_ns)},
          {"uncertainty_ns", opt(c.uncertainty_ns)},
          {"offset_min_ns", opt(c.offset_min_ns)},
          {"offset_max_ns", opt(c.offset_max_ns)}};
}

}  // namespace
}  // namespace detail

namespace {

nlohmann::json lock_session_json(const LockChains::Session& s) {
  using detail::valid_utf8;
  return {{"pid", s.pid},
          {"sampled", s.sampled},
          {"state", valid_utf8(s.state)},
          {"backend_type", valid_utf8(s.backend_type)},
          {"application_name", valid_utf8(s.application_name)},
          {"query", valid_utf8(s.query)},
          {"xact_age_s", s.xact_age_ns ? nlohmann::json(static_cast<double>(*s.xact_age_ns) /
                                                        common::kNsPerSDouble)
                                       : nlohmann::json(nullptr)}};
}

nlohmann::json lock_chains_json(const LockChains& c) {
  using detail::valid_utf8;
  nlohmann::json chain = nlohmann::json::array();
  for (const auto& l : c.chain) {
    auto j = lock_session_json(l.waiter);
    j["locktype"] = valid_utf8(l.locktype);
    j["mode"] = valid_utf8(l.mode);
    j["target"] = valid_utf8(l.target);
    chain.push_back(std::move(j));
  }
  return {{"polls", c.polls},
          {"waiter_samples", c.waiter_samples},
          {"cycle_samples", c.cycle_samples},
          {"max_waiters", c.max_waiters},
          {"distinct_roots", c.distinct_roots},
          {"root", c.root ? lock_session_json(*c.root) : nlohmann::json(nullptr)},
          {"root_waiter_samples", c.root_waiter_samples},
          {"root_polls", c.root_polls},
          {"chain", std::move(chain)},
          {"turnstile", c.turnstile},
          {"hot_lock", valid_utf8(c.hot_lock)},
          {"culprit", valid_utf8(c.culprit)}};
}

}  // namespace

nlohmann::json to_json(const Report& r) {
  using namespace detail;
  nlohmann::json windows = nlohmann::json::array();
  for (const auto& w : r.windows) windows.push_back(window_json(w));
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : r.findings) findings.push_back(finding_json(f));
  nlohmann::json stalls = nlohmann::json::array();
  for (const auto& s : r.stalls) stalls.push_back(stall_json(s));
  nlohmann::json notes = nlohmann::json::array();
  for (const auto& n : r.notes) notes.push_back(valid_utf8(n));

  nlohmann::json j;
  j["run"] = run_json(r);
  j["accounting"] = r.accounting ? accounting_json(*r.accounting) : nlohmann::json(nullptr);
  if (const auto& h = r.host_accounting) {
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& p : h->parts)
      parts.push_back({{"part", valid_utf8(p.name)}, {"time_ns", p.time_ns}, {"share", p.share}});
    j["host_accounting"] = {{"cores", h->cores},
                            {"wall_ns", h->wall_ns},
                            {"cpu_ns", h->cpu_ns},
                            {"parts", std::move(parts)}};
  }
  j["attribution"] = attribution_json(r.attribution);
  j["windows"] = std::move(windows);
  j["verdict"] = {{"kind", r.verdict.kind ? nlohmann::json(std::string(to_string(*r.verdict.kind)))
                                          : nlohmann::json(nullptr)},
                  {"reason", r.verdict.reason.empty() ? nlohmann::json(nullptr)
                                                      : nlohmann::json(r.verdict.reason)},
                  {"summary", valid_utf8(r.verdict.summary)}};
  j["findings"] = std::move(findings);
  j["stalls"] = std::move(stalls);
  if (r.lock_chains) j["lock_chains"] = lock_chains_json(*r.lock_chains);
  if (!r.hosts.empty()) {
    j["hosts"] = nlohmann::json::array();
    for (const auto& h : r.hosts) j["hosts"].push_back(host_json(h));
  }
  if (r.comparison) j["comparison"] = comparison_json(*r.comparison);
  if (r.clock) j["clock"] = clock_json(*r.clock);
  if (r.pgbench) j["pgbench"] = pgbench_json(*r.pgbench);
  if (r.sessions) j["sessions"] = sessions_json(*r.sessions);
  j["notes"] = std::move(notes);
  return j;
}

}  // namespace stallscope::correlate
