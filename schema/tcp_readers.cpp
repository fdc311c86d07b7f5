// The reads behind explain's network facts (schema/tcp_readers.h).
#include "schema/tcp_readers.h"

#include "schema/row.h"

namespace stallscope::schema {

std::optional<TcpRttSummary> tcp_rtt_in(Store& store, std::int64_t from_ns, std::int64_t to_ns) {
  if (!detail::table_exists(store, "tcp_sample")) return std::nullopt;
  TcpRttSummary out;
  {
    Cursor st(store.db(),
              "SELECT count(*), count(DISTINCT client_id * 4294967296 + connection), min(rtt_ns) "
              "FROM tcp_sample WHERE time_ns >= ?1 AND time_ns <= ?2");
    st.bind(1, from_ns);
    st.bind(2, to_ns);
    st.step();
    out.samples = st.int64(0);
    out.connections = st.int64(1);
    out.rtt_min_ns = st.int64(2);
  }
  if (out.samples == 0) return std::nullopt;
  // The lower middle row by rtt_ns, then by rttvar_ns.
  for (const char* column : {"rtt_ns", "rttvar_ns"}) {
    const std::string sql = std::string("SELECT ") + column +
                            " FROM tcp_sample WHERE time_ns >= ?1 AND time_ns <= ?2 ORDER BY " +
                            column + " LIMIT 1 OFFSET ?3";
    Cursor st(store.db(), sql.c_str());
    st.bind(1, from_ns);
    st.bind(2, to_ns);
    st.bind(3, (out.samples - 1) / 2);
    st.step();
    (std::string_view(column) == "rtt_ns" ? out.rtt_median_ns : out.rttvar_median_ns) = st.int64(0);
  }
  Cursor st(store.db(),
            "SELECT max(total_retrans) - min(total_retrans) FROM tcp_sample "
            "WHERE time_ns >= ?1 AND time_ns <= ?2 GROUP BY client_id, connection");
  st.bind(1, from_ns);
  st.bind(2, to_ns);
  while (st.step()) out.retransmits += st.int64(0);
  return out;
}

std::optional<TcpStackTotals> tcp_stack_totals(Store& store, std::int64_t after_ns,
                                               std::int64_t until_ns) {
  if (!detail::table_exists(store, "tcp_stack_sample")) return std::nullopt;
  Cursor st(store.db(),
            "SELECT count(t.delayed_acks), sum(CASE WHEN t.delayed_acks IS NOT NULL THEN "
            "t.span_ns END), sum(t.delayed_acks), sum(t.delayed_ack_locked), "
            "sum(t.delayed_ack_lost), sum(t.timeouts), sum(t.loss_probes), "
            "sum(t.slow_start_retrans), sum(t.fast_retrans), sum(t.syn_retrans), "
            "sum(t.zero_window_drop), sum(t.to_zero_window_adv), sum(t.want_zero_window_adv), "
            "sum(t.rcvq_drop), sum(t.listen_overflows), sum(t.listen_drops), "
            "sum(t.retrans_segs), sum(t.out_segs), sum(t.in_segs), sum(t.in_errs), "
            "sum(t.out_rsts) FROM tcp_stack_sample t JOIN sample s ON s.sample_id = t.sample_id "
            "WHERE s.time_ns > ?1 AND s.time_ns <= ?2");
  st.bind(1, after_ns);
  st.bind(2, until_ns);
  st.step();
  if (st.int64(0) == 0) return std::nullopt;
  // int64() reads NULL as 0.
  TcpStackTotals t;
  int i = 0;
  for (std::int64_t* v : {&t.rows,
                          &t.span_ns,
                          &t.delayed_acks,
                          &t.delayed_ack_locked,
                          &t.delayed_ack_lost,
                          &t.timeouts,
                          &t.loss_probes,
                          &t.slow_start_retrans,
                          &t.fast_retrans,
                          &t.syn_retrans,
                          &t.zero_window_drop,
                          &t.to_zero_window_adv,
                          &t.want_zero_window_adv,
                          &t.rcvq_drop,
                          &t.listen_overflows,
                          &t.listen_drops,
                          &t.retrans_segs,
                          &t.out_segs,
                          &t.in_segs,
                          &t.in_errs,
                          &t.out_rsts}) {
    *v = st.int64(i++);
  }
  return t;
}

}  // namespace stallscope::schema
