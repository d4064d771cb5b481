#include "tests/integration/harness.hpp"

#include "common/protocol/json_text.hpp"
#include "common/protocol/protocol.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

extern char** environ;

#ifndef RJG_GATEWAY_BIN
#define RJG_GATEWAY_BIN "robot-jsonrpc-gateway"
#endif
#ifndef RJG_TEST_WORKER_BIN
#define RJG_TEST_WORKER_BIN "robot-test-worker"
#endif
#ifndef RJG_CLI_BIN
#define RJG_CLI_BIN "robot-jsonrpc-cli"
#endif

namespace rjg::test {

namespace {
std::string under_test(std::string_view built) {
  const char* dir = std::getenv("RJG_BIN_DIR");
  if (!dir || !*dir) return std::string(built);
  return (fs::path(dir) / fs::path(built).filename()).string();
}
}  // namespace

const std::string& gateway_binary() {
  static const std::string path = under_test(RJG_GATEWAY_BIN);
  return path;
}
const std::string& test_worker_binary() {
  static const std::string path = under_test(RJG_TEST_WORKER_BIN);
  return path;
}
const std::string& cli_binary() {
  static const std::string path = under_test(RJG_CLI_BIN);
  return path;
}

std::string_view sanitizer_under_test() {
  if (const char* named = std::getenv("RJG_SANITIZER"); named && *named) return named;
#if defined(__SANITIZE_ADDRESS__)
  return "address";
#elif defined(__SANITIZE_THREAD__)
  return "thread";
#else
  return "";
#endif
}

std::int64_t volume_under_test(std::int64_t full) { return sanitizer_under_test().empty() ? full : full / 4; }

// ---------------------------------------------------------------------------------------------

TempDir::TempDir(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = fmt::format("{}/{}-XXXXXX", base && *base ? base : "/tmp", prefix);
  if (!::mkdtemp(templ.data())) throw std::runtime_error(fmt::format("mkdtemp {}: {}", templ, std::strerror(errno)));
  path_ = templ;
}

TempDir::~TempDir() {
  if (keep_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error(fmt::format("bind: {}", std::strerror(errno)));
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool can_connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

std::map<int, std::string> fd_targets(pid_t pid) {
  std::map<int, std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    std::error_code link_ec;
    auto target = fs::read_symlink(entry.path(), link_ec);
    if (!link_ec) out[std::atoi(entry.path().filename().c_str())] = target.string();
  }
  return out;
}

std::vector<TcpSocket> tcp_sockets() {
  std::vector<TcpSocket> out;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    // "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ..."
    std::istringstream table(read_file(path));
    std::string line;
    std::getline(table, line);  // the header
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::vector<std::string> f;
      for (std::string x; fields >> x;) f.push_back(x);
      if (f.size() <= 9) continue;
      // Addresses are "0100007F:1F4F" (tcp) or 32 hex digits, a colon and the port (tcp6).
      auto port_of = [](const std::string& address) {
        return static_cast<std::uint16_t>(std::stoul(address.substr(address.rfind(':') + 1), nullptr, 16));
      };
      out.push_back({port_of(f[1]), port_of(f[2]), f[3] == "0A", f[9]});
    }
  }
  return out;
}

std::set<std::string> listening_sockets(std::optional<std::uint16_t> port) {
  std::set<std::string> out;
  for (const auto& socket : tcp_sockets())
    if (socket.listening && (!port || socket.local_port == *port)) out.insert("socket:[" + socket.inode + "]");
  return out;
}

bool listens_on(pid_t pid, std::uint16_t port) {
  const auto listening = listening_sockets(port);
  if (listening.empty()) return false;
  for (const auto& [fd, target] : fd_targets(pid))
    if (listening.count(target)) return true;
  return false;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

// A TOML basic string: its escapes are JSON's (\" \\ \n \t \r \b \f \uXXXX).
std::string toml_string(std::string_view text) { return protocol::quote(text); }

bool pid_gone(pid_t pid) { return pid > 0 && ::kill(pid, 0) == -1 && errno == ESRCH; }

bool wait_pid_gone(pid_t pid, std::chrono::milliseconds timeout) {
  return eventually([&] { return pid_gone(pid); }, timeout, 20ms);
}

// ---------------------------------------------------------------------------------------------

ChildProcess::~ChildProcess() { kill_and_reap(); }

ChildProcess::ChildProcess(ChildProcess&& o) noexcept : pid_(o.pid_), status_(o.status_) { o.pid_ = -1; }

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    kill_and_reap();
    pid_ = o.pid_;
    status_ = o.status_;
    o.pid_ = -1;
  }
  return *this;
}

