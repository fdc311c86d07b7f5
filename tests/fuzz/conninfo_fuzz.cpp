// libFuzzer target: the masking of secrets (common/conninfo.h) —
// mask_conninfo, check_conninfo, conninfo_value, with_connection_flags on
// the input as a conninfo; mask_command_line and join_args_masked on it as
// an argv split at NUL bytes. And the promises themselves: a secret given in
// each spelling guarded here never appears in what is printed or stored, and
// masking is idempotent (masking the masked text or argv changes nothing).
// The same for the input as SQL text (common/sql_secrets.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/conninfo.h"
#include "common/error.h"
#include "common/sql_secrets.h"
#include "fuzz_check.h"

namespace {

// The input's longest run of letters and digits, if 8 or more, behind a
// prefix: a stand-in secret no masked output can contain by accident (the
// run alone may be "postgresql", which the output of a URI holds).
std::string secret_of(std::string_view text) {
  std::string best, cur;
  for (char c : text) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      cur += c;
      if (cur.size() > best.size()) best = cur;
    } else {
      cur.clear();
    }
  }
  return best.size() >= 8 ? "Zx9" + best : std::string();
}

bool hides(const std::string& out, const std::string& secret) {
  return out.find(secret) == std::string::npos;
}

// The input's printable characters but whitespace, '/' and '*', behind a
// prefix, if 8 or more: a password of any punctuation ('@', ':', quotes, '&',
// '=', '?', '#'), which the URI and value forms must hide whole.
std::string punctuated_secret_of(std::string_view text) {
  std::string out = "Zx9Q";
  for (char c : text) {
    if (c > ' ' && c < 0x7f && c != '/' && c != '*') out += c;
  }
  return out.size() >= 12 ? out : std::string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace stallscope;
  const std::string text(reinterpret_cast<const char*>(data), size);
  mask_conninfo(text);
  conninfo_value(text, "dbname");
  try {
    check_conninfo(text);
  } catch (const Error& e) {
    FUZZ_CHECK(e.kind() == ErrorKind::usage);
  }
  try {
    with_connection_flags(text, "h", "5432", "u");
  } catch (const Error& e) {
    FUZZ_CHECK(e.kind() == ErrorKind::usage);
  }
  std::vector<std::string> argv;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\0') {
      argv.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  mask_command_line(argv);
  join_args_masked(argv);
  const auto masked = mask_args(argv);
  FUZZ_CHECK(masked.size() == argv.size());
  FUZZ_CHECK(mask_args(masked) == masked);
  // The text as a message (mask_conninfo_message with no conninfo masks
  // the patterns only).
  const auto message = mask_conninfo_message(text, "");
  FUZZ_CHECK(mask_conninfo_message(message, "") == message);
  // The text as SQL.
  const auto sql = mask_sql_secrets(text);
  FUZZ_CHECK(mask_sql_secrets(sql) == sql);

  if (const std::string s = secret_of(text); !s.empty()) {
    FUZZ_CHECK(hides(mask_conninfo("host=db password=" + s), s));
    FUZZ_CHECK(hides(mask_conninfo("postgresql://u:" + s + "@db/x"), s));
    FUZZ_CHECK(hides(mask_command_line({"psql", "--password", s}), s));
    FUZZ_CHECK(hides(mask_command_line({"x", "--token=" + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"postgres: u x host=h password=" + s}), s));
    FUZZ_CHECK(hides(mask_command_line({"mysql", "-p" + s}), s));
    FUZZ_CHECK(hides(mask_command_line({"env", "PGPASSWORD=" + s, "psql"}), s));
    // Issue 15's hostile spellings.
    FUZZ_CHECK(hides(join_args_masked({"app --password " + s, "100"}), s));
    FUZZ_CHECK(hides(join_args_masked({"mysqlimport", "-p" + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"/usr/bin/mariadb-dump", "-u", "x", "-p" + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"env", "MYSQL_PWD=" + s, "mysql"}), s));
    FUZZ_CHECK(hides(join_args_masked({"x", "--pass=" + s, "--pass", s}), s));
    FUZZ_CHECK(hides(join_args_masked({"x", "--client-secret", s, "--client-secret=" + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"curl", "-H", "Authorization: Bearer " + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"curl", "-H", "Authorization: Basic " + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"psql", "postgresql://u:p@" + s + "@db/x"}), s));
    FUZZ_CHECK(hides(mask_conninfo("postgresql://u:p@" + s + "@db/x"), s));
    // Issue 27's command forms, and SQL text carrying a password.
    FUZZ_CHECK(hides(join_args_masked({"docker", "login", "-p", s}), s));
    FUZZ_CHECK(hides(join_args_masked({"sqlcmd", "-P", s, "-P" + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"ldapsearch", "-w", s, "-w" + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"mongosh", "-p", s}), s));
    FUZZ_CHECK(hides(join_args_masked({"openssl", "enc", "-k", s, "-K", s}), s));
    FUZZ_CHECK(hides(join_args_masked({"smbclient", "-U", "u%" + s, "-Uu%" + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"curl", "-H", "Cookie: sid=" + s}), s));
    FUZZ_CHECK(hides(mask_sql_secrets("ALTER ROLE a PASSWORD '" + s + "'"), s));
    FUZZ_CHECK(hides(mask_sql_secrets("SELECT dblink_connect('password=" + s + "')"), s));
    // After whatever the input puts before them (its own text as an argument).
    FUZZ_CHECK(hides(join_args_masked({text, "--password", s}), s));
    FUZZ_CHECK(hides(join_args_masked({text, "PGPASSWORD=" + s}), s));
  }
  if (const std::string p = punctuated_secret_of(text); !p.empty()) {
    FUZZ_CHECK(hides(join_args_masked({"psql", "postgresql://u:" + p + "@db/x"}), p));
    FUZZ_CHECK(hides(join_args_masked({"x", "--password=" + p, "MYSQL_PWD=" + p}), p));
    FUZZ_CHECK(hides(join_args_masked({"app --token " + p + " next"}), p));
    FUZZ_CHECK(hides(join_args_masked({"mysql", "-p" + p}), p));
    FUZZ_CHECK(hides(join_args_masked({"curl", "-H", "Authorization: Bearer " + p}), p));
  }
  return 0;
}
