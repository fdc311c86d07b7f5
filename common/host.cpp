#include "common/host.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>

namespace stallscope {
namespace {

// The first line of a small file, "" when it cannot be read.
std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return line;
}

}  // namespace

HostInfo read_host_info() {
  HostInfo info;
  utsname u{};
  if (uname(&u) == 0) {
    info.host = u.nodename;
    info.kernel = u.release;
  }
  info.machine_id = first_line("/etc/machine-id");
  info.boot_id = first_line("/proc/sys/kernel/random/boot_id");
  info.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  info.clock_ticks_per_s = sysconf(_SC_CLK_TCK);
  return info;
}

}  // namespace stallscope
