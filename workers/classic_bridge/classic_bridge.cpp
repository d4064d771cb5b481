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
#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "common/xmlrpc/classic_values.hpp"
#include "common/xmlrpc/xmlrpc.hpp"
#include "config/network.hpp"
#include "workers/sdk/sdk.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace json = boost::json;
namespace sdk = rjg::sdk;
namespace xmlrpc = rjg::xmlrpc;

namespace protocol = rjg::protocol;
using namespace std::chrono_literals;

// The server did not answer with XML-RPC: refused, unreachable, timed out, broken (connection), an HTTP
// error (http_status), not XML-RPC (not_xml_rpc). Robot's Remote library words a keyword's failure after
// the kind (RemoteClient.run_keyword).
struct TransportError : std::runtime_error {
  enum class Kind { not_connected, connection, http_status, not_xml_rpc };
  TransportError(Kind kind, const std::string& what) : std::runtime_error(what), kind(kind) {}
  Kind kind;
};
// The server answered, beyond what the bridge takes in one answer (its bytes, values or nesting): what()
// says so, naming the server and the limit. Not a broken server: its import stays usable.
struct LimitExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class XmlRpcServer {
 public:
  XmlRpcServer(rjg::config::UpstreamAddress address, std::chrono::milliseconds connect_timeout, std::size_t max_bytes)
      : address_(std::move(address)), connect_timeout_(connect_timeout), max_bytes_(max_bytes) {}

  const std::string& url() const { return address_.text; }

  // One call on a connection of its own. A fault is an answer (Response::is_fault); an answer beyond the
  // limits throws LimitExceeded, anything else that goes wrong TransportError. An answer is parsed straight
  // into its values, at most one per 16 bytes of it, so it holds a small multiple of max_bytes at most.
  xmlrpc::Response call(std::string_view method, const xmlrpc::Array& params) {
    asio::io_context io;
    boost::system::error_code ec;
    asio::ip::tcp::resolver resolver(io);
    const auto endpoints = resolver.resolve(address_.host, std::to_string(address_.port), ec);
    if (ec)
      throw TransportError(TransportError::Kind::not_connected,
                           fmt::format("cannot resolve '{}': {}", address_.host, ec.message()));
    beast::tcp_stream stream(io);
    stream.expires_after(connect_timeout_);
    stream.async_connect(endpoints, [&](boost::system::error_code e, const auto&) { ec = e; });
    io.run();
    if (ec == beast::error::timeout)
      throw TransportError(TransportError::Kind::not_connected,
                           fmt::format("no connection within {}s (connect_timeout)",
                                       std::chrono::duration<double>(connect_timeout_).count()));
    if (ec) throw TransportError(TransportError::Kind::not_connected, fmt::format("cannot connect: {}", ec.message()));
    stream.expires_never();  // a keyword runs as long as it runs: the gateway's keyword_timeout bounds it

    http::request<http::string_body> request{http::verb::post, address_.path.empty() ? "/RPC2" : address_.path, 11};
    request.set(http::field::host, fmt::format("{}:{}", address_.host, address_.port));
    request.set(http::field::user_agent, "robot-classic-bridge");
    request.set(http::field::content_type, "text/xml");
    request.body() = xmlrpc::write_call(method, params);
    request.prepare_payload();
    http::write(stream, request, ec);
    if (ec)
      throw TransportError(TransportError::Kind::connection, fmt::format("sending {} failed: {}", method, ec.message()));

    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.header_limit(64 * 1024);
    parser.body_limit(max_bytes_);
    http::read(stream, buffer, parser, ec);
    if (ec == http::error::body_limit)
      throw LimitExceeded(fmt::format("The classic remote server at {} answered {} with more than {} bytes, the most "
                                      "the bridge reads of one answer (the library's max_answer_bytes). Raise "
                                      "max_answer_bytes if its answers are that large.",
                                      url(), method, max_bytes_));
    if (ec)
      throw TransportError(TransportError::Kind::connection,
                           fmt::format("reading its answer to {} failed: {}", method, ec.message()));
    const auto& response = parser.get();
    if (response.result() != http::status::ok)
      throw TransportError(TransportError::Kind::http_status,
                           fmt::format("it answered {} with HTTP {} {}", method, response.result_int(),
                                       std::string_view(response.reason().data(), response.reason().size())));
    xmlrpc::Limits limits;
    limits.max_bytes = max_bytes_;
    try {
      return xmlrpc::parse_response(response.body(), limits);
    } catch (const xmlrpc::LimitError& e) {
      throw LimitExceeded(fmt::format("The classic remote server at {} answered {} beyond what the bridge takes in "
                                      "one answer: {}. An answer holds at most max_answer_bytes = {} bytes, at most "
                                      "one value per {} bytes of it, and arrays and structs nested at most {} deep.",
                                      url(), method, e.what(), max_bytes_, limits.bytes_per_value, limits.max_depth));
    } catch (const xmlrpc::ParseError& e) {
      throw TransportError(TransportError::Kind::not_xml_rpc,
                           fmt::format("its answer to {} is not XML-RPC: {}", method, e.what()));
    }
  }

