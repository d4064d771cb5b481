// rjg-fake-python: a stand-in for a Python interpreter with the reference server installed, for the
// fork server's integration tests on machines without Python's peers (a fresh clone). The gateway
// cannot tell it from Python: it runs it exactly as it would run PYTHON.
//
//   rjg-fake-python -m robot_jsonrpcremote_server ARGS...   a plain start: runs the test worker with ARGS
//   rjg-fake-python .../robot_jsonrpc_fork_server.py --name N --control-fd 0 [--preload M]... -- ARGS...
//                                                           the template: speaks the fork server's wire
//                                                           format (workers/fork_server/robot_jsonrpc_fork_control.py)
//                                                           and, per request, forks twice and runs the test
//                                                           worker with ARGS on the passed descriptors
//
// The test worker is $RJG_FAKE_PYTHON_WORKER (the library's env sets it). A forked worker gets
// RJG_FORKED_BY=<template pid> in its environment, so a test can tell a fork from a plain start. Faults,
// from the environment: RJG_FAKE_TEMPLATE=not-ready (says why and exits 3, as the real template does when
// Robot Framework is missing), =refuse (answers every request with an error), =silent (never answers a
// request), =exit-after-fork (exits after its first fork, as a template that crashed), =worker-dies (each
// worker exits with status 5 at once, before the gateway can have watched it).
#include <boost/json.hpp>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace json = boost::json;

