// The parser rows of rjg-bench: one frame of keys crafted to collide in Boost.JSON's hash table next to
// an ordinary frame of the same size, through the gateway's relay path and through Boost.JSON's parse.
#pragma once

#include <ostream>

namespace rjg::bench {

// Prints one row per parser. flood_stages: 2^N keys for the gateway's scanner (classify, bind, pickle
// check); boost_flood_stages: 2^N keys for Boost.JSON's json::parse (0 skips it). Changes malloc's
// mmap threshold for the rest of the process: run it first.
void parser_flood_report(unsigned flood_stages, unsigned boost_flood_stages, std::ostream& out);

}  // namespace rjg::bench
