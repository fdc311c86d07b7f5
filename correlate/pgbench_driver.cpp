// An imported pgbench log explained with a record file (explain_pair): the
// log holds transactions but no process or backend identity, so pgbench and
// its backends are found in the record file — pgbench by its comm (and the
// pid its log file names carry), its backends by the application_name
// pgbench gives them and by when they started.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/parse.h"
#include "common/units.h"
#include "correlate/passes.h"
#include "schema/pgbench_readers.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {
namespace {

constexpr const char* kPgbenchComm = "pgbench";
// Every process gets a row at least every 10 s: a pgbench process alive
// during the queries has one at a tick no later than this after them.
constexpr std::int64_t kProcessRowMaxGapNs = 10 * common::kNsPerS;
// process.start_ns counts in clock ticks (10 ms): a backend may show a
// start a tick before pgbench's.
constexpr std::int64_t kStartTicksSlackNs = 20 * common::kNsPerMs;
// The largest pid Linux gives (pid_max is at most 2^22).
constexpr std::int64_t kMaxPid = 4'194'304;

std::optional<int> pid_component(std::string_view s) {
  if (s.empty() || s.size() > 7 || s.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  const auto v = common::parse_int64(s);
  if (!v || *v <= 0 || *v > kMaxPid) return std::nullopt;
  return static_cast<int>(*v);
}

std::string found_by_text(const PgbenchDriver& d) {
  if (d.found_by == "log file name") return "its pid is in the imported log files' names";
  if (d.found_by == "only one") return "the only process named pgbench sampled during the queries";
  return fmt::format(
      "of the {} processes named pgbench sampled during the queries, the one with "
      "the most CPU",
      d.processes);
}

// A client backend's command line, "postgres: USER DB ADDR STATE…" with
// ADDR "[local]" or "HOST(PORT)": "USER DB HOST" (the port differs per
// connection); nullopt for any other process.
std::optional<std::string> client_backend_key(std::string_view cmdline) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < cmdline.size() && words.size() < 4) {
    const auto end = std::min(cmdline.find(' ', i), cmdline.size());
    if (end > i) words.push_back(cmdline.substr(i, end - i));
    i = end + 1;
  }
  if (words.size() < 4 || words[0] != "postgres:") return std::nullopt;
  auto addr = words[3];
  const auto paren = addr.find('(');
  if (addr != "[local]" && (paren == std::string_view::npos || addr.back() != ')'))
    return std::nullopt;
  if (paren != std::string_view::npos) addr = addr.substr(0, paren);
  return fmt::format("{} {} {}", words[1], words[2], addr);
}

void add_backend(QueryPath& qp, PgbenchDriver& d, int pid, std::optional<std::int64_t> process_id) {
  d.backend_pids.push_back(pid);
  qp.backend_pids.insert(pid);
  if (process_id) {
    qp.backend_process_ids.insert(*process_id);
    ++d.backend_processes;
  }
}

// The backends ASH saw with pgbench's application_name. Returns the first
// one's process (for its server and user), if any was sampled.
std::optional<schema::ProcessIdentity> add_backends_by_application_name(const ProcessLookups& file,
                                                                        Span span, QueryPath& qp,
                                                                        PgbenchDriver& d) {
  std::optional<schema::ProcessIdentity> first;
  for (const auto& b :
       file.ash_pids_with_application_name(d.application_name, span.start_ns, span.end_ns)) {
    const auto started_by =
        b.backend_start_ns ? *b.backend_start_ns + kBackendStartSlackNs : span.end_ns;
    const auto id = file.latest_with_pid(b.pid, started_by);
    add_backend(qp, d, b.pid, id);
    ++d.backends_by_application_name;
    if (id && !first) first = file.process_identity(*id);
  }
  return first;
}

// ASH samples only non-idle sessions, so a backend that was idle (waiting
// for pgbench) at every poll is not among them: the client backends that
// started as pgbench connected — of the same postmaster, user, database and
// kind of address as an ASH-seen one (or of its postmaster and still
// untitled), if any; never one ASH saw under another application_name —
// when with the ASH-seen ones they are no more than the log's clients.
// Returns why none were added ("" when added or none was missing).
std::string add_backends_by_start(const ProcessLookups& file, Span span,
                                  std::int64_t pgbench_start_ns, std::optional<int> clients,
                                  const std::optional<schema::ProcessIdentity>& seen, QueryPath& qp,
                                  PgbenchDriver& d) {
  if (!clients || static_cast<std::int64_t>(d.backend_pids.size()) >= *clients) return "";
  std::optional<std::string> key;
  if (seen) key = client_backend_key(seen->cmdline);
  const auto other =
      file.ash_pids_without_application_name(d.application_name, span.start_ns, span.end_ns);
  std::vector<schema::ProcessIdentity> found;
  for (auto& p : file.postgres_processes_started_between(pgbench_start_ns - kStartTicksSlackNs,
                                                         pgbench_start_ns + kBackendStartSlackNs)) {
    const auto k = client_backend_key(p.cmdline);
    // The sampler keeps the command line it first read: a backend it saw
    // before the backend set its title shows the postmaster's.
    const bool untitled = !p.cmdline.starts_with("postgres: ");
    const bool same_server = seen && seen->ppid && p.ppid == seen->ppid;
    if (seen ? !(same_server && (k ? !key || *k == *key : untitled)) : !k) continue;
    if (std::binary_search(other.begin(), other.end(), p.pid)) continue;
    if (std::find(d.backend_pids.begin(), d.backend_pids.end(), p.pid) != d.backend_pids.end())
      continue;
    found.push_back(std::move(p));
  }
  if (found.empty()) return "";
  if (static_cast<std::int64_t>(d.backend_pids.size() + found.size()) > *clients) {
    return fmt::format(
        " {} client backends started as pgbench connected, more than the log's {} clients, so "
        "none of them is taken as pgbench's.",
        found.size(), *clients);
  }
  for (const auto& p : found) add_backend(qp, d, p.pid, p.process_id);
  d.backends_by_start = static_cast<std::int64_t>(found.size());
  return "";
}

