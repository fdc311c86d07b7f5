// `stallscope explain`: read a run file and print the report.
#include <cmath>
#include <iostream>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "common/error.h"
#include "common/parse.h"
#include "common/units.h"
#include "correlate/correlate.h"
#include "schema/report_store.h"
#include "schema/run_reader.h"
#include "schema/store.h"
#include "tools/commands.h"

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
  auto ns = static_cast<std::int64_t>(std::llround(value * scale));
  if (ns < common::kNsPerMs) {
    throw Error(ErrorKind::usage, fmt::format("{}: '{}' is shorter than 1 ms", flag, text));
  }
  return ns;
}

int explain_command(const ExplainCommandOptions& o) {
  if (o.paths.empty() || o.paths.size() > 2) {
    throw Error(ErrorKind::usage,
                fmt::format("explain takes a run file, optionally followed by the server's record "
                            "file or a second run file to compare with ({} given)",
                            o.paths.size()));
  }
  // Read-write: explain stores its findings and stalls in the file.
  auto store = schema::Store::open_readwrite(o.paths.front());
  correlate::ExplainOptions eo;
  eo.window_ns = o.window_ns;
  eo.every_queries = o.every_queries;
  eo.path_process_names = o.path_processes;
  // Two files: a run and the server's record file (client + server), or two
  // run files of the same workload (compared: e.g. through a pooler and direct).
  bool two_runs = false;
  if (o.paths.size() == 2) {
    auto second = schema::Store::open_readonly(o.paths[1]);
    two_runs = schema::run_mode(store) == schema::RunMode::run &&
               schema::run_mode(second) == schema::RunMode::run;
  }
  correlate::Report report;
  if (two_runs) {
    report = correlate::explain(store, eo);
    // The baseline finds its poolers by itself (a --path-process pooler may
    // still run, idle, beside a direct baseline).
    auto baseline_options = eo;
    baseline_options.path_process_names.clear();
    auto baseline_store = schema::Store::open_readonly(o.paths[1]);
    const auto baseline = correlate::explain(baseline_store, baseline_options);
    report.comparison = correlate::compare_runs(report, o.paths[0], baseline, o.paths[1]);
  } else {
    report = o.paths.size() == 2 ? correlate::explain_pair(store, o.paths[1], eo)
                                 : correlate::explain(store, eo);
  }
  // A run still being written: its writer commits at most 250 ms apart, so
  // wait for a gap; if none comes, the report is printed but not saved.
  schema::set_busy_timeout(store, 2000);
  try {
    correlate::save_report(store, report);
  } catch (const Error& e) {
    if (report.run.end_ns || !schema::is_busy(e)) throw;
    std::cerr << fmt::format(
        "stallscope explain: warning: the run is still being written; findings and stalls not "
        "saved into {} (explain again when it ends)\n",
        o.paths.front());
  }
  if (o.json) {
    std::cout << correlate::to_json(report).dump(2) << '\n';
  } else {
    correlate::render_text(report, std::cout);
  }
  return 0;
}

}  // namespace stallscope::tools
