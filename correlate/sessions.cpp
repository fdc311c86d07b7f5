// explain on a `record --pg` file: the client sessions' time from ASH, split
// by state; the client processes (the command record started and its
// descendants, the owners of the sessions' client sockets, --client-process
// names) and their CPU; the accounting and the client findings built from
// them (sessions.h).
#include "correlate/sessions.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "common/units.h"
#include "correlate/format.h"
#include "schema/session_readers.h"

namespace stallscope::correlate::detail {
namespace {

// A backend process and the session it served start within this of each
// other (process.start_ns comes from clock ticks since boot: 10 ms steps).
constexpr std::int64_t kBackendStartMatchNs = 2 * common::kNsPerS;
// A pooled server connection's backend below this CPU over the span served
// no query (one short query costs ≥ 20 µs; an idle backend's timers none).
constexpr std::int64_t kIdlePooledMaxBackendCpuNs = common::kNsPerMs;
// The clients' sampled places split all of the session time left to their
// side when they explain at least this share of it (session_accounting).
constexpr double kClientSideMinCoverage = 0.5;

// One session's polls in the span, by part name.
struct SessionPolls {
  std::map<std::string, std::int64_t> by_part;
  std::int64_t total = 0;
};

// The part of a non-idle pg_activity_sample row.
std::string part_of(const schema::SessionBusyPolls& b) {
  if (b.state == "active") {
    if (b.wait_event_type.empty()) return "on_cpu";
    // Active but reading from its client: the backend waits for the client.
    if (b.wait_event_type == "Client") return "idle";
    return "wait:" + b.wait_event_type;
  }
  if (b.state.starts_with("idle in transaction")) return "idle_in_transaction";
  if (b.state == "idle") return "idle";
  return "other";
}

bool is_idle_part(const std::string& name) {
  return name == "idle" || name == "idle_in_transaction" || name == "other";
}

// Parts in display order: on_cpu, wait:<class> (largest first), idle,
// idle_in_transaction, other; shares of `total_ns`.
std::vector<SessionPart> make_parts(const std::map<std::string, std::int64_t>& polls,
                                    std::int64_t period_ns, std::int64_t total_ns) {
  std::vector<SessionPart> waits, out;
  auto part = [&](const std::string& name, std::int64_t n) {
    const std::int64_t ns = n * period_ns;
    return SessionPart{name, ns, total_ns > 0 ? double(ns) / double(total_ns) : 0.0};
  };
  for (const auto& [name, n] : polls)
    if (name.starts_with("wait:")) waits.push_back(part(name, n));
  std::stable_sort(waits.begin(), waits.end(),
                   [](const auto& x, const auto& y) { return x.time_ns > y.time_ns; });
  if (auto it = polls.find("on_cpu"); it != polls.end()) out.push_back(part("on_cpu", it->second));
  out.insert(out.end(), waits.begin(), waits.end());
  for (const char* name : {"idle", "idle_in_transaction", "other"}) {
    if (auto it = polls.find(name); it != polls.end()) out.push_back(part(name, it->second));
  }
  return out;
}

using GroupKey = std::tuple<std::string, std::string, std::string, std::string>;

struct ProcessIndex {
  std::vector<schema::ProcessIdentity> all;
  std::map<std::pair<int, std::int64_t>, std::size_t> by_identity;
  std::unordered_map<int, std::vector<std::size_t>> children;  // by ppid
  std::unordered_map<int, std::vector<std::size_t>> by_pid;

