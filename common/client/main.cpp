// robot-jsonrpc-cli: talks the Robot Framework JSON-RPC remote protocol to any server (the gateway
// or the reference server) from a shell: list libraries, show keywords, run one keyword.
#include "common/client/client.hpp"
#include "common/pickle/python_json.hpp"
#include "common/protocol/protocol.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace json = boost::json;
using rjg::client::RpcClient;
using rjg::client::RpcReply;

constexpr int kExitOk = 0;
constexpr int kExitKeywordFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitError = 3;

constexpr std::string_view kDefaultServer = "tcp://127.0.0.1:8271";

constexpr std::string_view kUsage = R"(Usage: robot-jsonrpc-cli [--server tcp://HOST:PORT] [--timeout SECONDS] COMMAND [ARGS]

Speaks the Robot Framework JSON-RPC remote protocol to a server (the gateway or the reference server).

Commands:
  libraries
      Initialize, print the server's name, version and the libraries it serves.
  keywords LIB [--arg JSON]... [--kwarg NAME=JSON]...
      Import LIB (with the given library arguments) and print each keyword with its arguments
      and the first line of its documentation.
  run LIB KEYWORD [JSON_ARG]... [--kw NAME=JSON]... [--import-arg JSON]... [--import-kwarg NAME=JSON]...
      Import LIB, run KEYWORD, print its log messages to stderr as "[LEVEL] message" as they
      arrive and its return value as JSON to stdout. An argument that is not valid JSON is
      passed as a plain string: `run Calculator Add 1 2`, `run StringTools Upper hello`.
      Values travel as Python peers send them: nested JSON arguments are pickled, and a pickled
      result is printed decoded, as JSON when it has a JSON form, else as Python's repr().
      Use -- to pass arguments that start with "--".

Options:
  --server tcp://HOST:PORT   server address (default tcp://127.0.0.1:8271)
  --timeout SECONDS          limit for each wait on the server (default 30; 0 = no limit)
  --help                     show this help

Exit codes: 0 success, 1 keyword failed (its own failure or the server's decision about the call: a
crashed worker, a keyword timeout, a refused value), 2 usage error, 3 connection, protocol or JSON-RPC error.
)";

struct UsageError {
  std::string message;
};

// A server-side failure worth exit code 3: the server's message and code are printed.
struct ServerError {
  std::string message;
};

struct Options {
  std::string server{kDefaultServer};
  double timeout_seconds = 30;
  std::string command;
  std::vector<std::string> positional;      // after the command
  json::array args;                         // --arg / JSON_ARG
  json::object kwargs;                      // --kwarg / --kw
  json::array import_args;                  // --import-arg
  json::object import_kwargs;               // --import-kwarg
};

// JSON if it parses, otherwise the text itself as a string; in Python's dialect, as the stock client
// sends it: a nested value (a list of lists, a dict holding a list) pickled, which a Python server
// needs (it refuses nested JSON) and native ones read as well.
json::value json_or_string(const std::string& text) {
  json::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return json::string(text);
  try {
    return rjg::pickle::python_dialect(v, "the value");
  } catch (const rjg::pickle::ValueError& e) {
    throw UsageError{fmt::format("'{}' cannot be sent: {}", text, e.what())};
  }
}

// A value as the CLI prints it. Python peers send nested values, bytes, datetimes... as pickles
// ({"__pickled__": "<hex>"}): decoded under the data-only policy and shown as plain JSON (as Python's
// json.dumps would write them) when they have a JSON form, else as Python's repr() (b'\x00', Decimal('1.5')).
// A pickle outside the data-only subset is shown as it was sent.
std::string shown_value(const json::value& v) {
  const std::string text = json::serialize(v);
  if (!rjg::pickle::holds_pickle(v)) return text;
  try {
    return json::serialize(rjg::pickle::plain_json(text, "result"));
  } catch (const rjg::pickle::ValueError&) {
  }
  try {
    return rjg::pickle::py_repr(rjg::pickle::from_json(text, "result"));
  } catch (const rjg::pickle::ValueError&) {
    return text;
  }
}

std::pair<std::string, json::value> name_value(const std::string& option, const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError{fmt::format("{} expects NAME=JSON, got '{}'", option, text)};
  return {text.substr(0, eq), json_or_string(text.substr(eq + 1))};
}

