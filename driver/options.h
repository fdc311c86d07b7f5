// Checking DriverOptions (driver/driver.h) before anything connects.
// Internal to driver/.
#pragma once

#include "driver/driver.h"

namespace stallscope::driver::detail {

// --pipeline N: at most this many transactions in flight per connection.
inline constexpr int kMaxPipeline = 256;

// Throws Error(usage) "cannot start the driver: …" (or "cannot use
// --pipeline …", "cannot run the SQL: …") for values that make no sense
// together: -c/-j below 1, neither or both of -T and -t, empty SQL, -R/-L
// not positive, --skip-late without -R and -L, --pipeline out of range or
// with what it cannot run, -r without scripts.
void check_options(const DriverOptions& o);

}  // namespace stallscope::driver::detail
