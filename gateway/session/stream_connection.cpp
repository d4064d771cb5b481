#include "gateway/session/stream_connection.hpp"

namespace rjg::gateway::session {

// Compiled once here rather than in every file that includes the header.
template class StreamConnection<runtime::FdStream>;
template class StreamConnection<runtime::DuplexStream<runtime::FdStream, runtime::FdStream>>;

}  // namespace rjg::gateway::session
