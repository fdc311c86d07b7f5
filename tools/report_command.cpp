// `stallscope report`: explain a run file (with its server's record file, or
// against a baseline run) and write the HTML report.
#include <filesystem>
#include <iostream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "common/output.h"
#include "common/printable.h"
#include "correlate/correlate.h"
#include "report/report.h"
#include "schema/pgbench_readers.h"
#include "schema/run_reader.h"
#include "schema/store.h"
#include "tools/commands.h"
#include "tools/session.h"

namespace stallscope::tools {
namespace {

std::string file_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

}  // namespace

int report_command(const ReportCommandOptions& o) {
  if (o.paths.empty() || o.paths.size() > 2) {
    throw Error(ErrorKind::usage,
                fmt::format("report takes a run file, optionally followed by the server's record "
                            "file ({} given)",
                            o.paths.size()));
  }
  // Told apart by what they hold: the file with queries first.
  const auto paths = client_file_first(o.paths);
  // The page never replaces what it reports on.
  std::vector<std::string> inputs = paths;
  if (o.baseline_path) inputs.push_back(*o.baseline_path);
  if (o.output_path != "-") common::refuse_output_that_is_an_input(o.output_path, inputs);
  auto store = schema::Store::open_readonly(paths.front());
  correlate::ExplainOptions eo;
  if (o.window_ns) {
    eo.window_ns = *o.window_ns;
    eo.window_chosen = true;
  }
  eo.path_process_names = o.path_processes;
  // A second run file is a baseline, as in explain; a record file the server's.
  std::optional<std::string> server_path;
  std::optional<std::string> baseline_path = o.baseline_path;
  if (paths.size() == 2) {
    auto second = schema::Store::open_readonly(paths[1]);
    const bool two_runs = schema::run_mode(store) == schema::RunMode::run &&
                          schema::run_mode(second) == schema::RunMode::run;
    if (two_runs && baseline_path) {
      throw Error(ErrorKind::usage,
                  fmt::format("{} is a run file, not a server's record file, and --baseline is "
                              "given too: give one run to compare with",
                              paths[1]));
    }
    (two_runs ? baseline_path : server_path) = paths[1];
  }
  correlate::Report report = server_path ? correlate::explain_pair(store, *server_path, eo)
                                         : correlate::explain(store, eo);
  std::optional<correlate::Report> baseline;
  if (baseline_path) {
    auto baseline_store = schema::Store::open_readonly(*baseline_path);
    auto baseline_options = eo;
    baseline_options.path_process_names.clear();
    baseline = correlate::explain(baseline_store, baseline_options);
    if (baseline->run.queries == 0 || report.run.queries == 0) {
      throw Error(ErrorKind::usage,
                  fmt::format("cannot compare {} with {}: {} holds no queries (--baseline takes a "
                              "run or an imported pgbench log of the same workload)",
                              paths[0], *baseline_path,
                              report.run.queries == 0 ? paths[0] : *baseline_path));
    }
    report.comparison = correlate::compare_runs(report, paths[0], *baseline, *baseline_path);
    correlate::add_baseline_notes(report, paths[0], *baseline, *baseline_path);
  }

  std::string title = file_name(paths[0]);
  if (server_path) title += " + " + file_name(*server_path);
  report::Page page(report, {.title = title,
                             .run_path = paths[0],
                             .server_path = server_path,
                             .baseline_path = baseline_path,
                             .max_bins = o.max_bins});
  page.set_command_line(schema::run_command_line(store).value_or(""));
  page.add_queries(store);
  page.add_query_path();
  const report::Page::Host run_host{.role = server_path ? "client" : "",
                                    .name = report.run.host,
                                    .kernel = report.run.kernel,
                                    .cores = report.run.cores};
  if (!server_path) {
    page.add_host(store, run_host);
    page.add_database(store, report.run.cores);
  } else {
    // The client's host from its own file (an imported pgbench log has no
    // samples: nothing), then the server's through its shifted views.
    page.add_host(store, run_host);
    correlate::ServerFileView server(store, *server_path);
    page.add_host(store, {.role = "server",
                          .name = server.host(),
                          .kernel = server.kernel(),
                          .cores = server.cores()});
    page.add_database(store, server.cores());
  }
  if (baseline) page.set_baseline(*baseline, *report.comparison, file_name(*baseline_path));

  std::ostringstream html;
  report::write_html(page.data(), html);
  const auto text = std::move(html).str();
  if (o.output_path == "-") {
    common::write_standard_output(text);
  } else {
    common::write_whole_file(o.output_path, text);
  }
  std::cerr << fmt::format(
      "stallscope report: wrote {} ({:.1f} MB): {}\n",
      o.output_path == "-" ? "standard output" : common::printable(o.output_path),
      static_cast<double>(text.size()) / 1e6, common::printable(report.verdict.summary));
  if (!report.run.end_ns) {
    std::cerr << fmt::format(
        "stallscope report: warning: {} has no end yet (status {}: still being written, or its "
        "writer was killed); the page shows what was stored so far\n",
        common::printable(paths[0]), report.run.status);
  }
  return 0;
}

}  // namespace stallscope::tools
