// Writing what the user named: an output file (whole or not at all, never
// over one of the command's inputs, never through a planted symlink), and
// standard output and error (every write checked; a reader that went away
// ends a run as SIGINT does).
//
//   common::refuse_output_that_is_an_input(o.output_path, o.paths);
//   common::write_whole_file("report.html", html);  // mode 0600, renamed into place
//   common::print_stderr("warning: {}\n", what);     // never throws
//   …
//   common::check_standard_output();                 // in main, at the end
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace stallscope::common {

// Whether paths `a` and `b` name one file: the same st_dev and st_ino
// (stat(2), following symbolic links). False when either cannot be stat'ed.
bool same_file(const std::string& a, const std::string& b);

// Throws Error(usage) "cannot write OUT: it is the input IN" when `output`
// names the same file (same device and inode) as one of `inputs`, and
// "cannot write OUT: it is the -wal file of the input IN" when it is an
// input's -wal, -shm or -journal (by inode, or by name before it exists):
// the command would destroy what it reads.
void refuse_output_that_is_an_input(const std::string& output,
                                    const std::vector<std::string>& inputs);

// Writes `text` to `path` whole or not at all:
//   - a regular file, or none yet: through a temporary file made with
//     mkstemp(3) in the same directory ("PATH.tmp.XXXXXX": O_EXCL, mode
//     0600, so a symlink planted there is never followed), written, synced
//     and renamed over `path`: the result has mode 0600;
//   - a character device or a FIFO (/dev/null, a named pipe): opened and
//     written directly, never replaced by a regular file;
//   - a directory, block device or socket: refused.
// Throws Error(usage) "cannot write PATH: is a directory" (…block device,
// socket) or for a directory that cannot be written, Error(io) "cannot
// write PATH: <reason>" when a write fails; the temporary file is removed.
void write_whole_file(const std::string& path, std::string_view text);

// Whether standard output or standard error is a pipe or socket whose reader
// has gone (poll(2) reports POLLERR or POLLHUP): a write to it would fail
// with EPIPE. False for files, terminals and devices.
bool standard_output_closed() noexcept;

// Writes `text` on standard error, never throwing (a failed write is lost);
// an EPIPE requests a stop (common/stop.h request_stop_on_broken_pipe), so a
// run whose stderr is piped into `head` ends as on SIGINT.
void write_stderr(std::string_view text) noexcept;

// fmt::print(stderr, …) that never throws: see write_stderr.
template <typename... T>
void print_stderr(fmt::format_string<T...> format, T&&... args) noexcept {
  try {
    write_stderr(fmt::format(format, std::forward<T>(args)...));
  } catch (...) {
    // Formatting ran out of memory: the line is lost, as a failed write.
  }
}

// When file descriptor 1 was closed at the start (`cmd >&-`), opens
// /dev/null read-only on it, so that no file the process opens later lands
// on it, and every write to standard output fails as on a closed descriptor
// (EBADF), to be reported. Call once, first thing in main.
void hold_closed_standard_output() noexcept;

// Writes `text` on standard output (after what C's stdout holds) and
// throws Error(io) "cannot write standard output: <strerror>" when the
// write fails, e.g. "No space left on device" for `> /dev/full`, "Bad file
// descriptor" for `>&-`.
void write_standard_output(std::string_view text);

// Flushes standard output (std::cout and C's stdout) and throws Error(io)
// "cannot write standard output: <reason>" (errno) when that or an earlier
// write to it failed.
void check_standard_output();

}  // namespace stallscope::common
