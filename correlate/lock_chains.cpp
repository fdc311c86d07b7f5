// Blocking chains to the root (lock_chains.h).
#include "correlate/lock_chains.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/units.h"
#include "correlate/format.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {
namespace {

constexpr std::size_t kQueryTextChars = 80;
constexpr std::int64_t kPgDatabaseClassId = 1262;  // pg_database: objid 0 is the NOTIFY queue lock

// The query on one line, whitespace runs folded, cut at kQueryTextChars.
std::string short_query(std::string_view q) {
  std::string out;
  bool space = false;
  for (char ch : q) {
    if (ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += ch;
  }
  if (out.size() > kQueryTextChars) {
    out.resize(kQueryTextChars);
    out += "…";
  }
  return out;
}

std::string seconds_text(std::int64_t ns) {
  const double s = double(ns) / common::kNsPerSDouble;
  return s >= 10 ? fmt::format("{:.0f} s", s) : fmt::format("{:.1f} s", s);
}

bool is_idle_state(const std::string& state) {
  return state == "idle" || state.starts_with("idle in transaction");
}

bool is_ddl(std::string_view query) {
  std::string head;
  for (char ch : query.substr(0, 16)) head += static_cast<char>(std::toupper(ch));
  for (const char* verb : {"ALTER", "DROP", "TRUNCATE", "CREATE INDEX", "REINDEX", "CLUSTER",
                           "VACUUM FULL", "LOCK", "CREATE TRIGGER"}) {
    if (head.starts_with(verb)) return true;
  }
  return false;
}

// The waiter row of a poll: in wait_event_type Lock with blockers.
bool is_waiter(const schema::LockPollSession& s) {
  return s.wait_event_type == "Lock" && !s.blocking_pids.empty();
}

struct PollIndex {
  const schema::LockPoll& poll;
  std::unordered_map<int, const schema::LockPollSession*> sessions;
  std::unordered_map<int, const schema::LockPollWait*> waits;

  explicit PollIndex(const schema::LockPoll& p) : poll(p) {
    for (const auto& s : p.sessions) sessions.emplace(s.pid, &s);
    for (const auto& w : p.waits) waits.emplace(w.pid, &w);  // the first row of a pid
  }
  const schema::LockPollSession* session(int pid) const {
    auto it = sessions.find(pid);
    return it == sessions.end() ? nullptr : it->second;
  }
  ChainSession chain_session(int pid) const {
    ChainSession c;
    c.pid = pid;
    const auto* s = session(pid);
    if (!s) return c;
    c.sampled = true;
    c.state = s->state;
    c.backend_type = s->backend_type;
    c.application_name = s->application_name;
    c.query = s->query;
    c.wait_event_type = s->wait_event_type;
    c.wait_event = s->wait_event;
    if (s->xact_start_ns)
      c.xact_age_ns = std::max<std::int64_t>(0, poll.time_ns - *s->xact_start_ns);
    return c;
  }
  ChainLink link(int pid) const {
    ChainLink l;
    l.waiter = chain_session(pid);
    if (auto it = waits.find(pid); it != waits.end()) {
      l.locktype = it->second->locktype;
      l.mode = it->second->mode;
      l.target = lock_target_text(*it->second);
    } else {
      l.locktype = l.waiter.wait_event;  // the Lock wait event is the lock type's name
      l.target = l.locktype.empty() ? std::string("a lock") : l.locktype + " lock";
    }
    return l;
  }
};

// The roots of `start`'s chains in one poll, each with the path to it
// (start first). Breadth first, each pid visited once: a cycle ends.
std::vector<std::vector<int>> roots_of(const PollIndex& ix, int start) {
  std::vector<std::vector<int>> out;
  std::unordered_map<int, int> parent{{start, start}};
  std::deque<int> todo{start};
  while (!todo.empty()) {
    const int pid = todo.front();
    todo.pop_front();
    const auto* s = ix.session(pid);
    if (pid != start && (!s || !is_waiter(*s))) {
      std::vector<int> path{pid};
      for (int p = pid; p != start;) {
        p = parent.at(p);
        path.push_back(p);
      }
      std::reverse(path.begin(), path.end());
      out.push_back(std::move(path));
      continue;
    }
    if (!s) continue;
    for (int b : s->blocking_pids) {
      if (parent.try_emplace(b, pid).second) todo.push_back(b);
    }
  }
  return out;
}

struct RootAcc {
  std::int64_t waiter_rows = 0;
  std::int64_t polls = 0;
  std::int64_t idle_polls = 0;
  int max_waiters = 0;
  std::int64_t last_tick = -1;
  ChainSession last;           // as its latest poll saw it
  std::vector<int> best_path;  // longest chain, from the poll with most waiters
  std::int64_t best_path_tick = -1;
  int best_path_waiters = -1;
  std::map<std::string, std::int64_t> link_locktypes;
};

std::string root_text(const ChainSession& r) {
  if (r.pid == 0) return "a prepared transaction (pg_prepared_xacts)";
  if (!r.sampled) return fmt::format("pid {} (not sampled)", r.pid);
  std::string who;
  if (!r.backend_type.empty()) who = r.backend_type;
  if (!r.application_name.empty())
    who += fmt::format("{}app '{}'", who.empty() ? "" : ", ", r.application_name);
  std::string text = fmt::format("pid {} {}", r.pid, r.state.empty() ? "(no state)" : r.state);
  if (r.xact_age_ns) {
    text += is_idle_state(r.state) && r.state != "idle"
                ? fmt::format(" for {}", seconds_text(*r.xact_age_ns))
                : fmt::format(", transaction open {}", seconds_text(*r.xact_age_ns));
  }
  if (!who.empty()) text += fmt::format(" ({})", who);
  if (r.state == "active" && !r.wait_event_type.empty())
    text += fmt::format(" waiting on {}:{}", r.wait_event_type, r.wait_event);
  if (!r.query.empty()) text += ": " + short_query(r.query);
  return text;
}

void make_culprit(LockChainSummary& x) {
  if (x.waiter_rows == 0) return;
  if (x.turnstile) {
    const bool notify = x.hot_lock.starts_with("the NOTIFY queue lock");
    x.culprit = fmt::format(
        "{}{} — a turnstile: {} sessions took turns holding it over {} polls, up to {} "
        "waiting at once, so throughput ≈ 1 / hold time{}{}",
        x.hot_lock, notify ? ", taken at COMMIT by transactions that called NOTIFY" : "",
        x.distinct_roots, x.polls, x.max_poll_waiters,
        x.tps && *x.tps > 0 ? fmt::format(" ({:.0f} tps: ≈ {:.1f} ms a hold)", *x.tps,
                                          common::kMsPerSDouble / *x.tps)
                            : std::string(),
        x.waiting_query.empty() ? "" : "; waiting: " + x.waiting_query);
    return;
  }
  if (!x.root) {
    x.culprit = fmt::format(
        "a lock cycle: {} waiter samples reached no root (a deadlock until "
        "deadlock_timeout)",
        x.cycle_rows);
    return;
  }
  const auto& r = *x.root;
  // The lock the root holds: what its direct waiter asks for.
  const ChainLink* last = x.chain.empty() ? nullptr : &x.chain.back();
  const std::string held = last ? last->locktype : std::string("heavyweight");
  std::string text =
      fmt::format("{} — holds the {} lock {} {} for", root_text(r), held, x.root_max_waiters,
                  x.root_max_waiters == 1 ? "backend waits" : "backends wait");
  if (x.chain.size() >= 2) {
    std::string types;
    for (const auto& l : x.chain) types += (types.empty() ? "" : " → ") + l.locktype;
    text += fmt::format(" (chain: {})", types);
    // A queue behind DDL: the head waiter before the root.
    const auto& head = x.chain.back();
    if (head.waiter.sampled && is_ddl(head.waiter.query)) {
      text += fmt::format("; they queue behind pid {}'s {} ({}{}), which waits for it",
                          head.waiter.pid, short_query(head.waiter.query),
                          head.mode.empty() ? "" : head.mode + " on ", head.target);
    }
  }
  if (r.sampled && x.root_idle_polls * 2 > x.root_polls) {
    text += "; the application holds it (cycle through the application likely)";
  }
  x.culprit = std::move(text);
}

}  // namespace

std::string lock_target_text(const schema::LockPollWait& w) {
  const auto num = [](const std::optional<std::int64_t>& v) { return v ? *v : 0; };
  const std::string rel =
      !w.relation_name.empty()
          ? w.relation_name
          : (w.relation_oid ? fmt::format("OID {}", *w.relation_oid) : std::string("?"));
  if (w.locktype == "advisory") {
    if (num(w.objsubid) == 1) {
      const auto key = (static_cast<std::uint64_t>(num(w.classid)) << 32) |
                       static_cast<std::uint64_t>(num(w.objid));
      return fmt::format("advisory lock key {}", static_cast<std::int64_t>(key));
    }
    return fmt::format("advisory lock ({}, {})", num(w.classid), num(w.objid));
  }
  if (w.locktype == "object") {
    if (num(w.classid) == kPgDatabaseClassId && num(w.objid) == 0)
      return "the NOTIFY queue lock (object 0 of pg_database)";
    return fmt::format("object {} of class {}{}", num(w.objid), num(w.classid),
                       num(w.objsubid) ? fmt::format(" column {}", num(w.objsubid)) : "");
  }
  if (w.locktype == "relation") return "relation " + rel;
  if (w.locktype == "tuple")
    return fmt::format("row ({},{}) of relation {}", num(w.page), num(w.tuple), rel);
  if (w.locktype == "page") return fmt::format("page {} of relation {}", num(w.page), rel);
  if (w.locktype == "extend") return "extension of relation " + rel;
  if (w.locktype == "transactionid")
    return w.transactionid ? fmt::format("transaction {}", *w.transactionid) : "a transaction";
  if (w.locktype == "virtualxid") return "virtual transaction " + w.virtualxid;
  return w.locktype;
}

LockChainSummary summarize_lock_chains(const std::vector<schema::LockPoll>& polls,
                                       const std::function<bool(int)>& counted) {
  LockChainSummary x;
  std::map<int, RootAcc> roots;
  std::map<std::string, std::int64_t> targets;  // hot-lock candidates
  std::map<std::string, std::string> target_types;
  std::map<std::string, std::int64_t> queries;
  for (const auto& poll : polls) {
    const PollIndex ix(poll);
    std::map<int, int> waiters_behind;             // root → waiters this poll
    std::map<int, std::vector<int>> longest_path;  // root → longest path this poll
    bool any = false;
    int poll_waiters = 0;
    for (const auto& s : poll.sessions) {
      if (!is_waiter(s)) continue;
      if (counted ? !counted(s.pid) : s.backend_type != "client backend") continue;
      any = true;
      ++poll_waiters;
      ++x.waiter_rows;
      if (!s.query.empty()) ++queries[short_query(s.query)];
      const auto link = ix.link(s.pid);
      // transactionid targets differ per holder and a hot row's tuple lock
      // moves with each new row version: both are keyed by the row's table
      // (a transactionid waiter's: the table it writes), else generically.
      std::string key = link.target;
      const auto it = ix.waits.find(s.pid);
      const schema::LockPollWait* w = it == ix.waits.end() ? nullptr : it->second;
      if (link.locktype == "tuple" && w) {
        key = "row of relation " + (w->relation_name.empty() && w->relation_oid
                                        ? fmt::format("OID {}", *w->relation_oid)
                                        : w->relation_name);
      } else if (link.locktype == "transactionid") {
        key = w && !w->write_relation_name.empty() ? "row of relation " + w->write_relation_name
                                                   : "row locks (transactionid)";
      }
      ++targets[key];
      target_types[key] = link.locktype;
      const auto paths = roots_of(ix, s.pid);
      if (paths.empty()) ++x.cycle_rows;
      for (const auto& path : paths) {
        const int root = path.back();
        ++waiters_behind[root];
        auto& best = longest_path[root];
        if (path.size() > best.size()) best = path;
        auto& acc = roots[root];
        ++acc.waiter_rows;
        for (std::size_t i = 0; i + 1 < path.size(); ++i)
          ++acc.link_locktypes[ix.link(path[i]).locktype];
      }
    }
    if (!any) continue;
    ++x.polls;
    x.max_poll_waiters = std::max(x.max_poll_waiters, poll_waiters);
    for (const auto& [root, n] : waiters_behind) {
      auto& acc = roots[root];
      ++acc.polls;
      acc.last = ix.chain_session(root);
      acc.last_tick = poll.ash_tick;
      if (acc.last.sampled && is_idle_state(acc.last.state)) ++acc.idle_polls;
      acc.max_waiters = std::max(acc.max_waiters, n);
      if (n >= acc.best_path_waiters) {
        acc.best_path_waiters = n;
        acc.best_path = longest_path[root];
        acc.best_path_tick = poll.ash_tick;
      }
    }
  }
  if (!queries.empty()) {
    x.waiting_query = std::max_element(queries.begin(), queries.end(), [](auto& a, auto& b) {
                        return a.second < b.second;
                      })->first;
  }
  x.distinct_roots = static_cast<std::int64_t>(roots.size());
  std::int64_t rooted_rows = 0;
  const RootAcc* top = nullptr;
  int top_pid = 0;
  for (const auto& [pid, acc] : roots) {
    rooted_rows += acc.waiter_rows;
    if (!top || acc.waiter_rows > top->waiter_rows) {
      top = &acc;
      top_pid = pid;
    }
  }
  if (top) {
    x.root = top->last;
    x.root->pid = top_pid;
    x.root_waiter_rows = top->waiter_rows;
    x.root_polls = top->polls;
    x.root_max_waiters = top->max_waiters;
    x.root_idle_polls = top->idle_polls;
    x.link_locktypes = top->link_locktypes;
    // The chain as the poll with the most waiters behind the root saw it.
    for (const auto& poll : polls) {
      if (poll.ash_tick != top->best_path_tick) continue;
      const PollIndex ix(poll);
      for (std::size_t i = 0; i + 1 < top->best_path.size(); ++i)
        x.chain.push_back(ix.link(top->best_path[i]));
      break;
    }
  }
  x.turnstile = x.distinct_roots >= kTurnstileMinRoots && top &&
                double(top->waiter_rows) < kTurnstileMaxRootShare * double(rooted_rows);
  if (!targets.empty()) {
    // The hot lock: the most waited-for target, a named one (not the
    // per-holder transactionid) when one was seen at all.
    const std::pair<const std::string, std::int64_t>* best = nullptr;
    for (const auto& t : targets) {
      const bool generic = t.first == "row locks (transactionid)";
      const bool best_generic = best && best->first == "row locks (transactionid)";
      if (!best || (best_generic && !generic) ||
          (generic == best_generic && t.second > best->second))
        best = &t;
    }
    x.hot_lock = best->first;
    x.hot_locktype = target_types[best->first];
    x.hot_lock_rows = best->second;
    if (x.hot_lock.starts_with("row of relation ")) x.hot_lock = "the hot " + x.hot_lock;
  }
  make_culprit(x);
  return x;
}

namespace {

LockChains::Session session_view(const ChainSession& c) {
  return {.pid = c.pid,
          .sampled = c.sampled,
          .state = c.state,
          .backend_type = c.backend_type,
          .application_name = c.application_name,
          .query = c.query,
          .xact_age_ns = c.xact_age_ns};
}

LockChains view_of(const LockChainSummary& x) {
  LockChains v{.polls = x.polls,
               .waiter_samples = x.waiter_rows,
               .cycle_samples = x.cycle_rows,
               .max_waiters = x.max_poll_waiters,
               .distinct_roots = x.distinct_roots,
               .root_waiter_samples = x.root_waiter_rows,
               .root_polls = x.root_polls,
               .turnstile = x.turnstile,
               .hot_lock = x.hot_lock,
               .culprit = x.culprit};
  if (x.root) v.root = session_view(*x.root);
  for (const auto& l : x.chain)
    v.chain.push_back({session_view(l.waiter), l.locktype, l.mode, l.target});
  return v;
}

}  // namespace

void name_lock_roots(const LockChainLookups& lookups, Report& report,
                     const std::function<bool(int)>& counted) {
  const auto chains = [&](std::int64_t from_ns, std::int64_t to_ns, std::optional<double> tps) {
    auto x = summarize_lock_chains(lookups.polls_between(from_ns, to_ns), counted);
    if (x.turnstile && tps) {
      x.tps = tps;
      make_culprit(x);
    }
    if (x.root && !x.root->sampled && x.root->pid > 0 && !x.turnstile) {
      // Not in the polls it blocked in (a file from before idle roots got
      // rows): its latest row up to the span's end, as the old stall text did.
      if (auto a = lookups.latest_activity(x.root->pid, to_ns)) {
        x.root->sampled = true;
        x.root->state = a->state;
        x.root->query = a->query;
        if (is_idle_state(a->state)) x.root_idle_polls = x.root_polls;
        make_culprit(x);
      }
    }
    return x;
  };
  if (!report.windows.empty()) {
    const auto x =
        chains(report.windows.front().start_ns, report.windows.back().end_ns, report.run.tps);
    if (x.waiter_rows > 0) report.lock_chains = view_of(x);
  }
  for (auto& f : report.findings) {
    if (f.kind != FindingKind::lock_wait) continue;
    const auto x = chains(f.start_ns, f.end_ns, report.run.tps);
    if (x.culprit.empty()) continue;
    f.culprit = x.culprit;
    if (x.turnstile) {
      f.evidence.emplace_back("lock_roots", x.distinct_roots);
      f.evidence.emplace_back("hot_lock", x.hot_lock);
      f.evidence.emplace_back("hot_lock_waiter_samples", x.hot_lock_rows);
    } else if (x.root) {
      f.evidence.emplace_back("root_blocker_pid", std::int64_t{x.root->pid});
      f.evidence.emplace_back("root_blocker_state", x.root->state);
      f.evidence.emplace_back("root_blocker_waiter_samples", x.root_waiter_rows);
      f.evidence.emplace_back("root_blocker_max_waiters", std::int64_t{x.root_max_waiters});
    }
  }
  for (auto& s : report.stalls) {
    if (s.cause != StallCause::lock_wait) continue;
    const auto x = chains(s.start_ns, s.end_ns, s.tps);
    if (x.culprit.empty()) continue;
    s.culprit = x.culprit;
    // The old clause named the most frequent first blocker, which may itself
    // wait: the root replaces it.
    const std::string clause =
        x.turnstile
            ? fmt::format(", on {} (a turnstile: the holder changes every few ms)", x.hot_lock)
        : x.root ? fmt::format(", the root blocker {}", root_text(*x.root))
                 : std::string();
    if (clause.empty()) continue;
    if (auto at = s.explanation.find(", blocked mostly by pid "); at != std::string::npos) {
      s.explanation = s.explanation.substr(0, at) + clause + ".";
    } else if (auto end = s.explanation.rfind("time (typical "); end != std::string::npos) {
      if (auto close = s.explanation.find(')', end); close != std::string::npos)
        s.explanation.insert(close + 1, clause);
    }
  }
}

}  // namespace stallscope::correlate::detail
