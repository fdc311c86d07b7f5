// Private to report/: number formatting and chart building shared by its
// files.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/report.h"

namespace stallscope::report::detail {

// v to 4 significant digits, so that the page's JSON carries "0.1234", not
// "0.12340000000000001"; non-finite values become 0.
inline double round_sig(double v) {
  if (!std::isfinite(v) || v == 0) return 0;
  const double scale = std::pow(10.0, 3 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
  return std::round(v * scale) / scale;
}

// An empty series of `bins` points.
inline Series series(std::string label, int bins) {
  return {std::move(label), std::vector<std::optional<double>>(static_cast<std::size_t>(bins))};
}

// Adds `c` to `charts` with its series that hold a value; a chart left
// without any is not added.
inline void keep(std::vector<Chart>& charts, Chart c) {
  std::erase_if(c.series, [](const Series& s) {
    return std::none_of(s.values.begin(), s.values.end(),
                        [](const auto& v) { return v.has_value(); });
  });
  if (!c.series.empty()) charts.push_back(std::move(c));
}

}  // namespace stallscope::report::detail