Options parse_args(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  bool options_done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& name) -> const std::string& {
      if (i + 1 >= args.size()) throw UsageError{fmt::format("{} needs a value", name)};
      return args[++i];
    };
    if (!options_done && a.size() > 2 && a.starts_with("--")) {
      // --name=value is accepted as well as --name value.
      std::string name = a;
      std::optional<std::string> inline_value;
      if (auto eq = a.find('='); eq != std::string::npos && (a.starts_with("--server") || a.starts_with("--timeout"))) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
      auto get = [&]() -> std::string { return inline_value ? *inline_value : value(name); };
      if (name == "--help") {
        throw UsageError{""};
      } else if (name == "--server") {
        o.server = get();
      } else if (name == "--timeout") {
        std::string t = get();
        try {
          std::size_t used = 0;
          o.timeout_seconds = std::stod(t, &used);
          if (used != t.size() || o.timeout_seconds < 0 || !std::isfinite(o.timeout_seconds)) throw 0;
        } catch (...) {
          throw UsageError{fmt::format("--timeout expects a number of seconds, got '{}'", t)};
        }
      } else if (name == "--arg" && o.command == "keywords") {
        o.args.push_back(json_or_string(value(name)));
      } else if (name == "--kwarg" && o.command == "keywords") {
        auto [k, v] = name_value(name, value(name));
        o.kwargs[k] = std::move(v);
      } else if (name == "--kw" && o.command == "run") {
        auto [k, v] = name_value(name, value(name));
        o.kwargs[k] = std::move(v);
      } else if (name == "--import-arg" && o.command == "run") {
        o.import_args.push_back(json_or_string(value(name)));
      } else if (name == "--import-kwarg" && o.command == "run") {
        auto [k, v] = name_value(name, value(name));
        o.import_kwargs[k] = std::move(v);
      } else {
        throw UsageError{o.command.empty() ? fmt::format("unknown option {}", a)
                                           : fmt::format("unknown option {} for '{}'", a, o.command)};
      }
      continue;
    }
    if (!options_done && (a == "-h")) throw UsageError{""};
    if (!options_done && a == "--") {
      options_done = true;
      continue;
    }
    if (o.command.empty()) {
      o.command = a;
      if (o.command != "libraries" && o.command != "keywords" && o.command != "run")
        throw UsageError{fmt::format("unknown command '{}'", a)};
      continue;
    }
    o.positional.push_back(a);
  }
  if (o.command.empty()) throw UsageError{"no command given"};
  if (o.command == "libraries" && !o.positional.empty())
    throw UsageError{"'libraries' takes no arguments"};
  if (o.command == "keywords" && o.positional.size() != 1) throw UsageError{"'keywords' needs exactly one LIB"};
  if (o.command == "run") {
    if (o.positional.size() < 2) throw UsageError{"'run' needs LIB and KEYWORD"};
    for (std::size_t i = 2; i < o.positional.size(); ++i) o.args.push_back(json_or_string(o.positional[i]));
  }
  return o;
}

std::string as_text(const json::value& v) {
  if (v.is_string()) return std::string(v.get_string());
  return json::serialize(v);
}

std::string field(const json::object& o, std::string_view name) {
  auto it = o.find(name);
  if (it == o.end() || it->value().is_null()) return {};
  return as_text(it->value());
}

std::string first_line(std::string_view text) {
  auto nl = text.find('\n');
  return std::string(text.substr(0, nl));
}

// A failed JSON-RPC call: message and code, for exit code 3.
[[noreturn]] void fail_reply(std::string_view what, const RpcReply& reply) {
  throw ServerError{fmt::format("{} failed: {} (JSON-RPC error {})", what, reply.error_message(), reply.error_code())};
}

// "name: type = default", "*args", "**kwargs", "*", "/".
std::string format_argument(const json::object& arg) {
  std::string name = field(arg, "name");
  std::string kind = field(arg, "kind");
  std::string type = field(arg, "type");
  std::string out;
  if (kind == "VAR_POSITIONAL") out = "*" + name;
  else if (kind == "VAR_NAMED") out = "**" + name;
  else if (kind == "NAMED_ONLY_MARKER") return "*";
  else if (kind == "POSITIONAL_ONLY_MARKER") return "/";
  else out = name;
  if (!type.empty()) out += ": " + type;
  auto hd = arg.find("has_default");
  if (hd != arg.end() && hd->value().is_bool() && hd->value().get_bool()) {
    auto d = arg.find("default");
    out += " = " + (d == arg.end() ? std::string("null") : shown_value(d->value()));
  }
  return out;
}

