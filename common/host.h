// Facts about this host, read once at the start of a run.
#pragma once

#include <string>

namespace stallscope {

struct HostInfo {
  std::string host;            // uname(2) nodename
  std::string kernel;          // uname(2) release
  int cores = 0;               // sysconf(_SC_NPROCESSORS_ONLN)
  long clock_ticks_per_s = 0;  // sysconf(_SC_CLK_TCK)
};

// Never throws: a failed uname(2) leaves host and kernel empty, a failed
// sysconf(3) gives -1.
HostInfo read_host_info();

}  // namespace stallscope