namespace {

[[noreturn]] void exec_worker(const std::vector<std::string>& args) {
  const char* worker = std::getenv("RJG_FAKE_PYTHON_WORKER");
  if (!worker) {
    std::fprintf(stderr, "rjg-fake-python: RJG_FAKE_PYTHON_WORKER is not set\n");
    _exit(2);
  }
  std::vector<char*> argv{const_cast<char*>(worker)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(worker, argv.data());
  std::fprintf(stderr, "rjg-fake-python: cannot run %s: %s\n", worker, std::strerror(errno));
  _exit(127);
}

void send(int control, const json::object& message) {
  const std::string text = json::serialize(message);
  ::send(control, text.data(), text.size(), MSG_NOSIGNAL);
}

const std::pair<const char*, int> kLimits[] = {
    {"as", RLIMIT_AS}, {"nofile", RLIMIT_NOFILE}, {"cpu", RLIMIT_CPU}, {"nproc", RLIMIT_NPROC}, {"core", RLIMIT_CORE}};

// template -> intermediate -> worker; the worker's pid, or -1. As the real template does, the intermediate
// is reaped only after the answer has gone (reap_intermediate): the worker may still be its child then.
pid_t intermediate_pid = 0;
void reap_intermediate() {
  if (intermediate_pid > 0) ::waitpid(intermediate_pid, nullptr, 0);
  intermediate_pid = 0;
}

pid_t fork_worker(const json::object& request, const int (&fds)[3], const std::vector<std::string>& args,
                  bool worker_dies) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return -1;
  const pid_t intermediate = ::fork();
  if (intermediate < 0) return -1;
  if (intermediate == 0) {
    ::close(report[0]);
    const pid_t worker = ::fork();
    if (worker == 0) {
      if (worker_dies) _exit(5);
      ::setpgid(0, 0);
      int high[3];
      for (int i = 0; i < 3; ++i) high[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
      for (int i = 0; i < 3; ++i) ::dup2(high[i], i);
      for (int fd = 3; fd < 1024; ++fd) ::close(fd);
      exec_worker(args);
    }
    ::setpgid(worker, worker);
    if (const auto* limits = request.if_contains("rlimits"); limits && limits->is_object())
      for (auto [name, resource] : kLimits)
        if (const auto* v = limits->as_object().if_contains(name); v && v->is_int64()) {
          const rlimit limit{static_cast<rlim_t>(v->as_int64()), static_cast<rlim_t>(v->as_int64())};
          ::prlimit(worker, static_cast<enum __rlimit_resource>(resource), &limit, nullptr);
        }
    if (const auto* cpu = request.if_contains("cpu"); cpu && cpu->is_int64()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<int>(cpu->as_int64()), &set);
      ::sched_setaffinity(worker, sizeof set, &set);
    }
    const std::string text = "pid " + std::to_string(worker);
    (void)!::write(report[1], text.data(), text.size());
    _exit(0);
  }
  ::close(report[1]);
  char buffer[64] = {};
  const ssize_t n = ::read(report[0], buffer, sizeof buffer - 1);
  ::close(report[0]);
  intermediate_pid = intermediate;
  if (n <= 4 || std::strncmp(buffer, "pid ", 4) != 0) return -1;
  return static_cast<pid_t>(std::atoi(buffer + 4));
}

int run_template(const std::vector<std::string>& argv) {
  std::string name = "?";
  int control = 0;
  json::array preloaded;
  std::vector<std::string> server_args;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--name" && i + 1 < argv.size()) name = argv[++i];
    else if (argv[i] == "--control-fd" && i + 1 < argv.size()) control = std::atoi(argv[++i].c_str());
    else if (argv[i] == "--preload" && i + 1 < argv.size()) preloaded.push_back(json::string(argv[++i]));
    else if (argv[i] == "--") {
      server_args.assign(argv.begin() + static_cast<std::ptrdiff_t>(i + 1), argv.end());
      break;
    }
  }
  const char* fault_env = std::getenv("RJG_FAKE_TEMPLATE");
  const std::string fault = fault_env ? fault_env : "";
  // The worker's environment is the template's: RJG_FORKED_BY tells a fork from a plain start.
  ::setenv("RJG_FORKED_BY", std::to_string(::getpid()).c_str(), 1);
  if (fault == "not-ready") {
    std::fprintf(stderr, "[ERROR] fork server for library '%s' (pid %d): cannot import robot: No module named "
                 "'robot' (fake); the gateway starts this library's workers the plain way\n", name.c_str(), ::getpid());
    return 3;
  }
  std::fprintf(stderr, "[INFO] fork server for library '%s' (pid %d): a stand-in template for the tests\n", name.c_str(),
               ::getpid());
  send(control, json::object{{"v", 1}, {"ready", true}, {"pid", ::getpid()}, {"preloaded", preloaded},
                             {"not_preloaded", json::object{}}, {"python", "fake"}, {"robot", "fake"},
                             {"server", "fake"}});
  for (;;) {
    char data[65536];
    alignas(cmsghdr) char space[CMSG_SPACE(16 * sizeof(int))];
    iovec io{data, sizeof data};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = space;
    message.msg_controllen = sizeof space;
    const ssize_t n = ::recvmsg(control, &message, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;  // the gateway closed its end
    std::vector<int> fds;
    for (cmsghdr* h = CMSG_FIRSTHDR(&message); h; h = CMSG_NXTHDR(&message, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS)
        for (std::size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
          fds.push_back(fd);
        }
    boost::system::error_code ec;
    json::value request = json::parse(std::string_view(data, static_cast<std::size_t>(n)), ec);
    const json::value id = !ec && request.is_object() && request.as_object().contains("id") ? request.at("id") : nullptr;
    if (fault == "silent") continue;
    if (ec || !request.is_object() || fds.size() != 3 || fault == "refuse") {
      send(control, json::object{{"v", 1}, {"id", id}, {"error", fault == "refuse" ? "refused (fake fault)" : "bad request"}});
    } else {
      const int three[3] = {fds[0], fds[1], fds[2]};
      const pid_t pid = fork_worker(request.as_object(), three, server_args, fault == "worker-dies");
      if (pid > 0) send(control, json::object{{"v", 1}, {"id", id}, {"pid", pid}});
      else send(control, json::object{{"v", 1}, {"id", id}, {"error", "cannot fork (fake)"}});
      reap_intermediate();
    }
    for (int fd : fds) ::close(fd);
    if (fault == "exit-after-fork") return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  ::signal(SIGPIPE, SIG_IGN);
  if (args.size() >= 2 && args[0] == "-m" && args[1] == "robot_jsonrpcremote_server")
    exec_worker(std::vector<std::string>(args.begin() + 2, args.end()));
  if (!args.empty() && std::string_view(args[0]).ends_with("robot_jsonrpc_fork_server.py"))
    return run_template(std::vector<std::string>(args.begin() + 1, args.end()));
  std::fprintf(stderr, "rjg-fake-python: expected -m robot_jsonrpcremote_server or the fork server's program\n");
  return 2;
}
