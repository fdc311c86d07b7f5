// FileCheck: schema::quick_check on a thread of its own (correlate.h).
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "common/printable.h"
#include "correlate/correlate.h"
#include "schema/store.h"

namespace stallscope::correlate {

struct FileCheck::State {
  std::string path;
  std::vector<std::string> problems;
  std::exception_ptr error;
  std::thread thread;  // joined by wait() or the destructor
};

FileCheck::FileCheck(std::string path) : state_(std::make_unique<State>()) {
  state_->path = std::move(path);
  State* state = state_.get();
  state_->thread = std::thread([state] {
    try {
      state->problems = schema::quick_check(state->path);
    } catch (...) {
      state->error = std::current_exception();
    }
  });
}

FileCheck::FileCheck(FileCheck&&) noexcept = default;

FileCheck::~FileCheck() {
  if (state_ && state_->thread.joinable()) state_->thread.join();
}

void FileCheck::wait() {
  if (state_->thread.joinable()) state_->thread.join();
  if (state_->error) std::rethrow_exception(state_->error);
  if (state_->problems.empty()) return;
  throw Error(ErrorKind::usage,
              fmt::format("cannot read {}: the file is damaged (SQLite's integrity check: {}{})",
                          state_->path, common::printable(state_->problems.front()),
                          state_->problems.size() > 1 ? "; …" : ""));
}

}  // namespace stallscope::correlate
