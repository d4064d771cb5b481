// The relay's system calls, counted (strace -c -f on the gateway) rather than timed: on the steady
// path of a keyword the gateway reads each message once and writes it once per hop, makes no read
// that finds nothing, and waits in epoll once per hop. A native worker, one session, sequential
// keywords: at most 7 system calls per relayed keyword (one read and one write per hop and one
// epoll_wait per arrival make 6; the rest is room for the loop's timers).
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

namespace rjg::test {
namespace {

class RelayCostTest : public GatewayTest {};

std::string syscall_table(const SyscallCounts& counts, int keywords) {
  std::string out;
  for (const auto& [name, entry] : counts.by_name)
    out += fmt::format("  {:<16} {:>8} calls ({:.2f} per keyword), {} failed\n", name, entry.calls,
                       static_cast<double>(entry.calls) / keywords, entry.errors);
  return out;
}

TEST_F(RelayCostTest, AKeywordCostsTheGatewayAtMostSevenSystemCalls) {
  GatewayOptions options;
  options.log_level = "info";  // debug lines are writes to stderr, per keyword
  start({test_library("TestLibrary")}, options);
  auto [client, token] = session();
  const json::array args{"payload"};
  for (int i = 0; i < 200; ++i) RJG_ASSERT_KEYWORD_OK(client.run_keyword(token, "Echo", args));

  constexpr int kKeywords = 2000;
  int failures = 0;
  const auto counts = count_syscalls(gateway().pid(), [&] {
    for (int i = 0; i < kKeywords; ++i) {
      auto reply = client.run_keyword(token, "Echo", args);
      if (!reply.ok() || reply.keyword_error()) ++failures;
    }
  });
  ASSERT_EQ(failures, 0);
  const double per_keyword = static_cast<double>(relay_calls(counts)) / kKeywords;
  const std::string table = syscall_table(counts, kKeywords);
  EXPECT_LE(per_keyword, 7.0) << "system calls per relayed keyword: " << per_keyword << "\n" << table;

  // One read per message per hop, and no read that finds nothing (an EAGAIN read is a failed read):
  // the client's request and the worker's answer.
  const auto reads = counts.by_name.contains("read") ? counts.by_name.at("read") : SyscallCounts::Entry{};
  EXPECT_LE(reads.calls, 2u * kKeywords + kKeywords / 100) << table;
  EXPECT_LE(reads.errors, static_cast<std::uint64_t>(kKeywords / 100)) << table;
  // Asio's own sockets would read with recvfrom/recvmsg: everything on the relay path is the
  // gateway's descriptor stream.
  EXPECT_FALSE(counts.by_name.contains("recvfrom")) << table;
  std::cout << fmt::format("[ syscalls ] {:.2f} per relayed keyword over {} keywords\n{}", per_keyword, kKeywords,
                           table);
}

}  // namespace
}  // namespace rjg::test
