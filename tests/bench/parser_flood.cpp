#include "tests/bench/parser_flood.hpp"

#include "common/pickle/pickle_policy.hpp"
#include "common/protocol/message.hpp"
#include "common/protocol/params.hpp"
#include "tests/unit/hash_flood.hpp"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace rjg::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace json = boost::json;
using namespace rjg::test;

// The best of `runs` timings of f, in seconds.
template <typename F>
double best_time(int runs, F&& f) {
  double best = 1e300;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

// The relay path's parsing of one run_keyword frame: classify, bind, pickle check.
void scan_frame(const std::string& body) {
  auto classified = protocol::parse_message(body, protocol::JsonLimits{64, std::size_t{1} << 24});
  const auto* m = std::get_if<protocol::Message>(&classified);
  if (!m) throw std::runtime_error("the flood frame was not classified");
  auto bound = protocol::bind_run_keyword(*m);
  const auto* p = std::get_if<protocol::RunKeyword>(&bound);
  if (!p) throw std::runtime_error("the flood frame's params did not bind");
  if (pickle::inspect_pickles_text(p->of(p->kwargs), pickle::PickleMode::data_only, "kwargs"))
    throw std::runtime_error("the flood frame's pickle check refused it");
}

}  // namespace

void parser_flood_report(unsigned flood_stages, unsigned boost_flood_stages, std::ostream& out) {
  // Boost.JSON's salt is the table's address: with a fixed mmap threshold a large table is always
  // mmapped, at a page boundary plus malloc's header, which the colliding keys are made for.
  ::mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  out << fmt::format("{:<32} {:>9} {:>11} {:>12} {:>12} {:>8}\n", "parser", "keys", "frame bytes", "colliding ms",
                     "ordinary ms", "ratio");
  auto row = [&](std::string_view parser, unsigned stages, std::size_t bytes, double flood, double plain) {
    out << fmt::format("{:<32} {:>9} {:>11} {:>12.2f} {:>12.2f} {:>8.2f}\n", parser, std::size_t{1} << stages, bytes,
                       flood * 1e3, plain * 1e3, plain > 0 ? flood / plain : 0);
  };
  // Boost.JSON first: later frees leave free heap that a large table could be carved from, at an
  // address the keys are not made for.
  if (boost_flood_stages > 0) {
    const std::string flood = object_of_keys(colliding_keys(boost_flood_stages));
    const std::string plain = object_of_keys(ordinary_keys(boost_flood_stages));
    const double t_plain = best_time(3, [&] { (void)json::parse(plain); });
    const double t_flood = best_time(1, [&] { (void)json::parse(flood); });
    row("parser: Boost.JSON json::parse", boost_flood_stages, flood.size(), t_flood, t_plain);
  }
  if (flood_stages > 0) {
    auto frame = [](const std::vector<std::string>& keys) {
      return fmt::format(R"({{"jsonrpc":"2.0","id":1,"method":"robot/run_keyword","params":{{"library_token":"t",)"
                         R"("name":"Echo","args":[],"kwargs":{}}}}})",
                         object_of_keys(keys));
    };
    const std::string flood = frame(colliding_keys(flood_stages)), plain = frame(ordinary_keys(flood_stages));
    const double t_plain = best_time(3, [&] { scan_frame(plain); });
    const double t_flood = best_time(3, [&] { scan_frame(flood); });
    row("parser: gateway relay path", flood_stages, flood.size(), t_flood, t_plain);
  }
}

}  // namespace rjg::bench
