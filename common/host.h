// Facts about this host, read once at the start of a run.
#pragma once

#include <string>

namespace stallscope {

struct HostInfo {
  std::string host;    // uname(2) nodename (a UTS namespace's own)
  std::string kernel;  // uname(2) release
  // /etc/machine-id (the installation) and /proc/sys/kernel/random/boot_id
  // (this boot of the kernel), 32 and 36 characters; "" when unreadable.
  // Hosts that share one kernel (containers, namespaces) share both; their
  // host names tell them apart.
  std::string machine_id;
  std::string boot_id;
  int cores = 0;               // sysconf(_SC_NPROCESSORS_ONLN)
  long clock_ticks_per_s = 0;  // sysconf(_SC_CLK_TCK)
};

// Never throws: a failed uname(2) leaves host and kernel empty, an unreadable
// id file its id empty, a failed sysconf(3) gives -1.
HostInfo read_host_info();

}  // namespace stallscope
