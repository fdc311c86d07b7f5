#include "common/conninfo.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace stallscope {
namespace {

TEST(MaskConninfo, MasksKeyValuePassword) {
  EXPECT_EQ(mask_conninfo("host=db port=5433 password=s3cret user=bob"),
            "user=bob password=*** host=db port=5433");
}

TEST(MaskConninfo, MasksQuotedPasswordWithSpaces) {
  auto masked = mask_conninfo("host=db password='a b c'");
  EXPECT_EQ(masked.find("a b c"), std::string::npos) << masked;
  EXPECT_NE(masked.find("password=***"), std::string::npos) << masked;
}

TEST(MaskConninfo, MasksUriUserinfoAndParameter) {
  EXPECT_EQ(mask_conninfo("postgresql://bob:s3cret@db:5432/app"),
            "postgresql://bob:***@db:5432/app");
  EXPECT_EQ(mask_conninfo("postgres://db/app?password=s3cret&sslmode=disable"),
            "postgres://db/app?password=***&sslmode=disable");
}

TEST(MaskConninfo, LeavesConninfoWithoutPasswordAlone) {
  EXPECT_EQ(mask_conninfo("host=/tmp port=5432"), "host=/tmp port=5432");
  EXPECT_EQ(mask_conninfo(""), "");
}

TEST(MaskCommandLine, MasksConninfoArguments) {
  auto line = mask_command_line({"stallscope", "run", "-o", "r.db", "host=x password=hunter2"});
  EXPECT_EQ(line.find("hunter2"), std::string::npos) << line;
  EXPECT_NE(line.find("stallscope run -o r.db"), std::string::npos) << line;
}

TEST(CheckConninfo, RejectsUnparsableConninfoNamingIt) {
  try {
    check_conninfo("host=x bogus_option=1 password=topsecret");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    std::string msg = e.what();
    EXPECT_NE(msg.find("bogus_option"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("topsecret"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(check_conninfo("host=/tmp port=1"));
  EXPECT_NO_THROW(check_conninfo(""));
}

// libpq's reason for refusing a malformed conninfo may quote the text it
// choked on, password and all (issue 15: these repeated it on stderr).
TEST(CheckConninfo, LibpqsReasonDoesNotRepeatThePassword) {
  for (const std::string conninfo :
       {"postgresql://u:S3cret@[::1", "postgresql://u:S3cret%zz@host/db",
        "postgresql://u:S3cret@host/db%zz", "postgres://u@host/db?password=S3cret&bogus=1",
        "host=x password='S3cret port=5"}) {
    try {
      check_conninfo(conninfo);
      ADD_FAILURE() << "expected an error for " << conninfo;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find("S3cret"), std::string::npos) << msg;
      EXPECT_NE(msg.find("invalid conninfo"), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(mask_conninfo_message(R"(invalid percent-encoded token: "S3cret%zz")",
                                  "postgresql://u:S3cret%zz@host/db"),
            R"(invalid percent-encoded token: "***")");
  EXPECT_EQ(mask_conninfo_message("no secret here", "host=x password=pw"), "no secret here");
  // sslpassword, the client key's passphrase, is a secret too.
  EXPECT_EQ(mask_conninfo("host=x sslpassword=Pw3001"), "host=x sslpassword=***");
  EXPECT_EQ(mask_conninfo_message("key Pw3001 refused", "host=x sslpassword=Pw3001"),
            "key *** refused");
}

}  // namespace
}  // namespace stallscope

namespace stallscope {
namespace {

// The spellings of a secret seen in command lines, each masked, in stored
// command lines and in the processes' (issue 15: all of these were stored in
// clear).
TEST(MaskCommandLine, MasksEverySpellingOfASecret) {
  EXPECT_EQ(join_args_masked({"tool", "--password", "S3cret", "next"}), "tool --password *** next");
  EXPECT_EQ(join_args_masked({"tool", "--passwd=S3cret"}), "tool --passwd=***");
  EXPECT_EQ(join_args_masked({"tool", "--secret=S3cret", "--token=abc.def"}),
            "tool --secret=*** --token=***");
  EXPECT_EQ(join_args_masked({"tool", "--API-KEY=k1"}), "tool --API-KEY=***");
  EXPECT_EQ(join_args_masked({"env", "PGPASSWORD=S3cret", "psql"}), "env PGPASSWORD=*** psql");
  EXPECT_EQ(join_args_masked({"/usr/bin/mysql", "-uroot", "-pS3cret", "db"}),
            "/usr/bin/mysql -uroot -p*** db");
  EXPECT_EQ(join_args_masked({"psql", "-p", "5432"}), "psql -p 5432") << "psql's -p is a port";
  EXPECT_EQ(join_args_masked({"sh -c psql postgresql://app:S3cret@db/x"}),
            "sh -c psql postgresql://app:***@db/x");
  EXPECT_EQ(join_args_masked({"worker", "redis://:S3cret@cache:6379/0"}),
            "worker redis://:***@cache:6379/0");
  EXPECT_EQ(mask_command_line({"stallscope", "record", "--", "app", "--token", "abc"}),
            "stallscope record -- app --token '***'");
}

TEST(JoinArgsMasked, JoinsExactlyAndMasksPasswords) {
  EXPECT_EQ(join_args_masked({"postgres: checkpointer ", ""}), "postgres: checkpointer  ");
  EXPECT_EQ(join_args_masked({"psql", "host=db password=hunter2"}), "psql host=db password=***");
  EXPECT_EQ(join_args_masked({"psql", "postgresql://u:pw@h/db"}), "psql postgresql://u:***@h/db");
}

}  // namespace
}  // namespace stallscope

namespace stallscope {
namespace {

TEST(FoldLines, JoinsLinesAndDropsTrailingBreaks) {
  EXPECT_EQ(fold_lines("FATAL:  no such user\nDETAIL: x\n"), "FATAL:  no such user; DETAIL: x");
  EXPECT_EQ(fold_lines("a\r\nb\r\n"), "a; b");
  EXPECT_EQ(fold_lines(""), "");
}

}  // namespace
}  // namespace stallscope

namespace stallscope {
namespace {

TEST(MaskCommandLine, QuotesForAPosixShell) {
  EXPECT_EQ(mask_command_line({"run", "--sql", "SELECT 'x'"}), "run --sql 'SELECT '\\''x'\\'''");
  EXPECT_EQ(mask_command_line({"a b", "plain-arg_1.sql"}), "'a b' plain-arg_1.sql");
}

TEST(FoldLines, DropsLibpqContinuationTabs) {
  EXPECT_EQ(fold_lines("connection refused\n\tIs the server running?\n"),
            "connection refused; Is the server running?");
}

TEST(ConninfoValue, ReadsAKeywordFromKeyValueAndUri) {
  EXPECT_EQ(conninfo_value("host=db dbname=shop password=***", "dbname"), "shop");
  EXPECT_EQ(conninfo_value("postgresql://u@db:6432/pgbouncer", "dbname"), "pgbouncer");
  EXPECT_EQ(conninfo_value("host=db", "dbname"), std::nullopt);
  EXPECT_EQ(conninfo_value("", "dbname"), std::nullopt);
  EXPECT_EQ(conninfo_value("host='unterminated", "host"), std::nullopt);
}

}  // namespace
}  // namespace stallscope

namespace stallscope {
namespace {

// pgbench's -h/-p/-U and bare database name, read back through libpq.
TEST(WithConnectionFlags, BareNameIsADatabaseAndFlagsOverride) {
  const auto c = with_connection_flags("shop", std::string("/tmp/sock dir"), std::string("5433"),
                                       std::string("bench"));
  EXPECT_EQ(conninfo_value(c, "dbname"), "shop");
  EXPECT_EQ(conninfo_value(c, "host"), "/tmp/sock dir");
  EXPECT_EQ(conninfo_value(c, "port"), "5433");
  EXPECT_EQ(conninfo_value(c, "user"), "bench");
  // On a key=value conninfo the flag wins over the same keyword.
  const auto kv = with_connection_flags("host=a port=1 dbname=x", std::string("b"), {}, {});
  EXPECT_EQ(conninfo_value(kv, "host"), "b");
  EXPECT_EQ(conninfo_value(kv, "port"), "1");
  EXPECT_EQ(conninfo_value(kv, "dbname"), "x");
  // Nothing to add: unchanged, and empty stays empty (PG* variables apply).
  EXPECT_EQ(with_connection_flags("host=a", {}, {}, {}), "host=a");
  EXPECT_EQ(with_connection_flags("", {}, {}, {}), "");
  EXPECT_EQ(conninfo_value(with_connection_flags("", {}, std::string("6000"), {}), "port"), "6000");
  EXPECT_EQ(with_connection_flags("postgresql://db/x", {}, {}, {}), "postgresql://db/x");
  EXPECT_THROW(with_connection_flags("postgresql://u:pw@db/x", std::string("h"), {}, {}), Error);
}

}  // namespace
}  // namespace stallscope