std::string format_signature(const json::object& kw) {
  std::string out = field(kw, "name") + "(";
  if (auto it = kw.find("args"); it != kw.end() && it->value().is_array()) {
    bool first = true;
    for (const auto& a : it->value().get_array()) {
      if (!a.is_object()) continue;
      if (!first) out += ", ";
      first = false;
      out += format_argument(a.get_object());
    }
  }
  return out + ")";
}

class Session {
 public:
  explicit Session(const Options& o) : client_(timeout_of(o)) {
    client_.set_client_info("robot-jsonrpc-cli", "0.1.0");
    client_.connect(std::string_view(o.server));
  }

  json::object initialize() {
    try {
      init_ = client_.initialize();
    } catch (const rjg::client::RpcCallError& e) {
      throw ServerError{fmt::format("robot/initialize failed: {} (JSON-RPC error {})", e.server_message(), e.code())};
    }
    return init_;
  }

  // Imports lib; returns (token, definition).
  std::pair<std::string, json::object> import(const std::string& lib, json::array args, json::object kwargs) {
    auto reply = client_.import_library(lib, std::move(args), std::move(kwargs));
    if (!reply.ok()) fail_reply(fmt::format("import of library '{}'", lib), reply);
    if (!reply.result->is_object()) throw ServerError{"robot/import_library returned a result that is not an object"};
    const auto& r = reply.result->get_object();
    auto tok = r.find("token");
    if (tok == r.end() || !tok->value().is_string()) throw ServerError{"robot/import_library returned no token"};
    json::object def;
    if (auto d = r.find("definition"); d != r.end() && d->value().is_object()) def = d->value().get_object();
    token_ = std::string(tok->value().get_string());
    return {*token_, def};
  }

  RpcReply run(const std::string& keyword, json::array args, json::object kwargs) {
    return client_.run_keyword(*token_, keyword, std::move(args), std::move(kwargs), [](const rjg::protocol::Message& m) {
      if (m.method() != rjg::protocol::kLog && m.method() != rjg::protocol::kTrace) return;
      std::string level = "INFO";
      std::string message;
      // params() parses a fresh copy: keep it while reading from it.
      if (const json::value params = m.params(); params.is_object()) {
        const auto& p = params.get_object();
        if (auto l = field(p, "level"); !l.empty()) level = l;
        message = field(p, "message");
      }
      if (m.method() == rjg::protocol::kTrace) level = "TRACE " + level;
      std::cerr << fmt::format("[{}] {}\n", level, message) << std::flush;
    });
  }

  // finalize (if imported), shutdown, exit (if announced), close. Errors here count as failures.
  void finish() {
    if (token_) {
      auto reply = client_.finalize_library(*token_);
      token_.reset();
      if (!reply.ok()) fail_reply("robot/finalize_library", reply);
    }
    auto reply = client_.shutdown();
    if (!reply.ok()) fail_reply("robot/shutdown", reply);
    bool support_exit = false;
    if (auto c = init_.find("capabilities"); c != init_.end() && c->value().is_object()) {
      auto se = c->value().get_object().find("support_exit");
      support_exit = se != c->value().get_object().end() && se->value().is_bool() && se->value().get_bool();
    }
    if (support_exit) client_.exit();
    client_.close();
  }

 private:
  static std::chrono::milliseconds timeout_of(const Options& o) {
    if (o.timeout_seconds == 0) return std::chrono::hours(24 * 365);
    return std::chrono::milliseconds(static_cast<long long>(std::ceil(o.timeout_seconds * 1000)));
  }

  RpcClient client_;
  json::object init_;
  std::optional<std::string> token_;
};

