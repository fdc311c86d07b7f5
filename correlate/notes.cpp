// The report's notes on sampling limits and caveats, written once the
// accounting is known (the passes add their own notes as they go).
#include <algorithm>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "common/units.h"
#include "correlate/format.h"
#include "correlate/kernel_sleep.h"
#include "correlate/passes.h"
#include "schema/records.h"

namespace stallscope::correlate::detail {
namespace {

// How often ASH and the host were sampled, and what that limits.
void add_sampling_rates(const NoteInputs& in, Report& report) {
  const auto& f = in.facts;
  if (in.perturbed_windows > 0) {
    report.notes.push_back(fmt::format(
        "{} of {} windows are flagged as perturbed: the sampler itself used more than {:.0f}% "
        "of a core there, so its own cost may have shaped what it measured.",
        in.perturbed_windows, report.windows.size(), 100 * kPerturbationMaxCoreShare));
  }
  if (f.ash_available) {
    report.notes.push_back(fmt::format(
        "ASH polls pg_stat_activity every {:.1f} ms: a wait shorter than that is seen with "
        "probability about its length / {:.1f} ms; wait times are estimated as samples x period.",
        ms(f.ash_period_ns), ms(f.ash_period_ns)));
  } else {
    report.notes.push_back(
        "No ASH samples in this file: server waits are unknown and stay in the remainder.");
  }
  add_ash_blind_note(f, report);    // kernel_sleep.h
  add_sampler_gap_note(f, report);  // kernel_sleep.h
  report.notes.push_back(fmt::format(
      "Host state is sampled every {:.1f} ms; process CPU and run delay are exact schedstat "
      "deltas, spread over the span each covers; D-state time is rows x period.",
      ms(f.sample_period_ns)));
}

// What the accounting of a run with queries could not see or double counts.
void add_accounting_caveats(const NoteInputs& in, Report& report) {
  if (!in.facts.backends_on_host) {
    report.notes.push_back(
        "This run's backends were not found among the sampled processes (server on another "
        "host?): "
        "server CPU is estimated from ASH samples of active backends with no wait event.");
  }
  if (!in.path.driver_process_id && !in.client_driver) {
    report.notes.push_back(
        "The stallscope process was not found among the sampled processes: driver CPU is 0.");
  }
  if (report.accounting && report.accounting->excess_ns > 0) {
    report.notes.push_back(fmt::format(
        "The measured parts exceed the query time by {:.1f}% and are trimmed to it, the "
        "driver's CPU and run delay first: some of them fall between queries, and estimates "
        "overlap (one driver thread serves several clients; a backend on CPU may be waiting in "
        "the run queue in between).",
        pct(report.accounting->excess_ns, report.accounting->query_ns)));
  }
  report.notes.push_back(
      "Run-queue delay of the query path is charged to server_cpu, client_cpu and runqueue in "
      "proportion to the CPU each of backends, driver and other processes used.");
}

}  // namespace

bool cut_short_by_its_file(const RunSummary& run) {
  const std::string_view reason = run.end_reason ? *run.end_reason : std::string_view();
  return run.status == "failed" &&
         (reason.starts_with("disk full") || reason.starts_with("write failed"));
}

void add_run_end_note(const Span& analysed, std::optional<std::int64_t> kept_until_ns,
                      Report& report) {
  const auto& r = report.run;
  const auto after_start_s = [&r](std::int64_t t_ns) {
    return double(t_ns - r.start_ns) / common::kNsPerSDouble;
  };
  std::string note;
  if (cut_short_by_its_file(r)) {
    // The figure `run` and `record` printed on stderr when the commit failed.
    const double kept_s = after_start_s(std::max(kept_until_ns.value_or(r.start_ns), r.start_ns));
    note = fmt::format(
        "The run was cut short: its file could not be written ({}), so stallscope stopped "
        "there and kept what it had committed: its first {:.1f} s{}. {}",
        r.end_reason.value_or(""), kept_s,
        r.duration_ns ? fmt::format(" of the {:.1f} s the run lasted",
                                    double(*r.duration_ns) / common::kNsPerSDouble)
                      : std::string(),
        kept_until_ns
            ? fmt::format("The figures and the accounting cover only the {:.1f} s analysed (up "
                          "to {:.1f} s after the start).",
                          double(analysed.duration_ns()) / common::kNsPerSDouble,
                          after_start_s(analysed.end_ns))
            : std::string("No query or sample was committed: there are no figures."));
  } else if (!r.end_ns && r.mode != to_string(schema::RunMode::import_pgbench)) {
    note = fmt::format(
        "The run did not end: its status is still '{}' and it has no end time, so its recorder "
        "was killed or crashed (or is still writing). The figures cover what was committed, up "
        "to {:.1f} s after the start; rows reach the file at most about 350 ms after they happen "
        "(every 100 ms to the writer, which commits every 250 ms), so up to that much before "
        "the end is missing.",
        r.status, after_start_s(analysed.end_ns));
  }
  if (!note.empty()) report.notes.insert(report.notes.begin(), std::move(note));
}

void add_sampling_notes(const NoteInputs& in, Report& report) {
  // An imported pgbench log alone: no samples of any kind, so the notes on
  // sampling rates and on processes not found would describe nothing.
  if (report.run.mode == to_string(schema::RunMode::import_pgbench) && !in.client_driver &&
      in.facts.host.cpu_rows == 0 && !in.facts.ash_available && in.facts.all_cpu_ns == 0) {
    report.notes.push_back(
        "An imported pgbench log holds no host, process or ASH samples: its query time cannot "
        "be split into CPU, waits and round trips. Record beside pgbench (`stallscope record "
        "--pg CONNINFO -T SECONDS` on pgbench's host, started before it) and explain the log "
        "with that file: `stallscope explain imported.db record.db`.");
    return;
  }
  add_sampling_rates(in, report);
  if (!in.facts.has_queries && report.sessions) {
    report.notes.push_back(
        "This file holds no queries (a record file): the time accounting is the client sessions' "
        "time as ASH sampled it (one state per session per poll), and the findings are scored as "
        "shares of it.");
  } else if (!in.facts.has_queries) {
    report.notes.push_back(
        "This file holds no queries and no client sessions (a record file; record --pg samples "
        "the database's sessions): the time accounting is the host's CPU time, and findings come "
        "from host state and ASH only, scored as shares of host CPU time or of sampled session "
        "time.");
  } else {
    add_accounting_caveats(in, report);
  }
}

void add_retry_note(const schema::RetryTotals& retry, Report& report) {
  if (retry.transactions <= 0) return;
  report.notes.push_back(fmt::format(
      "{} transaction{} retried after a serialization failure or a deadlock (--max-tries), with "
      "{} extra tr{}: {:.3f} s of their latency went into the tries that failed{}.",
      retry.transactions, retry.transactions == 1 ? " was" : "s were", retry.retries,
      retry.retries == 1 ? "y" : "ies",
      static_cast<double>(retry.retried_ns) / common::kNsPerSDouble,
      retry.latency_ns > 0
          ? fmt::format(" ({:.1f} % of all transactions' latency, \\sleep included)",
                        pct(retry.retried_ns, retry.latency_ns))
          : ""));
}

}  // namespace stallscope::correlate::detail
