#include "common/conninfo.h"

#include <gtest/gtest.h>

#include <cstdlib>

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

// SQL in an argument keeps no password: psql -c, run --sql; an argument
// that is no SQL with a quote in it is left as it is.
TEST(MaskCommandLine, MasksThePasswordsSqlArgumentsCarry) {
  EXPECT_EQ(join_args_masked({"psql", "-c", "ALTER ROLE app PASSWORD 'hunter2'", "O'Brien"}),
            "psql -c ALTER ROLE app PASSWORD '***' O'Brien");
  const auto line = mask_command_line({"stallscope", "run", "--sql=CREATE USER u PASSWORD 'pw1'"});
  EXPECT_EQ(line.find("pw1"), std::string::npos) << line;
  EXPECT_NE(line.find("***"), std::string::npos) << line;
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

// Issue 27: an unparsable port or sslmode got past PQconninfoParse and failed
// the connect (exit 1): bad input is a usage error (exit 2) naming it.
TEST(CheckConninfo, RejectsABadPortOrSslmode) {
  const auto why = [](const std::string& conninfo) {
    try {
      check_conninfo(conninfo);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(why("host=db port=abc password=S3cret"),
            "invalid conninfo 'password=*** host=db port=abc': port 'abc' is not a port number (1 "
            "to 65535)");
  EXPECT_NE(why("port=0").find("port '0' is not a port number"), std::string::npos);
  EXPECT_NE(why("port=65536").find("is not a port number"), std::string::npos);
  // Found by the fuzz target: the digits of a long port overflowed an int.
  EXPECT_NE(why("port=67882048912").find("is not a port number"), std::string::npos);
  EXPECT_NE(why("host=a,b port=5432,x").find("port '5432,x'"), std::string::npos);
  EXPECT_NE(why("postgresql://db:99999/x").find("port '99999'"), std::string::npos);
  EXPECT_EQ(why("host=db sslmode=bogus"),
            "invalid conninfo 'host=db sslmode=bogus': sslmode 'bogus' is not one of disable, "
            "allow, prefer, require, verify-ca, verify-full");
  EXPECT_NE(why("gssencmode=yes").find("gssencmode 'yes'"), std::string::npos);
  for (const std::string ok : {"port=5432", "port= 5432 ", "host=a,b port=5432,", "port=65535",
                               "sslmode=verify-full", "gssencmode=disable"}) {
    EXPECT_EQ(why(ok), "accepted") << ok;
  }
  // The environment's, where the conninfo does not set them.
  ::setenv("PGPORT", "nope", 1);
  EXPECT_EQ(why("host=db"), "invalid PGPORT: port 'nope' is not a port number (1 to 65535)");
  EXPECT_EQ(why("host=db port=5432"), "accepted");
  ::unsetenv("PGPORT");
  ::setenv("PGSSLMODE", "sure", 1);
  EXPECT_NE(why("").find("invalid PGSSLMODE: sslmode 'sure'"), std::string::npos);
  ::unsetenv("PGSSLMODE");
}

// libpq's reason for refusing a malformed conninfo may quote the text it
// choked on, password and all: the message must not repeat it on stderr.
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
// command lines and in the processes' (each was once stored in clear).
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

namespace stallscope {
namespace {

// Issue 15, from a hostile test: each of these was stored or printed in clear.

// exec -a "app --password S3cret" sleep 100: /proc shows one argv[0] with
// spaces; its options are masked as separate arguments are.
TEST(MaskArgs, MasksOptionsInsideAnArgumentWithSpaces) {
  EXPECT_EQ(join_args_masked({"app --password S3cret", "100"}), "app --password *** 100");
  EXPECT_EQ(join_args_masked({"app --client-secret S3cret --token=S3cret -v"}),
            "app --client-secret *** --token=*** -v");
  // The option ends one argument, its value is the next.
  EXPECT_EQ(join_args_masked({"app --password", "S3cret", "x"}), "app --password *** x");
  // A quoted value is taken whole.
  EXPECT_EQ(join_args_masked({"sh", "-c", "app --password 'S3 cret' --next"}),
            "sh -c app --password *** --next");
  // In a script, a quote inside a value closes the script's own quote: what
  // follows is masked in turn.
  EXPECT_EQ(join_args_masked({"bash", "-c",
                              "(exec -a 'app --password S3cret' sleep 2) & "
                              "(exec -a mariadb-dump bash -c 'sleep 2; true' -pS3cret)"}),
            "bash -c (exec -a 'app --password *** sleep 2) & "
            "(exec -a mariadb-dump bash -c 'sleep 2; true' -p***");
  // A secret option right after a secret option is an option, not a value.
  EXPECT_EQ(join_args_masked({"psql --password --token S3cret"}), "psql --password --token ***");
}

TEST(MaskArgs, MasksDashPOfEveryMysqlAndMariadbClient) {
  for (const std::string client :
       {"mysql", "mysqldump", "mysqladmin", "mysqlshow", "mysqlcheck", "mysqlslap", "mysqlimport",
        "mysqlbinlog", "mysqlsh", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import",
        "mariadb-check", "mariadb-show", "mariadb-slap", "mariabackup", "/usr/bin/mysqlimport"}) {
    EXPECT_EQ(join_args_masked({client, "-uroot", "-pS3cret", "db"}), client + " -uroot -p*** db");
  }
  // The client need not be argv[0], nor a separate argument.
  EXPECT_EQ(join_args_masked({"sudo", "mariadb-dump", "-pS3cret"}), "sudo mariadb-dump -p***");
  EXPECT_EQ(join_args_masked({"sh", "-c", "mysql -uroot -pS3cret db"}),
            "sh -c mysql -uroot -p*** db");
  EXPECT_EQ(join_args_masked({"mysql", "-p'S3 cret'", "db"}), "mysql -p*** db");
  // Elsewhere -p is a port, and a bare -p prompts.
  EXPECT_EQ(join_args_masked({"psql", "-p5433", "-h", "db"}), "psql -p5433 -h db");
  EXPECT_EQ(join_args_masked({"pgbench", "-p", "5433"}), "pgbench -p 5433");
  EXPECT_EQ(join_args_masked({"pgbench", "-f", "mysql_compat.sql", "-p5433"}),
            "pgbench -f mysql_compat.sql -p5433");
  // (A value runs to whitespace: the ')' goes with it.)
  EXPECT_EQ(join_args_masked({"sh", "-c", "(\"mysql\" -pS3cret)"}), "sh -c (\"mysql\" -p***");
  EXPECT_EQ(join_args_masked({"mysql", "-p", "db"}), "mysql -p db");
}

// Options of other known programs that hold a password though their name
// does not say so: sshpass -p, redis-cli -a, openssl -passin/-passout, and
// the password after the ':' of curl's -u USER:PASSWORD.
TEST(MaskArgs, MasksThePasswordOptionsOfSshpassRedisCliOpensslAndCurl) {
  EXPECT_EQ(join_args_masked({"sshpass", "-p", "S3cret", "ssh", "db"}), "sshpass -p *** ssh db");
  EXPECT_EQ(join_args_masked({"/usr/bin/sshpass", "-pS3cret", "ssh", "db"}),
            "/usr/bin/sshpass -p*** ssh db");
  EXPECT_EQ(join_args_masked({"redis-cli", "-h", "cache", "-a", "S3cret", "ping"}),
            "redis-cli -h cache -a *** ping");
  EXPECT_EQ(join_args_masked({"sh", "-c", "valkey-cli -a S3cret info"}),
            "sh -c valkey-cli -a *** info");
  EXPECT_EQ(join_args_masked({"openssl", "pkcs12", "-passin", "pass:S3cret", "-passout", "env:PW"}),
            "openssl pkcs12 -passin *** -passout ***");
  EXPECT_EQ(join_args_masked({"curl", "-u", "app:S3cret", "https://api"}),
            "curl -u app:*** https://api");
  EXPECT_EQ(
      join_args_masked({"curl", "--user", "app:S3:cret", "-uapp:S3cret", "--proxy-user=p:S3cret"}),
      "curl --user app:*** -uapp:*** --proxy-user=p:***");
  EXPECT_EQ(join_args_masked({"sh", "-c", "curl -s -u app:S3cret https://api | jq ."}),
            "sh -c curl -s -u app:*** https://api | jq .");
  // curl -u USER prompts for the password: nothing to mask. Elsewhere -a,
  // -u and -p are not secrets.
  EXPECT_EQ(join_args_masked({"curl", "-u", "app", "https://api"}), "curl -u app https://api");
  // A value without ':' is masked as any other argument (found by the fuzz
  // target: it was kept whole).
  EXPECT_EQ(join_args_masked({"curl --user", "PGPASSWORD=S3cret"}), "curl --user PGPASSWORD=***");
  EXPECT_EQ(join_args_masked({"ls", "-a", "/tmp", "-u", "x:y"}), "ls -a /tmp -u x:y");
  EXPECT_EQ(join_args_masked({"psql", "-p", "5433", "-U", "app:x"}), "psql -p 5433 -U app:x");
}

// Issue 27: docker login -p, sqlcmd -P, ldapsearch -w, mongosh -p, openssl
// enc -k/-K, smbclient -U USER%PASSWORD and Cookie: headers were stored in
// clear. Each option is a secret only once its program is named.
TEST(MaskArgs, MasksThePasswordOptionsOfDockerSqlcmdLdapMongoOpensslEncAndSmbclient) {
  EXPECT_EQ(join_args_masked({"docker", "login", "-u", "me", "-p", "S3cret", "reg.io"}),
            "docker login -u me -p *** reg.io");
  EXPECT_EQ(join_args_masked({"sh", "-c", "podman login -pS3cret reg.io && docker run -p 80:80 x"}),
            "sh -c podman login -p*** reg.io && docker run -p 80:80 x");
  EXPECT_EQ(join_args_masked({"docker", "run", "-p", "8080:80", "nginx"}),
            "docker run -p 8080:80 nginx");
  EXPECT_EQ(
      join_args_masked({"/opt/mssql-tools/bin/sqlcmd", "-S", "db", "-U", "sa", "-P", "S3cret"}),
      "/opt/mssql-tools/bin/sqlcmd -S db -U sa -P ***");
  EXPECT_EQ(join_args_masked({"bcp", "t", "out", "f", "-PS3cret"}), "bcp t out f -P***");
  EXPECT_EQ(join_args_masked({"ldapsearch", "-x", "-D", "cn=admin", "-w", "S3cret", "-b", "dc=x"}),
            "ldapsearch -x -D cn=admin -w *** -b dc=x");
  EXPECT_EQ(join_args_masked({"ldapmodify", "-wS3cret"}), "ldapmodify -w***");
  EXPECT_EQ(join_args_masked({"mongosh", "--host", "db", "-u", "app", "-p", "S3cret"}),
            "mongosh --host db -u app -p ***");
  EXPECT_EQ(join_args_masked({"mongodump", "-p", "S3cret", "--out", "d"}),
            "mongodump -p *** --out d");
  EXPECT_EQ(join_args_masked({"openssl", "enc", "-aes-256-cbc", "-k", "S3cret", "-in", "f"}),
            "openssl enc -aes-256-cbc -k *** -in f");
  EXPECT_EQ(join_args_masked({"openssl", "enc", "-K", "00ff", "-iv", "01"}),
            "openssl enc -K *** -iv 01");
  EXPECT_EQ(join_args_masked({"smbclient", "//srv/share", "-U", "me%S3cret"}),
            "smbclient //srv/share -U me%***");
  EXPECT_EQ(join_args_masked({"smbclient", "-Ume%S3cret", "--user=dom/me%S3cret", "-U", "me"}),
            "smbclient -Ume%*** --user=dom/me%*** -U me");
  EXPECT_EQ(join_args_masked({"rpcclient", "-U", "me%S3cret", "srv"}), "rpcclient -U me%*** srv");
  EXPECT_EQ(join_args_masked({"curl", "-H", "Cookie: session=S3cret; theme=dark", "https://x"}),
            "curl -H Cookie: *** https://x");
  EXPECT_EQ(join_args_masked({"sh", "-c", "curl -H 'Cookie: sid=S3cret' https://x"}),
            "sh -c curl -H 'Cookie: ***' https://x");
  // Elsewhere these options are not secrets.
  EXPECT_EQ(join_args_masked({"tar", "-P", "-w", "x", "-k", "-U", "a%b"}), "tar -P -w x -k -U a%b");
  EXPECT_EQ(join_args_masked({"psql", "-p", "5433", "-w"}), "psql -p 5433 -w");
}

TEST(MaskArgs, MasksAssignmentsWhoseNameEndsInASecretWord) {
  EXPECT_EQ(join_args_masked({"env", "MYSQL_PWD=S3cret", "mysql"}), "env MYSQL_PWD=*** mysql");
  EXPECT_EQ(join_args_masked({"tool", "--pass=S3cret", "DB_PASS=S3cret"}),
            "tool --pass=*** DB_PASS=***");
  EXPECT_EQ(join_args_masked({"tool", "--client-secret=S3cret", "SECRET_KEY=S3cret"}),
            "tool --client-secret=*** SECRET_KEY=***");
  EXPECT_EQ(join_args_masked({"env", "AWS_SECRET_ACCESS_KEY=S3cret", "AWS_ACCESS_KEY_ID=AKIA1"}),
            "env AWS_SECRET_ACCESS_KEY=*** AWS_ACCESS_KEY_ID=AKIA1");
  // Inside a quoted assignment the value runs to the quote.
  EXPECT_EQ(join_args_masked({"sh", "-c", R"(env "MYSQL_PWD=S3 cret" mysql)"}),
            R"(sh -c env "MYSQL_PWD=***" mysql)");
  // Not secrets: the shell's directories, paths to key files, counts.
  EXPECT_EQ(join_args_masked({"env", "PWD=/home/u", "OLDPWD=/tmp", "--key-file=k.pem",
                              "--password-file=/run/pw", "--max-tokens=5", "bypass=1"}),
            "env PWD=/home/u OLDPWD=/tmp --key-file=k.pem --password-file=/run/pw "
            "--max-tokens=5 bypass=1");
}

TEST(MaskArgs, MasksTheValueOfOptionsNamedForASecret) {
  EXPECT_EQ(join_args_masked({"tool", "--pass", "S3cret", "--client-secret", "S3cret"}),
            "tool --pass *** --client-secret ***");
  EXPECT_EQ(join_args_masked({"tool", "--db-password", "S3cret", "--auth-token", "S3cret"}),
            "tool --db-password *** --auth-token ***");
  EXPECT_EQ(join_args_masked({"openssl", "enc", "-pass", "S3cret"}), "openssl enc -pass ***");
  EXPECT_EQ(join_args_masked({"gpg", "--passphrase", "S3cret"}), "gpg --passphrase ***");
  // Not secrets: files, keys named by path, counts, switches.
  EXPECT_EQ(join_args_masked({"curl", "--key", "k.pem", "--key-file", "k.pem", "--password-file",
                              "/run/pw", "--max-tokens", "5", "--no-password", "-h", "db",
                              "--ask-pass", "site.yml"}),
            "curl --key k.pem --key-file k.pem --password-file /run/pw --max-tokens 5 "
            "--no-password -h db --ask-pass site.yml");
}

TEST(MaskArgs, MasksAuthorizationHeaders) {
  EXPECT_EQ(join_args_masked({"curl", "-H", "Authorization: Bearer S3cret", "https://api/x"}),
            "curl -H Authorization: Bearer *** https://api/x");
  EXPECT_EQ(join_args_masked({"curl", "-H", "authorization:Basic dTpTM2NyZXQ="}),
            "curl -H authorization:Basic ***");
  EXPECT_EQ(join_args_masked({"curl", "-H", "Proxy-Authorization: Basic S3cret"}),
            "curl -H Proxy-Authorization: Basic ***");
  // An unknown scheme is hidden with its credentials.
  EXPECT_EQ(join_args_masked({"curl", "-H", "Authorization: SSWS S3cret"}),
            "curl -H Authorization: ***");
  EXPECT_EQ(join_args_masked({"curl", "-H", "X-Api-Key: S3cret"}), "curl -H X-Api-Key: ***");
  // Inside a command line the header ends at its quote.
  EXPECT_EQ(
      join_args_masked({"sh", "-c", R"(curl -H "Authorization: Bearer S3cret" https://api/x)"}),
      R"(sh -c curl -H "Authorization: Bearer ***" https://api/x)");
  // A scheme alone is not a secret.
  EXPECT_EQ(join_args_masked({"x", "Authorization: Bearer"}), "x Authorization: Bearer");
}

// postgresql://u:p@ss@host/db: the user-info ends at the last '@' before the
// host (today's code stopped at the first and showed "ss").
TEST(MaskConninfo, UriPasswordMayHoldAtSigns) {
  EXPECT_EQ(mask_conninfo("postgresql://u:p@ss@host/db"), "postgresql://u:***@host/db");
  EXPECT_EQ(join_args_masked({"psql", "postgresql://u:p@ss:w@rd@db:5432/x?sslmode=require"}),
            "psql postgresql://u:***@db:5432/x?sslmode=require");
  EXPECT_EQ(join_args_masked({"app postgresql://u:S3?c#ret@db/x next"}),
            "app postgresql://u:***@db/x next");
  // A path's '@' is not user-info, nor is a user without a password.
  EXPECT_EQ(join_args_masked({"https://host/a@b", "https://bob@host/x"}),
            "https://host/a@b https://bob@host/x");
  // libpq splits at the first '@' and quotes the rest in its reason.
  try {
    check_conninfo("postgresql://u:S3@cret%zz@host/db");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("cret"), std::string::npos) << e.what();
  }
}

// /proc/PID/cmdline is read up to 256 KiB. Today's std::regex masking took
// 33 s on a 16 KiB run of letters and overflowed the stack (SIGSEGV, the
// sampler gone) at 64 KiB; the scanner takes each whole, in one pass.
TEST(MaskArgs, MasksArgumentsAsLongAsProcShows) {
  // (EXPECT_TRUE: a failure would print 256 KiB.)
  const std::string letters(256 * 1024, 'a');
  EXPECT_TRUE(join_args_masked({"x", letters}) == "x " + letters);
  EXPECT_EQ(join_args_masked({"x", "password=" + letters + " y"}), "x password=*** y");
  std::string schemes;
  while (schemes.size() < letters.size()) schemes += "a://u:";
  EXPECT_TRUE(join_args_masked({schemes + "p@h"}) == schemes + "***@h");
  std::string options;
  while (options.size() < letters.size()) options += "--password x ";
  const auto masked = join_args_masked({options});
  EXPECT_EQ(masked.find('x'), std::string::npos);
  EXPECT_EQ(masked.size(), options.size() / 13 * 15);
}

TEST(MaskArgs, MaskingAgainChangesNothing) {
  const std::vector<std::vector<std::string>> argvs = {
      {"app --password S3cret", "100"},
      {"mysql", "-p'a b'", "-pS3cret"},
      {"x", "--password", "--token", "t", "PGPASSWORD= p", "q"},
      {"curl", "-H", "Authorization: Bearer S3cret", "-H", "Authorization: S3cret x"},
      {"sh", "-c", R"(env "MYSQL_PWD=a b" curl -H "X-Api-Key: k" postgresql://u:p@s@h/d)"},
      {"psql", "postgres://db/app?password=s3&sslmode=disable", "host=x password='a b"},
      {"curl", "-u", "a:b c", "-ua:b:c", "-u", "nouser", "sshpass", "-p", "-p", "x"},
      {"sh", "-c", "sshpass -p 'a b' ssh; redis-cli -a x; openssl -passin pass:y"},
      {"docker", "login", "-p", "a b", "-pc", "sqlcmd", "-P", "x", "-Py", "ldapsearch", "-w", "z"},
      {"mongosh", "-p", "x", "openssl", "enc", "-k", "y", "-K", "z", "smbclient", "-U", "u%p q",
       "-Uu%v", "--user=%w", "-U", "nouser"},
      {"curl", "-H", "Cookie: a=b; c=d", "-H", "Set-Cookie: x=y", "Cookie:"},
      // Found by the fuzz target: masking turned "mariadbX_PWD=S\xcd" into
      // "mariadbX_PWD=***", which, with "=***" dropped as punctuation, named
      // a MariaDB client the second time, so the -p after it was masked then.
      {"mariadbX_PWD=S\xcd\x01", "-ps3cre\xfe"},
      // Found by the fuzz target: a NUL byte ended a value as if it were a
      // closing quote, and a value masked up to '&' or a quote inside an
      // authority joined it to a later '@' the second time.
      {std::string("x://aMYSQL_PWD=Zt/x\0_pp:@", 25), "x://?TOKEN=a/b&c:d@e",
       "x://'X-Api-Key:v/p'u:p@h"},
  };
  for (const auto& argv : argvs) {
    const auto once = mask_args(argv);
    EXPECT_EQ(mask_args(once), once) << join_args_masked(argv);
  }
  // Found by the fuzz target: a value after the user-info, in the host part
  // (?L_PWD=… up to '&'), hid the '/' that had ended the user-info, so the
  // second time the user-info ran to a later '@'.
  const std::string message = "es://6:x@host?L_PWD=Spost{/}:&p@@s{\v";
  const auto once = mask_conninfo_message(message, "");
  EXPECT_EQ(mask_conninfo_message(once, ""), once);
}

}  // namespace
}  // namespace stallscope
