// Client + server explain (correlate::explain_pair): a server's record file
// read through the client run file's connection. The server file is
// attached as `srv`, and each table explain reads from it is shadowed by a
// temporary view whose wall-clock columns are moved to the client's clock,
// so that explain's readers see the server's host, processes and ASH on the
// client's time line.
//
//   auto offsets = schema::clock_offsets(client);
//   schema::AttachedServerFile server(client, "server.db");   // ATTACH
//   auto span = server.sample_span();                         // server clock
//   server.shadow_tables(shift);                              // temp views
//   ... explain(client, ...) ...
//   // ~AttachedServerFile: drops the views, DETACH
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schema/store.h"

namespace stallscope::schema {

// One clock_offset row of the run file: the driver's estimate of the
// server's clock (offset = server clock − client clock).
struct ClockOffset {
  std::int64_t time_ns = 0;  // client clock
  std::int64_t offset_ns = 0;
  std::int64_t uncertainty_ns = 0;
};
// The store's clock_offset rows in time order (the main file's, not an
// attached one's).
std::vector<ClockOffset> clock_offsets(Store& store);

// A piecewise shift of server times to the client's clock: server time t
// becomes t − offsets_ns[i], i the first index with t < boundaries_ns[i] (the
// last offset past every boundary). No offsets: times stay unchanged.
// offsets_ns has one entry more than boundaries_ns, or both are empty.
struct ClockShift {
  std::vector<std::int64_t> boundaries_ns;  // server clock, increasing
  std::vector<std::int64_t> offsets_ns;
};

// The first and last sample tick's time_ns of a file.
struct SampleSpan {
  std::int64_t first_ns = 0;
  std::int64_t last_ns = 0;
};

class AttachedServerFile {
 public:
  // Attaches `path` to the store's connection as `srv`. Throws
  // schema::SqliteError (store.h) when it cannot be attached.
  AttachedServerFile(Store& store, const std::string& path);
  // Drops the views shadow_tables() made and detaches; never throws.
  ~AttachedServerFile();
  AttachedServerFile(const AttachedServerFile&) = delete;
  AttachedServerFile& operator=(const AttachedServerFile&) = delete;

  // First and last srv.sample time_ns (server clock); nullopt without
  // samples. Throws schema::SqliteError when srv has no such table.
  std::optional<SampleSpan> sample_span();
  // srv.run's host and cores. Throw schema::SqliteError when srv has no run
  // table.
  std::string host();
  std::string kernel();
  int cores();
  // Shadows each server table explain reads (those srv has) by a temporary
  // view of it, its wall-clock columns shifted by `shift`.
  void shadow_tables(const ClockShift& shift);

 private:
  void shadow_tables_sqlite(const ClockShift& shift);
  Store& store_;
};

}  // namespace stallscope::schema