void ChildProcess::start(const std::vector<std::string>& argv, const fs::path& stdout_path,
                         const fs::path& stderr_path, const std::map<std::string, std::string>& extra_env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The environment is built before fork: nothing but async-signal-safe calls run in the child.
  std::vector<std::string> env_storage;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string_view::npos && extra_env.count(std::string(entry.substr(0, eq)))) continue;
    env_storage.emplace_back(entry);
  }
  for (const auto& [name, value] : extra_env) env_storage.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0 || err < 0) throw std::runtime_error(fmt::format("open output files: {}", std::strerror(errno)));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out);
    ::close(err);
    throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    // A crashing worker must not leave core files behind; the limit is inherited.
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(SIGPIPE, SIG_DFL);
    ::execve(args[0], args.data(), envp.data());
    std::string msg = fmt::format("exec {}: {}\n", argv[0], std::strerror(errno));
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(127);
  }
  ::close(out);
  ::close(err);
  pid_ = pid;
  status_.reset();
}

bool ChildProcess::running() {
  if (pid_ <= 0 || status_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = st;
    return false;
  }
  return r == 0;
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  if (pid_ <= 0) return std::nullopt;
  eventually([&] { return !running(); }, timeout, 10ms);
  return status_;
}

void ChildProcess::signal(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

void ChildProcess::kill_and_reap() {
  if (pid_ <= 0 || status_) return;
  if (running()) ::kill(pid_, SIGKILL);
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  status_ = st;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

std::optional<ProcInfo> proc_info(pid_t pid) {
  std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  // "PID (COMM) STATE PPID PGRP ...": COMM may hold spaces and parentheses, so split at the last ')'.
  auto open = stat.find('(');
  auto close = stat.rfind(')');
  if (stat.empty() || open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcInfo info;
  info.pid = pid;
  info.comm = stat.substr(open + 1, close - open - 1);
  std::istringstream rest(stat.substr(close + 1));
  long ppid = 0, pgid = 0;
  if (!(rest >> info.state >> ppid >> pgid)) return std::nullopt;
  info.ppid = static_cast<pid_t>(ppid);
  info.pgid = static_cast<pid_t>(pgid);
  return info;
}

std::vector<ProcInfo> children_of(pid_t parent) {
  std::vector<ProcInfo> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto info = proc_info(static_cast<pid_t>(std::stol(name)));
    if (info && info->ppid == parent) out.push_back(*info);
  }
  return out;
}

std::uint64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::optional<std::size_t> open_fd_count(pid_t pid) {
  std::error_code ec;
  fs::directory_iterator it(fmt::format("/proc/{}/fd", pid), ec);
  if (ec) return std::nullopt;
  std::size_t n = 0;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return std::nullopt;
    ++n;
  }
  return n;
}

std::string describe_fds(pid_t pid) {
  std::string out;
  std::error_code ec;
  std::vector<std::pair<int, std::string>> fds;
  for (const auto& entry : fs::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    std::error_code lec;
    auto target = fs::read_symlink(entry.path(), lec);
    fds.emplace_back(std::atoi(entry.path().filename().c_str()), lec ? "?" : target.string());
  }
  std::sort(fds.begin(), fds.end());
  for (const auto& [fd, target] : fds) out += fmt::format("  {} -> {}\n", fd, target);
  return out;
}

std::string proc_cmdline(pid_t pid) {
  std::string text = read_file(fmt::format("/proc/{}/cmdline", pid));
  while (!text.empty() && text.back() == '\0') text.pop_back();
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

bool ProcessResult::exited_with(int code) const {
  return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

std::string ProcessResult::describe() const {
  return fmt::format("{}\n--- stdout ---\n{}\n--- stderr ---\n{}", timed_out ? "timed out" : describe_status(status),
                     out, err);
}

ProcessResult run_process(const std::vector<std::string>& argv, const fs::path& workdir,
                          std::chrono::milliseconds timeout) {
  // Tests run processes from several threads at once (classic_test): each run gets files of its own.
  static std::atomic<int> runs = 0;
  const int counter = ++runs;
  auto out_path = workdir / fmt::format("run{}.stdout", counter);
  auto err_path = workdir / fmt::format("run{}.stderr", counter);
  ChildProcess child;
  child.start(argv, out_path, err_path);
  ProcessResult result;
  auto status = child.wait(timeout);
  if (!status) {
    result.timed_out = true;
    child.kill_and_reap();
    status = child.status();
  }
  result.status = status.value_or(0);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

// ---------------------------------------------------------------------------------------------

LibrarySpec test_library(const std::string& name, std::vector<std::string> extra_args) {
  LibrarySpec spec;
  spec.name = name;
  spec.command = {test_worker_binary(), "--name", name};
  for (auto& a : extra_args) spec.command.push_back(std::move(a));
  spec.env["RJG_TEST_LIBRARY"] = name;
  return spec;
}

LibrarySpec command_library(std::string name, std::vector<std::string> command) {
  LibrarySpec spec;
  spec.name = std::move(name);
  spec.command = std::move(command);
  return spec;
}

std::string make_config(std::uint16_t port, const std::vector<LibrarySpec>& libraries, const GatewayOptions& options) {
  std::string out;
  out += "[gateway]\n";
  if (options.listen.empty()) {
    out += fmt::format("listen = [{}]\n", toml_string(fmt::format("tcp://127.0.0.1:{}", port)));
  } else {
    std::string entries;
    for (const auto& entry : options.listen)
      entries += (entries.empty() ? "" : ", ") + toml_string(fmt::format(fmt::runtime(entry), fmt::arg("port", port)));
    out += fmt::format("listen = [{}]\n", entries);
  }
  out += fmt::format("log_level = {}\n", toml_string(options.log_level));
  out += fmt::format("drain_timeout = {}\n", toml_string(options.drain_timeout));
  out += options.extra_gateway_toml;
  if (!options.extra_gateway_toml.empty() && !options.extra_gateway_toml.ends_with('\n')) out += "\n";
  // A suite registered once per loop count (the pool tests: threads = 1 and 4) says which in the
  // environment; a test that sets threads itself keeps its own.
  if (const char* threads = std::getenv("RJG_TEST_GATEWAY_THREADS");
      threads && *threads && options.extra_gateway_toml.find("threads") == std::string::npos)
    out += fmt::format("threads = {}\n", threads);
  if (!options.extra_toml.empty()) out += "\n" + options.extra_toml + (options.extra_toml.ends_with('\n') ? "" : "\n");
  for (const auto& lib : libraries) {
    out += "\n[[library]]\n";
    out += fmt::format("name = {}\n", toml_string(lib.name));
    // No command at all: the entry's extra_toml says what serves it (upstream = "tcp://...").
    if (!lib.command.empty()) {
      std::string cmd;
      for (const auto& c : lib.command) cmd += (cmd.empty() ? "" : ", ") + toml_string(c);
      out += fmt::format("command = [{}]\n", cmd);
    }
    if (!lib.env.empty()) {
      std::string env;
      for (const auto& [k, v] : lib.env) env += (env.empty() ? "" : ", ") + k + " = " + toml_string(v);
      out += fmt::format("env = {{ {} }}\n", env);
    }
    if (lib.cwd) out += fmt::format("cwd = {}\n", toml_string(*lib.cwd));
    if (lib.startup_timeout) out += fmt::format("startup_timeout = {}\n", toml_string(*lib.startup_timeout));
    if (lib.shutdown_grace) out += fmt::format("shutdown_grace = {}\n", toml_string(*lib.shutdown_grace));
    out += lib.extra_toml;
    if (!lib.extra_toml.empty() && !lib.extra_toml.ends_with('\n')) out += "\n";
  }
  return out;
}

GatewayProcess::GatewayProcess(std::vector<LibrarySpec> libraries, GatewayOptions options)
    : libraries_(std::move(libraries)), options_(std::move(options)) {}

GatewayProcess::~GatewayProcess() {
  if (process_.pid() > 0 && process_.running()) {
    process_.signal(SIGTERM);
    if (!process_.wait(10s)) process_.kill_and_reap();
  }
}

void GatewayProcess::start() {
  // free_port's port is free only until something else binds it: another test's gateway, started in
  // parallel, may take it first. Then this gateway cannot listen and exits at once; it starts again on
  // another port. Anything else that ends the start-up is the test's failure.
  for (int attempt = 1;; ++attempt) {
    port_ = free_port();
    write_file(config_path(), make_config(port_, libraries_, options_));
    std::vector<std::string> argv;
    for (const auto& arg : options_.launcher) argv.push_back(fmt::format(fmt::runtime(arg), fmt::arg("port", port_)));
    for (const auto& arg : {gateway_binary(), std::string("--config"), config_path().string()}) argv.push_back(arg);
    process_.start(argv, dir_.path() / "gateway.stdout", stderr_path(), options_.env);
    if (wait_listening()) return;
    const std::string log = this->log();
    const bool port_taken = log.find(fmt::format(":{}): Address already in use", port_)) != std::string::npos;
    if (!port_taken || attempt == 3) {
      throw std::runtime_error(fmt::format("the gateway exited during start-up ({})\nconfig:\n{}\nstderr:\n{}",
                                           describe_status(process_.status().value_or(0)),
                                           read_file(config_path()), log_tail()));
    }
  }
}

bool GatewayProcess::wait_listening() {
  auto deadline = Clock::now() + 10s;
  for (;;) {
    if (!process_.running()) return false;
    // That the port accepts is not enough: it must be this gateway's socket (see can_connect). Under
    // systemd-socket-activate the launcher binds it and becomes the gateway (exec, same pid), and the
    // connect is what makes it run the gateway.
    if (listens_on(process_.pid(), port_) && can_connect(port_)) return true;
    if (Clock::now() >= deadline) {
      std::string tail = log_tail();
      process_.kill_and_reap();
      throw std::runtime_error(fmt::format(
          "the gateway did not accept connections on port {} within 10 s\nconfig:\n{}\nstderr:\n{}", port_,
          read_file(config_path()), tail));
    }
    std::this_thread::sleep_for(20ms);
  }
}

std::optional<int> GatewayProcess::stop(std::chrono::milliseconds timeout) {
  if (process_.pid() <= 0) return std::nullopt;
  process_.signal(SIGTERM);
  auto status = process_.wait(timeout);
  if (!status) process_.kill_and_reap();
  return status;
}

std::string GatewayProcess::uri() const { return fmt::format("tcp://127.0.0.1:{}", port_); }

std::string GatewayProcess::log() const { return read_file(stderr_path()); }

std::string GatewayProcess::log_tail(std::size_t max_lines) const {
  std::string text = log();
  std::size_t pos = text.size();
  for (std::size_t lines = 0; lines <= max_lines; ++lines) {
    if (pos == 0) return text;
    auto nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) return text;
    pos = nl;
  }
  return fmt::format("[... {} earlier bytes ...]\n{}", pos + 1, text.substr(pos + 1));
}

client::RpcClient GatewayProcess::connect(std::chrono::milliseconds timeout) const {
  client::RpcClient client(timeout);
  client.set_client_info("rjg-integration-tests", "0");
  client.connect("127.0.0.1", port_);
  return client;
}

// ---------------------------------------------------------------------------------------------

const json::object* keyword_definition(const json::object& definition, std::string_view name) {
  for (const auto& k : definition.at("keywords").as_array())
    if (k.as_object().at("name") == json::value(json::string(name))) return &k.as_object();
  return nullptr;
}

json::value keyword_value(const client::RpcReply& reply) {
  if (!reply.result || !reply.result->is_object()) return nullptr;
  auto it = reply.result->get_object().find("result");
  return it == reply.result->get_object().end() ? json::value(nullptr) : it->value();
}

std::optional<KeywordFailure> keyword_failure_of(const protocol::Message& answer) {
  if (answer.kind != protocol::Message::Kind::response) return std::nullopt;
  const std::string_view result = answer.result_text();
  const auto members = protocol::members(result);  // none unless the result is an object
  const auto* error = protocol::find(members, "error");
  if (!error || error->kind != protocol::Kind::object) return std::nullopt;
  const std::string_view error_text = error->value.of(result);
  const auto error_members = protocol::members(error_text);
  auto text_of = [&](std::string_view name) {
    const auto* member = protocol::find(error_members, name);
    if (!member) return std::string();
    const auto value = member->value.of(error_text);
    return value.starts_with('"') ? protocol::decode_string(value) : std::string(value);
  };
  return KeywordFailure{text_of("type"), text_of("message")};
}

std::string frame(std::string_view body) { return fmt::format("Content-Length: {}\r\n\r\n{}", body.size(), body); }

std::string describe(const client::RpcReply& reply) {
  json::object o;
  o["id"] = reply.id;
  if (reply.result) o["result"] = *reply.result;
  if (reply.error) o["error"] = *reply.error;
  std::string text = json::serialize(o);
  if (text.size() > 2000) text = text.substr(0, 2000) + "...";
  return text;
}

std::string open_library(client::RpcClient& client, const std::string& library, json::array args, json::object kw_args) {
  client.initialize();
  auto reply = client.import_library(library, std::move(args), std::move(kw_args));
  if (!reply.ok()) throw std::runtime_error(fmt::format("import of '{}' failed: {}", library, describe(reply)));
  const auto& r = reply.result->as_object();
  return std::string(r.at("token").as_string());
}

pid_t worker_pid(client::RpcClient& client, const std::string& token) {
  auto reply = client.run_keyword(token, "Get Pid");
  if (!reply.ok() || reply.keyword_error())
    throw std::runtime_error(fmt::format("Get Pid failed: {}", describe(reply)));
  auto v = keyword_value(reply);
  if (v.is_int64()) return static_cast<pid_t>(v.get_int64());
  if (v.is_uint64()) return static_cast<pid_t>(v.get_uint64());
  if (v.is_string()) return static_cast<pid_t>(std::stol(std::string(v.get_string())));
  throw std::runtime_error(fmt::format("Get Pid returned {}", json::serialize(v)));
}

// ---------------------------------------------------------------------------------------------

DirectWorker::DirectWorker(const std::string& name, std::vector<std::string> extra_args)
    : name_(name), extra_(std::move(extra_args)) {}

DirectWorker::~DirectWorker() {
  if (process_.pid() > 0 && process_.running()) {
    process_.signal(SIGTERM);
    if (!process_.wait(5s)) process_.kill_and_reap();
  }
}

std::string DirectWorker::log() const { return read_file(dir_.path() / "worker.stderr"); }

void DirectWorker::start(std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{test_worker_binary(), "--name", name_, "--tcp", "127.0.0.1:0"};
  for (const auto& a : extra_) argv.push_back(a);
  process_.start(argv, dir_.path() / "worker.stdout", dir_.path() / "worker.stderr");
  static const std::regex listening(R"(listening on ([^\s:]+|\[[^\]]+\]):(\d+))");
  auto deadline = Clock::now() + timeout;
  for (;;) {
    std::string err = log();
    std::smatch m;
    if (std::regex_search(err, m, listening)) {
      host_ = m[1].str();
      if (host_.size() > 2 && host_.front() == '[') host_ = host_.substr(1, host_.size() - 2);
      port_ = static_cast<std::uint16_t>(std::stoi(m[2].str()));
      return;
    }
    if (!process_.running())
      throw std::runtime_error(fmt::format("{} --tcp exited ({}) without printing 'listening on HOST:PORT' "
                                           "(is --tcp supported?); stderr:\n{}",
                                           test_worker_binary(), describe_status(process_.status().value_or(0)), err));
    if (Clock::now() >= deadline) {
      process_.kill_and_reap();
      throw std::runtime_error(fmt::format("{} --tcp printed no 'listening on HOST:PORT' within {} ms; stderr:\n{}",
                                           test_worker_binary(), timeout.count(), err));
    }
    std::this_thread::sleep_for(20ms);
  }
}

}  // namespace rjg::test

namespace rjg::test {

std::optional<std::string> find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const fs::path candidate = fs::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return std::nullopt;
}

namespace {
// TracerPid of every thread of pid is set (and there is at least one thread).
bool all_threads_traced(pid_t pid) {
  std::error_code ec;
  std::size_t threads = 0;
  for (const auto& task : fs::directory_iterator(fs::path("/proc") / std::to_string(pid) / "task", ec)) {
    std::ifstream in(task.path() / "status");
    bool traced = false;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("TracerPid:", 0) == 0) {
        traced = std::strtol(line.c_str() + 10, nullptr, 10) != 0;
        break;
      }
    }
    if (!traced) return false;
    ++threads;
  }
  return !ec && threads > 0;
}

void end_strace(ChildProcess& strace) {
  if (strace.pid() <= 0 || !strace.running()) return;
  strace.signal(SIGINT);
  if (!strace.wait(10s)) strace.kill_and_reap();
}
}  // namespace

