// What a process asleep in poll, select, epoll_wait or a blocking read waits
// on (sampler/poll_wait.h): the text parsers, and PollWaitReader on real
// children of this test blocked in each call.
#include "sampler/poll_wait.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

namespace stallscope::sampler::detail {
namespace {

TEST(PollWait, ParsesABlockedSyscallLine) {
  const auto s =
      parse_syscall("232 0x3 0x7ffd5e3c1a00 0x400 0xa 0x0 0x0 0x7ffd5e3c19c8 0x7f3b1c2e8e2e\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->number, 232);
  EXPECT_EQ(s->args[0], 3u);
  EXPECT_EQ(s->args[1], 0x7ffd5e3c1a00u);
  EXPECT_EQ(s->args[3], 10u);
  EXPECT_FALSE(parse_syscall("running\n"));
  EXPECT_FALSE(parse_syscall("-1 0x7ffd5e3c19c8 0x7f3b1c2e8e2e\n"));
  EXPECT_FALSE(parse_syscall("7 0x1 0x2\n"));  // too few arguments
  EXPECT_FALSE(parse_syscall("7 0x1 0x2 zz 0x0 0x0 0x0 0x0 0x0\n"));
}

TEST(PollWait, ParsesEpollTargetFds) {
  const std::string fdinfo =
      "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n"
      "tfd:        5 events:       19 data:                5  pos:0 ino:2b5a sdev:8\n"
      "tfd:       12 events:       19 data:                c  pos:0 ino:2b5b sdev:8\n";
  EXPECT_EQ(parse_epoll_tfds(fdinfo), (std::vector<int>{5, 12}));
  EXPECT_TRUE(parse_epoll_tfds("pos:\t0\nflags:\t02\n").empty());
}

TEST(PollWait, TellsTimedFromUntimedCalls) {
  BlockedSyscall s;
  s.number = SYS_epoll_pwait;
  s.args = {4, 0x1000, 16, 0xffffffffu, 0, 8};  // timeout -1 as an int
  auto c = poll_call(s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "epoll_pwait");
  EXPECT_FALSE(c->timed);
  EXPECT_EQ(c->epoll_fd, 4);
  s.args[3] = 10;
  EXPECT_TRUE(poll_call(s)->timed);
  s.number = SYS_ppoll;
  s.args = {0x2000, 3, 0, 0, 8, 0};  // no timeout pointer: for ever
  c = poll_call(s);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->timed);
  EXPECT_EQ(c->count, 3u);
  s.args[2] = 0x3000;
  EXPECT_TRUE(poll_call(s)->timed);
  s.number = SYS_read;  // a blocking read waits on its one fd, for ever
  s.args = {7, 0x4000, 8192, 0, 0, 0};
  c = poll_call(s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "read");
  EXPECT_FALSE(c->timed);
  EXPECT_EQ(c->fds, PollCall::Fds::one);
  EXPECT_EQ(c->epoll_fd, 7);
  s.number = SYS_write;
  EXPECT_FALSE(poll_call(s));
}

// A forked child that runs `wait` (blocking), SIGKILLed and reaped on
// destruction; the parent waits until it is asleep in a system call.
class BlockedChild {
 public:
  explicit BlockedChild(const std::function<void()>& wait) {
    pid_ = ::fork();
    if (pid_ == 0) {
      wait();
      ::_exit(0);
    }
  }
  ~BlockedChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  BlockedChild(const BlockedChild&) = delete;
  BlockedChild& operator=(const BlockedChild&) = delete;
  int pid() const { return pid_; }
  // Reads until the child is in the call (at most 2 s).
  std::optional<schema::PollWaitRow> read(
      const std::unordered_set<int>& database_ports = {}) const {
    PollWaitReader reader("/proc");
    for (int i = 0; i < 200; ++i) {
      reader.new_tick();
      if (auto w = reader.read(pid_, database_ports)) return w;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

 private:
  pid_t pid_ = -1;
};

// asyncio's shape: an epoll set holding one end of the process's own
// socketpair (its self-pipe), waited with a timeout — its own timer, no peer.
TEST(PollWait, EpollWithATimeoutOnItsOwnSocketpairHasNoPeer) {
  BlockedChild child([] {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return;
    const int ep = ::epoll_create1(0);
    epoll_event e{.events = EPOLLIN, .data = {.fd = pair[0]}};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, pair[0], &e);
    epoll_event out[4];
    ::epoll_wait(ep, out, 4, 10'000);
  });
  const auto w = child.read();
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->syscall == "epoll_wait" || w->syscall == "epoll_pwait") << w->syscall;
  EXPECT_TRUE(w->timed);
  ASSERT_TRUE(w->peer_sockets);
  EXPECT_EQ(*w->peer_sockets, 0);
}

// A TCP connection to this test (a database, a pooler) in the set: a peer.
TEST(PollWait, PollWithATimeoutOnATcpConnectionHasAPeer) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_LOOPBACK)}};
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  BlockedChild child([addr] {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return;
    const int other = ::eventfd(0, 0);
    pollfd fds[2] = {{.fd = other, .events = POLLIN, .revents = 0},
                     {.fd = s, .events = POLLIN, .revents = 0}};
    ::poll(fds, 2, 10'000);
  });
  // Its remote port is a database port or not.
  const int port = ntohs(addr.sin_port);
  const auto w = child.read({port});
  const auto other = child.read({port + 1});
  ::close(listener);
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->syscall == "poll" || w->syscall == "ppoll") << w->syscall;
  EXPECT_TRUE(w->timed);
  ASSERT_TRUE(w->peer_sockets);
  EXPECT_EQ(*w->peer_sockets, 1);
  EXPECT_EQ(w->database_sockets, std::optional<int>(1));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->peer_sockets, std::optional<int>(1));
  EXPECT_EQ(other->database_sockets, std::optional<int>(0));
  EXPECT_EQ(w->database_queued, std::optional<int>(0));  // nothing sent
}

