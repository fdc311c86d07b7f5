#include "common/error.h"

namespace stallscope {

void throw_usage(std::string message) {
  throw Error(ErrorKind::usage, std::move(message));
}

}  // namespace stallscope
