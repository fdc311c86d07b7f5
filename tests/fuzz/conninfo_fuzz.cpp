// libFuzzer target: the masking of secrets (common/conninfo.h) —
// mask_conninfo, check_conninfo, conninfo_value, with_connection_flags on
// the input as a conninfo; mask_command_line and join_args_masked on it as
// an argv split at NUL bytes. And the promise itself: a secret given in each
// spelling guarded here never appears in what is printed or stored.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/conninfo.h"
#include "common/error.h"
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

  if (const std::string s = secret_of(text); !s.empty()) {
    FUZZ_CHECK(hides(mask_conninfo("host=db password=" + s), s));
    FUZZ_CHECK(hides(mask_conninfo("postgresql://u:" + s + "@db/x"), s));
    FUZZ_CHECK(hides(mask_command_line({"psql", "--password", s}), s));
    FUZZ_CHECK(hides(mask_command_line({"x", "--token=" + s}), s));
    FUZZ_CHECK(hides(join_args_masked({"postgres: u x host=h password=" + s}), s));
    FUZZ_CHECK(hides(mask_command_line({"mysql", "-p" + s}), s));
    FUZZ_CHECK(hides(mask_command_line({"env", "PGPASSWORD=" + s, "psql"}), s));
  }
  return 0;
}
