// A byte stream over a non-blocking file descriptor (a connected socket or one end of a pipe) that
// makes no system call it knows to be useless: the relay's hot path.
//
// Asio's own sockets and pipes, after every read that returned data, try the next read at once
// ("speculatively") and so make a read that returns EAGAIN per message on each hop. Here a read that
// returns fewer bytes than asked drained the descriptor, so the next read waits for epoll to report
// new bytes instead of trying first. Epoll (edge-triggered, as Asio registers every descriptor)
// reports bytes that arrive after that read, so nothing is missed: the reactor's own bookkeeping
// (an event with no read pending re-enables the attempt) covers a message that arrives between reads.
// Writes are tried at once (write_some_now() without a wait, for a writer that has nothing queued),
// and a short write waits for room in the same way.
//
// One case gives no new event: the peer's end of stream (a FIN, a closed pipe) that arrived together
// with the last bytes, before they were read. A short read cannot tell it apart, and no edge follows.
// So a stream whose last read was short and that then stays silent is probed once: after
// kProbeAfter without a read completing, its pending read is tried once (one loop-wide timer
// serves every stream of the loop). A stream in steady use is never probed, an idle one once per
// idle spell, and an end of stream is seen within about twice kProbeAfter.
//
// The stream plugs into Asio's epoll reactor through its operation interface, the one Asio's own
// descriptors use; that interface is internal to Asio, so this file is tied to the Boost version the
// project is built with (Debian 12's 1.81) and refuses to compile with another.
//
// Completion handlers run as Asio's own run: a read completed by the reactor calls its handler
// directly from the event loop, so a message costs one wakeup, one read and no extra pass.
#pragma once

#include <boost/version.hpp>
#if BOOST_VERSION / 100 != 1081
#error "common/runtime/fd_stream.hpp uses Boost.Asio 1.81's reactor operations; check it against this Boost version"
#endif

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/detail/bind_handler.hpp>
#include <boost/asio/detail/fenced_block.hpp>
#include <boost/asio/detail/handler_alloc_helpers.hpp>
#include <boost/asio/detail/handler_cont_helpers.hpp>
#include <boost/asio/detail/handler_work.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/socket_base.hpp>

#if !defined(BOOST_ASIO_HAS_EPOLL) || defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#error "common/runtime/fd_stream.hpp needs Asio's epoll reactor"
#endif

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace rjg::runtime {

namespace fd_io {

namespace asio = boost::asio;
namespace ad = boost::asio::detail;

// Most buffers one write takes (the write queue gathers at most 64 frames).
inline constexpr int kMaxIov = 64;

// A silent stream whose last read was short is probed for an end of stream after this long.
inline constexpr std::chrono::milliseconds kProbeAfter{50};

struct ReadOpBase;

// What a stream and its operations share; outlives the stream while an operation still holds it.
struct StreamState : std::enable_shared_from_this<StreamState> {
  ad::reactor* reactor = nullptr;
  ad::reactor::per_descriptor_data reactor_data = nullptr;
  class ProbeList* probes = nullptr;  // the loop's
  asio::any_io_executor executor;
  int fd = -1;
  ReadOpBase* pending_read = nullptr;  // the read operation started and not completed yet
  std::chrono::steady_clock::time_point last_read{};
  bool probe_listed = false;  // on the loop's probe list
  bool probe_wanted = false;  // due for a probe while no read waited: listed again when one does

  // The pending read is tried once now, for an end of stream that came with the last bytes.
  void probe();
  // After a short read: listed for a probe should the stream stay silent.
  void list_for_probe();
};

// One read or write on a descriptor, performed by the reactor when the descriptor is ready.
struct ReadOpBase : ad::reactor_op {
  ReadOpBase(std::shared_ptr<StreamState> state, void* data, std::size_t size, func_type complete)
      : reactor_op(boost::system::error_code(), &ReadOpBase::do_perform, complete),
        state(std::move(state)),
        fd(this->state->fd),
        data(data),
        size(size) {
    cancellation_key_ = this;  // a probe takes it out of the reactor's queue by this key
  }
  static status do_perform(ad::reactor_op* base);
  // In the completion: a probe's read (true: completed, deliver it; false: still nothing, requeued),
  // and the bookkeeping of every completed read.
  static bool finish(ReadOpBase* o, bool owner);
  std::shared_ptr<StreamState> state;
  int fd;
  void* data;
  std::size_t size;
  bool short_read = false;
  bool probing = false;
};

struct WriteOpBase : ad::reactor_op {
  WriteOpBase(int fd, bool socket, func_type complete)
      : reactor_op(boost::system::error_code(), &WriteOpBase::do_perform, complete), fd(fd), socket(socket) {}
  static status do_perform(ad::reactor_op* base);
  int fd;
  bool socket;
  iovec iov[kMaxIov];
  int count = 0;
  std::size_t total = 0;
};

// Fills iov from a buffer sequence (at most kMaxIov buffers, the rest waits for the next write);
// returns the bytes covered.
template <typename ConstBufferSequence>
std::size_t gather(const ConstBufferSequence& buffers, iovec* iov, int& count) {
  std::size_t total = 0;
  count = 0;
  for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers) && count < kMaxIov;
       ++it) {
    asio::const_buffer b(*it);
    if (b.size() == 0) continue;
    iov[count].iov_base = const_cast<void*>(b.data());
    iov[count].iov_len = b.size();
    total += b.size();
    ++count;
  }
  return total;
}

