#include "tools/delayacct.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "common/fd.h"
#include "common/output.h"

namespace stallscope::tools {
namespace {

// Writes `value` to the sysctl file; returns 0 or an errno.
int write_sysctl(const std::string& path, const char* value) {
  const common::Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return errno;
  if (::write(fd.get(), value, std::strlen(value)) < 0) return errno;
  return 0;
}

}  // namespace

DelayacctGuard DelayacctGuard::enable(const std::string& who, std::string sysctl_path) {
  DelayacctGuard guard;
  char buf[8] = {};
  ssize_t n = 0;
  {
    const common::Fd fd(::open(sysctl_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      common::print_stderr("{}: --delayacct: cannot read {}: {}; blkio_delay_ns stays NULL\n", who,
                           sysctl_path, std::strerror(errno));
      return guard;
    }
    n = ::read(fd.get(), buf, sizeof buf - 1);
  }                                          // closed before the sysctl is written
  if (n > 0 && buf[0] == '1') return guard;  // already on: leave it alone
  if (int err = write_sysctl(sysctl_path, "1"); err != 0) {
    common::print_stderr("{}: --delayacct: cannot turn on {}: {}; blkio_delay_ns stays NULL\n", who,
                         sysctl_path, std::strerror(err));
    return guard;
  }
  guard.path_ = std::move(sysctl_path);
  return guard;
}

DelayacctGuard::DelayacctGuard(DelayacctGuard&& other) noexcept
    : path_(std::exchange(other.path_, {})) {}

DelayacctGuard& DelayacctGuard::operator=(DelayacctGuard&& other) noexcept {
  if (this != &other) {
    restore();
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

DelayacctGuard::~DelayacctGuard() {
  restore();
}

void DelayacctGuard::restore() noexcept {
  if (path_.empty()) return;
  write_sysctl(path_, "0");
  path_.clear();
}

}  // namespace stallscope::tools