  explicit ProcessIndex(std::vector<schema::ProcessIdentity> processes)
      : all(std::move(processes)) {
    for (std::size_t i = 0; i < all.size(); ++i) {
      by_identity[{all[i].pid, all[i].start_ticks}] = i;
      by_pid[all[i].pid].push_back(i);
      if (all[i].ppid) children[*all[i].ppid].push_back(i);
    }
  }
  // The process (pid, start_ticks); without start_ticks the latest with pid.
  std::optional<std::size_t> find(int pid, std::optional<std::int64_t> start_ticks) const {
    if (start_ticks) {
      auto it = by_identity.find({pid, *start_ticks});
      if (it != by_identity.end()) return it->second;
      return std::nullopt;
    }
    auto it = by_pid.find(pid);
    if (it == by_pid.end() || it->second.empty()) return std::nullopt;
    return it->second.back();
  }
};

// The client processes: the command and its descendants, socket owners,
// --client-process names; process index → how it was found.
std::map<std::size_t, std::string> find_client_processes(
    const ProcessIndex& px, const std::vector<schema::RecordClient>& declared,
    const std::vector<schema::SessionInfo>& sessions, int stallscope_pid) {
  std::map<std::size_t, std::string> found;
  // A pooler owns the sockets of the sessions it pools: a hop on the path,
  // not the client (its clients are the command, its descendants and the
  // named processes), unless named with --client-process.
  auto take = [&](std::size_t i, const char* how) {
    if (px.all[i].pid == stallscope_pid) return;
    if (std::string_view(how) != "name" && is_pooler_comm(px.all[i].comm)) return;
    found.try_emplace(i, how);
  };
  for (const auto& c : declared) {
    if (c.source != "command" || !c.pid) continue;
    const auto root = px.find(*c.pid, c.start_ticks);
    if (!root) continue;
    take(*root, "command");
    // Descendants: children (by ppid) started no earlier than their parent.
    std::deque<std::size_t> todo{*root};
    while (!todo.empty()) {
      const auto parent = todo.front();
      todo.pop_front();
      auto it = px.children.find(px.all[parent].pid);
      if (it == px.children.end()) continue;
      for (auto child : it->second) {
        if (px.all[child].start_ticks < px.all[parent].start_ticks || found.contains(child))
          continue;
        take(child, "descendant");
        todo.push_back(child);
      }
    }
  }
  for (const auto& c : declared) {
    if (c.source != "comm" || c.comm.empty()) continue;
    for (std::size_t i = 0; i < px.all.size(); ++i)
      if (px.all[i].comm == c.comm) take(i, "name");
  }
  for (const auto& s : sessions) {
    if (!s.client_pid) continue;
    // A pooler owns the sockets of the sessions it pools: a hop on the
    // path, not the client (its clients are the command, its descendants
    // and the named processes).
    if (auto i = px.find(*s.client_pid, s.client_start_ticks)) take(*i, "socket");
  }
  return found;
}

// `holds_session_socket`: the process owns a session's client socket (the
// sampler recognises that socket as the database's: it leads to the
// server's port or to its .s.PGSQL.* file).
ClientProcess client_process(const SessionReads& file, const schema::ProcessIdentity& p,
                             const std::string& found_by, Span span, bool holds_session_socket) {
  const auto cpu = file.process_cpu(p.process_id, span.start_ns, span.end_ns);
  // Its cores over the part of the span it was sampled in: a process the
  // sampler first saw after the span began (the command record started) has
  // no CPU before its first sight.
  const std::int64_t from_ns = std::max(span.start_ns, cpu.first_sight_ns.value_or(span.start_ns));
  const double span_ns = double(std::max<std::int64_t>(1, span.end_ns - from_ns));
  ClientProcess c{.process_id = p.process_id,
                  .pid = p.pid,
                  .comm = p.comm,
                  .found_by = found_by,
                  .cpu_ns = cpu.cpu_ns,
                  .run_delay_ns = cpu.run_delay_ns,
                  .cores = round4(double(cpu.cpu_ns) / span_ns),
                  .threads_sampled = cpu.threads_sampled,
                  .sampled_ns = static_cast<std::int64_t>(span_ns)};
  if (cpu.top_thread_cpu_ns) {
    c.top_thread_cores = round4(double(*cpu.top_thread_cpu_ns) / span_ns);
    c.top_thread_comm = cpu.top_thread_comm;
  }
  c.hottest_thread_cores = c.top_thread_cores.value_or(c.cores);
  const std::int64_t demand_ns =
      cpu.top_thread_cpu_ns ? *cpu.top_thread_cpu_ns + cpu.top_thread_run_delay_ns.value_or(0)
                            : cpu.cpu_ns + cpu.run_delay_ns;
  c.hottest_thread_demand_cores = round4(double(demand_ns) / span_ns);
  const auto sleeps = file.process_sleeps(p.process_id, span.start_ns, span.end_ns);
  // Which of its sockets is the database's is known when it holds a
  // session's socket or was seen waiting on a database socket (else its
  // database socket may lead where the sampler could not tell: a pooler on
  // another host).
  const bool database_known =
      holds_session_socket || std::any_of(sleeps.begin(), sleeps.end(), [](const auto& sl) {
        return sl.on == schema::SleptOn::database && sl.sleep_ns > 0;
      });
  for (const auto& sl : sleeps) {
    if (sl.sleep_ns <= 0) continue;
    if (sl.on == schema::SleptOn::own_timer) {
      c.own_timer_ns += sl.sleep_ns;
      continue;
    }
    if (sl.on == schema::SleptOn::database) {
      c.on_database_ns += sl.sleep_ns;
      continue;
    }
    if (sl.on == schema::SleptOn::other && database_known) {
      c.on_other_ns += sl.sleep_ns;
      continue;
    }
    const std::string wchan = sl.state == "R" ? std::string() : sl.wchan;
    auto it = std::find_if(c.sleep_by_wchan_ns.begin(), c.sleep_by_wchan_ns.end(),
                           [&](const auto& e) { return e.first == wchan; });
    if (it == c.sleep_by_wchan_ns.end()) {
      c.sleep_by_wchan_ns.emplace_back(wchan, sl.sleep_ns);
    } else {
      it->second += sl.sleep_ns;
    }
  }
  std::stable_sort(c.sleep_by_wchan_ns.begin(), c.sleep_by_wchan_ns.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  return c;
}

// The client side of the session time, from where the clients that held
// sessions slept: shares of their own time (CPU + run delay + sleep) asleep
// by choice (a timer: nanosleep, or poll/select/epoll_wait with a timeout
// and no socket to another process among its fds), blocked elsewhere in the
// kernel (by wchan), waiting on fds none of which is the database's (other),
// and asleep on the database socket (waiting for the server or the
// network; by wait channel — a socket read or poll — where process_poll
// did not say).
// Sleep whose place is not known (spans that ended running) is spread over
// the others in proportion; waiting for a child (a shell) is not the
// client's side at all and is left out.
struct ClientSide {
  bool sampled = false;
  double think_share = 0;
  double socket_share = 0;
  double other_share = 0;
  std::vector<std::pair<std::string, double>> blocked_share;  // largest first
};

ClientSide client_side(const SessionView& v) {
  ClientSide out;
  double think = 0, socket = 0, other = 0, unknown = 0, own = 0;
  std::map<std::string, double> blocked;
  for (const auto& c : v.client_processes) {
    if (c.sessions == 0) continue;
    // Asleep in an event loop until its own timer: think time.
    double sleeps = double(c.own_timer_ns + c.on_database_ns + c.on_other_ns), child = 0;
    think += double(c.own_timer_ns);
    socket += double(c.on_database_ns);
    other += double(c.on_other_ns);
    for (const auto& [wchan, ns] : c.sleep_by_wchan_ns) {
      const double t = double(ns);
      sleeps += t;
      if (wchan.empty()) {
        unknown += t;
        continue;
      }
      switch (wchan_family(wchan)) {
        case WchanFamily::timer:
          think += t;
          break;
        case WchanFamily::latch:
        case WchanFamily::none:
          socket += t;
          break;
        case WchanFamily::child:
          child += t;
          break;
        default:
          blocked[wchan] += t;
      }
    }
    // Time spent waiting for a child (a shell running the pipeline) is the
    // child's to explain, not this process's.
    own += double(c.cpu_ns + c.run_delay_ns) + sleeps - child;
  }
  if (own <= 0) return out;
  out.sampled = true;
  const double known = think + socket + other;
  double blocked_total = 0;
  for (const auto& [w, t] : blocked) blocked_total += t;
  // Unknown sleep spread over the known places in proportion.
  const double spread = known + blocked_total > 0 ? 1 + unknown / (known + blocked_total) : 1;
  out.think_share = think * spread / own;
  out.socket_share = socket * spread / own;
  out.other_share = other * spread / own;
  for (const auto& [w, t] : blocked) out.blocked_share.emplace_back(w, t * spread / own);
  std::stable_sort(out.blocked_share.begin(), out.blocked_share.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  return out;
}

}  // namespace

namespace {

// Each client session's polls in the span (index in `sessions` → polls):
// its busy polls from pg_activity_sample, its idle ones from pg_session_idle.
std::map<std::size_t, SessionPolls> read_session_polls(
    const SessionReads& file, const std::vector<schema::SessionInfo>& sessions,
    const schema::AshTickSpan& ticks, Span span) {
  // Client sessions by id and by (pid, backend start).
  std::unordered_map<std::int64_t, std::size_t> by_id;
  std::map<std::pair<int, std::int64_t>, std::size_t> by_identity;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    if (sessions[i].backend_type != "client backend") continue;
    by_id[sessions[i].session_id] = i;
    by_identity[{sessions[i].pid, sessions[i].backend_start_ns.value_or(0)}] = i;
  }
  std::map<std::size_t, SessionPolls> polls;
  for (const auto& b : file.session_busy_polls(span.start_ns, span.end_ns)) {
    auto it = by_identity.find({b.pid, b.backend_start_ns.value_or(0)});
    if (it == by_identity.end()) continue;  // not a client backend
    auto& p = polls[it->second];
    p.by_part[part_of(b)] += b.polls;
    p.total += b.polls;
  }
  for (const auto& idle : file.session_idle_polls(ticks)) {
    auto it = by_id.find(idle.session_id);
    if (it == by_id.end()) continue;
    auto& p = polls[it->second];
    p.by_part["idle"] += idle.polls;
    p.total += idle.polls;
  }
  return polls;
}

// Whose sessions are the application's: with the application named (a
// command, --client-process), a session whose socket another process on
// this host holds is the server's other load, not the application's.
struct SessionOwners {
  const ProcessIndex& px;
  std::set<int> named_pids;                      // the application's, not found by socket
  std::optional<std::int64_t> command_start_ns;  // when record's command began (its root)

  bool is_other(const schema::SessionInfo& info) const {
    if (named_pids.empty()) return false;
    if (!info.client_pid) {
      // A local client (Unix socket, loopback) that no process here holds
      // and whose backend is older than the command: a session left from
      // before — its client gone (killed, its backend still waiting on a
      // lock) — not the command's.
      const bool local =
          info.client_addr.empty() || info.client_addr == "127.0.0.1" || info.client_addr == "::1";
      // (Both clocks are this host's: start times agree to a clock tick.)
      constexpr std::int64_t kSameHostStartSlackNs = 100 * common::kNsPerMs;
      return local && command_start_ns && info.backend_start_ns &&
             *info.backend_start_ns + kSameHostStartSlackNs < *command_start_ns;
    }
    if (named_pids.contains(*info.client_pid)) return false;
    const auto k = px.find(*info.client_pid, info.client_start_ticks);
    return !(k && is_pooler_comm(px.all[*k].comm));
  }
};

SessionOwners session_owners(const ProcessIndex& px,
                             const std::map<std::size_t, std::string>& found) {
  SessionOwners o{.px = px};
  for (const auto& [i, how] : found) {
    if (how != "socket") o.named_pids.insert(px.all[i].pid);
    if (how == "command" && px.all[i].start_ns)
      o.command_start_ns =
          std::min(px.all[i].start_ns.value(), o.command_start_ns.value_or(INT64_MAX));
  }
  return o;
}

// The client processes of the view (v.client_processes, s.client_process_ids),
// but for socket owners whose sessions are other load; returns pid → index
// in v.client_processes.
std::unordered_map<int, std::size_t> add_client_processes(
    const SessionReads& file, Span span, const ProcessIndex& px,
    const std::map<std::size_t, std::string>& found, const SessionOwners& owners,
    const std::vector<schema::SessionInfo>& sessions,
    const std::map<std::size_t, SessionPolls>& polls, SessionScan& s) {
  std::set<int> other_owner_pids;
  for (const auto& [i, p] : polls) {
    if (owners.is_other(sessions[i]) && sessions[i].client_pid)
      other_owner_pids.insert(*sessions[i].client_pid);
  }
  std::set<std::size_t> socket_owners;  // indexes in px.all
  for (const auto& info : sessions) {
    if (!info.client_pid) continue;
    if (const auto k = px.find(*info.client_pid, info.client_start_ticks)) socket_owners.insert(*k);
  }
  std::unordered_map<int, std::size_t> client_of_pid;
  for (const auto& [i, how] : found) {
    if (how == "socket" && other_owner_pids.contains(px.all[i].pid)) continue;
    client_of_pid[px.all[i].pid] = s.view.client_processes.size();
    s.view.client_processes.push_back(
        client_process(file, px.all[i], how, span, socket_owners.contains(i)));
    s.client_process_ids.insert(px.all[i].process_id);
  }
  return client_of_pid;
}

// The sessions by group (application, client address, user, database):
// the application's and the other load's, with their polls by part.
struct SessionGroups {
  std::map<GroupKey, SessionGroup> groups;
  std::map<GroupKey, std::map<std::string, std::int64_t>> group_polls;
  std::map<GroupKey, std::set<int>> group_clients;
  std::map<std::string, std::int64_t> all_polls;
  std::map<GroupKey, SessionGroup> others;
};

// The view's groups, their parts and client pids, the whole view's parts
// and each client process's sessions.
void finish_view(SessionGroups& gs, std::int64_t ash_period_ns, SessionScan& s) {
  SessionView& v = s.view;
  for (auto& [key, g] : gs.groups) {
    g.parts = make_parts(gs.group_polls[key], ash_period_ns, g.session_ns);
    std::int64_t idle_ns = 0;
    for (const auto& p : g.parts)
      if (p.name == "idle" || p.name == "idle_in_transaction") idle_ns += p.time_ns;
    g.idle_share = g.session_ns > 0 ? round4(double(idle_ns) / double(g.session_ns)) : 0;
    // Its clients: the owners of its sessions' sockets; without any, every
    // client process not found through a socket (the command, its
    // descendants, the named processes).
    auto& pids = gs.group_clients[key];
    if (pids.empty()) {
      for (const auto& c : v.client_processes)
        if (c.found_by != "socket") pids.insert(c.pid);
    }
    g.client_pids.assign(pids.begin(), pids.end());
    v.sessions += g.sessions;
    v.session_ns += g.session_ns;
    v.groups.push_back(g);
  }
  std::stable_sort(v.groups.begin(), v.groups.end(),
                   [](const auto& x, const auto& y) { return x.session_ns > y.session_ns; });
  for (auto& [key, g] : gs.others) {
    v.other_sessions += g.sessions;
    v.other_session_ns += g.session_ns;
    v.other_groups.push_back(std::move(g));
  }
  std::stable_sort(v.other_groups.begin(), v.other_groups.end(),
                   [](const auto& x, const auto& y) { return x.session_ns > y.session_ns; });
  if (v.groups.empty()) return;
  v.parts = make_parts(gs.all_polls, ash_period_ns, v.session_ns);
  for (const auto& p : v.parts) {
    if (p.name == "on_cpu") {
      s.on_cpu_ns += p.time_ns;
    } else if (p.name.starts_with("wait:")) {
      s.wait_by_class_ns[p.name.substr(5)] += p.time_ns;
    } else if (is_idle_part(p.name)) {
      s.idle_ns += p.time_ns;
    }
  }
  // Each client process's sessions and their idle share.
  for (auto& c : v.client_processes) {
    std::int64_t session_ns = 0, idle_ns = 0;
    for (const auto& g : v.groups) {
      if (std::find(g.client_pids.begin(), g.client_pids.end(), c.pid) == g.client_pids.end())
        continue;
      c.sessions += g.sessions;
      session_ns += g.session_ns;
      idle_ns += static_cast<std::int64_t>(g.idle_share * double(g.session_ns));
    }
    c.sessions_idle_share = session_ns > 0 ? round4(double(idle_ns) / double(session_ns)) : 0;
  }
  std::stable_sort(v.client_processes.begin(), v.client_processes.end(),
                   [](const auto& x, const auto& y) { return x.cpu_ns > y.cpu_ns; });
}

}  // namespace

std::optional<SessionScan> session_view(const SessionReads& file, const SessionInputs& in) {
  if (!file.has_sessions() || in.ash_period_ns <= 0) return std::nullopt;
  const auto ticks = file.ash_tick_span(in.span.start_ns, in.span.end_ns);
  if (!ticks) return std::nullopt;
  const auto sessions = file.sessions();
  const auto polls = read_session_polls(file, sessions, *ticks, in.span);
  if (polls.empty()) return std::nullopt;

  SessionScan s;
  SessionView& v = s.view;
  v.ash_period_ns = in.ash_period_ns;
  v.polls = ticks->polls;
  // The client processes and their CPU.
  const ProcessIndex px(file.process_identities());
  const auto found =
      find_client_processes(px, file.record_clients(), sessions, in.run.stallscope_pid);
  const auto owners = session_owners(px, found);
  const auto client_of_pid =
      add_client_processes(file, in.span, px, found, owners, sessions, polls, s);
  // Groups, and each group's client processes.
  SessionGroups gs;
  // A pooler's server connection idle at every poll whose backend (sampled
  // on this host) used no CPU in the span served none of the queries: the
  // pool's spare (or one left from an earlier run). At 10 polls a second a
  // short query is rarely seen active, so idle polls alone do not say it.
  auto pooler_of = [&](const schema::SessionInfo& info) -> std::string {
    if (!info.client_pid) return {};
    const auto k = px.find(*info.client_pid, info.client_start_ticks);
    return k && is_pooler_comm(px.all[*k].comm) ? px.all[*k].comm : std::string();
  };
  auto backend_unused = [&](const schema::SessionInfo& info) {
    const auto it = px.by_pid.find(info.pid);
    if (it == px.by_pid.end()) return false;  // not sampled here: not known
    bool matched = false;
    for (auto k : it->second) {
      const auto& proc = px.all[k];
      if (proc.start_ns && info.backend_start_ns &&
          std::llabs(*proc.start_ns - *info.backend_start_ns) > kBackendStartMatchNs)
        continue;
      matched = true;
      if (file.process_cpu(proc.process_id, in.span.start_ns, in.span.end_ns).cpu_ns >=
          kIdlePooledMaxBackendCpuNs)
        return false;
    }
    return matched;
  };
  for (const auto& [i, p] : polls) {
    const auto& info = sessions[i];
    if (p.by_part.size() == 1 && p.by_part.contains("idle")) {
      if (auto pooler = pooler_of(info); !pooler.empty() && backend_unused(info)) {
        ++v.idle_pooled_sessions;
        v.idle_pooler = pooler;
        continue;
      }
    }
    const GroupKey key{info.application_name,
                       info.client_addr.empty() ? std::string("local") : info.client_addr,
                       info.usename, info.datname};
    if (owners.is_other(info)) {
      auto& g = gs.others[key];
      std::tie(g.application_name, g.client_addr, g.user, g.database) = key;
      ++g.sessions;
      g.session_ns += p.total * in.ash_period_ns;
      if (info.client_pid && std::find(g.client_pids.begin(), g.client_pids.end(),
                                       *info.client_pid) == g.client_pids.end())
        g.client_pids.push_back(*info.client_pid);
      continue;
    }
    auto& g = gs.groups[key];
    std::tie(g.application_name, g.client_addr, g.user, g.database) = key;
    ++g.sessions;
    g.session_ns += p.total * in.ash_period_ns;
    for (const auto& [name, n] : p.by_part) {
      gs.group_polls[key][name] += n;
      gs.all_polls[name] += n;
    }
    if (info.client_pid && client_of_pid.contains(*info.client_pid))
      gs.group_clients[key].insert(*info.client_pid);
    // The session's backend process.
    s.backend_pids.insert(info.pid);
    if (auto it = px.by_pid.find(info.pid); it != px.by_pid.end()) {
      for (auto k : it->second) {
        const auto& proc = px.all[k];
        if (!proc.start_ns || !info.backend_start_ns ||
            std::llabs(*proc.start_ns - *info.backend_start_ns) <= kBackendStartMatchNs)
          s.backend_process_ids.insert(proc.process_id);
      }
    }
  }
  finish_view(gs, in.ash_period_ns, s);
  if (v.groups.empty()) return std::nullopt;
  return s;
}

void add_session_backends(const SessionScan& s, QueryPath& qp) {
  qp.backend_process_ids.insert(s.backend_process_ids.begin(), s.backend_process_ids.end());
  qp.backend_pids.insert(s.backend_pids.begin(), s.backend_pids.end());
}

void remove_client_processes(const SessionScan& s, Facts& f) {
  std::int64_t client_cpu_ns = 0;
  for (const auto& c : s.view.client_processes) client_cpu_ns += c.cpu_ns;
  f.other_cpu_ns = std::max<std::int64_t>(0, f.other_cpu_ns - client_cpu_ns);
  auto is_client = [&](std::int64_t id) { return s.client_process_ids.contains(id); };
  std::erase_if(f.single_thread, [&](const auto& c) { return is_client(c.process.process_id); });
  std::erase_if(f.top_other, [&](const auto& c) { return is_client(c.process_id); });
}

namespace {

// The session accounting's parts, in the order the report lists them, as
// shares of the session time.
void add_session_parts(Accounting& a, std::int64_t unaccounted_ns) {
  auto part = [&](Part kind, std::string_view key, std::int64_t ns) {
    a.parts.push_back({.name = part_id(kind, key),
                       .time_ns = ns,
                       .share = a.client_ns > 0 ? double(ns) / double(a.client_ns) : 0.0});
  };
  part(Part::client_cpu, {}, a.driver_cpu_ns);
  part(Part::server_cpu, {}, a.server_cpu_ns);
  for (const auto& [cls, ns] : a.server_wait_by_class_ns) part(Part::server_wait, cls, ns);
  for (const auto& [wchan, ns] : a.kernel_wait_by_wchan_ns) part(Part::kernel_wait, wchan, ns);
  part(Part::run_queue, {}, a.run_delay_ns);
  if (a.client_sleep_ns > 0) part(Part::client_sleep, {}, a.client_sleep_ns);
  if (a.client_idle_ns > 0) part(Part::client_idle, {}, a.client_idle_ns);
  for (const auto& [wchan, ns] : a.client_blocked_by_wchan_ns)
    part(Part::client_blocked, wchan, ns);
  part(Part::remainder, {}, a.remainder_ns);
  if (unaccounted_ns > 0) part(Part::unaccounted, {}, unaccounted_ns);
}

}  // namespace

Accounting session_accounting(const SessionScan& s, const WindowAcc& total, const Facts& f) {
  const SessionView& v = s.view;
  Accounting a;
  a.clients = static_cast<int>(v.sessions);
  a.wall_ns = f.span.duration_ns();
  a.client_ns = v.session_ns;
  // The session time is the total the parts add up to (and the findings'
  // shares are of): the sessions' idle time, the client's side, is in it.
  a.query_ns = v.session_ns;
  a.client_busy_share = a.client_ns > 0 ? 1.0 : 0.0;
  std::int64_t client_cpu_ns = 0, client_delay_ns = 0;
  for (const auto& c : v.client_processes) {
    client_cpu_ns += c.cpu_ns;
    client_delay_ns += c.run_delay_ns;
  }
  // Each part takes what it measured, as far as the session time not yet
  // taken covers it; what does not fit is excess_ns.
  std::int64_t left_ns = a.client_ns;
  auto take = [&](std::int64_t ns) {
    const std::int64_t fits = std::clamp<std::int64_t>(ns, 0, left_ns);
    left_ns -= fits;
    a.excess_ns += std::max<std::int64_t>(0, ns) - fits;
    return fits;
  };
  // Server waits: ASH, exact by construction.
  for (const auto& [cls, ns] : s.wait_by_class_ns) {
    a.server_wait_by_class_ns.emplace_back(cls, take(ns));
    a.server_wait_ns += a.server_wait_by_class_ns.back().second;
  }
  std::stable_sort(a.server_wait_by_class_ns.begin(), a.server_wait_by_class_ns.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  // Backends: schedstat where they were sampled (CPU and run delay, also
  // while ASH saw them idle — reading the next query, waking up), else
  // ASH's on-CPU time.
  a.server_cpu_ns = take(f.backends_on_host ? total.server_cpu_ns : s.on_cpu_ns);
  // Backends asleep in the kernel outside any wait event (kernel_sleep.cpp):
  // ASH saw them active with no wait event, the host asleep on a pipe or a
  // socket send.
  for (const auto& [wchan, ns] : total.kernel_sleep_ns) {
    if (const auto taken = take(ns); taken > 0) {
      a.kernel_wait_by_wchan_ns.emplace_back(wchan, taken);
      a.kernel_wait_ns += taken;
    }
  }
  std::stable_sort(a.kernel_wait_by_wchan_ns.begin(), a.kernel_wait_by_wchan_ns.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  const std::int64_t backend_delay_ns =
      take(f.backends_on_host ? total.run_delay_ns - total.driver_run_delay_ns : 0);
  // Client processes: their CPU and run delay.
  a.driver_cpu_ns = take(client_cpu_ns);
  a.driver_run_delay_ns = take(client_delay_ns);
  a.run_delay_ns = backend_delay_ns + a.driver_run_delay_ns;
  // The client's side of the rest: where the clients slept, as shares of
  // their own time scaled to the session time. Their sleep on the socket
  // also covers the server's parts taken above; only what is beyond those is
  // the round trip. What no client sample explains is unaccounted.
  const ClientSide side = client_side(v);
  std::int64_t unaccounted_ns = 0;
  if (side.sampled) {
    const double session = double(a.client_ns);
    const double server_taken =
        double(a.server_wait_ns + a.server_cpu_ns + a.kernel_wait_ns + backend_delay_ns);
    const double think = side.think_share * session;
    const double other = side.other_share * session;
    const double socket = std::max(0.0, side.socket_share * session - server_taken);
    double measured = think + other + socket;
    for (const auto& [wchan, share] : side.blocked_share) measured += share * session;
    // The session time (ASH polls) and the clients' own time (their rows'
    // spans) are two clocks a few % apart: when the clients' places explain
    // at least half of what is left, they split all of it in proportion;
    // below that, each takes what it measured and the rest is unaccounted.
    const double scale = measured > 0 && measured >= kClientSideMinCoverage * double(left_ns)
                             ? double(left_ns) / measured
                             : 1.0;
    a.client_sleep_ns = take(std::llround(think * scale));
    a.client_idle_ns = take(std::llround(other * scale));
    for (const auto& [wchan, share] : side.blocked_share) {
      if (const auto taken = take(std::llround(share * session * scale)); taken > 0)
        a.client_blocked_by_wchan_ns.emplace_back(wchan, taken);
    }
    // Rounding: the last place takes what is left when all of it is split.
    a.remainder_ns = take(scale != 1.0 ? left_ns : std::llround(socket));
    unaccounted_ns = left_ns;
  } else {
    a.remainder_ns = 0;
    unaccounted_ns = left_ns;
  }
  // Clients asleep by choice are idle between queries, as think time is in a run.
  a.idle_ns = a.client_sleep_ns + a.client_idle_ns;
  a.client_busy_share =
      a.client_ns > 0 ? double(a.client_ns - a.idle_ns) / double(a.client_ns) : 0.0;
  add_session_parts(a, unaccounted_ns);
  return a;
}

}  // namespace stallscope::correlate::detail
