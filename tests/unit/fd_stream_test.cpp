// FdStream: the relay's descriptor stream. Bytes that arrive after a short read are read on epoll's
// next event; an end of stream that arrived together with the last bytes is still seen (the probe);
// writes go out at once or wait for room; closing aborts what waits.
#include "common/runtime/fd_stream.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

namespace {

using namespace rjg::runtime;
using namespace std::chrono_literals;
namespace asio = boost::asio;

struct ReadResult {
  boost::system::error_code ec;
  std::string bytes;
};

// Runs io until done() holds, bounded (10 s).
template <typename Done>
void run_until(asio::io_context& io, Done done) {
  io.restart();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
}

// One async_read_some on s, run on io until it completes (bounded: 10 s of the loop).
std::optional<ReadResult> read_once(asio::io_context& io, FdStream& s, std::size_t size = 4096) {
  std::optional<ReadResult> result;
  std::string buffer(size, '\0');
  s.async_read_some(asio::buffer(buffer), [&](const boost::system::error_code& ec, std::size_t n) {
    result = ReadResult{ec, buffer.substr(0, n)};
  });
  run_until(io, [&] { return result.has_value(); });
  return result;
}

// Runs the reactor once with nothing waiting, so that the events already there are taken (a plain poll()
// returns at once when there is no work).
void take_pending_events(asio::io_context& io) {
  auto work = asio::make_work_guard(io);
  io.restart();
  io.poll();
}

std::array<int, 2> socket_pair() {
  std::array<int, 2> fds{};
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds.data()) != 0) throw std::runtime_error("socketpair failed");
  return fds;
}

std::array<int, 2> pipe_pair() {
  std::array<int, 2> fds{};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  return fds;
}

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    ASSERT_GT(n, 0);
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

TEST(FdStream, BytesThatArriveAfterAShortReadAreReadOnTheNextEvent) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream s(io.get_executor(), mine);
  write_all(peer, "first");
  auto r1 = read_once(io, s);
  ASSERT_TRUE(r1);
  EXPECT_FALSE(r1->ec);
  EXPECT_EQ(r1->bytes, "first");
  // The read above was short: the next one waits for epoll rather than trying first. Bytes written
  // while it waits arrive with the event.
  std::optional<ReadResult> r2;
  std::string buffer(4096, '\0');
  s.async_read_some(asio::buffer(buffer), [&](const boost::system::error_code& ec, std::size_t n) {
    r2 = ReadResult{ec, buffer.substr(0, n)};
  });
  io.restart();
  io.poll();
  EXPECT_FALSE(r2) << "completed before any byte was written";
  write_all(peer, "second");
  run_until(io, [&] { return r2.has_value(); });
  ASSERT_TRUE(r2);
  EXPECT_FALSE(r2->ec);
  EXPECT_EQ(r2->bytes, "second");
  ::close(peer);
}

TEST(FdStream, BytesThatArriveBetweenReadsAreNotLost) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream s(io.get_executor(), mine);
  write_all(peer, "one");
  auto r1 = read_once(io, s);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->bytes, "one");
  // Written while no read is pending: its event finds no operation waiting.
  write_all(peer, "two");
  io.restart();
  io.poll();
  auto r2 = read_once(io, s);
  ASSERT_TRUE(r2);
  EXPECT_FALSE(r2->ec);
  EXPECT_EQ(r2->bytes, "two");
  ::close(peer);
}

// The peer writes and ends its side before the stream reads: one event covers both, the short read
// takes the bytes, and no further event comes for the end of stream. The probe finds it.
TEST(FdStream, EndOfStreamThatCameWithTheLastBytesIsSeenOnASocket) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream s(io.get_executor(), mine);
  write_all(peer, "last words");
  ::shutdown(peer, SHUT_WR);
  take_pending_events(io);  // epoll's one event for both is taken now, with no read waiting
  auto r1 = read_once(io, s);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->bytes, "last words");
  auto r2 = read_once(io, s);
  ASSERT_TRUE(r2) << "the end of stream was never seen";
  EXPECT_EQ(r2->ec, asio::error::eof);
  ::close(peer);
}

TEST(FdStream, EndOfStreamThatCameWithTheLastBytesIsSeenOnAPipe) {
  asio::io_context io;
  auto [read_end, write_end] = pipe_pair();
  FdStream s(io.get_executor(), read_end);
  write_all(write_end, "exit answer");
  ::close(write_end);
  take_pending_events(io);  // epoll's one event for both is taken now, with no read waiting
  auto r1 = read_once(io, s);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->bytes, "exit answer");
  auto r2 = read_once(io, s);
  ASSERT_TRUE(r2) << "the end of stream was never seen";
  EXPECT_EQ(r2->ec, asio::error::eof);
}

// A stream whose reader is done (it read the end of stream) but that is still open is not probed for
// ever: the loop's probe timer stops, and the loop runs out of work.
TEST(FdStream, AStreamNoLongerReadIsNotProbedForEver) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream s(io.get_executor(), mine);
  write_all(peer, "bye");
  auto r1 = read_once(io, s);  // short: the stream is listed for a probe
  ASSERT_TRUE(r1);
  ::close(peer);
  auto r2 = read_once(io, s);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->ec, asio::error::eof);
  // No read is started again; the stream stays open.
  io.restart();
  io.run_for(std::chrono::seconds(2));
  EXPECT_TRUE(io.stopped()) << "the loop still had work (a probe timer) with nothing left to probe";
  EXPECT_TRUE(s.is_open());
}

