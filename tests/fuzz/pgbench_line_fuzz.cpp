// libFuzzer target: pgbench log lines, one at a time, through
// import::PgbenchLogParser::parse_line (the input split at '\n'), as
// `stallscope import-pgbench` parses each line of a file.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "pgbench_log_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  stallscope::import::PgbenchLogParser parser;
  parser.begin_file("fuzz.log");
  try {
    while (!text.empty()) {
      const auto eol = text.find('\n');
      parser.parse_line(text.substr(0, eol));
      text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    }
    parser.end_file();
  } catch (const stallscope::Error& e) {
    FUZZ_CHECK(e.kind() == stallscope::ErrorKind::usage);
  }
  stallscope::fuzz::check_batch(parser);
  return 0;
}
