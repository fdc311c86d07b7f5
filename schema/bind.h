// Private to schema/: binding a value that may be missing. An empty
// std::optional binds SQL NULL (never 0 as a stand-in); integers bind as
// INTEGER, floating point as REAL, strings as TEXT.
//
//   detail::bind_opt(statement, 3, row.latency_ns);  // NULL when absent
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include <SQLiteCpp/Statement.h>

#include "schema/row.h"

namespace stallscope::schema::detail {

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
