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