 private:
  rjg::config::UpstreamAddress address_;
  std::chrono::milliseconds connect_timeout_;
  std::size_t max_bytes_;
};

// What a call to the server that could not be made becomes: a JSON-RPC error naming the server.
sdk::RpcError unreachable(const XmlRpcServer& server, const TransportError& e) {
  return sdk::RpcError(protocol::kWorkerFailed,
                       fmt::format("The classic remote server at {} failed: {}. Check that it runs and that the URL "
                                   "(upstream) is right.",
                                   server.url(), e.what()));
}

// bytes.decode("latin-1"): each byte the code point of its value, as UTF-8.
std::string latin1_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (const unsigned char c : bytes) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

// A value as text, as Robot's Remote library reads a message (robot.utils.safe_str): base64 (a server
// sends text XML cannot carry so) as its Latin-1 characters, anything else as Python's str().
std::string text_of(const xmlrpc::Value& v) {
  if (const auto* s = std::get_if<std::string>(&v.v)) return *s;
  if (const auto* b = std::get_if<xmlrpc::Binary>(&v.v)) return latin1_text(b->bytes);
  return rjg::pickle::py_str(xmlrpc::to_python(v));
}

// ---- Library information ----

struct KeywordInfo {
  std::string name;
  xmlrpc::Array args{xmlrpc::Value("*args")};  // a server that does not say takes anything
  xmlrpc::Value types;                         // a struct by argument name, or an array by position
  xmlrpc::Array tags;
  std::string doc;
};
struct LibraryInfo {
  std::vector<KeywordInfo> keywords;
  std::string doc;
};

void fill(KeywordInfo& kw, std::string_view field, const xmlrpc::Value& value) {
  if (field == "args" && value.is<xmlrpc::Array>()) kw.args = value.as<xmlrpc::Array>();
  else if (field == "types") kw.types = value;
  else if (field == "tags" && value.is<xmlrpc::Array>()) kw.tags = value.as<xmlrpc::Array>();
  else if (field == "doc") kw.doc = text_of(value);
}

