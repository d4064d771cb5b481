// GoogleTest fixture: one real gateway per test, its log printed when the test fails.
#pragma once

#include "common/protocol/protocol.hpp"
#include "tests/integration/harness.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace rjg::test {

namespace protocol = rjg::protocol;

class GatewayTest : public ::testing::Test {
 protected:
  // The default configuration: two test-worker libraries, TestLibrary first.
  static std::vector<LibrarySpec> default_libraries() {
    return {test_library("TestLibrary"), test_library("SecondLibrary")};
  }

  void start(std::vector<LibrarySpec> libraries = default_libraries(), GatewayOptions options = {}) {
    gateway_ = std::make_unique<GatewayProcess>(std::move(libraries), std::move(options));
    gateway_->start();
  }

  GatewayProcess& gateway() { return *gateway_; }

  client::RpcClient connect() { return gateway_->connect(); }

  // Connect, initialize, import: a ready session on `library`.
  std::pair<client::RpcClient, std::string> session(const std::string& library = "TestLibrary", json::array args = {},
                                            json::object kw_args = {}) {
    client::RpcClient client = connect();
    std::string token = open_library(client, library, std::move(args), std::move(kw_args));
    return {std::move(client), std::move(token)};
  }

  // Worker pids seen by the test, killed at the end as a safety net if the gateway left them.
  pid_t remember_pid(pid_t pid) {
    pids_.push_back(pid);
    return pid;
  }

  // Waits (bounded) until the gateway log contains `needle` at least `times` times.
  bool log_eventually(std::string_view needle, std::size_t times = 1, std::chrono::milliseconds timeout = 30s) {
    return eventually([&] { return count_of(gateway().log(), needle) >= times; }, timeout, 20ms);
  }

  // Waits (bounded) until `pattern` (one capture group: a pid) has matched at least `times` times;
  // returns every pid it matched.
  std::vector<pid_t> pids_eventually(const std::string& pattern, std::size_t times = 1,
                                     std::chrono::milliseconds timeout = 30s) {
    std::vector<pid_t> pids;
    eventually(
        [&] {
          pids = captured_pids(gateway().log(), pattern);
          return pids.size() >= times;
        },
        timeout, 20ms);
    for (pid_t p : pids) remember_pid(p);
    return pids;
  }

  // Worker pids in the order the gateway started them, for one library.
  std::vector<pid_t> started_pids(const std::string& library) {
    auto pids = captured_pids(gateway().log(), fmt::format(R"(worker {}\[(\d+)\]: started)", library));
    for (pid_t p : pids) remember_pid(p);
    return pids;
  }

  void SetUp() override { ::signal(SIGPIPE, SIG_IGN); }

  void TearDown() override {
    if (gateway_ && HasFailure()) {
      std::cerr << "---- gateway config (" << gateway_->config_path().string() << ") ----\n"
                << read_file(gateway_->config_path()) << "---- gateway stderr (last lines) ----\n"
                << gateway_->log_tail() << "---- end of gateway stderr ----\n";
    }
    gateway_.reset();
    for (pid_t pid : pids_) {
      if (!pid_gone(pid)) ::kill(pid, SIGKILL);
    }
  }

  std::unique_ptr<GatewayProcess> gateway_;
  std::vector<pid_t> pids_;
};

// Assertion helpers that print the whole reply on failure.
#define RJG_EXPECT_OK(reply) EXPECT_TRUE((reply).ok()) << ::rjg::test::describe(reply)
#define RJG_ASSERT_OK(reply) ASSERT_TRUE((reply).ok()) << ::rjg::test::describe(reply)
// Each evaluates `reply` once: it may be the call itself.
#define RJG_ASSERT_KEYWORD_OK(reply)                                                                          \
  do {                                                                                                        \
    const auto& rjg_reply_ = (reply);                                                                         \
    ASSERT_TRUE(rjg_reply_.ok()) << ::rjg::test::describe(rjg_reply_);                                        \
    ASSERT_EQ(rjg_reply_.keyword_error(), nullptr) << "keyword failed: " << ::rjg::test::describe(rjg_reply_); \
  } while (0)
// A keyword that succeeded. (ok() alone says little for a keyword: the gateway's own failures of a call
// are results too.) Evaluates `reply` once.
#define RJG_EXPECT_KEYWORD_OK(reply)                                                            \
  do {                                                                                          \
    const auto& rjg_reply_ = (reply);                                                           \
    EXPECT_TRUE(rjg_reply_.ok() && rjg_reply_.keyword_error() == nullptr)                       \
        << "expected the keyword to pass, got " << ::rjg::test::describe(rjg_reply_);           \
  } while (0)
#define RJG_ASSERT_ERROR(reply, code)                                                    \
  do {                                                                                   \
    const auto& rjg_reply_ = (reply);                                                    \
    ASSERT_FALSE(rjg_reply_.ok()) << "expected error " << (code) << ", got "             \
                                  << ::rjg::test::describe(rjg_reply_);                  \
    ASSERT_EQ(rjg_reply_.error_code(), (code)) << ::rjg::test::describe(rjg_reply_);     \
  } while (0)

#define RJG_EXPECT_ERROR_CODE(reply, code)                                              \
  EXPECT_TRUE(!(reply).ok() && (reply).error_code() == (code))                          \
      << "expected error " << (code) << ", got " << ::rjg::test::describe(reply)

// A robot/run_keyword the gateway failed: answered with a result (never a JSON-RPC error, which would end
// the stock client's session) whose "error" has the type of the failure that used to carry `code`
// (protocol::keyword_error_type). Its text is reply.failure_message().
#define RJG_ASSERT_KEYWORD_FAILURE(reply, code)                                                                 \
  do {                                                                                                          \
    const auto& rjg_reply_ = (reply);                                                                           \
    ASSERT_TRUE(rjg_reply_.ok()) << "expected a keyword failure " << ::rjg::protocol::keyword_error_type(code) \
                                 << " as a result, got " << ::rjg::test::describe(rjg_reply_);                  \
    ASSERT_NE(rjg_reply_.keyword_error(), nullptr)                                                              \
        << "expected a keyword failure " << ::rjg::protocol::keyword_error_type(code) << ", got "              \
        << ::rjg::test::describe(rjg_reply_);                                                                   \
    ASSERT_EQ(rjg_reply_.keyword_error_type(), ::rjg::protocol::keyword_error_type(code))                      \
        << ::rjg::test::describe(rjg_reply_);                                                                   \
  } while (0)

#define RJG_EXPECT_KEYWORD_FAILURE(reply, code)                                                                \
  do {                                                                                                         \
    const auto& rjg_reply_ = (reply);                                                                          \
    EXPECT_TRUE(rjg_reply_.ok() && rjg_reply_.keyword_error() != nullptr &&                                    \
                rjg_reply_.keyword_error_type() == ::rjg::protocol::keyword_error_type(code))                  \
        << "expected a keyword failure " << ::rjg::protocol::keyword_error_type(code) << " as a result, got " \
        << ::rjg::test::describe(rjg_reply_);                                                                  \
  } while (0)

}  // namespace rjg::test
