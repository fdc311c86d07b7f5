// common::Fd and common::Dir: ownership moves, and the handle is closed
// exactly once, by whoever owns it last.
#include "common/fd.h"

#include <fcntl.h>

#include <cerrno>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "support/test_support.h"

namespace stallscope::common {
namespace {

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

int open_null() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

TEST(Fd, DefaultIsEmpty) {
  Fd fd;
  EXPECT_FALSE(fd);
  EXPECT_EQ(fd.get(), -1);
}

TEST(Fd, FailedOpenIsEmpty) {
  Fd fd(::open("/nonexistent/stallscope", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(errno, ENOENT);
  EXPECT_FALSE(fd);
  EXPECT_EQ(fd.get(), -1);
}

TEST(Fd, ClosesFileInDtor) {
  int raw = -1;
  {
    Fd fd(open_null());
    raw = fd.get();
    EXPECT_TRUE(fd);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(Fd, MoveCtorEmptiesTheSource) {
  Fd a(open_null());
  const int raw = a.get();
  Fd b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the state after a move is the point
  EXPECT_EQ(a.get(), -1);
  EXPECT_EQ(b.get(), raw);
  EXPECT_TRUE(is_open(raw));
}

TEST(Fd, MoveAssignClosesTheTargetsFileAndEmptiesTheSource) {
  Fd a(open_null());
  Fd b(open_null());
  const int raw_a = a.get();
  const int raw_b = b.get();
  b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), raw_a);
  EXPECT_TRUE(is_open(raw_a));
  EXPECT_FALSE(is_open(raw_b));
}

TEST(Fd, ReleaseGivesUpOwnership) {
  int raw = -1;
  {
    Fd fd(open_null());
    raw = fd.release();
    EXPECT_FALSE(fd);
  }
  EXPECT_TRUE(is_open(raw));
  ::close(raw);
}

TEST(Fd, ResetClosesAndAdopts) {
  Fd fd(open_null());
  const int first = fd.get();
  const int second = open_null();
  fd.reset(second);
  EXPECT_FALSE(is_open(first));
  EXPECT_EQ(fd.get(), second);
  fd.reset();
  EXPECT_FALSE(fd);
  EXPECT_FALSE(is_open(second));
}

TEST(Dir, ListsEntriesAndClosesInDtor) {
  test::TempDir tmp;
  std::ofstream(tmp.path() / "a") << "x";
  std::ofstream(tmp.path() / "b") << "y";
  int raw = -1;
  std::set<std::string> names;
  {
    Dir dir(::opendir(tmp.path().c_str()));
    ASSERT_TRUE(dir);
    raw = ::dirfd(dir.get());
    EXPECT_TRUE(is_open(raw));
    while (const dirent* e = dir.read()) names.insert(e->d_name);
  }
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "a", "b"}));
  EXPECT_FALSE(is_open(raw));
}

TEST(Dir, FailedOpenIsEmpty) {
  Dir dir(::opendir("/nonexistent/stallscope"));
  EXPECT_EQ(errno, ENOENT);
  EXPECT_FALSE(dir);
  EXPECT_EQ(dir.get(), nullptr);
}

TEST(Dir, MoveCtorEmptiesTheSource) {
  Dir a(::opendir("/"));
  DIR* raw = a.get();
  ASSERT_NE(raw, nullptr);
  Dir b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), raw);
}

TEST(Dir, MoveAssignClosesTheTargetsStream) {
  Dir a(::opendir("/"));
  Dir b(::opendir("/"));
  const int raw_b = ::dirfd(b.get());
  DIR* raw_a = a.get();
  b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), raw_a);
  EXPECT_FALSE(is_open(raw_b));
}

TEST(Dir, ReleaseGivesUpOwnership) {
  DIR* raw = nullptr;
  {
    Dir dir(::opendir("/"));
    raw = dir.release();
    EXPECT_FALSE(dir);
  }
  ASSERT_NE(raw, nullptr);
  EXPECT_TRUE(is_open(::dirfd(raw)));
  ::closedir(raw);
}

}  // namespace
}  // namespace stallscope::common