LibraryInfo fetch_information(XmlRpcServer& server) {
  LibraryInfo info;
  auto everything = server.call("get_library_information", {});
  if (!everything.is_fault && everything.value.is<xmlrpc::Struct>()) {
    for (const auto& [name, fields] : everything.value.as<xmlrpc::Struct>()) {
      if (name == "__intro__") {
        if (const auto* doc = fields.member("doc")) info.doc = text_of(*doc);
        continue;
      }
      // __init__ and any other __name__ describe the library, not a keyword (Remote.get_keyword_names).
      if (name.starts_with("__") && name.ends_with("__")) continue;  // "__" and "___" too, as in Remote
      KeywordInfo kw;
      kw.name = name;
      if (fields.is<xmlrpc::Struct>())
        for (const auto& [field, value] : fields.as<xmlrpc::Struct>()) fill(kw, field, value);
      info.keywords.push_back(std::move(kw));
    }
    return info;
  }
  // A server older than Robot 4's get_library_information: one call per keyword and field, each with its
  // default when the server faults or the call fails (as Robot's Remote library does: its client turns
  // both into the TypeError it falls back on).
  auto names = server.call("get_keyword_names", {});
  if (names.is_fault)
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("The classic remote server at {} answered get_keyword_names with a fault: {}",
                                    server.url(), names.fault.message));
  if (!names.value.is<xmlrpc::Array>())
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("The classic remote server at {} answered get_keyword_names with no list",
                                    server.url()));
  for (const auto& name : names.value.as<xmlrpc::Array>()) {
    KeywordInfo kw;
    kw.name = text_of(name);
    for (auto [method, field] : {std::pair{"get_keyword_arguments", "args"}, std::pair{"get_keyword_types", "types"},
                                 std::pair{"get_keyword_tags", "tags"}, std::pair{"get_keyword_documentation", "doc"}}) {
      try {
        auto answer = server.call(method, {xmlrpc::Value(kw.name)});
        if (!answer.is_fault) fill(kw, field, answer.value);
      } catch (const TransportError& e) {
        rjg::log::warn("{} of keyword '{}' failed, so the keyword has its default {}: {}", method, kw.name, field,
                       e.what());
      }
    }
    info.keywords.push_back(std::move(kw));
  }
  if (auto intro = server.call("get_keyword_documentation", {xmlrpc::Value("__intro__")}); !intro.is_fault)
    info.doc = text_of(intro.value);
  return info;
}

// A classic argument spec ("a", "b=2", "*rest", "**named", "*", "/", or ["b", 2]) as ArgumentDefinitions.
json::array argument_definitions(const KeywordInfo& kw) {
  json::array out;
  bool named_only = false;
  std::size_t position = 0;
  // A nil type (None) says nothing about the argument, as an empty one.
  auto type_text = [](const xmlrpc::Value& type) -> std::optional<std::string> {
    if (type.is<xmlrpc::Nil>()) return std::nullopt;
    return text_of(type);
  };
  auto type_of = [&](const std::string& name) -> std::optional<std::string> {
    if (const auto* by_name = kw.types.member(name)) return type_text(*by_name);
    if (kw.types.is<xmlrpc::Array>() && position < kw.types.as<xmlrpc::Array>().size())
      return type_text(kw.types.as<xmlrpc::Array>()[position]);
    return std::nullopt;
  };
  for (const auto& item : kw.args) {
    std::string spec;
    std::optional<json::value> default_value;
    if (const auto* pair = std::get_if<xmlrpc::Array>(&item.v); pair && !pair->empty()) {
      spec = text_of((*pair)[0]);
      if (pair->size() > 1)
        default_value = json::parse(xmlrpc::to_json_argument(xmlrpc::to_python((*pair)[1])));
    } else {
      spec = text_of(item);
    }
    if (spec == "/") {
      // The markers themselves the SDK's session adds to the definition (sdk::add_argument_markers).
      for (auto& arg : out) arg.as_object()["kind"] = "POSITIONAL_ONLY";
      continue;
    }
    if (spec == "*") {
      named_only = true;
      continue;
    }
    json::object arg{{"required", true}};
    std::string name = spec;
    if (spec.starts_with("**")) {
      name = spec.substr(2);
      arg["kind"] = "VAR_NAMED";
    } else if (spec.starts_with("*")) {
      name = spec.substr(1);
      arg["kind"] = "VAR_POSITIONAL";
      named_only = true;
    } else {
      if (auto eq = spec.find('='); eq != std::string::npos && !default_value) {
        name = spec.substr(0, eq);
        default_value = json::value(spec.substr(eq + 1));  // a classic default is the text Robot converts
      }
      arg["kind"] = named_only ? "NAMED_ONLY" : "POSITIONAL_OR_NAMED";
    }
    arg["name"] = name;
    if (auto type = type_of(name); type && !type->empty()) arg["type"] = *type;
    arg["has_default"] = default_value.has_value();
    if (default_value) arg["default"] = std::move(*default_value);
    out.push_back(std::move(arg));
    ++position;
  }
  return out;
}

