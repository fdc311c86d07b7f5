// libFuzzer target: a whole pgbench log through
// import::PgbenchLogParser::parse_file (line reading, the 4 KiB line cap,
// kind detection, every line), twice as two files of one import, as
// `stallscope import-pgbench a.log b.log` reads them.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/error.h"
#include "pgbench_log_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  stallscope::import::PgbenchLogParser parser;
  try {
    for (const char* name : {"a.log", "b.log"}) {
      std::istringstream in(text);
      parser.parse_file(in, name);
    }
  } catch (const stallscope::Error& e) {
    FUZZ_CHECK(e.kind() == stallscope::ErrorKind::usage);
  }
  stallscope::fuzz::check_batch(parser);
  return 0;
}
