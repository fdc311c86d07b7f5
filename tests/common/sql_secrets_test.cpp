#include "common/sql_secrets.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope {
namespace {

TEST(MaskSqlSecrets, MasksTheConstantAfterPassword) {
  EXPECT_EQ(mask_sql_secrets("ALTER ROLE app PASSWORD 's3cret'"), "ALTER ROLE app PASSWORD '***'");
  EXPECT_EQ(mask_sql_secrets("create user app with login encrypted password 'it''s'"),
            "create user app with login encrypted password '***'");
  EXPECT_EQ(mask_sql_secrets("ALTER USER app PASSWORD E's3\\'cret' VALID UNTIL 'infinity'"),
            "ALTER USER app PASSWORD '***' VALID UNTIL 'infinity'");
  EXPECT_EQ(mask_sql_secrets("CREATE ROLE a PASSWORD $pw$s3cret$pw$ LOGIN"),
            "CREATE ROLE a PASSWORD '***' LOGIN");
  EXPECT_EQ(mask_sql_secrets("CREATE ROLE a PASSWORD $$s3cret$$"), "CREATE ROLE a PASSWORD '***'");
  EXPECT_EQ(mask_sql_secrets("ALTER ROLE a PASSWORD /* c */ U&'s3cret'"),
            "ALTER ROLE a PASSWORD /* c */ '***'");
  EXPECT_EQ(mask_sql_secrets("ALTER ROLE a PASSWORD 'sec'\n'ret'"),
            "ALTER ROLE a PASSWORD '***'\n'***'");
  // \password sends the hash: masked too.
  EXPECT_EQ(mask_sql_secrets("ALTER USER a PASSWORD 'SCRAM-SHA-256$4096:abc$def:ghi'"),
            "ALTER USER a PASSWORD '***'");
}

TEST(MaskSqlSecrets, MasksUserMappingOptions) {
  EXPECT_EQ(mask_sql_secrets("CREATE USER MAPPING FOR app SERVER s OPTIONS (user 'r', password "
                             "'s3cret')"),
            "CREATE USER MAPPING FOR app SERVER s OPTIONS (user 'r', password '***')");
  EXPECT_EQ(mask_sql_secrets("ALTER USER MAPPING FOR app SERVER s OPTIONS (SET \"password\" 'x1', "
                             "ADD sslpassword 'x2')"),
            "ALTER USER MAPPING FOR app SERVER s OPTIONS (SET \"password\" '***', ADD sslpassword "
            "'***')");
}

TEST(MaskSqlSecrets, MasksConninfosInsideConstants) {
  EXPECT_EQ(mask_sql_secrets("SELECT dblink_connect('c1', 'host=db user=app password=s3cret')"),
            "SELECT dblink_connect('c1', 'host=db user=app password=***')");
  EXPECT_EQ(mask_sql_secrets("SELECT * FROM dblink('host=db password=''a b''', 'SELECT 1') AS t(x "
                             "int)"),
            "SELECT * FROM dblink('host=db password=***', 'SELECT 1') AS t(x int)");
  EXPECT_EQ(mask_sql_secrets("CREATE SUBSCRIPTION s CONNECTION 'postgresql://rep:s3cret@db/app' "
                             "PUBLICATION p"),
            "CREATE SUBSCRIPTION s CONNECTION 'postgresql://rep:***@db/app' PUBLICATION p");
  EXPECT_EQ(mask_sql_secrets("SELECT dblink_exec($$host=db password=s3cret$$, 'VACUUM')"),
            "SELECT dblink_exec('host=db password=***', 'VACUUM')");
}

TEST(MaskSqlSecrets, LeavesOtherSqlAlone) {
  for (const std::string sql : {
           "SELECT password FROM users WHERE name = 'password'",
           "UPDATE t SET v = 'x' -- password 'not a constant here'",
           "SELECT $1, $2::text, a$b FROM t /* PASSWORD 'in a comment' */",
           "ALTER ROLE app PASSWORD NULL",
           "SELECT 'it''s', E'a\\nb', $q$x$q$, \"Password\"",
       }) {
    EXPECT_EQ(mask_sql_secrets(sql), sql);
  }
}

// pg_stat_activity.query is cut at track_activity_query_size: a constant
// the cut leaves open is masked to the end.
TEST(MaskSqlSecrets, MasksAConstantCutOffByTheEnd) {
  EXPECT_EQ(mask_sql_secrets("ALTER ROLE a PASSWORD 's3cr"), "ALTER ROLE a PASSWORD '***'");
  EXPECT_EQ(mask_sql_secrets("SELECT dblink_connect('password=s3cret host=d"),
            "SELECT dblink_connect('password=*** host=d'");
}

TEST(MaskSqlSecrets, MaskingAgainChangesNothing) {
  for (const std::string sql : {
           "ALTER ROLE a PASSWORD E'x\\\\y' LOGIN",
           "SELECT dblink_connect(E'password=a\\'b host=c')",
           "SELECT dblink('password=''x y'' host=c', $$SELECT 'q'$$)",
           "ALTER ROLE a PASSWORD 's3cr",
           "SELECT dblink_connect('password=s3cret host=d",
           "CREATE USER MAPPING FOR a SERVER s OPTIONS (password $t$x$t$)",
       }) {
    const auto once = mask_sql_secrets(sql);
    EXPECT_EQ(once.find("s3cret"), std::string::npos) << once;
    EXPECT_EQ(mask_sql_secrets(once), once) << sql;
  }
}

}  // namespace
}  // namespace stallscope