json::object definition(const std::string& name, const LibraryInfo& info) {
  json::array keywords;
  for (const auto& kw : info.keywords) {
    json::array tags;
    for (const auto& tag : kw.tags) tags.emplace_back(text_of(tag));
    keywords.emplace_back(json::object{
        {"name", kw.name}, {"args", argument_definitions(kw)}, {"doc", kw.doc}, {"tags", std::move(tags)}});
  }
  return json::object{{"name", name}, {"doc", info.doc}, {"keywords", std::move(keywords)}};
}

// ---- Keyword calls ----

// Robot's StdoutLogSplitter: a message starts at a *LEVEL* (or *LEVEL:TIMESTAMP*) marker at the start of
// a line and runs to the next one; text before the first marker is INFO. Each message is stripped.
void relay_output(sdk::Call& call, std::string_view output) {
  static constexpr std::string_view kLevels[] = {"TRACE", "DEBUG", "INFO", "CONSOLE", "HTML", "WARN", "ERROR"};
  // The marker at `at` (a line start): its level and its length, or nothing.
  auto marker = [&](std::size_t at) -> std::optional<std::pair<std::string_view, std::size_t>> {
    if (at >= output.size() || output[at] != '*') return std::nullopt;
    for (auto level : kLevels) {
      if (output.compare(at + 1, level.size(), level) != 0) continue;
      std::size_t end = at + 1 + level.size();
      if (end < output.size() && output[end] == ':') {  // a timestamp: digits, optionally a fraction
        std::size_t digits = end + 1;
        while (digits < output.size() && std::isdigit(static_cast<unsigned char>(output[digits]))) ++digits;
        if (digits == end + 1) continue;
        if (digits < output.size() && output[digits] == '.') {
          std::size_t fraction = digits + 1;
          while (fraction < output.size() && std::isdigit(static_cast<unsigned char>(output[fraction]))) ++fraction;
          if (fraction > digits + 1) digits = fraction;
        }
        end = digits;
      }
      if (end < output.size() && output[end] == '*') return std::pair{level, end + 1 - at};
    }
    return std::nullopt;
  };
  auto strip = [](std::string_view s) {
    const auto first = s.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return std::string_view();
    return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
  };
  auto emit = [&](std::string_view level, std::string_view text) {
    const auto message = strip(text);
    if (message.empty()) return;
    if (level == "HTML") call.log(message, "INFO", true);
    else if (level == "CONSOLE") call.log(message, "INFO", false, true);
    else call.log(message, level);
  };
  std::string_view level = "INFO";
  std::size_t begin = 0;
  for (std::size_t line = 0; line <= output.size();) {
    if (auto m = marker(line)) {
      emit(level, output.substr(begin, line - begin));
      level = m->first;
      begin = line + m->second;
    }
    const auto nl = output.find('\n', line);
    if (nl == std::string_view::npos) break;
    line = nl + 1;
  }
  emit(level, output.substr(begin));
}

// ---- Arguments, as Robot's Remote library sends them (ArgumentCoercer in robot/libraries/Remote.py) ----

using rjg::pickle::Overloaded;

// Remote's ArgumentCoercer.binary: the control characters XML cannot carry (tab, LF and CR it can).
bool holds_binary(std::string_view text) {
  for (const unsigned char c : text)
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return true;
  return false;
}

// An argument Remote would not send either: its exception's type and Remote's text, then where and what to do.
[[noreturn]] void refuse(std::string type, std::string remote_text, std::string_view path, std::string_view advice) {
  throw sdk::KeywordError(fmt::format("{} ({}: Robot's Remote library refuses it too; {})", remote_text, path, advice),
                          std::move(type));
}

