// A small SDK for native keyword libraries that speak the Robot Framework JSON-RPC remote protocol
// (the protocol specification of robotframework-jsonrpcremote), over stdio (spawned by the gateway)
// or over TCP by themselves.
//
//   rjg::sdk::Library lib{"Calculator", "Adds numbers.", "1.0"};
//   lib.keyword("Add", {{"a", "int"}, {"b", "int", json::value(0)}}, "Adds two integers.",
//               [](rjg::sdk::Call& c) -> json::value { return c.get<int64_t>("a") + c.get<int64_t>("b"); });
//   int main(int argc, char** argv) { return rjg::sdk::serve(lib, argc, argv); }
//
// The layers, from the inside out: Library (what the keywords are), Session (one protocol session,
// driven message by message, writing through an Output), serve()/serve_stream() (bytes in and out).
#pragma once

#include "common/log.hpp"
#include "common/protocol/message.hpp"
#include "common/protocol/server_protocol.hpp"

#include <boost/json.hpp>

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace rjg::sdk {

namespace json = boost::json;

// ---------------------------------------------------------------------------------------------
// Keyword signatures

// Argument kinds of the protocol's ArgumentDefinition. Declare them in Python's order: positional
// ones, then at most one VAR_POSITIONAL, then named-only ones, then at most one VAR_NAMED.
enum class ArgKind { positional_or_named, var_positional, named_only, var_named };

std::string_view to_string(ArgKind kind);  // "POSITIONAL_OR_NAMED", ...

struct Arg {
  // Implicit on purpose, so signatures read {{"a", "int"}, {"b", "int", json::value(0)}}.
  Arg(std::string name, std::string type = {}, std::optional<json::value> default_value = std::nullopt,
      ArgKind kind = ArgKind::positional_or_named, std::string doc = {})
      : name(std::move(name)), type(std::move(type)), default_value(std::move(default_value)), kind(kind),
        doc(std::move(doc)) {}

  std::string name;
  // Type hint as text, sent to Robot Framework. The SDK converts values for "int", "float", "bool"
  // and "str" (and the aliases "integer", "double", "boolean", "string"); any other type, or "", is
  // passed through untouched (which is what pickled Python objects need).
  std::string type;
  std::optional<json::value> default_value;  // set: the argument is optional
  ArgKind kind = ArgKind::positional_or_named;
  std::string doc;

  static Arg var_positional(std::string name, std::string type = {}) {
    return {std::move(name), std::move(type), std::nullopt, ArgKind::var_positional};
  }
  static Arg named_only(std::string name, std::string type = {}, std::optional<json::value> def = std::nullopt) {
    return {std::move(name), std::move(type), std::move(def), ArgKind::named_only};
  }
  static Arg var_named(std::string name, std::string type = {}) {
    return {std::move(name), std::move(type), std::nullopt, ArgKind::var_named};
  }
};

// How Robot Framework should treat a failure (RunKeywordErrorMode).
enum class ErrorMode { unset, continuable, fatal, skip };

// Throw from a keyword body to fail the keyword. Any other std::exception fails it as well, with the
// C++ type name as the error type; neither ends the session.
class KeywordError : public std::runtime_error {
 public:
  explicit KeywordError(std::string message, std::string type = "AssertionError", std::string traceback = {},
                        ErrorMode mode = ErrorMode::unset)
      : std::runtime_error(message), message_(std::move(message)), type_(std::move(type)),
        traceback_(std::move(traceback)), mode_(mode) {}

  // The whole message: what() ends at a NUL character, which a relayed message may hold.
  const std::string& message() const { return message_; }
  const std::string& type() const { return type_; }
  const std::string& traceback() const { return traceback_; }
  ErrorMode mode() const { return mode_; }

 private:
  std::string message_;
  std::string type_;
  std::string traceback_;
  ErrorMode mode_;
};

// ---------------------------------------------------------------------------------------------
// Where a session's messages go. The transport frames them; tests capture them.

class Output {
 public:
  virtual ~Output() = default;
  // One complete JSON-RPC message (unframed JSON text).
  virtual void send(std::string_view json_text) = 0;
  // Bytes written into the protocol stream as they are, without framing. Test-only: it exists so
  // the test worker can corrupt its own stream on purpose.
  virtual void write_raw(std::string_view bytes) = 0;
};

// Fails a keyword or an import with a JSON-RPC error answer (not a keyword failure result): code,
// message and `data`, a JSON text sent as it is ("" for none).
class RpcError : public std::runtime_error {
 public:
  RpcError(int code, std::string message, std::string data_text = {})
      : std::runtime_error(std::move(message)), code(code), data_text(std::move(data_text)) {}
  int code;
  std::string data_text;
};

// Arguments of the robot/import_library call that created a library instance. The trees are empty
// when the texts hold what a tree cannot (NaN, Infinity, a number beyond a double); the texts are
// always the ones sent ("" when absent).
struct ImportArgs {
  json::array args;
  json::object kw_args;
  std::string args_text;
  std::string kw_args_text;
};

// What an on_import hook sees. `state` is the instance's own storage (one per import token); put
// whatever the keywords need into it, and read it back with Call::state<T>().
struct ImportContext {
  const std::string& library;
  const ImportArgs& import;
  std::any& state;
  // Members added to the import result next to token and definition (the protocol lets a peer add
  // fields; the test worker uses it to send values the gateway must check).
  json::object extra_result{};
  // Where log() sends to: the session's output (set by the session).
  Output* out = nullptr;

  // Sends a robot/log notification at once, before the import is answered (as a Python library's
  // constructor may log while it is imported).
  void log(std::string_view message, std::string_view level = "INFO", bool html = false, bool console = false);
};

// One keyword invocation: bound and converted arguments, and a way to talk to the client.
class Call {
 public:
  Call(const std::string& library, const std::string& keyword, json::object bound, const ImportArgs& import,
       std::any& state, Output& out)
      : library_(library), keyword_(keyword), bound_(std::move(bound)), import_(import), state_(state), out_(out) {}

  const std::string& library() const { return library_; }
  const std::string& keyword() const { return keyword_; }

  // The bound value of a declared argument (VAR_POSITIONAL: an array, VAR_NAMED: an object). Typed
  // arguments are already converted. Asking for an undeclared name is a bug in the library and
  // throws std::logic_error.
  const json::value& value(std::string_view name) const;
  const json::object& arguments() const { return bound_; }

  // Typed access with Robot-like conversion (so get<int64_t> also accepts "42"); a value that does
  // not convert throws KeywordError("... cannot be converted to ...", "ValueError").
  // T: bool, any integer type (range-checked), float/double, std::string, json::array, json::object.
  // json::array and json::object also read a pickled list, tuple, set or dict (what Python clients send
  // for nested values) as plain JSON, as plain() does.
  template <typename T>
  T get(std::string_view name) const;
  // The argument as plain JSON: {"__pickled__": ...} values (the argument itself or inside it) decoded
  // under the data-only policy and turned into JSON as Python's json.dumps would (tuples and sets as
  // lists, datetimes as isoformat() text). A value JSON cannot carry (bytes, Decimal, NaN) throws
  // KeywordError naming the argument, type "ValueError". value() gives the argument as it was sent.
  json::value plain(std::string_view name) const;

  // Sends a robot/log notification at once; the client logs it under the running keyword.
  // Levels: TRACE, DEBUG, INFO, WARN, ERROR, CONSOLE, HTML.
  void log(std::string_view message, std::string_view level = "INFO", bool html = false, bool console = false);

  const ImportArgs& import_args() const { return import_; }

  // The instance state set by on_import; throws std::bad_any_cast if it holds another type.
  template <typename T>
  T& state() {
    return std::any_cast<T&>(state_);
  }

  // Test-only: bytes straight into the protocol stream, bypassing framing (see Output::write_raw).
  void write_raw(std::string_view bytes) { out_.write_raw(bytes); }
  // A whole notification (its JSON text), framed and sent at once.
  void notify_raw(std::string_view json_text) { out_.send(json_text); }

  // The args and kwargs exactly as the caller sent them ("" when absent): number texts, escapes and
  // NaN/Infinity included. For keywords declared with Library::raw_keyword, the only way to read them.
  std::string_view args_text() const { return args_text_; }
  std::string_view kwargs_text() const { return kwargs_text_; }
  // Makes the keyword's result this JSON text, sent as it is (it must be valid JSON; NaN, Infinity
  // and numbers of any size are allowed); the value the body returns is then ignored.
  void return_raw(std::string json_text) { raw_result_ = std::move(json_text); }
  const std::optional<std::string>& raw_result() const { return raw_result_; }
  // Ends the worker once this keyword's answer (result or failure) is written: the session stops as if
  // robot/exit had come, its instances are destroyed, and serve()/serve_stream() return `status`. For an
  // adapter whose backend died under it: the gateway gets the failure first, then sees the exit and
  // starts a fresh worker for the next import.
  void exit_after_answer(int status) { exit_status_ = status; }
  const std::optional<int>& exit_status() const { return exit_status_; }
  void set_texts(std::string_view args, std::string_view kwargs) {
    args_text_ = args;
    kwargs_text_ = kwargs;
  }

 private:
  std::int64_t as_int64(std::string_view name) const;
  double as_double(std::string_view name) const;
  bool as_bool(std::string_view name) const;
  std::string as_string(std::string_view name) const;
  [[noreturn]] void out_of_range(std::string_view name, std::string_view type) const;

  const std::string& library_;
  const std::string& keyword_;
  json::object bound_;
  const ImportArgs& import_;
  std::any& state_;
  Output& out_;
  std::string_view args_text_, kwargs_text_;
  std::optional<std::string> raw_result_;
  std::optional<int> exit_status_;
};

template <typename T>
T Call::get(std::string_view name) const {
  if constexpr (std::is_same_v<T, bool>) {
    return as_bool(name);
  } else if constexpr (std::is_integral_v<T>) {
    std::int64_t v = as_int64(name);
    if (!std::in_range<T>(v)) out_of_range(name, "int");
    return static_cast<T>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(as_double(name));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return as_string(name);
  } else if constexpr (std::is_same_v<T, json::array> || std::is_same_v<T, json::object>) {
    const json::value v = plain(name);
    if constexpr (std::is_same_v<T, json::array>) {
      if (v.is_array()) return v.get_array();
    } else {
      if (v.is_object()) return v.get_object();
    }
    throw KeywordError("Keyword '" + library_ + "." + keyword_ + "': argument '" + std::string(name) +
                           "' is not " + (std::is_same_v<T, json::array> ? "a list" : "a dictionary"),
                       "ValueError");
  } else {
    static_assert(!sizeof(T), "Call::get supports bool, integers, floating point, std::string, json::array, json::object");
  }
}

// ---------------------------------------------------------------------------------------------
// Libraries

using KeywordBody = std::function<json::value(Call&)>;

// How a keyword's result goes on the wire.
//   python (the default): in the dialect Python peers read (common/pickle/python_json.hpp): a scalar, or
//     a flat list or dict of scalars, as JSON; anything nested (a list of dicts, a dict holding a list)
//     pickled whole as {"__pickled__": ...}, which the stock client and the reference server unpickle
//     into the list or dict the body built. (They refuse nested JSON, and the stock client then ends
//     its session.) A value that already is one pickle object is sent as it is.
//   as_is: exactly the JSON the body returned. For relays, whose value already is in the dialect of
//     the peer that sent it (an echo of an argument), and for tools that must send exact JSON.
// Call::return_raw texts are always sent as they are.
enum class ResultForm { python, as_is };

struct Keyword {
  std::string name;
  std::vector<Arg> args;
  std::string doc;
  KeywordBody body;
  std::vector<std::string> tags;
  bool raw = false;  // Library::raw_keyword: arguments as texts, no binding
  ResultForm result_form = ResultForm::python;
};

class Library {
 public:
  explicit Library(std::string name, std::string doc = {}, std::string version = {});

  // Registers a keyword. Throws std::invalid_argument for a duplicate name or a signature the
  // protocol cannot express (kinds out of order, a required positional after an optional one).
  Library& keyword(std::string name, std::vector<Arg> args, std::string doc, KeywordBody body,
                   std::vector<std::string> tags = {});
  // Registers a keyword that takes any arguments (*args, **kwargs) and gets them only as the texts the
  // caller sent (Call::args_text(), kwargs_text()): no tree is built, so values a tree cannot hold
  // (NaN, Infinity, 1e400, 40-digit integers) reach it unchanged, and Call::return_raw sends them back.
  Library& raw_keyword(std::string name, std::string doc, KeywordBody body);
  // Sets how a registered keyword's result is sent (see ResultForm). Throws std::invalid_argument for
  // a name that is not registered.
  Library& result_form(std::string_view keyword, ResultForm form);

  // Called for each robot/import_library with that import's arguments; throwing fails the import
  // with a JSON-RPC error carrying the exception's message.
  Library& on_import(std::function<void(ImportContext&)> hook);

  // Keywords the library learns only when it is imported (an adapter to another server): a call of a
  // name that is not registered reaches `body` as a raw keyword (Call::keyword() is the name called,
  // Call::args_text()/kwargs_text() what was sent), and the import hook describes them by setting
  // ImportContext::extra_result["definition"].
  Library& dynamic_keywords(KeywordBody body);
  const KeywordBody& dynamic_body() const { return dynamic_body_; }

  // Called with the params of robot/initialize before it is answered; returning false leaves the
  // request unanswered. Meant for fault injection (delays, hangs) in tests.
  Library& on_initialize(std::function<bool(const json::value& params)> hook);

  // server_info.name in the robot/initialize answer; the library's name unless set. (The test worker
  // poses as the reference server with it.)
  Library& server_name(std::string name) {
    server_name_ = std::move(name);
    return *this;
  }
  const std::string& server_name() const { return server_name_.empty() ? name_ : server_name_; }

  const std::string& name() const { return name_; }
  const std::string& doc() const { return doc_; }
  const std::string& version() const { return version_; }
  const std::vector<Keyword>& keywords() const { return keywords_; }

  // Exact name first, then Robot's normalization (case, spaces and underscores ignored).
  const Keyword* find(std::string_view name) const;
  // The LibraryDefinition sent in the import result.
  json::object definition() const;

  const std::function<void(ImportContext&)>& import_hook() const { return import_hook_; }
  const std::function<bool(const json::value&)>& initialize_hook() const { return initialize_hook_; }

 private:
  std::string name_;
  std::string doc_;
  std::string version_;
  std::vector<Keyword> keywords_;
  std::function<void(ImportContext&)> import_hook_;
  std::function<bool(const json::value&)> initialize_hook_;
  KeywordBody dynamic_body_;
  std::string server_name_;
};

// Adds the markers Python's signature has to every keyword's args of a LibraryDefinition, where a
// definition left them out: NAMED_ONLY_MARKER ("*") before the first NAMED_ONLY argument that no
// VAR_POSITIONAL precedes, POSITIONAL_ONLY_MARKER ("/") after the last POSITIONAL_ONLY one. The stock
// client builds Robot's argument spec from the markers alone (the reference server sends them), so
// without them it takes named-only arguments for positional ones (and Robot refuses a required one
// after an optional one) and binds name=value to a positional-only argument. The session applies it
// to every import's definition, the adapters' too; args of another shape are left as they are.
void add_argument_markers(json::object& definition);

// ---------------------------------------------------------------------------------------------
// Keyword names as Robot Framework matches them

// Robot's normalization of a keyword name: case, spaces and underscores ignored.
std::string normalize_name(std::string_view name);

// The element of `items` that `name` calls: an exact name first, then Robot's normalization; nullptr
// when none. `name_of(item)` gives an element's name. (Library::find and the adapters' keyword tables.)
template <class Range, class NameOf>
auto find_by_name(Range& items, std::string_view name, NameOf name_of) -> decltype(&*std::begin(items)) {
  for (auto& item : items)
    if (name_of(item) == name) return &item;
  const std::string key = normalize_name(name);
  for (auto& item : items)
    if (normalize_name(name_of(item)) == key) return &item;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Argument binding and conversion, exposed for tests and for libraries that convert by hand.

// Robot-like conversion of `value` to the type named by `type`. Returns nullopt when the value does
// not convert; returns the value unchanged for types the SDK does not convert.
std::optional<json::value> convert(const json::value& value, std::string_view type);

// Binds a run_keyword call's args/kwargs to the keyword's signature: positional, then named, then
// defaults, then conversion. Throws KeywordError (type "TypeError" or "ValueError") naming the
// library, keyword and argument.
json::object bind_arguments(const std::string& library, const Keyword& keyword, const json::array& args,
                            const json::object& kwargs);
// A value as an error message shows it: a string as it is, anything else as JSON, cut at 80 bytes
// (at a character boundary).
std::string show_value(const json::value& value);

// ---------------------------------------------------------------------------------------------
// A protocol session: the state machine of one connection, independent of any transport. The
// method table, the handshake and the params binding are the gateway's own (rjg::protocol::ServerProtocol);
// Session supplies the library's answers.

class Session final : private protocol::ServerMethods {
 public:
  Session(const Library& library, Output& out);
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Handles one frame body. Answers, and log notifications sent while a keyword runs, go to the
  // Output before this returns. Never throws for anything a peer can send.
  void handle(std::string_view body);
  // The same for a body already classified (a transport's reader classifies as it reads).
  void handle(const protocol::Classified& message);

  // True once robot/exit was received, or a keyword asked to exit after its answer: the transport
  // should close the connection.
  bool done() const { return done_ || exit_status_.has_value(); }
  // Set when a keyword called Call::exit_after_answer: the status the process should exit with.
  const std::optional<int>& exit_status() const { return exit_status_; }

 private:
  struct Instance;

  // ServerMethods, grouped by what they do. The handshake: answered with the library's
  // capabilities (or, when the on_initialize hook says so, not at all).
  void on_initialize(const protocol::Message& request, protocol::Initialize params) override;
  void on_initialized(const protocol::Message& notification) override;
  // One instance (token) per import.
  void on_import_library(const protocol::Message& request, protocol::ImportLibrary params) override;
  std::string new_token();
  // Keywords run on the calling thread, blocking it until they return.
  void on_run_keyword(const protocol::Message& request, protocol::RunKeyword params) override;
  // The whole answer's text: a result (possibly raw), or an RpcError's error answer.
  std::string run_keyword(const protocol::Message& request, const protocol::RunKeyword& call);
  void on_finalize_library(const protocol::Message& request, protocol::FinalizeLibrary params) override;
  // The end: robot/exit sets done().
  void on_shutdown(const protocol::Message& request) override;
  void on_exit(const protocol::Message& notification) override;
  // Answers, and whatever ServerProtocol cannot dispatch (answered with its error, or logged).
  void reply(const protocol::Message& request, const json::value& result);
  void reply_error(std::string_view id_text, int code, std::string_view message);
  void refuse(const protocol::Message& request, int code, std::string message) override;
  void ignore(const protocol::Message& message, std::string why) override;

  const Library& library_;
  Output& out_;
  protocol::ServerProtocol protocol_;
  bool done_ = false;
  std::optional<int> exit_status_;
  std::uint64_t imports_ = 0;
  std::map<std::string, std::unique_ptr<Instance>, std::less<>> instances_;
};

// ---------------------------------------------------------------------------------------------
// Transports

struct ServeOptions {
  enum class Transport { stdio, tcp };
  Transport transport = Transport::stdio;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  log::Level log_level = log::Level::info;
};

// Parses --stdio, --tcp HOST:PORT ([::1]:PORT for IPv6) and --log-level LEVEL. Returns an error
// message for anything else; programs with options of their own parse those first.
std::optional<std::string> parse_serve_options(const std::vector<std::string>& args, ServeOptions& options);
std::string serve_usage(std::string_view program);

// Runs the library until the end: stdio returns 0 on robot/exit or end of input; TCP serves
// connections (each its own session) until a fatal error. Both return the status a keyword passed to
// Call::exit_after_answer once that keyword's answer is written. One I/O thread reads and writes every
// stream; each session handles its messages in order on a thread of its own, so keyword bodies may
// block while their logs go out.
int serve(const Library& library, const ServeOptions& options);
// Parses argv (exit code 2 on bad usage, 0 for --help) and serves.
int serve(const Library& library, int argc, char** argv);

// Serves one session over the given descriptors (a pipe pair, a socket twice, even regular files)
// until robot/exit, end of input or a broken stream. Returns 0 when the session ended normally, 1 on
// a framing or I/O error, or the status of Call::exit_after_answer. Blocking; the descriptors stay
// the caller's. Used by the stdio transport and by tests.
int serve_stream(const Library& library, int in_fd, int out_fd, std::string_view peer = "stdio");

}  // namespace rjg::sdk
