// The correlator: reads a run file, lines up query timing with host and
// database samples, and explains where the client time went.
//
//   auto store = schema::Store::open_readonly("run.db");
//   correlate::Report r = correlate::explain(store, {.window_ns = 1'000'000'000});
//   correlate::render_text(r, std::cout);
//   std::cout << correlate::to_json(r).dump(2);
//
// (The Report type and its parts are declared in this header by the
// correlate implementation.)
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>

#include <nlohmann/json.hpp>

#include "schema/store.h"

namespace stallscope::correlate {

struct ExplainOptions {
  // Time windows of this length (--window, default 1 s) ...
  std::int64_t window_ns = 1'000'000'000;
  // ... or, when set, windows of this many consecutive queries (--every N).
  std::optional<std::int64_t> every_queries;
};

struct Report;  // defined below by the implementation

// Reads the run file and builds the report. Throws Error(usage) for a file
// that holds no run, Error(sqlite) for read failures.
Report explain(schema::Store& store, const ExplainOptions& options);
// Human-readable text: run header, window table, time accounting, findings.
void render_text(const Report& report, std::ostream& out);
// {"run":…, "accounting":…, "windows":[…], "findings":[…]}; findings ordered by score.
nlohmann::json to_json(const Report& report);

}  // namespace stallscope::correlate
