#include "driver/epoll.h"

#include <fcntl.h>

#include <cerrno>
#include <utility>

#include <gtest/gtest.h>

namespace stallscope::driver::detail {
namespace {

bool is_open(int fd) {
  return fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

TEST(Epoll, ClosesItsDescriptorOnDestruction) {
  int fd = -1;
  {
    Epoll e;
    fd = e.fd();
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(is_open(fd));
    EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  }
  EXPECT_FALSE(is_open(fd));
}

TEST(Epoll, MoveEmptiesTheSource) {
  Epoll a;
  const int fd = a.fd();
  Epoll b(std::move(a));
  EXPECT_EQ(a.fd(), -1);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(b.fd(), fd);
  Epoll c;
  const int other = c.fd();
  c = std::move(b);
  EXPECT_EQ(b.fd(), -1);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.fd(), fd);
  EXPECT_FALSE(is_open(other));  // the descriptor c held is closed
  EXPECT_TRUE(is_open(fd));
}

}  // namespace
}  // namespace stallscope::driver::detail
