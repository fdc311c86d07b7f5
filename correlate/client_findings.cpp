// The findings on a `record --pg` file's client side (sessions.h): the
// client processes' CPU — one finding per command name, so that N workers of
// one application server are one culprit with their count and busiest
// worker — and the clients blocked in the kernel on something other than the
// database socket (the accounting's client_blocked:<wchan> parts).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "correlate/format.h"
#include "correlate/kernel_sleep.h"
#include "correlate/sessions.h"

namespace stallscope::correlate::detail {
namespace {

// The client processes of one command name that held sessions.
struct CommandGroup {
  std::string comm;
  std::vector<const ClientProcess*> processes;  // busiest first
  std::int64_t cpu_ns = 0;
  std::int64_t run_delay_ns = 0;
  double idle_ns = 0;  // their sessions' idle time, at most the view's
  std::int64_t sessions = 0;
  std::int64_t session_ns = 0;
};

std::vector<CommandGroup> command_groups(const SessionView& v) {
  std::map<std::string, CommandGroup> by_comm;
  for (const auto& c : v.client_processes) {
    if (c.sessions == 0) continue;
    auto& g = by_comm[c.comm];
    g.comm = c.comm;
    g.processes.push_back(&c);
    g.cpu_ns += c.cpu_ns;
    g.run_delay_ns += c.run_delay_ns;
    g.sessions += c.sessions;
    std::int64_t session_ns = 0;
    for (const auto& s : v.groups) {
      if (std::find(s.client_pids.begin(), s.client_pids.end(), c.pid) != s.client_pids.end())
        session_ns += s.session_ns;
    }
    g.session_ns += session_ns;
    g.idle_ns += c.sessions_idle_share * double(session_ns);
  }
  std::int64_t view_idle_ns = 0;
  for (const auto& p : v.parts) {
    if (p.name == "idle" || p.name == "idle_in_transaction") view_idle_ns += p.time_ns;
  }
  std::vector<CommandGroup> out;
  for (auto& [comm, g] : by_comm) {
    // Processes sharing sessions (a command and its descendants, none owning
    // a socket) would count the same idle time once each.
    g.idle_ns = std::min(g.idle_ns, double(view_idle_ns));
    g.sessions = std::min(g.sessions, v.sessions);
    g.session_ns = std::min(g.session_ns, v.session_ns);
    std::stable_sort(g.processes.begin(), g.processes.end(),
                     [](const auto* x, const auto* y) { return x->cpu_ns > y->cpu_ns; });
    out.push_back(std::move(g));
  }
  return out;
}

std::string pids_text(const CommandGroup& g, std::size_t at_most) {
  std::string out;
  for (std::size_t i = 0; i < g.processes.size() && i < at_most; ++i) {
    out += fmt::format("{}{}", i ? ", " : "", g.processes[i]->pid);
  }
  if (g.processes.size() > at_most) out += ", …";
  return out;
}

// client_cpu / single_thread for one command's client processes.
void client_cpu_finding(const CommandGroup& g, const Facts& f, double total_ns, double accounted_ns,
                        std::vector<Finding>& out) {
  const ClientProcess& top = *g.processes.front();
  const bool many = g.processes.size() > 1;
  // Over the span the processes were sampled in: one process's from its
  // first sight (ClientProcess::sampled_ns), several's the whole span.
  const double span_ns =
      double(std::max<std::int64_t>(1, many ? f.span.duration_ns() : top.sampled_ns));
  const double cores = double(g.cpu_ns) / span_ns;
  const double queued = double(g.run_delay_ns) / span_ns;
  // One thread at a full core of CPU (a single process), its share of the
  // steal counted (HostTotals::with_steal). Its run-queue delay does not
  // count: on a host the backends saturate, a client thread queues behind
  // them (server_cpu's case), whatever it would use alone.
  const bool one_thread =
      !many && f.host.with_steal(top.hottest_thread_cores) >= kSingleThreadMinCores;
  // A finding claims no more than the accounting's client parts (client CPU
  // and its run delay, trimmed to the session time) measured.
  const double score = std::min(one_thread ? g.idle_ns * std::min(1.0, top.hottest_thread_cores)
                                           : std::min(double(g.cpu_ns + g.run_delay_ns), g.idle_ns),
                                accounted_ns) /
                       total_ns;
  Finding x;
  x.kind = one_thread ? FindingKind::single_thread : FindingKind::client_cpu;
  x.score = round4(std::clamp(score, 0.0, 1.0));
  if (x.score < kMinScore) return;
  x.start_ns = f.span.start_ns;
  x.end_ns = f.span.end_ns;
  const std::string sessions_text =
      fmt::format("{} session{}", g.sessions, g.sessions == 1 ? " was" : "s were");
  const double idle_share = g.session_ns > 0 ? g.idle_ns / double(g.session_ns) : 0;
  const std::string who = many ? fmt::format("The clients, {} × {} (pids {})", g.processes.size(),
                                             g.comm, pids_text(g, 6))
                               : fmt::format("The client {} (pid {})", g.comm, top.pid);
  if (one_thread) {
    x.summary = fmt::format(
        "{} ran at {:.2f} cores, its busiest thread at {:.2f} (running or waiting for a CPU: "
        "{:.2f}), while its {} idle, waiting for it, {} of the time: one client thread is the "
        "limit, not the database.",
        who, top.cores, top.hottest_thread_cores, top.hottest_thread_demand_cores, sessions_text,
        share_pct_text(top.sessions_idle_share));
  } else {
    x.summary = fmt::format(
        "{} used {:.2f} cores of {} and waited for a CPU for another {:.2f} ({} of the session "
        "time with their run-queue delay) while their {} idle, waiting for the client, {} of the "
        "time{}.",
        who, cores, f.cores, queued, share_pct_text(x.score), sessions_text,
        share_pct_text(idle_share),
        cores + queued >= kRoundtripMaxHostBusyShare * f.cores
            ? ": the host is full of the application"
            : "");
  }
  x.evidence = {{"comm", g.comm},
                {"pid", std::int64_t{top.pid}},
                {"processes", static_cast<std::int64_t>(g.processes.size())},
                {"found_by", top.found_by},
                {"client_cores", round4(cores)},
                {"client_run_delay_cores", round4(queued)},
                {"busiest_process_cores", round4(top.cores)},
                {"hottest_thread_cores", round4(top.hottest_thread_cores)},
                {"hottest_thread_demand_cores", round4(top.hottest_thread_demand_cores)},
                {"client_cpu_s", round4(double(g.cpu_ns) / kNsPerS)},
                {"client_run_delay_s", round4(double(g.run_delay_ns) / kNsPerS)},
                {"sessions", g.sessions},
                {"sessions_idle_share", round4(idle_share)},
                {"session_s", round4(double(g.session_ns) / kNsPerS)}};
  if (!many && top.top_thread_cores)
    x.evidence.emplace_back("top_thread_comm", top.top_thread_comm);
  x.culprit = one_thread ? fmt::format("the client {} (pid {}), its busiest thread at {:.2f} cores",
                                       g.comm, top.pid, top.hottest_thread_cores)
              : many
                  ? fmt::format(
                        "the clients, {} × {} (pids {}), at {:.2f} cores; busiest pid {} at "
                        "{:.2f}",
                        g.processes.size(), g.comm, pids_text(g, 6), cores, top.pid, top.cores)
                  : fmt::format("the client {} (pid {}) at {:.2f} cores", g.comm, top.pid, cores);
  x.suggestion =
      one_thread
          ? "The client's own work sets the pace: one thread at a full core while its database "
            "sessions sit idle. Profile the client (py-spy, perf), move per-row work into SQL or "
            "batch it, or run several client processes; a faster database will not help."
      : cores + queued >= kRoundtripMaxHostBusyShare * f.cores
          ? "The application's processes fill the host's CPUs, and the database waits for them: "
            "give the application its own cores or host, or make its per-request work cheaper; "
            "a faster database will not help."
          : "The client's CPU is a serial part of every round trip: make its per-query work "
            "cheaper, or give it more cores or processes.";
  out.push_back(std::move(x));
}

// kernel_wait on the client side: the largest client_blocked:<wchan> part.
void client_blocked_finding(const Report& r, const Facts& f, std::vector<Finding>& out) {
  const auto& a = *r.accounting;
  if (a.client_blocked_by_wchan_ns.empty() || a.client_ns <= 0) return;
  std::int64_t total_ns = 0;
  for (const auto& [w, ns] : a.client_blocked_by_wchan_ns) total_ns += ns;
  const auto& [wchan, ns] = a.client_blocked_by_wchan_ns.front();
  Finding x;
  x.kind = FindingKind::kernel_wait;
  x.score = round4(std::clamp(double(total_ns) / double(a.client_ns), 0.0, 1.0));
  if (x.score < kMinScore) return;
  x.start_ns = f.span.start_ns;
  x.end_ns = f.span.end_ns;
  // The clients that slept there (those with sessions and that wchan).
  std::string who;
  int named = 0;
  for (const auto& c : r.sessions->client_processes) {
    if (c.sessions == 0) continue;
    const bool slept = std::any_of(c.sleep_by_wchan_ns.begin(), c.sleep_by_wchan_ns.end(),
                                   [&](const auto& e) { return e.first == wchan; });
    if (!slept) continue;
    if (named++ < 3) who += fmt::format("{}{} (pid {})", who.empty() ? "" : ", ", c.comm, c.pid);
  }
  if (who.empty()) who = "the clients";
  const auto meaning = common::wchan_meaning(wchan, false);
  x.summary = fmt::format(
      "The client {} spent {} of the session time asleep in {}{} while their sessions waited for "
      "it: the client is blocked in the kernel, not waiting for the database.",
      who, share_pct_text(double(ns) / double(a.client_ns)), wchan,
      meaning.empty() ? std::string() : fmt::format(" ({})", meaning));
  x.culprit = sleep_culprit("the client " + who, "client", wchan);
  x.evidence = {{"client_wchan", wchan},
                {"client_blocked_s", round4(double(ns) / kNsPerS)},
                {"client_blocked_share", round4(double(ns) / double(a.client_ns))},
                {"client_blocked_all_s", round4(double(total_ns) / kNsPerS)}};
  x.suggestion =
      "The client waits on something other than the database: a pipe or terminal it writes its "
      "log or output to (read it faster, log less, or log to a file), a lock among its own "
      "threads, or its own file I/O.";
  out.push_back(std::move(x));
}

}  // namespace

void client_process_findings(const Report& r, const Facts& f, std::vector<Finding>& out) {
  if (!r.sessions || r.sessions->session_ns <= 0) return;
  const double total_ns = double(r.sessions->session_ns);
  const double accounted_ns =
      r.accounting ? double(r.accounting->driver_cpu_ns + r.accounting->driver_run_delay_ns)
                   : total_ns;
  for (const auto& g : command_groups(*r.sessions))
    client_cpu_finding(g, f, total_ns, accounted_ns, out);
  if (r.accounting) client_blocked_finding(r, f, out);
}

}  // namespace stallscope::correlate::detail