int cmd_libraries(const Options& o) {
  Session s(o);
  auto init = s.initialize();
  std::string name, version;
  if (auto it = init.find("server_info"); it != init.end() && it->value().is_object()) {
    name = field(it->value().get_object(), "name");
    version = field(it->value().get_object(), "version");
  }
  std::cout << fmt::format("server: {} {}\n", name.empty() ? "(unnamed)" : name, version);
  json::array libraries;
  bool support_exit = false;
  if (auto c = init.find("capabilities"); c != init.end() && c->value().is_object()) {
    const auto& caps = c->value().get_object();
    if (auto l = caps.find("libraries"); l != caps.end() && l->value().is_array()) libraries = l->value().get_array();
    if (auto se = caps.find("support_exit"); se != caps.end() && se->value().is_bool()) support_exit = se->value().get_bool();
  }
  std::cout << fmt::format("support_exit: {}\n", support_exit);
  if (libraries.empty()) {
    std::cout << "libraries: (any)\n";
  } else {
    std::cout << "libraries:\n";
    for (const auto& l : libraries) std::cout << "  " << as_text(l) << "\n";
  }
  std::cout.flush();
  s.finish();
  return kExitOk;
}

int cmd_keywords(const Options& o) {
  Session s(o);
  s.initialize();
  auto [token, def] = s.import(o.positional[0], o.args, o.kwargs);
  std::string header = "library: " + field(def, "name");
  std::vector<std::string> extras;
  if (auto v = field(def, "version"); !v.empty()) extras.push_back("version " + v);
  if (auto v = field(def, "scope"); !v.empty()) extras.push_back("scope " + v);
  if (!extras.empty()) header += " (" + fmt::format("{}", fmt::join(extras, ", ")) + ")";
  std::cout << header << "\n";
  if (auto doc = first_line(field(def, "doc")); !doc.empty()) std::cout << "  " << doc << "\n";
  std::cout << "keywords:\n";
  if (auto it = def.find("keywords"); it != def.end() && it->value().is_array()) {
    for (const auto& kw : it->value().get_array()) {
      if (!kw.is_object()) continue;
      std::cout << "  " << format_signature(kw.get_object()) << "\n";
      if (auto doc = first_line(field(kw.get_object(), "doc")); !doc.empty()) std::cout << "      " << doc << "\n";
    }
  }
  std::cout.flush();
  s.finish();
  return kExitOk;
}

int cmd_run(const Options& o) {
  Session s(o);
  s.initialize();
  s.import(o.positional[0], o.import_args, o.import_kwargs);
  auto reply = s.run(o.positional[1], o.args, o.kwargs);
  // The gateway, like the reference server, answers every failure of the call with a result that carries
  // the error (the type says whose: WorkerFailed, KeywordTimeout, PickleRefused... or the keyword's own
  // exception): exit code 1. A JSON-RPC error here is the server refusing the request itself.
  if (!reply.ok()) fail_reply(fmt::format("keyword '{}'", o.positional[1]), reply);
  int code = kExitOk;
  if (const auto* err = reply.keyword_error()) {
    std::cerr << fmt::format("keyword '{}' failed: {}\n", o.positional[1], field(*err, "message"));
    if (auto t = field(*err, "type"); !t.empty()) std::cerr << "type: " << t << "\n";
    if (auto m = field(*err, "mode"); !m.empty()) std::cerr << "mode: " << m << "\n";
    if (auto tb = field(*err, "traceback"); !tb.empty()) std::cerr << "traceback:\n" << tb << (tb.ends_with('\n') ? "" : "\n");
    std::cerr.flush();
    code = kExitKeywordFailed;
  } else {
    json::value value = nullptr;
    if (reply.result->is_object()) {
      if (auto r = reply.result->get_object().find("result"); r != reply.result->get_object().end()) value = r->value();
    }
    std::cout << shown_value(value) << "\n" << std::flush;
  }
  s.finish();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_args(argc, argv);
  } catch (const UsageError& e) {
    if (e.message.empty()) {
      std::cout << kUsage;
      return kExitOk;
    }
    std::cerr << "robot-jsonrpc-cli: " << e.message << "\n\n" << kUsage;
    return kExitUsage;
  }
  try {
    if (options.command == "libraries") return cmd_libraries(options);
    if (options.command == "keywords") return cmd_keywords(options);
    return cmd_run(options);
  } catch (const ServerError& e) {
    std::cerr << "robot-jsonrpc-cli: " << e.message << "\n";
  } catch (const rjg::client::RpcError& e) {
    std::cerr << "robot-jsonrpc-cli: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "robot-jsonrpc-cli: " << e.what() << "\n";
  }
  return kExitError;
}
