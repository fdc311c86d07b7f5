// What explain's passes read, without the run file: a pass takes its rows as
// a RowSource (a stream) or a vector, and what it looks up by key as a
// Lookup; explain() (explain.cpp) binds each to a schema/ reader, and a unit
// test to values (rows_of, a lambda over a map). No pass holds the Store.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace stallscope::correlate::detail {

// A stream of rows: each call fills `row` and returns true, or returns false
// at the end (then it is not called again).
template <class Row>
using RowSource = std::function<bool(Row&)>;

// The rows of a schema/ reader: anything with `bool next(Row&)`, such as
// schema::HostTicks. The reader must outlive the source.
template <class Row, class Reader>
RowSource<Row> rows_from(Reader& reader) {
  return [&reader](Row& row) { return reader.next(row); };
}

// The rows of a reader the source owns (a reader opened for one pass).
template <class Row, class Reader>
RowSource<Row> rows_owned(std::shared_ptr<Reader> reader) {
  return [reader = std::move(reader)](Row& row) { return reader->next(row); };
}

// The rows of a vector, in order (the vector must outlive the source).
template <class Row>
RowSource<Row> rows_of(const std::vector<Row>& rows) {
  return [&rows, i = std::size_t{0}](Row& row) mutable {
    if (i == rows.size()) return false;
    row = rows[i++];
    return true;
  };
}

// A lookup by key, such as a query text by its id: explain binds it to a
// schema/ reader's query, a test to a map.
template <class Value, class... Key>
using Lookup = std::function<Value(Key...)>;

}  // namespace stallscope::correlate::detail
