// Worker's TCP_INFO samples (driver/worker.h): round-trip time and
// retransmissions of each client's TCP connection, read by the thread that
// owns the socket.
#include <libpq-fe.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/units.h"
#include "driver/worker.h"

namespace stallscope::driver::detail {

// TCP_INFO of each connected TCP socket of this thread (unix sockets: none).
void Worker::sample_tcp(std::int64_t) {
  std::int64_t wall_ns = 0;
  for (Client* c : clients_) {
    if (!c->conn || c->state == ClientState::done || c->state == ClientState::resetting ||
        c->state == ClientState::backoff) {
      continue;
    }
    int fd = PQsocket(c->conn.get());
    if (fd < 0) continue;
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0 ||
        (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)) {
      continue;
    }
    tcp_info info{};
    socklen_t info_len = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) != 0) continue;
    if (wall_ns == 0) wall_ns = wall_now_ns();
    pending_.tcp_samples.push_back(schema::TcpSampleRow{
        .time_ns = wall_ns,
        .client_id = c->client_id,
        .connection = c->connection,
        .rtt_ns = static_cast<std::int64_t>(info.tcpi_rtt) * common::kNsPerUs,
        .rttvar_ns = static_cast<std::int64_t>(info.tcpi_rttvar) * common::kNsPerUs,
        .total_retrans = static_cast<std::int64_t>(info.tcpi_total_retrans),
        .unacked = static_cast<std::int64_t>(info.tcpi_unacked),
    });
  }
}

}  // namespace stallscope::driver::detail
