// The HTML report (`stallscope report`): one self-contained page that shows
// explain's verdict, findings, stalls and time accounting beside timelines of
// the client's and the hosts' and the database's state on one time axis.
//
//   auto store = schema::Store::open_readonly("run.db");
//   auto r = correlate::explain(store, {});
//   report::Page page(r, {.title = "run.db", .run_path = "run.db"});
//   page.add_queries(store);     // throughput, latency, schedule lag
//   page.add_query_path();       // driver, poolers, backends: CPU per window
//   page.add_host(store, {.name = r.run.host, .kernel = r.run.kernel, .cores = r.run.cores});
//   page.add_database(store, r.run.cores);  // database load (ASH), top SQL
//   report::write_html(page.data(), out);
//
// The page's data is one JSON document (its shape: docs/report.md, "The
// page's data"), embedded in the HTML with the page's script
// (report/web/report.js), its CSS and uPlot (report/web/node_modules, pinned
// in report/web/package-lock.json), so the page makes no network request and
// opens from file:// or as an e-mail attachment. Untrusted text (process
// names, command lines, SQL, wchan) is data: the page writes it as text.
//
// Charts are binned to at most Options::max_bins overview points a series
// over the analysed span, plus finer bins around stalls (report::Grid),
// whatever the run's length: a bin holds the mean of a rate (CPU %, PSI %,
// load) or a count over its ticks, the peak where one is drawn (max runnable
// tasks), and per-bin latency percentiles.
// Readers throw schema::SqliteError on read failures.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "correlate/correlate.h"
#include "schema/store.h"

namespace stallscope::report {

// The time bins every chart shares: bin i covers [edges_ns[i], edges_ns[i+1]),
// wall clock. Overview bins are bin_ns long; around the stalls (Grid::
// kDetailStalls at most) they are one sample period long (fine_bin_ns), so
// that a stall zoomed into shows its own detail, not two overview points.
struct Grid {
  // Stalls given fine bins, and fine bins per stall at most.
  static constexpr int kDetailStalls = 10;
  static constexpr int kDetailBinsPerStall = 300;
  std::vector<std::int64_t> edges_ns;  // bins() + 1 of them, increasing
  std::int64_t bin_ns = 1;             // the overview bins' length
  std::int64_t fine_bin_ns = 0;        // the bins around stalls; 0: none (every bin is bin_ns)
  int bins() const { return edges_ns.empty() ? 0 : static_cast<int>(edges_ns.size()) - 1; }
  std::int64_t start_ns() const { return edges_ns.empty() ? 0 : edges_ns.front(); }
  std::int64_t end_ns() const { return edges_ns.empty() ? 0 : edges_ns.back(); }
  std::int64_t bin_start_ns(int i) const { return edges_ns[static_cast<std::size_t>(i)]; }
  std::int64_t bin_end_ns(int i) const { return edges_ns[static_cast<std::size_t>(i) + 1]; }
  std::int64_t width_ns(int i) const { return bin_end_ns(i) - bin_start_ns(i); }
  // The bin of a time; nullopt outside the grid.
  std::optional<int> bin_of(std::int64_t t_ns) const;
};

// The grid over a report's analysed span (its windows; without windows the
// run's start to end): overview bins no shorter than one sample period
// (1 ÷ run.hz; 100 ms without sampling), at most max_bins of them; where
// they are longer than two sample periods, the first kDetailStalls stalls
// and their surroundings (3 overview bins and the stall's length each side)
// get bins of one sample period (at most kDetailBinsPerStall a stall).
Grid grid_for(const correlate::Report& report, int max_bins);

struct Options {
  std::string title;     // shown as the page's title: the file name(s)
  std::string run_path;  // the files, as given
  std::optional<std::string> server_path;
  std::optional<std::string> baseline_path;
  int max_bins = 1000;  // overview points per series at most (Grid)
  int top_rows = 15;    // rows per table ranking
};

// One series of a chart: values[i] belongs to bin i; nullopt is a gap.
struct Series {
  std::string label;
  std::vector<std::optional<double>> values;
};

// One timeline chart, drawn by the page from this description.
struct Chart {
  std::string id;     // "throughput", "latency", "aas", "host_cpu:<host>", ...
  std::string title;  // shown above the chart
  std::string unit;   // the y axis
  bool y_log = false;
  bool stacked = false;  // series drawn as stacked areas
  std::vector<Series> series;
  std::vector<std::pair<std::string, double>> lines;  // horizontal reference lines
  std::string note;                                   // a line under the title
};

// The page's data, gathered piece by piece from the files the report reads.
class Page {
 public:
  Page(const correlate::Report& report, Options options);

