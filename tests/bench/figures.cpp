#include "tests/bench/figures.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace rjg::bench {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(std::min<double>(v.size() - 1, std::max(0.0, p / 100.0 * (v.size() - 1) + 0.5)));
  return v[idx];
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

std::string ratio_text(double a, double b) { return b > 0 ? fmt::format("x{:.2f}", a / b) : std::string("-"); }

std::string last_line(const std::string& text) {
  const auto end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return {};
  const auto newline = text.rfind('\n', end);
  const auto start = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(start, end - start + 1);
}

}  // namespace rjg::bench
