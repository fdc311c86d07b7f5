// `stallscope explain`: read a run file and print the report.
#include <cmath>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/output.h"
#include "common/parse.h"
#include "common/printable.h"
#include "common/units.h"
#include "correlate/correlate.h"
#include "schema/report_store.h"
#include "schema/run_reader.h"
#include "schema/store.h"
#include "tools/commands.h"
#include "tools/session.h"

namespace stallscope::tools {

std::int64_t parse_duration_ns(const std::string& text, const std::string& flag) {
  static const std::regex re(R"(^\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s|m|h)?\s*$)");
  std::smatch m;
  std::optional<double> number;
  if (std::regex_match(text, m, re)) number = common::parse_double(m[1].str());
  if (!number) {
    throw Error(
        ErrorKind::usage,
        fmt::format("{}: cannot parse '{}' as a duration (e.g. 1s, 500ms, 2m)", flag, text));
  }
  const double value = *number;
  std::string unit = m[2].matched ? m[2].str() : "s";
  double scale = unit == "ns"   ? 1
                 : unit == "us" ? common::kNsPerUsDouble
                 : unit == "ms" ? common::kNsPerMsDouble
                 : unit == "s"  ? common::kNsPerSDouble
                 : unit == "m"  ? 60 * common::kNsPerSDouble
                                : 3600 * common::kNsPerSDouble;
  // Past what an int64 of ns holds (292 years): said so, not wrapped around.
  if (value * scale >= 9.2e18) {
    throw Error(ErrorKind::usage,
                fmt::format("{}: '{}' is too long (at most 292 years)", flag, text));
  }
  auto ns = static_cast<std::int64_t>(std::llround(value * scale));
  if (ns < common::kNsPerMs) {
    throw Error(ErrorKind::usage, fmt::format("{}: '{}' is shorter than 1 ms", flag, text));
  }
  return ns;
}

namespace {

// Whether explain's results could not be saved for a reason of the file's
// place, not of explain: its file or directory cannot be written (read-only
// file, directory or mount), another process holds its write lock, or the
// disk is full. The report is printed all the same.
bool save_is_optional(const Error& e) {
  return schema::is_busy(e) || schema::is_unwritable(e);
}

// Explains the first file: alone, as a client + server pair with the
// server's record file, or compared with a second run file of the same
// workload (through a pooler and direct, say).
correlate::Report explain_files(schema::Store& store, const std::vector<std::string>& paths,
                                const correlate::ExplainOptions& eo) {
  if (paths.size() == 1) return correlate::explain(store, eo);
  {
    auto second = schema::Store::open_readonly(paths[1]);
    if (schema::run_mode(store) == schema::RunMode::run &&
        schema::run_mode(second) == schema::RunMode::run) {
      auto report = correlate::explain(store, eo);
      // The baseline finds its poolers by itself (a --path-process pooler may
      // still run, idle, beside a direct baseline).
      auto baseline_options = eo;
      baseline_options.path_process_names.clear();
      const auto baseline = correlate::explain(second, baseline_options);
      report.comparison = correlate::compare_runs(report, paths[0], baseline, paths[1]);
      correlate::add_baseline_notes(report, paths[0], baseline, paths[1]);
      return report;
    }
  }
  // The server's record file, attached by explain_pair once it is closed here.
  return correlate::explain_pair(store, paths[1], eo);
}

// Saves the findings and stalls into the file at `path`, or says on stderr
// why not (read-only, its WAL unreadable, its write lock held): the report
// is printed all the same.
void save_or_warn(schema::Store& store, const std::string& path, const correlate::Report& report) {
  // One line each, the file name and SQLite's message made printable.
  auto warn = [](const std::string& message) {
    std::cerr << "stallscope explain: warning: " << common::printable(message) << '\n';
  };
  if (const auto bytes = schema::unread_wal_bytes(store)) {
    warn(
        fmt::format("{}-wal ({} bytes) could not be read (no WAL index can be made beside it): "
                    "the report leaves out the commits in it",
                    path, *bytes));
  }
  if (const auto why = schema::read_only_reason(store)) {
    warn(fmt::format("findings and stalls not saved into {}: {}", path, *why));
  } else {
    // A run still being written: its writer commits at most 250 ms apart, so
    // wait for a gap; if none comes, the report is printed but not saved.
    schema::set_busy_timeout(store, 2000);
    try {
      correlate::save_report(store, report);
    } catch (const Error& e) {
      if (!save_is_optional(e)) throw;
      warn(fmt::format("findings and stalls not saved: {}{}", e.what(),
                       !schema::is_busy(e) ? ""
                       : report.run.end_ns
                           ? " (another process holds its write lock; explain again when "
                             "it is done)"
                           : " (the run is still being written; explain again when it ends)"));
    }
  }
}

}  // namespace

int explain_command(const ExplainCommandOptions& o) {
  if (o.paths.empty() || o.paths.size() > 2) {
    throw Error(ErrorKind::usage,
                fmt::format("explain takes a run file, optionally followed by the server's record "
                            "file or a second run file to compare with ({} given)",
                            o.paths.size()));
  }
  // Told apart by what they hold: the file with queries first.
  const auto paths = client_file_first(o.paths);
  // Each file is checked (PRAGMA quick_check) on threads of their own while
  // explain reads it; a damaged file is refused before anything is printed.
  std::vector<correlate::FileCheck> checks;
  auto start_checks = [&checks, &o, &paths] {
    if (o.no_check) return;
    for (const auto& path : paths) checks.emplace_back(path);
  };
  auto wait_for_checks = [&checks] {
    for (auto& c : checks) c.wait();
  };
  // Read-write: explain stores its findings and stalls in the file; a file
  // it cannot write is read all the same and the report printed. Opened
  // before the checks start: a check's read-only connection opened while
  // this one makes -wal and -shm beside the file (and, on a full disk,
  // removes them again) would read a half-made WAL index ("disk I/O error")
  // and leave both files behind.
  std::optional<schema::Store> opened;
  try {
    opened.emplace(schema::Store::open_readwrite_if_possible(paths.front()));
  } catch (const Error&) {
    start_checks();
    wait_for_checks();
    throw;
  }
  start_checks();
  auto& store = *opened;
  correlate::ExplainOptions eo;
  if (o.window_ns) {
    eo.window_ns = *o.window_ns;
    eo.window_chosen = true;
  }
  eo.every_queries = o.every_queries;
  eo.path_process_names = o.path_processes;
  correlate::Report report;
  try {
    report = explain_files(store, paths, eo);
  } catch (const Error&) {
    // A damaged file's failed read: the check names the damage.
    wait_for_checks();
    throw;
  }
  wait_for_checks();
  save_or_warn(store, paths.front(), report);
  // Rendered whole, then written with the write checked: a full disk or a
  // closed stdout is an error, not a report nobody got.
  std::ostringstream out;
  if (o.json) {
    // Invalid UTF-8 that reached the report is replaced (U+FFFD), never a throw.
    out << correlate::to_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
        << '\n';
  } else {
    correlate::render_text(report, out);
  }
  common::write_standard_output(std::move(out).str());
  return 0;
}

}  // namespace stallscope::tools