  // The run's commands line(s) and the rate asked for (-R), shown in the
  // run facts. The command line is as stored: passwords masked.
  void set_command_line(std::string command_line) { command_line_ = std::move(command_line); }
  // Throughput, latency p50/p99 and (-R) schedule lag, from the file's
  // query rows: each query counts in the bin where it was answered. An
  // imported aggregate pgbench log: throughput and mean latency per interval.
  void add_queries(schema::Store& store);
  // The query path's CPU over time — the driver's, the poolers' and
  // proxies', the run's backends' — and their run-queue delay, in cores, as
  // the time accounting counts them per window (correlate::Window::accounting);
  // nothing for a file without an accounting.
  void add_query_path();
  // A host whose samples add_host reads: in a client + server pair its role
  // ("client" or "server") tells the charts apart — the two may be one
  // machine with one name; "" for a single file.
  struct Host {
    std::string role;
    std::string name;  // uname nodename
    std::string kernel;
    int cores = 0;
  };
  // A host's CPU by mode, runnable and D-state tasks, pressure stall
  // information, and CPU by process name (the busiest six, the rest as
  // "other"), from the store's samples — the client's file, or a server file
  // seen through correlate::ServerFileView; and its processes ranked by CPU
  // and by off-CPU time (run-queue delay + D state). Its charts' ids end in
  // ":<role>" in a pair, ":<name>" alone; it is listed in the run facts.
  void add_host(schema::Store& store, const Host& host);
  // Database load as average active sessions by wait class (active sessions
  // per ASH poll, in bins with at least one poll), with a line at `cores`;
  // the top wait events and the top SQL by ASH samples.
  void add_database(schema::Store& store, int cores);
  // A second run to compare with (the report's --baseline): both runs'
  // figures and accounting parts side by side, and their differences in
  // words (report::differences).
  void set_baseline(const correlate::Report& baseline, const correlate::RunComparison& comparison,
                    std::string title);

  nlohmann::json data() const;

 private:
  // facts.rate: {"mode": "fixed" | "closed loop", "target_tps"}, null for a
  // record file.
  nlohmann::json rate_json() const;
  void add_processes(schema::Store& store, const Host& host, const std::string& key,
                     const std::string& on);
  // An aggregate pgbench log (import-pgbench of --aggregate-interval logs):
  // throughput and mean latency per interval.
  void add_aggregate_intervals(schema::Store& store);

  const correlate::Report& report_;
  Options options_;
  Grid grid_;
  std::string command_line_;
  std::vector<Chart> charts_;
  nlohmann::json tables_ = nlohmann::json::object();
  nlohmann::json baseline_ = nullptr;
  nlohmann::json part_labels_ = nlohmann::json::object();  // the baseline's parts in words
  std::vector<Host> hosts_;
};

// How two runs' accounting differs, in sentences: the tps change, the
// latency, then each part whose time per query moved by 5% of the slower
// run's mean latency or whose share of query time moved by 5 points, the
// largest move first ("server_wait:Lock rose from 0.2 to 4 ms a query (2% →
// 40% of query time)."), and a changed verdict.
std::vector<std::string> differences(const correlate::Report& run,
                                     const correlate::Report& baseline,
                                     const correlate::RunComparison& comparison);

// Writes the page: the data JSON (with <, >, & and U+2028/U+2029 escaped, so
// no text in it can close its script element) between uPlot and the page's
// script, under a Content-Security-Policy that forbids every request.
void write_html(const nlohmann::json& data, std::ostream& out);

}  // namespace stallscope::report