// How pgbench and its backends were found, or why not: one note.
std::string note_of(const PgbenchDriver& d, bool ash_in_file, const std::string& by_start) {
  std::string note;
  if (d.pid) {
    note = fmt::format(
        "pgbench found in the record file: pid {} ({}); its CPU (every thread) is driver_cpu and "
        "its run delay client_run_queue.",
        *d.pid, found_by_text(d));
  } else {
    note =
        "pgbench was not found in the record file: no process named pgbench was sampled during "
        "the queries (it ran on another host, or not under this name), so its CPU is not "
        "measured and stays in the remainder; record on pgbench's host to measure it.";
  }
  if (!d.backend_pids.empty()) {
    note += fmt::format(" Its backends: {} ({} seen by ASH with application_name '{}'",
                        d.backend_pids.size(), d.backends_by_application_name, d.application_name);
    if (d.backends_by_start > 0) {
      note +=
          fmt::format(", {} more started as pgbench connected — ASH samples only non-idle sessions",
                      d.backends_by_start);
    }
    note += fmt::format("), {} of them among the sampled processes.", d.backend_processes);
  } else if (!ash_in_file) {
    note +=
        " The record file has no ASH samples (record without --pg) and no client backend started "
        "as pgbench connected: pgbench's backends were not found.";
  } else {
    note += fmt::format(
        " No ASH sample during the queries has application_name '{}' (pgbench's default; "
        "PGAPPNAME or an application_name in its conninfo changes it): every client backend's "
        "samples count.",
        d.application_name);
  }
  return note + by_start;
}

}  // namespace

std::vector<int> pids_in_log_names(std::string_view command_line) {
  std::vector<int> pids;
  std::size_t i = 0;
  while (i < command_line.size()) {
    const auto end = std::min(command_line.find(' ', i), command_line.size());
    auto arg = command_line.substr(i, end - i);
    i = end + 1;
    if (const auto slash = arg.rfind('/'); slash != std::string_view::npos)
      arg = arg.substr(slash + 1);
    // PREFIX.PID or PREFIX.PID.N: the last one or two dot-separated parts.
    const auto last_dot = arg.rfind('.');
    if (last_dot == std::string_view::npos || last_dot == 0) continue;
    const auto last = pid_component(arg.substr(last_dot + 1));
    if (!last) continue;
    pids.push_back(*last);
    const auto stem = arg.substr(0, last_dot);
    if (const auto dot = stem.rfind('.'); dot != std::string_view::npos && dot > 0) {
      if (const auto pid = pid_component(stem.substr(dot + 1))) pids.push_back(*pid);
    }
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

void find_pgbench(const ProcessLookups& file, Span span, std::optional<int> clients, QueryPath& qp,
                  std::vector<std::string>& notes) {
  PgbenchDriver d;
  auto all = file.sampled_processes_with_cpu(kPgbenchComm, span.start_ns,
                                             span.end_ns + kProcessRowMaxGapNs);
  std::erase_if(all, [&](const auto& p) { return p.start_ns && *p.start_ns > span.end_ns; });
  d.processes = static_cast<int>(all.size());
  const auto named = pids_in_log_names(file.run_command_line().value_or(""));
  auto chosen = std::find_if(all.begin(), all.end(), [&](const auto& p) {
    return std::binary_search(named.begin(), named.end(), p.pid);
  });
  if (chosen != all.end()) {
    d.found_by = "log file name";
  } else if (!all.empty()) {
    chosen = std::max_element(all.begin(), all.end(),
                              [](const auto& x, const auto& y) { return x.cpu_ns < y.cpu_ns; });
    d.found_by = all.size() == 1 ? "only one" : "most CPU";
  }
  if (chosen != all.end()) {
    d.pid = chosen->pid;
    d.start_ns = chosen->start_ns;
    qp.driver_process_id = chosen->process_id;
    qp.external_driver = true;
  }
  const auto seen = add_backends_by_application_name(file, span, qp, d);
  std::string by_start;
  if (d.start_ns) by_start = add_backends_by_start(file, span, *d.start_ns, clients, seen, qp, d);
  d.note = note_of(d, file.has_ash_rows(), by_start);
  notes.push_back(d.note);
  qp.pgbench = std::move(d);
}

}  // namespace stallscope::correlate::detail
