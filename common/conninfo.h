// Masking secrets before anything is stored or printed.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace stallscope {

// Returns `conninfo` (key=value or postgres:// URI) with the password
// replaced by "***". Uses libpq's PQconninfoParse; a URI, and text libpq
// cannot parse, is returned with the patterns mask_args lists masked by hand.
// Example: mask_conninfo("host=db password=s3cret") == "host=db password=***".
std::string mask_conninfo(const std::string& conninfo);

// `message` (e.g. libpq's error about `conninfo`, which may quote it) with
// every password written in `conninfo` — a URI's user-info secret,
// password=… values, parsable or not — and the patterns mask_conninfo
// masks replaced by "***".
// Example: mask_conninfo_message(R"(bad token: "s3c%zz")", "postgresql://u:s3c%zz@h")
//          == R"(bad token: "***")".
std::string mask_conninfo_message(std::string message, const std::string& conninfo);

// Throws Error(usage) "invalid conninfo '<masked>': <libpq's reason>" when
// libpq cannot parse `conninfo` (key=value or URI). Empty is valid (PG*
// environment variables and defaults apply).
void check_conninfo(const std::string& conninfo);

// pgbench's and psql's way of naming the server, folded into one conninfo:
// `conninfo` may be a bare database name (no '=' and not a URI, e.g.
// "shop"), which becomes dbname='shop'; each of `host`, `port`, `user`
// given (-h, -p, -U) is appended as host=…, port=…, user=… (quoted as libpq
// wants), so it overrides the same keyword earlier in a key=value conninfo.
// A URI cannot take them: Error(usage) "cannot combine -h/-p/-U with the URI
// conninfo '<masked>'". Without flags, a key=value conninfo or URI is
// returned unchanged.
// Example: with_connection_flags("shop", "/tmp", "5433", {}) ==
//          "dbname=shop host=/tmp port=5433".
std::string with_connection_flags(const std::string& conninfo,
                                  const std::optional<std::string>& host,
                                  const std::optional<std::string>& port,
                                  const std::optional<std::string>& user);

// The value of `keyword` (e.g. "dbname") given in `conninfo` (key=value or
// URI, parsed by libpq's PQconninfoParse), or nullopt when it is not given
// or the text does not parse. PG* environment variables are not consulted.
// Example: conninfo_value("host=db dbname=shop", "dbname") == "shop".
std::optional<std::string> conninfo_value(const std::string& conninfo, const std::string& keyword);

// Each argument of `argv` with its secrets replaced by "***", in the same
// order (what mask_command_line quotes and join_args_masked joins). Masked:
// - URI user-info, any scheme, anywhere in an argument: the secret of
//   scheme://user:secret@host runs from its first ':' to the last '@'
//   before the next '/' or whitespace (so it may hold '@', ':', '?', '#');
// - NAME=value, NAME = 'value', "NAME=value" and ?NAME=value& anywhere in an
//   argument, for a secret NAME: one that, in lower case and without its
//   separators ('-', '_', '.'), ends in password, passwd, passphrase,
//   secret, token, apikey, accesskey or secretkey (PGPASSWORD, --client-secret,
//   AWS_SECRET_ACCESS_KEY), or whose last part is "pass" (--pass, DB_PASS)
//   or, after another part, "pwd" (MYSQL_PWD; not the shell's PWD and
//   OLDPWD). --key, --key-file, --password-file and --max-tokens are not;
// - the value after an option -NAME or --NAME with a secret NAME
//   (--password S, --client-secret S, -pass S): the next argument, or the
//   next word in the same argument (a process title with spaces,
//   "app --password S"); not after the switches --no-…, --skip-…, --ask-…;
// - -pSECRET once a MySQL or MariaDB client was named (a program, any path,
//   whose name starts with mysql, mariadb or mariabackup and holds only
//   letters, digits, '-', '_': mysqlimport, mariadb-dump; not mysql.db); the
//   -p of psql and pgbench is a port;
// - once the program is named: sshpass -p SECRET (or -pSECRET), redis-cli
//   (valkey-cli, keydb-cli) -a SECRET, openssl -passin/-passout SECRET, and
//   the SECRET of curl -u/--user/-U/--proxy-user USER:SECRET (also
//   -uUSER:SECRET, --user=USER:SECRET);
// - HTTP credentials: after Authorization: and Proxy-Authorization: (a
//   known scheme kept: "Authorization: Bearer ***"), and after NAME: for a
//   secret NAME of two parts or more (X-Api-Key: ***), to the end of the
//   line or to the quote around the header.
// A value ends at whitespace (one that starts with a quote, 'a b' or "a b",
// at its closing quote), at the quote before a quoted "NAME=value", and at
// '&' after ?NAME= or &NAME=. Idempotent (masking the result again changes nothing), and
// linear in the total length.
// Example: mask_args({"mysqlimport", "-pS3cret", "db"}) ==
//          {"mysqlimport", "-p***", "db"}.
std::vector<std::string> mask_args(const std::vector<std::string>& argv);

// Joins argv into one line a POSIX shell would split back into the same
// arguments (single-quoted where needed), masked as mask_args masks them and
// then with the passwords SQL carries in each argument masked too
// (mask_sql_secrets: psql -c "ALTER ROLE app PASSWORD '***'", run --sql=…).
// Example: {"run", "--sql", "SELECT 'x'"} → "run --sql 'SELECT '\''x'\'''".
std::string mask_command_line(const std::vector<std::string>& argv);

// Joins arguments with single spaces exactly as they are (no quoting), masked
// as mask_command_line masks them. For process command lines read from /proc, which
// are stored as the process shows them.
std::string join_args_masked(const std::vector<std::string>& args);

}  // namespace stallscope
