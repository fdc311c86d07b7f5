// Names with bytes that are not UTF-8 from other users of the host: a
// process whose comm holds them (prctl(PR_SET_NAME) takes any bytes) burns a
// core while `stallscope record` samples the host; explain's text shows the
// name escaped (\xNN, never the raw bytes), and its JSON stays valid (U+FFFD).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "support/test_support.h"

namespace stallscope {
namespace {

using test::run_command;

// A child burning CPU under the comm "ho\xff\xfeg"; killed on destruction.
class HostileHog {
 public:
  HostileHog() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_NAME, "ho\xff\xfeg", 0, 0, 0);
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
  }
  ~HostileHog() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  HostileHog(const HostileHog&) = delete;
  HostileHog& operator=(const HostileHog&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

TEST(HostileText, InvalidUtf8ProcessNameIsEscapedInTextAndValidInJson) {
  test::TempDir dir;
  const auto db = dir.file("rec.db");
  {
    HostileHog hog;
    ASSERT_GT(hog.pid(), 0);
    const auto r = run_command(
        {test::stallscope_bin(), "record", "-o", db, "--hz", "10", "-T", "3", "-P", "0"});
    ASSERT_EQ(r.exit_status, 0) << r.err;
  }
  const auto t = run_command({test::stallscope_bin(), "explain", db});
  ASSERT_EQ(t.exit_status, 0) << t.err;
  // The hog's core is in the host accounting, under its name, escaped.
  EXPECT_NE(t.out.find("ho\\xff\\xfeg"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("ho\xff\xfeg"), std::string::npos) << "raw bytes on the terminal";
  EXPECT_EQ(common::valid_utf8(t.out), t.out);
  const auto j = run_command({test::stallscope_bin(), "explain", "--json", db});
  ASSERT_EQ(j.exit_status, 0) << j.err;
  EXPECT_EQ(common::valid_utf8(j.out), j.out);
  EXPECT_TRUE(nlohmann::json::accept(j.out));
  EXPECT_NE(j.out.find("ho\xef\xbf\xbd\xef\xbf\xbdg"), std::string::npos);
}

}  // namespace
}  // namespace stallscope
