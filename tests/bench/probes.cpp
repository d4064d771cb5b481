#include "tests/bench/probes.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace rjg::bench {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::uint64_t cpu_ns(pid_t pid) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream in(task.path() / "schedstat");
    std::uint64_t on_cpu = 0;
    if (in >> on_cpu) total += on_cpu;
  }
  return total;
}

std::size_t thread_count(pid_t pid) {
  std::size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(fmt::format("/proc/{}/task", pid), ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

}  // namespace rjg::bench