// A moved-from stream is a closed one: its operations fail, they do not crash.
TEST(FdStream, AMovedFromStreamFailsItsOperations) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream a(io.get_executor(), mine);
  FdStream b(std::move(a));
  auto r = read_once(io, a);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ec, asio::error::bad_descriptor);
  ::close(peer);
}

TEST(FdStream, WriteSomeNowWritesWhatFitsThenSaysWouldBlock) {
  asio::io_context io;
  auto [read_end, write_end] = pipe_pair();
  FdStream s(io.get_executor(), write_end);
  const std::string chunk(16 * 1024, 'x');
  std::size_t written = 0;
  boost::system::error_code ec;
  for (int i = 0; i < 1000 && !ec; ++i) written += s.write_some_now(asio::buffer(chunk), ec);
  EXPECT_EQ(ec, asio::error::would_block);
  EXPECT_GT(written, 0u);
  // A pipe holds a bounded amount; the rest must wait for room.
  EXPECT_LT(written, 1000 * chunk.size());
  ::close(read_end);
}

TEST(FdStream, AsyncWriteWaitsForRoomAndCompletesWhenThePeerReads) {
  asio::io_context io;
  auto [read_end, write_end] = pipe_pair();
  FdStream s(io.get_executor(), write_end);
  const std::string chunk(16 * 1024, 'y');
  boost::system::error_code ec;
  std::size_t written = 0;
  while (!ec) written += s.write_some_now(asio::buffer(chunk), ec);
  std::optional<std::size_t> done;
  s.async_write_some(asio::buffer(chunk), [&](const boost::system::error_code& e, std::size_t n) {
    EXPECT_FALSE(e);
    done = n;
  });
  io.restart();
  io.poll();
  EXPECT_FALSE(done) << "a write into a full pipe completed";
  std::string sink(written, '\0');
  std::size_t drained = 0;
  while (drained < written) {
    const ssize_t n = ::read(read_end, sink.data(), sink.size() - drained);
    ASSERT_GT(n, 0);
    drained += static_cast<std::size_t>(n);
  }
  run_until(io, [&] { return done.has_value(); });
  ASSERT_TRUE(done);
  EXPECT_GT(*done, 0u);
  ::close(read_end);
}

TEST(FdStream, WritesToAClosedPeerFailWithoutSigpipe) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream s(io.get_executor(), mine);
  ::close(peer);
  boost::system::error_code ec;
  s.write_some_now(asio::buffer(std::string("anyone?")), ec);
  EXPECT_EQ(ec, asio::error::broken_pipe);
}

TEST(FdStream, CloseAbortsAPendingRead) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream s(io.get_executor(), mine);
  std::optional<boost::system::error_code> result;
  std::string buffer(64, '\0');
  s.async_read_some(asio::buffer(buffer), [&](const boost::system::error_code& ec, std::size_t) { result = ec; });
  io.poll();
  EXPECT_FALSE(result);
  boost::system::error_code ignored;
  s.close(ignored);
  EXPECT_FALSE(s.is_open());
  io.restart();
  io.run_for(1s);
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, asio::error::operation_aborted);
  ::close(peer);
}

TEST(FdStream, ShutdownReceiveEndsAPendingRead) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream s(io.get_executor(), mine);
  std::optional<boost::system::error_code> result;
  std::string buffer(64, '\0');
  s.async_read_some(asio::buffer(buffer), [&](const boost::system::error_code& ec, std::size_t) { result = ec; });
  io.poll();
  boost::system::error_code ec;
  s.shutdown(asio::socket_base::shutdown_receive, ec);
  EXPECT_FALSE(ec);
  run_until(io, [&] { return result.has_value(); });
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, asio::error::eof);
  ::close(peer);
}

// Epoll cannot watch a regular file, and a read of one never waits: it is read at once.
TEST(FdStream, ARegularFileIsReadWithoutWaiting) {
  asio::io_context io;
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  std::fputs("on disk", f);
  std::fflush(f);
  const int fd = ::dup(::fileno(f));
  std::fclose(f);
  ::lseek(fd, 0, SEEK_SET);
  FdStream s(io.get_executor(), fd);
  auto r = read_once(io, s);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ec);
  EXPECT_EQ(r->bytes, "on disk");
  auto end = read_once(io, s);
  ASSERT_TRUE(end);
  EXPECT_EQ(end->ec, asio::error::eof);
}

TEST(FdStream, AMovedStreamKeepsItsDescriptor) {
  asio::io_context io;
  auto [mine, peer] = socket_pair();
  FdStream a(io.get_executor(), mine);
  FdStream b(std::move(a));
  EXPECT_FALSE(a.is_open());
  EXPECT_EQ(b.native_handle(), mine);
  write_all(peer, "moved");
  auto r = read_once(io, b);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->bytes, "moved");
  ::close(peer);
}

}  // namespace
