// Small helpers the benchmark programs share to turn their measurements into table cells.
#pragma once

#include <string>
#include <vector>

namespace rjg::bench {

// The p-th percentile (0 to 100) of v, nearest rank; 0 for no values.
double percentile(std::vector<double> v, double p);
// The arithmetic mean; 0 for no values.
double mean(const std::vector<double>& v);
// "x1.25" for a / b; "-" when b is not positive.
std::string ratio_text(double a, double b);
// The last non-empty line of a text (of a process's stderr: its last message).
std::string last_line(const std::string& text);

}  // namespace rjg::bench
