// The gateway's configuration model, loaded from TOML and validated strictly at start-up. The initial
// value of each field is the default of its key; the keys themselves are declared in keys.cpp.
#pragma once

#include "config/network.hpp"  // ListenAddress, Network

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::config {

using Duration = std::chrono::milliseconds;

// How imports of a library map to worker processes.
enum class Isolation {
  session,  // every import gets a worker of its own, ended after finalize (the default)
  shared,   // imports share long-lived workers: several tokens on one worker
};

// Which CPUs a library's workers may run on.
enum class CpuAffinity {
  any,  // every CPU the gateway may run on (the default)
  one,  // each worker (and what it starts) bound to one of them, taken in turn
};

// What the gateway lets through of {"__pickled__": "<hex>"} values (Python objects) for a library.
enum class PicklePolicy {
  allow,      // opaque bytes, passed through unchecked (the reference server's behaviour)
  data_only,  // only pickles that build plain Robot data (the default)
  deny,       // no pickled value at all
};

// Whether the gateway escapes argument strings before a worker sees them.
enum class Arguments {
  auto_,   // escape when the worker's robot/initialize answer shows it evaluates strings (the reference server)
  escape,  // always escape, as Robot Framework's own escaping does
  as_is,   // never: the worker gets every string exactly as the client sent it
};

// What a session's import becomes when its worker is lost (it crashed, or keyword_timeout ended it).
enum class WorkerLoss {
  reimport,  // the next keyword on the token imports the library again, with the same arguments, in a new worker
  fail,      // every later keyword on the token fails, saying the instance is gone
};

// Per-worker resource limits (setrlimit in the worker before exec). 0 means not set, except for core_size,
// which is set when core_size_set (core_size = 0 then turns core dumps off).
struct ResourceLimits {
  std::uint64_t address_space = 0;  // RLIMIT_AS, bytes
  std::uint64_t open_files = 0;     // RLIMIT_NOFILE
  std::uint64_t cpu_seconds = 0;    // RLIMIT_CPU
  std::uint64_t processes = 0;      // RLIMIT_NPROC
  std::uint64_t core_size = 0;      // RLIMIT_CORE, bytes; applied only when core_size_set
  bool core_size_set = false;       // core_size was configured (core_size = 0 is valid: no core dumps)
  bool any() const { return address_space || open_files || cpu_seconds || processes || core_size_set; }

  bool operator==(const ResourceLimits&) const = default;
};

struct Library {
  std::string name;
  // command[0] without a slash is looked up in PATH (then next to the gateway) by --check-config and again
  // at each worker start, by the same function (supervisor::resolve_command); with a slash it has been made
  // absolute against the configuration file's directory.
  std::vector<std::string> command;  // empty when `upstream` is set
  // A server of the protocol elsewhere, instead of a worker process: "tcp://HOST:PORT" ({library} may stand
  // for the imported name); empty: `command`.
  std::string upstream;
  std::string upstream_name;  // the name imported on the upstream; empty: the imported name
  // upstream = "http://...": a classic remote server (XML-RPC over HTTP), reached through a bridge worker
  // process the gateway starts (command is set to run it); `upstream` stays empty, as a process serves it.
  std::string classic_upstream;
  Duration connect_timeout{std::chrono::seconds(10)};
  // upstream = "http://...": the largest answer the bridge worker reads from the classic remote server.
  std::uint64_t max_answer_bytes = 16u * 1024 * 1024;
  // Glob entries: names refused; none: kDefaultDeny.
  std::optional<std::vector<std::string>> deny;
  // Glob entries: whether a name whose wildcard part holds a '.' is served. Off by default: Robot's importer
  // takes "LabPower.os" as the attribute os of the module LabPower, so a dotted name reaches every module
  // that a matching library imports.
  bool dotted = false;
  // Set by concrete() on a glob entry, for one import: the name the client imported (name stays the
  // entry's, which names its pool and metrics), and whether the command depends on it.
  std::string imported;
  bool name_in_command = false;
  // ... and whether anything of how it starts (command, env, upstream) depends on it: a start that fails
  // then says nothing about the entry's other names.
  bool name_dependent = false;
  std::map<std::string, std::string> env;    // added to the worker's environment
  std::optional<std::string> cwd;              // absolute (relative ones resolved against the file's directory)
  Duration startup_timeout{std::chrono::seconds(30)};  // spawn until the worker answers initialize
  Duration shutdown_grace{std::chrono::seconds(5)};    // shutdown/exit until SIGTERM, and SIGTERM until SIGKILL

  // Pools and lifecycle. Every key below may also be set in [defaults].
  Isolation isolation = Isolation::session;
  std::size_t prewarm = 0;       // started and initialized idle workers kept ready
  // Session isolation: each prewarmed worker also imports the library without arguments ahead of time;
  // an import without arguments then takes that instance (needs prewarm >= 1).
  bool prewarm_import = false;
  std::size_t max_workers = 0;   // cap on this library's workers; 0: only [gateway] max_workers applies
  Duration queue_timeout{std::chrono::seconds(30)};  // how long an import may wait for capacity
  Duration keyword_timeout{0};                        // 0: none
  std::uint64_t max_keywords = 0;                     // recycle a shared worker after that many keywords; 0: never
  Duration max_age{0};                                // recycle a shared worker older than that; 0: never
  std::uint64_t max_rss = 0;                          // recycle a shared worker above that resident size, bytes; 0: never
  ResourceLimits rlimits;
  std::size_t max_imports_per_worker = 16;            // shared: tokens one worker holds at most
  CpuAffinity cpu_affinity = CpuAffinity::any;
  // The reference server's workers forked from one preloaded template process per pool instead of each
  // started afresh (gateway/supervisor/fork_server.hpp); only for a command reference_server_command()
  // accepts. preload: modules the template imports ahead besides the libraries the command names.
  bool fork_server = false;
  std::vector<std::string> preload;

  PicklePolicy pickle = PicklePolicy::data_only;
  Arguments arguments = Arguments::auto_;
  WorkerLoss on_worker_loss = WorkerLoss::reimport;
  // The classic Remote front: imports of this library that classic clients share, calls spread over them;
  // 0: not served to classic clients.
  std::size_t classic_instances = 1;

  int source_line = 0;  // where the [[library]] table starts

  bool operator==(const Library&) const = default;

  bool is_upstream() const { return !upstream.empty(); }
  bool is_glob() const;
  // The library as log lines and errors name it: the imported name through a glob entry, else the name.
  const std::string& label() const { return imported.empty() ? name : imported; }
  // What the worker or upstream is asked to import: an upstream, its upstream_name or the imported name; a
  // glob entry whose command does not name the library, the imported name; "" otherwise (a worker program
  // serves the library its command line names).
  std::string import_name() const;
};

// Whether a library name is a glob ("Selenium*": has '*' or '?').
bool is_glob(std::string_view name);
// '*' one or more characters ("Lab*" does not serve "Lab" itself), '?' one character; nothing else is special.
bool glob_match(std::string_view pattern, std::string_view name);
// A name a client may import through a glob entry: at most kMaxImportName bytes of letters, digits, '_'
// and '.'; each dotted part starts with a letter (not '_': "X.__main__" would run a package's command-line
// code, "_io" is a private module). What could be a path, an option or a traversal ("-c", "a/b", "../x")
// is not.
inline constexpr std::size_t kMaxImportName = 200;
bool valid_import_name(std::string_view name);
// The names a glob entry refuses when its `deny` is not set: Robot Framework's standard libraries and the
// top-level modules of Python's standard library.
const std::vector<std::string>& default_deny();
// Whether `library` (a glob entry) refuses `name` by its deny list: the whole name, a dotted prefix of it or
// any one of its dotted parts is in the list ("LabPower.os" is refused by "os").
bool denied(const Library& library, std::string_view name);
// Why a glob entry refuses a name that it matches; none: it serves it. The one rule for every place a client's
// name meets a glob entry (the router, for JSON-RPC and classic clients alike, and the configuration check
// of [classic] default_library).
enum class GlobRefusal {
  none,
  not_a_name,    // not valid_import_name()
  denied,        // denied()
  dotted,        // a '.' where the entry's wildcards stand, and the entry is not `dotted = true`
  chooses_host,  // a dotted name where the entry's upstream host is {library}: it would choose the domain
};
GlobRefusal glob_refusal(const Library& entry, std::string_view name);
// A glob entry as it serves the imported `name`: `{library}` replaced by it in command items, env values,
// upstream and upstream_name, and `imported` set. (In exact entries the loader replaced {library} already.)
Library concrete(const Library& entry, std::string_view name);

struct Gateway {
  std::vector<ListenAddress> listen{*parse_listen_address("tcp://127.0.0.1:8271")};
  std::string log_level = "info";
  std::string log_format = "text";  // "text" or "json" (the log module reads it)
  Duration drain_timeout{std::chrono::seconds(30)};  // on SIGTERM: how long keywords in flight may finish
  std::size_t max_message_bytes = 64u * 1024 * 1024;

  std::size_t max_workers = 256;  // cap on all workers together; 0: none

  // Hardening limits.
  std::size_t max_header_bytes = 8 * 1024;  // the whole header block of a frame
  std::size_t max_json_depth = 64;          // nesting of arrays and objects in one message
  Duration handshake_timeout{std::chrono::seconds(10)};  // connect until robot/initialize is received
  Duration read_timeout{std::chrono::seconds(30)};       // a frame begun must be complete within this
  Duration idle_timeout{0};                               // no message at all for this long; 0: none
  std::size_t max_sessions = 1024;                        // connections at once; 0: none
  std::size_t max_sessions_per_client = 64;               // per source address; 0: none
  std::vector<Network> allow_from;                        // CIDR networks; empty: every address
  // Load balancers whose connections start with a PROXY protocol header (v1 or v2); empty: none.
  std::vector<Network> proxy_protocol_from;
  unsigned unix_mode = 0660;  // socket files of unix: listeners
  std::string unix_group;     // their group; empty: the gateway's own

  // Bounded memory per connection.
  std::uint64_t max_pending_bytes = 16u * 1024 * 1024;  // request texts of one connection waiting for a worker
  std::size_t max_pending_requests = 64;                // unanswered requests of one connection
  Duration write_timeout{std::chrono::seconds(30)};     // a client's write queue full for this long: disconnect
  std::size_t max_object_members = 65536;               // members of one JSON object in a message

  // Event loops: sessions are spread over this many threads; 0: one per core.
  std::size_t threads = 0;

  // Processes.
  bool end_orphans = true;  // end a worker's descendants that were reparented to the gateway

  bool operator==(const Gateway&) const = default;
};

// [admin]: the HTTP endpoint for operators (metrics, health, status). Off when the table is absent.
struct Admin {
  std::vector<ListenAddress> listen;  // required in the table; empty: no admin endpoint
  std::vector<Network> allow_from;    // empty: every address

  bool operator==(const Admin&) const = default;
};

// [classic]: the front for Robot Framework's classic Remote library (XML-RPC over HTTP). Off when the table
// is absent.
struct Classic {
  std::vector<ListenAddress> listen;  // required in the table
  std::string default_library;        // served at "/" and "/RPC2"; empty: the first exact library
  // An XML-RPC request's body: what one call can make the front read and parse (see "Bounded memory").
  std::uint64_t max_body_bytes = 8u * 1024 * 1024;
  // Imports held for classic clients, all libraries together (each one in a worker of its pool); at the cap,
  // the least recently used idle one makes room for a call that needs another.
  std::size_t max_imports = 4;
  Duration idle_timeout{std::chrono::minutes(5)};  // an import no classic call used for this long ends; 0: never

  bool operator==(const Classic&) const = default;
};

struct Config {
  std::string path;  // the file it was loaded from
  Gateway gateway;
  Admin admin;
  Classic classic;
  std::vector<Library> libraries;

  const Library* find_library(std::string_view name) const;
};

// A command that runs the reference Python server on stdio: [PYTHON, PYTHON_OPTIONS..., "-m",
// "robot_jsonrpcremote_server", ARGS...] with "--stdio" among ARGS. fork_server = true needs this shape:
// the template runs the same interpreter with the same options, and the server's start-up with ARGS.
struct ReferenceServerCommand {
  std::vector<std::string> interpreter;  // PYTHON and its options
  std::vector<std::string> server_args;  // ARGS
};
std::optional<ReferenceServerCommand> reference_server_command(const std::vector<std::string>& command);
inline constexpr std::string_view kReferenceServerModule = "robot_jsonrpcremote_server";

// The same library settings, wherever the table stands in the file.
bool same_settings(const Library& a, const Library& b);

// All problems found in a file, each "FILE:LINE:COLUMN: what is wrong".
struct ConfigError : std::runtime_error {
  explicit ConfigError(std::vector<std::string> problems);
  std::vector<std::string> problems;
};

// Loads and validates; throws ConfigError listing every problem found.
Config load_file(const std::string& path);
// Same, from text (path is used in messages only).
Config load_string(std::string_view text, const std::string& path);

// Parses "500ms", "30s", "5m", "2h" or a number of seconds (integer or float). Returns nullopt if invalid.
std::optional<Duration> parse_duration(std::string_view text);
// Parses a byte size: an integer, or a string "512", "64KiB", "512MiB", "2GiB" (also K/M/G and KB/MB/GB
// meaning powers of 1024). Returns nullopt if invalid.
std::optional<std::uint64_t> parse_size(std::string_view text);
std::string_view to_string(Isolation isolation);
std::string_view to_string(PicklePolicy policy);
std::string_view to_string(Arguments arguments);

// The configuration reference in Markdown: the keys of each table, with type, default, allowed values and
// what each does. doc/configuration.md holds it between these marker lines (a unit test checks that it is up to date),
// and robot-jsonrpc-config-reference prints it with them.
std::string reference_markdown();
inline constexpr const char* kReferenceBegin = "<!-- config-reference:begin -->\n";
inline constexpr const char* kReferenceEnd = "<!-- config-reference:end -->\n";

}  // namespace rjg::config
