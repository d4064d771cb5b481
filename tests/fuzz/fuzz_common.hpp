// Shared by the fuzz targets: an invariant check that stops the fuzzer with a readable reason.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace rjg::fuzz {

// libFuzzer treats abort() as a crash and saves the input as crash-<sha1> (see deploy/fuzz.sh).
[[noreturn]] inline void invariant_failed(const char* condition, std::string_view detail, const char* file, int line) {
  std::fprintf(stderr, "\n==== fuzz invariant violated at %s:%d: %s\n", file, line, condition);
  if (!detail.empty()) std::fprintf(stderr, "==== %.*s\n", static_cast<int>(detail.size()), detail.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace rjg::fuzz

#define RJG_FUZZ_CHECK(condition, detail)                                                    \
  do {                                                                                      \
    if (!(condition)) ::rjg::fuzz::invariant_failed(#condition, (detail), __FILE__, __LINE__); \
  } while (0)