// A str: as it is, or its Latin-1 bytes when it holds control characters (Remote's _handle_string).
xmlrpc::Value remote_text(const std::string& text, std::string_view path) {
  if (!holds_binary(text)) return xmlrpc::Value(text);
  auto bytes = xmlrpc::to_latin1(text);
  if (!bytes)
    refuse("ValueError", fmt::format("Cannot represent {} as binary.", rjg::pickle::py_repr(text)), path,
           "a string holding control characters goes as bytes, and this one has characters beyond Latin-1: pass "
           "bytes instead");
  return xmlrpc::Value(xmlrpc::Binary{std::move(*bytes)});
}

// Remote's _to_string: safe_str() of the value ("" for None), then as a str.
std::string safe_text(const rjg::pickle::PyValue& value) {
  if (value.get<rjg::pickle::PyNone>()) return {};
  if (const auto* b = value.get<rjg::pickle::PyBytes>()) return latin1_text(b->bytes);
  return rjg::pickle::py_str(value);
}

// One argument as Remote's ArgumentCoercer.coerce turns it into XML-RPC: str (bytes when it holds control
// characters), int within XML-RPC's 32 bits, float, bool, bytes and datetime as they are; a date as the
// datetime of its midnight, a timedelta as its seconds; dicts (OrderedDict, DotDict) as structs with
// safe_str() of each key, lists, tuples and sets as arrays; None as "", and anything else as its str().
// Where Remote fails (a larger int: xmlrpc.client's OverflowError; binary keys; control characters beyond
// Latin-1) the keyword fails with Remote's text. `path`: "args[1]['key']".
xmlrpc::Value remote_argument(const rjg::pickle::PyValue& value, const std::string& path) {
  namespace py = rjg::pickle;
  auto items = [&](const std::vector<py::PyValue>& in) {
    xmlrpc::Array out;
    out.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) out.push_back(remote_argument(in[i], fmt::format("{}[{}]", path, i)));
    return xmlrpc::Value(std::move(out));
  };
  auto overflow = [&](const std::string& digits) -> xmlrpc::Value {
    refuse("OverflowError", "int exceeds XML-RPC limits", path,
           fmt::format("{} is outside the 32-bit integers XML-RPC carries: pass it as a string", digits));
  };
  return std::visit(
      Overloaded{
          [&](const std::string& s) { return remote_text(s, path); },
          [](bool b) { return xmlrpc::Value(b); },
          [&](std::int64_t i) {
            if (i < INT32_MIN || i > INT32_MAX) return overflow(std::to_string(i));
            return xmlrpc::Value(i);
          },
          [&](const py::PyBigInt& b) { return overflow(b.decimal); },
          [](double d) { return xmlrpc::Value(d); },
          [](const py::PyBytes& b) { return xmlrpc::Value(xmlrpc::Binary{b.bytes}); },
          [](const py::PyDateTime& t) { return xmlrpc::to_xmlrpc(py::PyValue{t}); },
          [](const py::PyDate& d) {
            py::PyDateTime midnight;
            midnight.year = d.year, midnight.month = d.month, midnight.day = d.day;
            return xmlrpc::to_xmlrpc(py::PyValue{midnight});
          },
          [](const py::PyTimedelta& t) {
            // total_seconds(): the microseconds divided once, exact while they fit a double's 53 bits.
            const long double micros =
                (static_cast<long double>(t.days) * 86400 + t.seconds) * 1'000'000 + t.microseconds;
            return xmlrpc::Value(static_cast<double>(micros / 1'000'000));
          },
          [&](const py::PyList& l) { return items(l.items); },
          [&](const py::PyTuple& t) { return items(t.items); },
          [&](const py::PySet& s) { return items(s.items); },
          [&](const py::PyDict& d) {
            xmlrpc::Struct out;
            out.reserve(d.items.size());
            for (const auto& [k, v] : d.items) {
              const std::string where = fmt::format("{}[{}]", path, py::py_repr(k));
              auto key = remote_text(safe_text(k), where);
              if (auto* bytes = std::get_if<xmlrpc::Binary>(&key.v))
                refuse("ValueError",
                       fmt::format("Dictionary keys cannot be binary. Got {}.", py::py_repr(py::PyBytes{bytes->bytes})),
                       where, "a key holding control characters would go as bytes, which a struct's names cannot be");
              out.emplace_back(std::move(key.as<std::string>()), remote_argument(v, where));
            }
            return xmlrpc::Value(std::move(out));
          },
          [](const py::PyNone&) { return xmlrpc::Value(std::string()); },
          [&](const py::PyElement& e) -> xmlrpc::Value {
            // Remote sends str() of it, which holds the object's address: only the Python process that
            // holds the element can write that text.
            throw sdk::KeywordError(
                fmt::format("{} ({}) cannot be sent to a classic remote server: Robot's Remote library would send "
                            "its str(), which holds its address in the Python process that has it. Pass its text "
                            "instead (XML's Element To String).",
                            py::py_repr(py::PyValue{e}), path),
                "ValueError");
          },
          [&](const auto& other) { return remote_text(py::py_str(py::PyValue{other}), path); },
      },
      value.v);
}

