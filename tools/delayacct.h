// `--delayacct` (record and run): turns the kernel.task_delayacct sysctl on
// for the life of the command, so process_sample.blkio_delay_ns (stat field
// 42, delay accounting) is filled, and puts it back at exit.
//
//   auto guard = DelayacctGuard::enable("record");  // prints a warning if it cannot
//   info.delayacct_set = guard.set_by_us() ? 1 : 0;  // run row
//   ...                                               // ~DelayacctGuard restores 0
//
// "Where permitted": when the sysctl is missing or cannot be written (not
// root, read-only /proc/sys) it prints one line to stderr naming the file and
// the reason and goes on without it; that is never an error. When it was on
// already it is left alone.
#pragma once

#include <string>

namespace stallscope::tools {

class DelayacctGuard {
 public:
  // `who` prefixes the warning ("record", "run"); `sysctl_path` is a seam for tests.
  static DelayacctGuard enable(const std::string& who,
                               std::string sysctl_path = "/proc/sys/kernel/task_delayacct");
  DelayacctGuard() = default;
  DelayacctGuard(DelayacctGuard&& other) noexcept;
  DelayacctGuard& operator=(DelayacctGuard&& other) noexcept;
  DelayacctGuard(const DelayacctGuard&) = delete;
  DelayacctGuard& operator=(const DelayacctGuard&) = delete;
  ~DelayacctGuard();  // writes 0 back if this guard turned it on

  // True when this guard switched it from 0 to 1.
  bool set_by_us() const noexcept { return !path_.empty(); }
  // Restores now (idempotent).
  void restore() noexcept;

 private:
  std::string path_;  // non-empty: we set it and must restore it
};

}  // namespace stallscope::tools
