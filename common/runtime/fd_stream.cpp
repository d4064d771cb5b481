#include "common/runtime/fd_stream.hpp"

#include <boost/asio/steady_timer.hpp>

#include <optional>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace rjg::runtime {

namespace fd_io {

namespace {
boost::system::error_code errno_code(int e) {
  return boost::system::error_code(e, boost::asio::error::get_system_category());
}
}  // namespace

// The streams of one event loop that may hold an unseen end of stream (see kProbeAfter), and the one
// timer that probes them. A service of the loop's execution context, so every stream of the loop
// finds the same list.
class ProbeList : public asio::execution_context::service {
 public:
  static asio::execution_context::id id;

  explicit ProbeList(asio::execution_context& context) : service(context) {}

  void add(std::shared_ptr<StreamState> state, const asio::any_io_executor& executor) {
    list_.push_back(std::move(state));
    if (!timer_) timer_.emplace(executor);
    arm();
  }

 private:
  void shutdown() override {
    list_.clear();
    timer_.reset();
  }

  void arm() {
    if (armed_) return;
    armed_ = true;
    timer_->expires_after(kProbeAfter);
    timer_->async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      armed_ = false;
      tick();
    });
  }

  void tick() {
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<StreamState>> due;
    std::size_t kept = 0;
    for (auto& weak : list_) {
      auto state = weak.lock();
      if (!state || state->fd < 0) continue;  // closed: forgotten
      if (now - state->last_read < kProbeAfter) {
        list_[kept++] = weak;  // still in use
        continue;
      }
      state->probe_listed = false;
      due.push_back(std::move(state));
    }
    list_.resize(kept);
    for (auto& state : due) state->probe();
    if (!list_.empty()) arm();
  }

  std::optional<asio::steady_timer> timer_;
  std::vector<std::weak_ptr<StreamState>> list_;
  bool armed_ = false;
};

asio::execution_context::id ProbeList::id;

void StreamState::probe() {
  if (fd < 0 || !reactor_data) return;
  if (!pending_read) {
    // Its reader is busy (or done): probed once it reads again, if it ever does.
    probe_wanted = true;
    return;
  }
  pending_read->probing = true;
  // Out of the reactor's queue; its completion (finish) tries the read once.
  reactor->cancel_ops_by_key(fd, reactor_data, ad::reactor::read_op, pending_read);
}

void StreamState::list_for_probe() {
  if (probe_listed || !probes || fd < 0) return;
  probe_listed = true;
  probes->add(shared_from_this(), executor);
}

bool ReadOpBase::finish(ReadOpBase* o, bool owner) {
  StreamState& state = *o->state;
  if (owner && o->probing && o->ec_ == asio::error::operation_aborted && state.fd >= 0) {
    o->probing = false;
    o->ec_.clear();
    if (do_perform(o) == not_done) {
      // Nothing there: back into the reactor's queue. Not speculatively: the read was just tried.
      state.reactor->start_op(ad::reactor::read_op, state.fd, state.reactor_data, o, false, false);
      return false;
    }
  }
  o->probing = false;
  if (state.pending_read == o) state.pending_read = nullptr;
  if (owner && !o->ec_) {
    state.last_read = std::chrono::steady_clock::now();
    if (o->short_read) state.list_for_probe();
  }
  return true;
}