// ---- Results, as Robot's Remote library reads them (RemoteResult) ----

// Remote's RemoteResult._convert: every dict, at any depth, a DotDict (so ${result.name} works).
void to_dot_dicts(rjg::pickle::PyValue& value) {
  if (auto* list = std::get_if<rjg::pickle::PyList>(&value.v)) {
    for (auto& item : list->items) to_dot_dicts(item);
  } else if (auto* dict = std::get_if<rjg::pickle::PyDict>(&value.v)) {
    dict->kind = rjg::pickle::PyDict::Kind::dot_dict;
    for (auto& [key, item] : dict->items) to_dot_dicts(item);
  }
}

// Python's bool() of a result's flag (Remote: bool(result.get("fatal", False))).
bool truthy(const xmlrpc::Value& v) {
  return std::visit(Overloaded{
                        [](const xmlrpc::Nil&) { return false; },
                        [](bool b) { return b; },
                        [](std::int64_t i) { return i != 0; },
                        [](double d) { return d != 0; },
                        [](const std::string& s) { return !s.empty(); },
                        [](const xmlrpc::Binary& b) { return !b.bytes.empty(); },
                        [](const xmlrpc::DateTime&) { return true; },
                        [](const xmlrpc::Array& a) { return !a.empty(); },
                        [](const xmlrpc::Struct& s) { return !s.empty(); },
                    },
                    v.v);
}