// A Unix-socket client blocked in read() after sending a byte the server has
// not read: a database socket with bytes queued when the listener's file is
// named as libpq names PostgreSQL's (.s.PGSQL.PORT), a peer that is not the
// database otherwise.
TEST(PollWait, BlockingReadOnAUnixSocketToAPostgresFileIsADatabaseSocket) {
  char dir_template[] = "/tmp/poll_wait_test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::filesystem::path dir(dir_template);
  for (const std::string name : {".s.PGSQL.5432", "app.sock"}) {
    const auto path = (dir / name).string();
    const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{.sun_family = AF_UNIX, .sun_path = {}};
    path.copy(addr.sun_path, sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::listen(listener, 4), 0);
    BlockedChild child([addr] {
      const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      if (::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return;
      // A query the server has not read yet: queued on its end.
      [[maybe_unused]] auto sent = ::write(s, "Q", 1);
      char byte;
      [[maybe_unused]] auto n = ::read(s, &byte, 1);
    });
    const int accepted = ::accept(listener, nullptr, nullptr);
    const auto w = child.read();
    ::close(accepted);
    ::close(listener);
    ASSERT_TRUE(w) << name;
    EXPECT_EQ(w->syscall, "read");
    EXPECT_FALSE(w->timed);
    EXPECT_EQ(w->peer_sockets, std::optional<int>(1)) << name;
    EXPECT_EQ(w->database_sockets, std::optional<int>(name == "app.sock" ? 0 : 1)) << name;
    EXPECT_EQ(w->database_queued, std::optional<int>(name == "app.sock" ? 0 : 1)) << name;
  }
  std::filesystem::remove_all(dir);
}

// select with a timeout on a pipe: no socket at all; without a timeout the
// wait is untimed, and its fds are read all the same (a wait for input).
TEST(PollWait, SelectOnAPipeAndAnUntimedPoll) {
  BlockedChild timed([] {
    int p[2];
    if (::pipe(p) != 0) return;
    fd_set read_set;
    FD_ZERO(&read_set);
    FD_SET(p[0], &read_set);
    timeval tv{.tv_sec = 10, .tv_usec = 0};
    ::select(p[0] + 1, &read_set, nullptr, nullptr, &tv);
  });
  auto w = timed.read();
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->syscall == "select" || w->syscall == "pselect6") << w->syscall;
  EXPECT_TRUE(w->timed);
  EXPECT_EQ(w->peer_sockets, std::optional<int>(0));

  BlockedChild untimed([] {
    int p[2];
    if (::pipe(p) != 0) return;
    pollfd fd{.fd = p[0], .events = POLLIN, .revents = 0};
    ::poll(&fd, 1, -1);
  });
  w = untimed.read();
  ASSERT_TRUE(w);
  EXPECT_FALSE(w->timed);
  EXPECT_EQ(w->peer_sockets, std::optional<int>(0));
  EXPECT_EQ(w->database_sockets, std::optional<int>(0));
}

}  // namespace
}  // namespace stallscope::sampler::detail
