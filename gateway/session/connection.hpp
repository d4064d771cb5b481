// What a client session's logic and the server see of a client connection, whatever its transport.
#pragma once

#include "gateway/session/session_activity.hpp"

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

namespace rjg::gateway::session {

namespace asio = boost::asio;

class Connection {
 public:
  virtual ~Connection() = default;
  // "session 7 (127.0.0.1:51234)", for log lines.
  virtual const std::string& name() const = 0;
  // Queues one message (a JSON text) to the client; dropped once the connection is gone.
  virtual void send(std::string json_text) = 0;
  // Resumes once the client has room for more (relaying a worker's logs waits for a slow client).
  virtual asio::awaitable<void> wait_for_room() = 0;
  // The session finished its last running task: idle_timeout counts from now.
  virtual void session_idle() = 0;
  // Stops reading, ends the session's imports, flushes what is queued, closes the transport.
  virtual void close(std::string why) = 0;
  virtual bool closing() const = 0;
  // Completes once close() has finished its work.
  virtual asio::awaitable<void> wait_closed() = 0;

  // Imports the session holds now, for /status: the session writes it on its loop, the server reads it
  // on loop 0 (it keeps its own reference, so it never touches the connection from there).
  const std::shared_ptr<std::atomic<std::size_t>> imports_open = std::make_shared<std::atomic<std::size_t>>(0);
  // Its libraries and running keywords, for /status and the status page: shared the same way.
  const std::shared_ptr<SessionActivity> activity = std::make_shared<SessionActivity>();
};

}  // namespace rjg::gateway::session
