// A keyword call, as Robot's Remote library (robot/libraries/Remote.py) makes it: the arguments coerced
// as Remote coerces them, the server's output relayed as log messages, its result read as Remote reads it.
#include "common/xmlrpc/classic_values.hpp"
#include "workers/classic_bridge/classic_bridge.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rjg::classic_bridge {

namespace {

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

}  // namespace

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

}  // namespace rjg::classic_bridge
