// robot-classic-bridge: a classic Robot Framework remote server (XML-RPC over HTTP: PythonRemoteServer,
// jrobotremoteserver, nrobotremote, in-house ones) served as a worker of the JSON-RPC protocol. The
// gateway starts it for a library configured with upstream = "http://HOST:PORT[/PATH]"; it runs by hand
// too (--tcp).
//
//   robot-classic-bridge --url http://HOST:PORT[/PATH] [--name NAME] [--connect-timeout SECONDS]
//                        [--max-bytes N] [--stdio | --tcp HOST:PORT] [--log-level LEVEL]
//
// An import asks the server for its library information (get_library_information, or the per-keyword
// methods of servers that predate it) and answers a definition built from it. A keyword call is the
// server's run_keyword, and does what Robot's own Remote library (robot/libraries/Remote.py) does with the
// same call, so that a suite gets the same from this route as from Remote: the arguments are coerced as
// Remote coerces them (ArgumentCoercer: see remote_argument), the output becomes robot/log notifications
// (in order, before the answer, split at Robot's *LEVEL* markers as Robot splits it), status FAIL the
// protocol's error (message, traceback, CONTINUABLE or FATAL), the return value the protocol's value as
// Remote returns it (no return value "", structs DotDicts, base64 bytes, dateTime a datetime: pickled where
// JSON has no such value), and Remote's texts for what goes wrong ("Invalid remote result dictionary: ...",
// "Connection to remote server broken: ...").
// Every call opens a connection of its own, as Robot's Remote library does. The server cannot be asked to
// stop a keyword: the gateway's keyword_timeout ends this process, which closes the connection.
//
// The parts: xmlrpc_server.cpp (the calls to the server), library_information.cpp (an import's
// definition), keyword_calls.cpp (a keyword call); classic_bridge.hpp is what they share.
#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "config/network.hpp"
#include "workers/classic_bridge/classic_bridge.hpp"
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace {
namespace sdk = rjg::sdk;
namespace protocol = rjg::protocol;
using namespace std::chrono_literals;
using rjg::classic_bridge::definition;
using rjg::classic_bridge::fetch_information;
using rjg::classic_bridge::LimitExceeded;
using rjg::classic_bridge::run_keyword;
using rjg::classic_bridge::TransportError;
using rjg::classic_bridge::unreachable;
using rjg::classic_bridge::XmlRpcServer;

struct Options {
  std::optional<rjg::config::UpstreamAddress> url;
  std::string name = "Remote";
  std::chrono::milliseconds connect_timeout = 10s;
  std::size_t max_bytes = 16u * 1024 * 1024;  // the gateway passes the library's max_answer_bytes
};

int usage(const char* program, std::string_view problem) {
  if (!problem.empty()) std::fprintf(stderr, "%s: %.*s\n", program, static_cast<int>(problem.size()), problem.data());
  std::fprintf(stderr,
               "usage: %s --url http://HOST:PORT[/PATH] [--name NAME] [--connect-timeout SECONDS] [--max-bytes N]\n"
               "       [--stdio | --tcp HOST:PORT] [--log-level LEVEL]\n"
               "  --url URL                 the classic remote server (no path: /RPC2, as Python's client posts)\n"
               "  --name NAME               the library's name in its definition (default Remote)\n"
               "  --connect-timeout SECONDS how long a connection to the server may take (default 10)\n"
               "  --max-bytes N             the largest answer read from the server (default 16 MiB)\n"
               "%s",
               program, sdk::serve_usage(program).c_str());
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    if (arg == "--url") {
      auto v = value();
      std::string why;
      if (!v || !(options.url = rjg::config::parse_upstream_address(*v, &why)) || !options.url->http)
        return usage(argv[0], fmt::format("--url needs http://HOST:PORT[/PATH]{}", why.empty() ? "" : ": " + why));
    } else if (arg == "--name") {
      auto v = value();
      if (!v || v->empty()) return usage(argv[0], "--name needs a name");
      options.name = *v;
    } else if (arg == "--connect-timeout") {
      auto v = value();
      char* end = nullptr;
      const double seconds = v ? std::strtod(v->c_str(), &end) : -1;
      if (!v || end != v->c_str() + v->size() || !(seconds > 0))
        return usage(argv[0], "--connect-timeout needs a number of seconds above 0");
      options.connect_timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
    } else if (arg == "--max-bytes") {
      auto v = value();
      char* end = nullptr;
      const auto n = v ? std::strtoull(v->c_str(), &end, 10) : 0;
      if (!v || end != v->c_str() + v->size() || n < 1024) return usage(argv[0], "--max-bytes needs a number of at least 1024");
      options.max_bytes = n;
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0], {});
      return 0;
    } else {
      rest.push_back(arg);
    }
  }
  if (!options.url) return usage(argv[0], "--url is required");
  sdk::ServeOptions serve;
  if (auto problem = sdk::parse_serve_options(rest, serve)) return usage(argv[0], *problem);

  XmlRpcServer server(*options.url, options.connect_timeout, options.max_bytes);
  sdk::Library library(options.name, fmt::format("The classic remote server at {}.", server.url()));
  library.server_name("robot-classic-bridge");
  library.on_import([&](sdk::ImportContext& context) {
    if (!context.import.args.empty() || !context.import.kw_args.empty())
      throw sdk::RpcError(protocol::kInvalidParams,
                          fmt::format("Library '{}' is served by the classic remote server at {}, which hosts one "
                                      "instance of it: it takes no import arguments.",
                                      options.name, server.url()));
    try {
      context.extra_result["definition"] = definition(options.name, fetch_information(server));
    } catch (const TransportError& e) {
      throw unreachable(server, e);
    } catch (const LimitExceeded& e) {
      throw sdk::RpcError(protocol::kWorkerFailed, e.what());
    }
  });
  library.dynamic_keywords([&](sdk::Call& call) { return run_keyword(server, call); });
  rjg::log::info("serving the classic remote server at {} as library {}", server.url(), options.name);
  return sdk::serve(library, serve);
}
