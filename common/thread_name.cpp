#include "common/thread_name.h"

#include <pthread.h>

#include <cstring>

namespace stallscope {

void set_thread_name(const char* name) noexcept {
  char buf[16] = {};
  std::strncpy(buf, name, sizeof buf - 1);
  pthread_setname_np(pthread_self(), buf);
}

}  // namespace stallscope
