// Private to schema/: binding a value that may be missing, running a bound
// INSERT, and SQLite's message for a failed write. An empty std::optional
// binds SQL NULL (never 0 as a stand-in); integers bind as INTEGER,
// floating point as REAL, strings as TEXT.
//
//   detail::bind_opt(statement, 3, row.latency_ns);  // NULL when absent
//   detail::run_row(statement);                      // exec, reset, clear
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>

#include "schema/row.h"

namespace stallscope::schema::detail {

// Runs a bound statement once and makes it ready for the next row.
inline void run_row(SQLite::Statement& st) {
  st.exec();
  st.reset();
  st.clearBindings();
}

// SQLite's message, with the system error underneath when there is one,
// e.g. "disk I/O error (No space left on device)". SQLite keeps it only for
// some failures (not, as measured, for a WAL write past RLIMIT_FSIZE at
// COMMIT: "disk I/O error" alone). (store.cpp)
std::string with_system_error(SQLite::Database& db, const std::string& message);

template <typename T>
void bind_opt(SQLite::Statement& st, int index, const std::optional<T>& v) {
  if (!v) {
    st.bind(index);
  } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::string>) {
    st.bind(index, *v);
  } else if constexpr (std::is_floating_point_v<T>) {
    st.bind(index, static_cast<double>(*v));
  } else {
    st.bind(index, static_cast<std::int64_t>(*v));
  }
}

// The same for a Cursor (integers only: the columns Cursor binds are *_ns
// and ids).
template <typename T>
void bind_opt(Cursor& st, int index, const std::optional<T>& v) {
  if (v) {
    st.bind(index, static_cast<std::int64_t>(*v));
  } else {
    st.bind_null(index);
  }
}

}  // namespace stallscope::schema::detail
