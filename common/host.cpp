#include "common/host.h"

#include <sys/utsname.h>
#include <unistd.h>

namespace stallscope {

HostInfo read_host_info() {
  HostInfo info;
  utsname u{};
  if (uname(&u) == 0) {
    info.host = u.nodename;
    info.kernel = u.release;
  }
  info.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  info.clock_ticks_per_s = sysconf(_SC_CLK_TCK);
  return info;
}

}  // namespace stallscope