// Writes once, without waiting: bytes written, or -1 with errno (EAGAIN: no room now).
long write_once(int fd, bool socket, const iovec* iov, int count);

// The handler-owning operation, as Asio's descriptor operations own theirs.
template <typename Base, typename Handler, typename IoExecutor>
class Op : public Base {
 public:
  BOOST_ASIO_DEFINE_HANDLER_PTR(Op);

  template <typename... Args>
  Op(Handler& handler, const IoExecutor& io_ex, Args&&... args)
      : Base(std::forward<Args>(args)..., &Op::do_complete), handler_(std::move(handler)), work_(handler_, io_ex) {}

  static void do_complete(void* owner, ad::operation* base, const boost::system::error_code&, std::size_t) {
    Op* o = static_cast<Op*>(base);
    if constexpr (std::is_same_v<Base, ReadOpBase>) {
      if (!ReadOpBase::finish(o, owner != nullptr)) return;  // a probe found nothing: still pending
    }
    ptr p = {ad::addressof(o->handler_), o, o};
    ad::handler_work<Handler, IoExecutor> w(std::move(o->work_));
    // The memory goes back before the upcall; a copy of the handler makes the call.
    ad::binder2<Handler, boost::system::error_code, std::size_t> handler(o->handler_, o->ec_, o->bytes_transferred_);
    p.h = ad::addressof(handler.handler_);
    p.reset();
    if (owner) {
      ad::fenced_block b(ad::fenced_block::half);
      w.complete(handler, handler.handler_);
    }
  }

 private:
  Handler handler_;
  ad::handler_work<Handler, IoExecutor> work_;
};

}  // namespace fd_io

class FdStream {
 public:
  using executor_type = boost::asio::any_io_executor;

  // Takes ownership of fd (made non-blocking); -1 makes a closed stream.
  FdStream(executor_type executor, int fd);
  FdStream(FdStream&& other) noexcept;
  FdStream& operator=(FdStream&&) = delete;
  FdStream(const FdStream&) = delete;
  FdStream& operator=(const FdStream&) = delete;
  ~FdStream();

  executor_type get_executor() const { return executor_; }
  int native_handle() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }

  // Operations waiting on it complete with operation_aborted.
  void close(boost::system::error_code& ec);
  // Sockets only (shutdown(2)); a pending read then sees the end of the stream.
  void shutdown(boost::asio::socket_base::shutdown_type what, boost::system::error_code& ec);
  void cancel();

  template <typename MutableBufferSequence, typename Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBufferSequence& b) { this->start_read(handler, b); }, token, buffers);
  }

  template <typename ConstBufferSequence, typename Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBufferSequence& b) { this->start_write(handler, b); }, token, buffers);
  }

  // Writes what fits now, without waiting: the bytes written (0 and would_block when there is no
  // room). Only while no async_write_some is pending, or the bytes could pass each other.
  template <typename ConstBufferSequence>
  std::size_t write_some_now(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
    iovec iov[fd_io::kMaxIov];
    int count = 0;
    fd_io::gather(buffers, iov, count);
    return write_now(iov, count, ec);
  }

 private:
  std::size_t write_now(const iovec* iov, int count, boost::system::error_code& ec);

  template <typename Handler, typename MutableBufferSequence>
  void start_read(Handler& handler, const MutableBufferSequence& buffers) {
    // One buffer: the message stream reads into one.
    boost::asio::mutable_buffer b = *boost::asio::buffer_sequence_begin(buffers);
    using op = fd_io::Op<fd_io::ReadOpBase, Handler, executor_type>;
    typename op::ptr p = {boost::asio::detail::addressof(handler), op::ptr::allocate(handler), 0};
    p.p = new (p.v) op(handler, executor_, state_, b.data(), b.size());
    if (fd_ >= 0 && b.size() > 0) {
      state_->pending_read = p.p;
      if (state_->probe_wanted) {
        state_->probe_wanted = false;
        state_->list_for_probe();
      }
    }
    start(boost::asio::detail::reactor::read_op, p.p, boost_asio_handler_cont_helpers::is_continuation(handler),
          b.size() == 0);
    p.v = p.p = 0;
  }

  template <typename Handler, typename ConstBufferSequence>
  void start_write(Handler& handler, const ConstBufferSequence& buffers) {
    using op = fd_io::Op<fd_io::WriteOpBase, Handler, executor_type>;
    typename op::ptr p = {boost::asio::detail::addressof(handler), op::ptr::allocate(handler), 0};
    p.p = new (p.v) op(handler, executor_, fd_, socket_);
    p.p->total = fd_io::gather(buffers, p.p->iov, p.p->count);
    start(boost::asio::detail::reactor::write_op, p.p, boost_asio_handler_cont_helpers::is_continuation(handler),
          p.p->total == 0);
    p.v = p.p = 0;
  }

  void start(int op_type, boost::asio::detail::reactor_op* op, bool is_continuation, bool noop);

  executor_type executor_;
  std::shared_ptr<fd_io::StreamState> state_;
  int fd_ = -1;
  bool socket_ = false;
};

}  // namespace rjg::runtime
