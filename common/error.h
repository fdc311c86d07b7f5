// stallscope::Error — the one error type of the project.
//
// Every library throws Error; tools/main.cpp catches what reaches it and
// maps it to the exit status: kind usage → 2, everything else → 1. The
// other catches do one of three things: add context and throw again (the
// script line an error came from); record the error as data and go on (a
// failed transaction or reconnect attempt, a sampler's failed poll); or
// clean up and throw again (stop the samplers, mark the run failed, check a
// damaged file so the error names the damage).
// Messages read "cannot <verb> <object>: <reason>" and name the file, flag,
// conninfo (masked) or SQL involved, so main can print them on one line.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace stallscope {

enum class ErrorKind {
  usage,     // bad flag, bad input file, bad SQL script: exit 2
  io,        // file system; code = errno
  proc,      // /proc or libproc2; code = errno
  sqlite,    // code = SQLite extended result code
  postgres,  // code = 0; sqlstate() holds the SQLSTATE when the server sent one
  runtime,   // anything else that made the run fail
};

// `text` with each NUL byte written as the four characters \x00.
std::string without_nul(std::string text);

class Error : public std::runtime_error {
 public:
  // A NUL byte in `message` (from an input file) is kept as the text "\x00":
  // what() is a C string, which would end there.
  Error(ErrorKind kind, std::string message, int code = 0, std::string sqlstate = {})
      : std::runtime_error(without_nul(std::move(message))),
        kind_(kind),
        code_(code),
        sqlstate_(std::move(sqlstate)) {}

  ErrorKind kind() const noexcept { return kind_; }
  // errno for io/proc, SQLite extended code for sqlite, 0 otherwise.
  int code() const noexcept { return code_; }
  // Five-character SQLSTATE for postgres errors from the server, else empty.
  const std::string& sqlstate() const noexcept { return sqlstate_; }
  // Process exit status for this error: 2 for usage, 1 otherwise.
  int exit_status() const noexcept { return kind_ == ErrorKind::usage ? 2 : 1; }

 private:
  ErrorKind kind_;
  int code_;
  std::string sqlstate_;
};

// Folds `text` onto one line for a one-line error: inner line breaks become
// "; ", trailing spaces and line breaks go.
// Example: fold_lines("FATAL: no\nDETAIL: x\n") == "FATAL: no; DETAIL: x".
std::string fold_lines(std::string_view text);

// Shorthand: throw Error(ErrorKind::usage, message).
[[noreturn]] void throw_usage(std::string message);

}  // namespace stallscope
