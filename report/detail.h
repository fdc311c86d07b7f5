// Private to report/: number formatting shared by its files.
#pragma once

#include <cmath>

namespace stallscope::report::detail {

// v to 4 significant digits, so that the page's JSON carries "0.1234", not
// "0.12340000000000001"; non-finite values become 0.
inline double round_sig(double v) {
  if (!std::isfinite(v) || v == 0) return 0;
  const double scale = std::pow(10.0, 3 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
  return std::round(v * scale) / scale;
}

}  // namespace stallscope::report::detail