ad::reactor_op::status ReadOpBase::do_perform(ad::reactor_op* base) {
  auto* o = static_cast<ReadOpBase*>(base);
  for (;;) {
    const ssize_t n = ::read(o->fd, o->data, o->size);
    if (n > 0) {
      o->bytes_transferred_ = static_cast<std::size_t>(n);
      // Fewer bytes than asked: the descriptor is drained. The next read waits for epoll's next event
      // rather than trying (and failing with EAGAIN) first.
      o->short_read = o->bytes_transferred_ < o->size;
      return o->short_read ? done_and_exhausted : done;
    }
    if (n == 0) {
      o->ec_ = boost::asio::error::eof;
      return done_and_exhausted;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return not_done;
    o->ec_ = errno_code(errno);
    return done;
  }
}

long write_once(int fd, bool socket, const iovec* iov, int count) {
  for (;;) {
    ssize_t n;
    if (socket) {
      msghdr msg{};
      msg.msg_iov = const_cast<iovec*>(iov);
      msg.msg_iovlen = static_cast<std::size_t>(count);
      // A peer that went away is an error on this write, never SIGPIPE.
      n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    } else {
      n = ::writev(fd, iov, count);
    }
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

ad::reactor_op::status WriteOpBase::do_perform(ad::reactor_op* base) {
  auto* o = static_cast<WriteOpBase*>(base);
  const long n = write_once(o->fd, o->socket, o->iov, o->count);
  if (n >= 0) {
    o->bytes_transferred_ = static_cast<std::size_t>(n);
    // A short write filled the buffer: the next write waits for room.
    return o->bytes_transferred_ < o->total ? done_and_exhausted : done;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) return not_done;
  o->ec_ = errno_code(errno);
  return done;
}

}  // namespace fd_io

FdStream::FdStream(executor_type executor, int fd)
    : executor_(std::move(executor)), state_(std::make_shared<fd_io::StreamState>()), fd_(fd) {
  auto& context = boost::asio::query(executor_, boost::asio::execution::context);
  state_->reactor = &boost::asio::use_service<boost::asio::detail::reactor>(context);
  state_->probes = &boost::asio::use_service<fd_io::ProbeList>(context);
  state_->executor = executor_;
  state_->reactor->init_task();
  if (fd_ < 0) return;
  struct stat st {};
  socket_ = ::fstat(fd_, &st) == 0 && S_ISSOCK(st.st_mode);
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0 && !(flags & O_NONBLOCK)) ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  // A regular file is accepted by the reactor without epoll (its reads never wait); a descriptor it
  // refuses leaves the stream closed for operations (bad_descriptor).
  if (state_->reactor->register_descriptor(fd_, state_->reactor_data) != 0) {
    state_->reactor->cleanup_descriptor_data(state_->reactor_data);
    state_->reactor_data = nullptr;
  }
  state_->fd = fd_;
}

FdStream::FdStream(FdStream&& other) noexcept
    : executor_(other.executor_), state_(std::move(other.state_)), fd_(std::exchange(other.fd_, -1)), socket_(other.socket_) {
  // The moved-from stream is a closed one: its operations fail with bad_descriptor.
  other.state_ = std::make_shared<fd_io::StreamState>();
  other.state_->reactor = state_->reactor;
  other.state_->probes = state_->probes;
  other.state_->executor = state_->executor;
}

FdStream::~FdStream() {
  boost::system::error_code ignored;
  close(ignored);
}

void FdStream::close(boost::system::error_code& ec) {
  ec.clear();
  if (fd_ < 0) return;
  auto& state = *state_;
  if (state.pending_read) state.pending_read->probing = false;  // aborted, not probed
  if (state.reactor_data) {
    // Removed from epoll explicitly (not by the close): a forked child may still hold the descriptor.
    state.reactor->deregister_descriptor(fd_, state.reactor_data, false);
    state.reactor->cleanup_descriptor_data(state.reactor_data);
    state.reactor_data = nullptr;
  }
  state.fd = -1;
  if (::close(fd_) != 0 && errno != EINTR) ec = fd_io::errno_code(errno);
  fd_ = -1;
}

void FdStream::shutdown(boost::asio::socket_base::shutdown_type what, boost::system::error_code& ec) {
  ec.clear();
  if (fd_ < 0) {
    ec = boost::asio::error::bad_descriptor;
    return;
  }
  const int how = what == boost::asio::socket_base::shutdown_receive ? SHUT_RD
                  : what == boost::asio::socket_base::shutdown_send  ? SHUT_WR
                                                                     : SHUT_RDWR;
  if (::shutdown(fd_, how) != 0) ec = fd_io::errno_code(errno);
}

void FdStream::cancel() {
  if (fd_ < 0 || !state_->reactor_data) return;
  if (state_->pending_read) state_->pending_read->probing = false;  // cancelled, not probed
  state_->reactor->cancel_ops(fd_, state_->reactor_data);
}

std::size_t FdStream::write_now(const iovec* iov, int count, boost::system::error_code& ec) {
  ec.clear();
  if (fd_ < 0) {
    ec = boost::asio::error::bad_descriptor;
    return 0;
  }
  if (count == 0) return 0;
  const long n = fd_io::write_once(fd_, socket_, iov, count);
  if (n >= 0) return static_cast<std::size_t>(n);
  ec = (errno == EAGAIN || errno == EWOULDBLOCK) ? boost::asio::error::would_block : fd_io::errno_code(errno);
  return 0;
}

void FdStream::start(int op_type, boost::asio::detail::reactor_op* op, bool is_continuation, bool noop) {
  auto& state = *state_;
  if (fd_ < 0 || !state.reactor_data) {
    op->ec_ = boost::asio::error::bad_descriptor;
    state.reactor->post_immediate_completion(op, is_continuation);
  } else if (noop) {
    state.reactor->post_immediate_completion(op, is_continuation);
  } else {
    state.reactor->start_op(op_type, fd_, state.reactor_data, op, is_continuation, true);
  }
}

}  // namespace rjg::runtime