json::value run_keyword(XmlRpcServer& server, sdk::Call& call) {
  xmlrpc::Array params{xmlrpc::Value(call.keyword())};
  rjg::pickle::PyValue args, kwargs;
  try {
    args = xmlrpc::from_json(call.args_text().empty() ? "[]" : call.args_text(), "args");
    kwargs = xmlrpc::from_json(call.kwargs_text().empty() ? "{}" : call.kwargs_text(), "kwargs");
  } catch (const xmlrpc::ValueError& e) {
    // A value outside the data-only subset (an object only Python could render): never unpickled, never sent.
    throw sdk::KeywordError(fmt::format("An argument of keyword '{}' cannot be sent to the classic remote server at "
                                        "{}: {}. Pass it as text, a number, bytes, a date or a list or dict of them.",
                                        call.keyword(), server.url(), e.what()),
                            "ValueError");
  }
  const auto* positional = args.get<rjg::pickle::PyList>();
  const auto* named = kwargs.get<rjg::pickle::PyDict>();
  if (!positional || !named)
    throw sdk::KeywordError(fmt::format("Keyword '{}' was called with {} that are not a {}", call.keyword(),
                                        positional ? "named arguments" : "arguments", positional ? "dict" : "list"),
                            "ValueError");
  xmlrpc::Array converted;
  for (std::size_t i = 0; i < positional->items.size(); ++i)
    converted.push_back(remote_argument(positional->items[i], fmt::format("args[{}]", i)));
  params.emplace_back(std::move(converted));
  // Robot's Remote sends the named arguments only when there are some: older servers take two params.
  if (!named->items.empty()) {
    xmlrpc::Struct converted_named;
    for (const auto& [key, value] : named->items) {
      const std::string name = rjg::pickle::py_str(key);
      converted_named.emplace_back(name, remote_argument(value, fmt::format("kwargs['{}']", name)));
    }
    params.emplace_back(std::move(converted_named));
  }

  // The failures below are Remote's (XmlRpcRemoteClient.run_keyword, RemoteResult): its text first, then
  // which server, and what to do.
  xmlrpc::Response answer;
  try {
    answer = server.call("run_keyword", params);
  } catch (const TransportError& e) {
    if (e.kind == TransportError::Kind::not_xml_rpc)
      throw sdk::KeywordError(
          fmt::format("Processing XML-RPC return value failed. Most often this happens when the return value "
                      "contains characters that are not valid in XML. Original error was: ExpatError: {} (the classic remote "
                      "server at {})",
                      e.what(), server.url()),
          "RuntimeError");
    if (e.kind == TransportError::Kind::http_status) throw unreachable(server, e);
    // Remote's words for every socket error; what happened to the call differs, and so does the advice.
    throw sdk::KeywordError(
        fmt::format("Connection to remote server broken: {}. {}", e.what(),
                    e.kind == TransportError::Kind::not_connected
                        ? fmt::format("The keyword did not reach the classic remote server at {}: check that it "
                                      "runs and that the library's upstream URL is right.",
                                      server.url())
                        : fmt::format("The classic remote server at {} took the call, so the keyword may have run "
                                      "in part; check that the server still runs.",
                                      server.url())),
        "RuntimeError");
  } catch (const LimitExceeded& e) {
    // The keyword ran; its answer cannot be taken. It fails, and the import goes on.
    throw sdk::KeywordError(e.what(), "RuntimeError");
  }
  // As Robot's Remote library: a fault fails the keyword with its text.
  if (answer.is_fault) throw sdk::KeywordError(answer.fault.message, "RuntimeError");
  const auto* status = answer.value.is<xmlrpc::Struct>() ? answer.value.member("status") : nullptr;
  if (!status)
    throw sdk::KeywordError(fmt::format("Invalid remote result dictionary: {} (the classic remote server at {} "
                                        "answered run_keyword without a status)",
                                        rjg::pickle::py_repr(xmlrpc::to_python(answer.value)), server.url()),
                            "RuntimeError");
  if (const auto* output = answer.value.member("output")) relay_output(call, text_of(*output));
  // Remote compares with the str "PASS": a status sent as base64 (bytes in Python) is not one.
  const auto* status_text = std::get_if<std::string>(&status->v);
  if (!status_text || *status_text != "PASS") {
    const auto* error = answer.value.member("error");
    const auto* traceback = answer.value.member("traceback");
    auto flag = [&](const char* name) {
      const auto* v = answer.value.member(name);
      return v && truthy(*v);
    };
    const auto mode = flag("fatal") ? sdk::ErrorMode::fatal
                      : flag("continuable") ? sdk::ErrorMode::continuable
                                            : sdk::ErrorMode::unset;
    // RemoteError: what Remote raises, a name Robot leaves out of the message (the server put the
    // exception's own name in it already).
    throw sdk::KeywordError(error ? text_of(*error) : std::string(), "RemoteError",
                            traceback ? text_of(*traceback) : std::string(), mode);
  }
  // No return value is "" (Remote: result.get("return", "")); dicts are DotDicts.
  rjg::pickle::PyValue returned{std::string()};
  if (const auto* value = answer.value.member("return")) returned = xmlrpc::to_python(*value);
  to_dot_dicts(returned);
  call.return_raw(xmlrpc::to_json_argument(returned));
  return nullptr;
}

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
