// tcp_socket_owner and process_start_ticks on fake /proc trees.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "sampler/sampler.h"
#include "support/test_support.h"

namespace stallscope::sampler {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A stat line whose field 22 (start time) is `start_ticks`; the comm holds
// a space and a parenthesis, as comms may.
std::string stat_line(int pid, std::int64_t start_ticks) {
  return std::to_string(pid) + " (py thon) x) S 1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 " +
         std::to_string(start_ticks) + " 1000 10 0\n";
}

constexpr const char* kTcpHeader =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n";

TEST(ProcessStartTicks, IsField22AfterTheComm) {
  test::TempDir dir;
  write(dir.path() / "42" / "stat", stat_line(42, 123456));
  EXPECT_EQ(process_start_ticks(42, dir.path().string()), 123456);
  EXPECT_FALSE(process_start_ticks(43, dir.path().string()));
}

TEST(TcpSocketOwner, FindsTheProcessHoldingTheClientEnd) {
  test::TempDir dir;
  const auto root = dir.path();
  // Client end 127.0.0.1:40000 -> :5432 (inode 777); the server's end
  // :5432 -> :40000 (inode 888) belongs to the backend.
  // Appended to a named string: GCC 12 sees a false out-of-bounds memcpy
  // (-Warray-bounds) in `std::string(kTcpHeader) + "…"` here.
  std::string tcp(kTcpHeader);
  tcp +=
      "   0: 0100007F:9C40 0100007F:1538 01 00000000:00000000 00:00000000 00000000  "
      "1000        0 777 1 0000000000000000 20 4 30 10 -1\n"
      "   1: 0100007F:1538 0100007F:9C40 01 00000000:00000000 00:00000000 00000000   "
      "105        0 888 1 0000000000000000 20 4 30 10 -1\n";
  write(root / "net" / "tcp", tcp);
  write(root / "net" / "tcp6", kTcpHeader);
  write(root / "100" / "stat", stat_line(100, 5000));  // the backend
  fs::create_directories(root / "100" / "fd");
  fs::create_symlink("socket:[888]", root / "100" / "fd" / "9");
  write(root / "200" / "stat", stat_line(200, 7000));  // the client
  fs::create_directories(root / "200" / "fd");
  fs::create_symlink("/dev/null", root / "200" / "fd" / "0");
  fs::create_symlink("socket:[777]", root / "200" / "fd" / "3");
  const auto owner = tcp_socket_owner(40000, 5432, root.string());
  ASSERT_TRUE(owner);
  EXPECT_EQ(owner->pid, 200);
  EXPECT_EQ(owner->start_ticks, 7000);
  // The other end, and ports no socket has.
  const auto backend = tcp_socket_owner(5432, 40000, root.string());
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->pid, 100);
  EXPECT_FALSE(tcp_socket_owner(40001, 5432, root.string()));
  EXPECT_FALSE(tcp_socket_owner(-1, 5432, root.string()));  // a Unix-socket session
}

}  // namespace
}  // namespace stallscope::sampler