SyscallCounts count_syscalls(pid_t pid, const std::function<void()>& work) {
  const auto program = find_program("strace");
  if (!program) throw StraceUnusable("strace is not installed (deploy/install-deps.sh installs it)");
  TempDir dir("rjg-strace");
  const fs::path summary = dir.path() / "summary";
  ChildProcess strace;
  strace.start({*program, "-c", "-f", "-p", std::to_string(pid), "-o", summary.string()}, dir.path() / "strace.stdout",
               dir.path() / "strace.stderr");
  const bool attached = eventually([&] { return all_threads_traced(pid) || !strace.running(); }, 20s, 5ms);
  if (!attached || !strace.running()) {
    std::string err = read_file(dir.path() / "strace.stderr");
    end_strace(strace);
    while (!err.empty() && err.back() == '\n') err.pop_back();
    throw StraceUnusable(
        fmt::format("strace did not attach to pid {} within 20 s: {}", pid, err.empty() ? "(no output)" : err));
  }
  try {
    work();
  } catch (...) {
    end_strace(strace);
    throw;
  }
  strace.signal(SIGINT);
  const auto status = strace.wait(20s);
  if (!status) {
    strace.kill_and_reap();
    throw std::runtime_error("strace did not exit within 20 s of SIGINT");
  }
  const std::string text = read_file(summary);
  if (text.empty())
    throw std::runtime_error(fmt::format("strace wrote no summary ({}): {}", describe_status(*status),
                                         read_file(dir.path() / "strace.stderr")));
  return parse_strace_summary(text);
}

