// The page's database side (report.h Page::add_database): the database load
// chart (average active sessions by wait class), the top wait events and
// the top SQL, from one pass over the ASH rows.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"
#include "report/detail.h"
#include "report/report.h"
#include "schema/ash_tick_readers.h"
#include "schema/run_reader.h"
#include "schema/sample_readers.h"

namespace stallscope::report {
namespace {

using common::seconds;
using detail::keep;
using detail::round_sig;
using detail::series;

// One statement's ASH samples: all, on CPU, and by wait ("Class:Event").
struct SqlSums {
  std::int64_t samples = 0, cpu = 0;
  std::map<std::string, std::int64_t> waits;
};

// The ASH rows in the grid's bins, counted as the load chart and the tables
// need them.
struct AshScan {
  std::vector<std::int64_t> polls;  // per bin
  std::int64_t total_polls = 0;
  std::int64_t active = 0;  // sessions counted as load, all polls
  // Wait classes (CPU: active without a wait event) → sessions per bin.
  std::map<std::string, std::vector<std::int64_t>, std::less<>> by_class;
  std::map<std::pair<std::string, std::string>, std::int64_t> by_event;  // (class, event)
  std::map<std::int64_t, SqlSums> by_sql;                                // query_text_id
};

AshScan scan_ash(schema::Store& store, const Grid& grid) {
  const int n = grid.bins();
  const auto from_ns = grid.start_ns();
  const auto to_ns = grid.end_ns();
  AshScan scan;
  scan.polls.assign(static_cast<std::size_t>(n), 0);
  {
    schema::AshPolls p(store, from_ns, to_ns - 1);
    for (schema::AshPoll poll; p.next(poll);) {
      if (const auto b = grid.bin_of(poll.time_ns)) {
        ++scan.polls[*b];
        ++scan.total_polls;
      }
    }
  }
  if (scan.total_polls == 0) return scan;
  schema::AshRows rows(store, from_ns, to_ns, false);
  for (schema::AshRow row; rows.next(row);) {
    const auto b = grid.bin_of(row.time_ns);
    if (!b) continue;
    const auto state = row.state;
    const auto type = row.wait_event_type;
    // Database load counts active sessions; background processes (no
    // state) count unless idle in their main loop (Activity).
    const bool counted = state ? *state == "active" : type.value_or("") != "Activity";
    if (!counted) continue;
    ++scan.active;
    const std::string cls = type ? std::string(*type) : std::string("CPU");
    auto c = scan.by_class.find(cls);
    if (c == scan.by_class.end())
      c = scan.by_class.emplace(cls, std::vector<std::int64_t>(static_cast<std::size_t>(n))).first;
    ++c->second[*b];
    const std::string event = type ? std::string(row.wait_event.value_or("")) : "";
    ++scan.by_event[{cls, event}];
    if (const auto q = row.query_text_id) {
      auto& s = scan.by_sql[*q];
      ++s.samples;
      if (!type) {
        ++s.cpu;
      } else {
        ++s.waits[cls + ":" + event];
      }
    }
  }
  return scan;
}

// Average active sessions per bin by wait class, CPU at the bottom, with the
// cores as a line.
Chart load_chart(const AshScan& scan, int bins, int cores) {
  Chart aas{
      .id = "aas", .title = "Database load", .unit = "average active sessions", .stacked = true};
  std::vector<std::pair<std::string, std::int64_t>> classes;
  for (const auto& [cls, per_bin] : scan.by_class) {
    std::int64_t sum = 0;
    for (auto v : per_bin) sum += v;
    classes.emplace_back(cls, sum);
  }
  std::sort(classes.begin(), classes.end(), [](const auto& a, const auto& b) {
    if ((a.first == "CPU") != (b.first == "CPU")) return a.first == "CPU";
    return a.second > b.second;
  });
  for (const auto& [cls, sum] : classes) {
    auto s = series(cls, bins);
    const auto& per_bin = scan.by_class.find(cls)->second;
    for (int i = 0; i < bins; ++i)
      if (scan.polls[i] > 0)
        s.values[i] =
            round_sig(static_cast<double>(per_bin[i]) / static_cast<double>(scan.polls[i]));
    aas.series.push_back(std::move(s));
  }
  aas.lines.emplace_back("cores", cores);
  aas.note = fmt::format(
      "active sessions per ASH poll by wait class (CPU: active, no wait "
      "event); above the {}-core line sessions queue for CPU or wait",
      cores);
  return aas;
}

// The top wait events: samples, average active sessions, share of the load.
nlohmann::json wait_events_table(const AshScan& scan, int top_rows) {
  const auto total_polls_d = static_cast<double>(scan.total_polls);
  const auto active_d = std::max<double>(1, static_cast<double>(scan.active));
  std::vector<std::pair<std::pair<std::string, std::string>, std::int64_t>> events(
      scan.by_event.begin(), scan.by_event.end());
  std::sort(events.begin(), events.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  auto ev = nlohmann::json::array();
  for (std::size_t i = 0; i < events.size() && i < static_cast<std::size_t>(top_rows); ++i) {
    const auto& [key, count] = events[i];
    ev.push_back(
        {{"wait_event_type", key.first},
         {"wait_event", key.second.empty() ? nlohmann::json(nullptr) : nlohmann::json(key.second)},
         {"samples", count},
         {"aas", round_sig(static_cast<double>(count) / total_polls_d)},
         {"share", round_sig(static_cast<double>(count) / active_d)}});
  }
  return ev;
}

// One row per statement: texts stored apart (one seen before the server
// computed its query_id, say) are one when their text or query_id is.
struct Statement {
  std::optional<std::int64_t> query_id;
  std::string query;
  SqlSums sums;
  std::int64_t text_samples = 0;  // of the text shown
};

std::vector<Statement> merge_statements(schema::Store& store,
                                        const std::map<std::int64_t, SqlSums>& by_sql) {
  std::vector<Statement> statements;
  std::map<std::string, std::size_t> by_text;
  std::map<std::int64_t, std::size_t> by_query_id;
  for (const auto& [id, sums] : by_sql) {
    auto entry = schema::query_text_entry(store, id).value_or(schema::QueryTextEntry{});
    std::optional<std::size_t> at;
    if (auto t = by_text.find(entry.query); t != by_text.end()) at = t->second;
    if (entry.query_id)
      if (auto q = by_query_id.find(*entry.query_id); q != by_query_id.end()) at = q->second;
    if (!at) {
      at = statements.size();
      statements.push_back({entry.query_id, entry.query, {}, 0});
    }
    auto& st = statements[*at];
    by_text.emplace(entry.query, *at);
    if (entry.query_id) {
      by_query_id.emplace(*entry.query_id, *at);
      if (!st.query_id) st.query_id = entry.query_id;
    }
    st.sums.samples += sums.samples;
    st.sums.cpu += sums.cpu;
    for (const auto& [w, c] : sums.waits) st.sums.waits[w] += c;
    if (sums.samples > st.text_samples) {
      st.text_samples = sums.samples;
      st.query = entry.query;
    }
  }
  std::sort(statements.begin(), statements.end(),
            [](const auto& a, const auto& b) { return a.sums.samples > b.sums.samples; });
  return statements;
}

// The top SQL: samples, database time, share of the load, CPU share, top wait.
nlohmann::json sql_table(const std::vector<Statement>& statements, std::int64_t active,
                         std::int64_t period_ns, int top_rows) {
  const auto active_d = std::max<double>(1, static_cast<double>(active));
  auto sj = nlohmann::json::array();
  for (std::size_t i = 0; i < statements.size() && i < static_cast<std::size_t>(top_rows); ++i) {
    const auto& st = statements[i];
    std::optional<std::string> top_wait;
    std::int64_t best = 0;
    for (const auto& [w, c] : st.sums.waits)
      if (c > best) best = c, top_wait = w;
    sj.push_back(
        // As text: a 64-bit query_id does not fit a JavaScript number.
        {{"query_id",
          st.query_id ? nlohmann::json(std::to_string(*st.query_id)) : nlohmann::json(nullptr)},
         {"query", st.query},
         {"samples", st.sums.samples},
         {"db_time_s", round_sig(seconds(st.sums.samples * period_ns))},
         {"share", round_sig(static_cast<double>(st.sums.samples) / active_d)},
         {"cpu_share",
          round_sig(static_cast<double>(st.sums.cpu) / static_cast<double>(st.sums.samples))},
         {"top_wait", top_wait ? nlohmann::json(*top_wait) : nlohmann::json(nullptr)}});
  }
  return sj;
}

}  // namespace

void Page::add_database(schema::Store& store, int cores) {
  const auto scan = scan_ash(store, grid_);
  if (scan.total_polls == 0) {
    tables_["wait_events_note"] =
        "no ASH polls: the file was recorded without a database "
        "connection (--pg), or the server file holds none";
    tables_["sql_note"] = tables_["wait_events_note"];
    return;
  }
  keep(charts_, load_chart(scan, grid_.bins(), cores));
  tables_["wait_events"] = wait_events_table(scan, options_.top_rows);
  tables_["sql"] = sql_table(merge_statements(store, scan.by_sql), scan.active,
                             report_.ash_period_ns.value_or(0), options_.top_rows);
  if (tables_["sql"].empty())
    tables_["sql_note"] = "ASH stored no query text for the active sessions";
}

}  // namespace stallscope::report
