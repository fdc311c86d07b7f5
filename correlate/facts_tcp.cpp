// The network facts (correlate/network.h): the driver connections' TCP_INFO
// and the host's TCP counters over the analysed span, and the server's
// address as the run's conninfo names it.
#include "common/conninfo.h"
#include "correlate/detail.h"
#include "correlate/network.h"

namespace stallscope::correlate::detail {
namespace {

// "host:port" from the conninfo (hostaddr before host; port 5432 when not
// given); a Unix-socket directory alone; "" without a host.
std::string peer_of(const std::string& conninfo) {
  auto host = conninfo_value(conninfo, "hostaddr");
  if (!host || host->empty()) host = conninfo_value(conninfo, "host");
  if (!host || host->empty()) return "";
  if (host->starts_with('/') || host->starts_with('@')) return *host;
  const auto port = conninfo_value(conninfo, "port");
  return *host + ":" + (port && !port->empty() ? *port : std::string("5432"));
}

}  // namespace

NetworkFacts network_facts(std::optional<schema::TcpRttSummary> rtt,
                           std::optional<schema::TcpStackTotals> stack,
                           const std::optional<std::string>& conninfo) {
  NetworkFacts n{.rtt = std::move(rtt), .stack = std::move(stack)};
  if (conninfo) n.peer = peer_of(*conninfo);
  return n;
}

}  // namespace stallscope::correlate::detail