std::uint64_t relay_calls(const SyscallCounts& counts) {
  std::uint64_t calls = counts.total;
  if (sanitizer_under_test().empty()) return calls;
  for (const char* name : {"mmap", "munmap", "madvise", "mprotect"})
    if (auto it = counts.by_name.find(name); it != counts.by_name.end()) calls -= it->second.calls;
  return calls;
}

SyscallCounts parse_strace_summary(const std::string& text) {
  // % time     seconds  usecs/call     calls    errors syscall
  // ------ ----------- ----------- --------- --------- ----------------
  //  60.00    0.000060           2        30         4 read
  //  ...
  // 100.00    0.000100           2        50         4 total
  // The errors column is empty for a call that never failed.
  SyscallCounts counts;
  std::istringstream in(text);
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("------", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string word; fields >> word;) f.push_back(word);
    if (f.size() < 5) continue;
    SyscallCounts::Entry entry;
    try {
      entry.calls = std::stoull(f[3]);
      entry.errors = f.size() >= 6 ? std::stoull(f[4]) : 0;
    } catch (const std::exception&) {
      continue;
    }
    if (f.back() == "total") counts.total = entry.calls;
    else counts.by_name[f.back()] = entry;
  }
  return counts;
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

std::size_t count_of(std::string_view text, std::string_view needle) {
  std::size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string_view::npos; pos = text.find(needle, pos + needle.size())) ++n;
  return n;
}

std::vector<pid_t> captured_pids(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  std::vector<pid_t> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(static_cast<pid_t>(std::stol((*it)[1].str())));
  return out;
}

std::vector<std::string> lines_with(const std::string& text, std::string_view needle) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    if (contains(line, needle)) out.emplace_back(line);
    start = end + 1;
  }
  return out;
}

std::int64_t as_int(const json::value& v) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) return static_cast<std::int64_t>(v.get_uint64());
  throw std::runtime_error("not an integer: " + json::serialize(v));
}

std::string token_of(const client::RpcReply& reply) {
  if (!reply.ok() || !reply.result->is_object() || !reply.result->get_object().contains("token"))
    throw std::runtime_error("not an import result: " + describe(reply));
  return std::string(reply.result->get_object().at("token").as_string());
}

}  // namespace rjg::test
