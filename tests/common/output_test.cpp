// common/output.h: the output file written whole, never over an input, never
// through a planted symlink, a device or FIFO written in place.
#include "common/output.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "common/error.h"
#include "support/test_support.h"

namespace stallscope::common {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

TEST(OutputFile, SameFileIsTheSameInodeUnderAnyName) {
  test::TempDir dir;
  std::ofstream(dir.file("a")) << "a";
  std::ofstream(dir.file("b")) << "a";
  std::filesystem::create_hard_link(dir.file("a"), dir.file("hard"));
  std::filesystem::create_symlink(dir.file("a"), dir.file("soft"));
  EXPECT_TRUE(same_file(dir.file("a"), dir.file("a")));
  EXPECT_TRUE(same_file(dir.file("a"), dir.file("hard")));
  EXPECT_TRUE(same_file(dir.file("soft"), dir.file("a")));
  EXPECT_TRUE(same_file(dir.file("a"), (dir.path() / "." / "a").string()));
  EXPECT_FALSE(same_file(dir.file("a"), dir.file("b")));  // same content, another file
  EXPECT_FALSE(same_file(dir.file("a"), dir.file("missing")));
}

TEST(OutputFile, AnOutputThatIsAnInputIsRefusedNamingBoth) {
  test::TempDir dir;
  std::ofstream(dir.file("run.db")) << "data";
  std::filesystem::create_hard_link(dir.file("run.db"), dir.file("link.db"));
  try {
    refuse_output_that_is_an_input(dir.file("link.db"), {dir.file("other.db"), dir.file("run.db")});
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_EQ(std::string(e.what()),
              fmt::format("cannot write {}: it is the input {} (the output would destroy it)",
                          dir.file("link.db"), dir.file("run.db")));
  }
  EXPECT_NO_THROW(refuse_output_that_is_an_input(dir.file("new.html"), {dir.file("run.db")}));
  EXPECT_EQ(slurp(dir.file("run.db")), "data");
}

// The files SQLite keeps beside an input (a killed run's -wal holds its
// commits): refused by inode through another name, and by name before they
// exist.
TEST(OutputFile, AnInputsWalShmOrJournalIsRefused) {
  test::TempDir dir;
  std::ofstream(dir.file("run.db")) << "data";
  std::ofstream(dir.file("run.db-wal")) << "commits";
  std::filesystem::create_symlink(dir.file("run.db-wal"), dir.file("page.html"));
  try {
    refuse_output_that_is_an_input(dir.file("page.html"), {dir.file("run.db")});
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("cannot write {}: it is the -wal file of the input {} (the output "
                          "would destroy it)",
                          dir.file("page.html"), dir.file("run.db")));
  }
  const auto sub = (dir.path() / "sub").string();
  std::filesystem::create_directory(sub);
  for (const char* beside : {"run.db-shm", "run.db-journal", "sub/../run.db-shm"}) {
    EXPECT_THROW(refuse_output_that_is_an_input(dir.file(beside), {dir.file("run.db")}), Error)
        << beside;
  }
  EXPECT_NO_THROW(
      refuse_output_that_is_an_input(dir.file("run.db-wal.html"), {dir.file("run.db")}));
  EXPECT_EQ(slurp(dir.file("run.db-wal")), "commits");
}

// The page went to OUT.tmp, opened with O_CREAT|O_TRUNC: a symlink planted
// there was followed and its target overwritten. The temporary file is now
// mkstemp's (O_EXCL), and the page ends with mode 0600 even over a 0644 file.
TEST(OutputFile, APlantedSymlinkIsNotFollowedAndThePageIs0600) {
  test::TempDir dir;
  std::ofstream(dir.file("victim")) << "precious";
  std::ofstream(dir.file("out.html")) << "old page";
  ::chmod(dir.file("out.html").c_str(), 0644);
  std::filesystem::create_symlink(dir.file("victim"), dir.file("out.html.tmp"));
  write_whole_file(dir.file("out.html"), "<html>new</html>");
  EXPECT_EQ(slurp(dir.file("victim")), "precious");
  EXPECT_EQ(slurp(dir.file("out.html")), "<html>new</html>");
  EXPECT_EQ(mode_of(dir.file("out.html")) & 07777, 0600);
  EXPECT_TRUE(S_ISLNK(mode_of(dir.file("out.html.tmp"))));
  // Nothing else is left in the directory: victim, out.html, the symlink.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 3);
}

// A FIFO (or a device) is written in place: the page was renamed over it,
// replacing the node with a regular file.
TEST(OutputFile, AFifoIsWrittenInPlaceNotReplaced) {
  test::TempDir dir;
  const std::string fifo = dir.file("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto reader = std::async(std::launch::async, [&] { return slurp(fifo); });
  write_whole_file(fifo, "<html>page</html>");
  EXPECT_EQ(reader.get(), "<html>page</html>");
  EXPECT_TRUE(S_ISFIFO(mode_of(fifo)));
}

TEST(OutputFile, DirectoryAndBadPlacesAreUsageErrors) {
  test::TempDir dir;
  for (const auto& [path, message] : std::vector<std::pair<std::string, std::string>>{
           {dir.path().string(), "is a directory"},
           {dir.file("no/such/dir/out.html"), "No such file or directory"}}) {
    try {
      write_whole_file(path, "x");
      ADD_FAILURE() << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// As root, -o /dev/full replaced the device with a regular file. A device
// node made in a temporary directory (root only: mknod) shows it is now
// written in place, and its error (ENOSPC) reported.
TEST(OutputFile, ACharacterDeviceIsWrittenInPlaceAndItsErrorReported) {
  test::TempDir dir;
  const std::string full = dir.file("full");
  if (::mknod(full.c_str(), S_IFCHR | 0600, makedev(1, 7)) != 0) {
    GTEST_SKIP() << "mknod needs root: " << std::strerror(errno);
  }
  try {
    write_whole_file(full, "<html>page</html>");
    ADD_FAILURE() << "the write to a full device succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_EQ(e.code(), ENOSPC);
    EXPECT_EQ(std::string(e.what()), "cannot write " + full + ": No space left on device");
  }
  EXPECT_TRUE(S_ISCHR(mode_of(full)));
}

}  // namespace
}  // namespace stallscope::common
