// Fuzzes the configuration loader on arbitrary text.
//
// Input: the text of a TOML file. Invariants: load_string either returns a configuration with at
// least one library, or throws ConfigError listing at least one problem, each naming the file; any
// other exception (std::out_of_range from a conversion, say) or a crash is a bug. Short inputs are
// also given to the value parsers the loader uses (durations, listen addresses) directly.
#include "config/config.hpp"

#include "fuzz_common.hpp"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

namespace {

// Relative paths in the text resolve against this directory; it does not exist, so a `cwd` is
// always reported as missing and nothing outside is touched.
const std::string kPath = "/nonexistent/rjg-fuzz/gateway.toml";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  try {
    auto config = rjg::config::load_string(text, kPath);
    RJG_FUZZ_CHECK(!config.libraries.empty(), "a configuration without libraries was accepted");
    RJG_FUZZ_CHECK(!config.gateway.listen.empty(), "a configuration without listen addresses was accepted");
    for (const auto& library : config.libraries) {
      RJG_FUZZ_CHECK(config.find_library(library.name) == &library, "find_library does not find " + library.name);
      RJG_FUZZ_CHECK(!library.command.empty(), "library " + library.name + " was accepted without a command");
    }
  } catch (const rjg::config::ConfigError& e) {
    RJG_FUZZ_CHECK(!e.problems.empty(), "ConfigError without problems");
    for (const auto& problem : e.problems)
      RJG_FUZZ_CHECK(problem.starts_with(kPath + ":"), "a problem that does not name the file: " + problem);
  } catch (const std::exception& e) {
    rjg::fuzz::invariant_failed("load_string returns or throws ConfigError",
                                std::string("it threw ") + typeid(e).name() + ": " + e.what(), __FILE__, __LINE__);
  } catch (...) {
    rjg::fuzz::invariant_failed("load_string returns or throws ConfigError", "it threw a non-std exception", __FILE__,
                                __LINE__);
  }

  if (size <= 64) {
    try {
      if (auto d = rjg::config::parse_duration(text))
        RJG_FUZZ_CHECK(d->count() >= 0, "parse_duration gave a negative duration");
      std::string why;
      if (!rjg::config::parse_listen_address(text, &why))
        RJG_FUZZ_CHECK(!why.empty(), "parse_listen_address refused without saying why");
    } catch (const std::exception& e) {
      rjg::fuzz::invariant_failed("the value parsers do not throw", std::string(typeid(e).name()) + ": " + e.what(),
                                  __FILE__, __LINE__);
    }
  }
  return 0;
}
