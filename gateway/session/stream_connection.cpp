#include "gateway/session/stream_connection.hpp"

namespace rjg::gateway {

// Compiled once here rather than in every file that includes the header.
template class StreamConnection<FdStream>;
template class StreamConnection<DuplexStream<FdStream, FdStream>>;

}  // namespace rjg::gateway
