// The classic remote server as XML-RPC calls over HTTP, and how the bridge reads its texts.
#include "common/protocol/protocol.hpp"
#include "common/xmlrpc/classic_values.hpp"
#include "workers/classic_bridge/classic_bridge.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <fmt/format.h>

#include <chrono>
#include <string>

namespace rjg::classic_bridge {

namespace {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
}  // namespace

xmlrpc::Response XmlRpcServer::call(std::string_view method, const xmlrpc::Array& params) {
  asio::io_context io;
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(address_.host, std::to_string(address_.port), ec);
  if (ec)
    throw TransportError(TransportError::Kind::not_connected,
                         fmt::format("cannot resolve '{}': {}", address_.host, ec.message()));
  beast::tcp_stream stream(io);
  stream.expires_after(connect_timeout_);
  stream.async_connect(endpoints, [&](boost::system::error_code e, const auto&) { ec = e; });
  io.run();
  if (ec == beast::error::timeout)
    throw TransportError(TransportError::Kind::not_connected,
                         fmt::format("no connection within {}s (connect_timeout)",
                                     std::chrono::duration<double>(connect_timeout_).count()));
  if (ec) throw TransportError(TransportError::Kind::not_connected, fmt::format("cannot connect: {}", ec.message()));
  stream.expires_never();  // a keyword runs as long as it runs: the gateway's keyword_timeout bounds it

  http::request<http::string_body> request{http::verb::post, address_.path.empty() ? "/RPC2" : address_.path, 11};
  request.set(http::field::host, fmt::format("{}:{}", address_.host, address_.port));
  request.set(http::field::user_agent, "robot-classic-bridge");
  request.set(http::field::content_type, "text/xml");
  request.body() = xmlrpc::write_call(method, params);
  request.prepare_payload();
  http::write(stream, request, ec);
  if (ec)
    throw TransportError(TransportError::Kind::connection, fmt::format("sending {} failed: {}", method, ec.message()));

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(max_bytes_);
  http::read(stream, buffer, parser, ec);
  if (ec == http::error::body_limit)
    throw LimitExceeded(fmt::format("The classic remote server at {} answered {} with more than {} bytes, the most "
                                    "the bridge reads of one answer (the library's max_answer_bytes). Raise "
                                    "max_answer_bytes if its answers are that large.",
                                    url(), method, max_bytes_));
  if (ec)
    throw TransportError(TransportError::Kind::connection,
                         fmt::format("reading its answer to {} failed: {}", method, ec.message()));
  const auto& response = parser.get();
  if (response.result() != http::status::ok)
    throw TransportError(TransportError::Kind::http_status,
                         fmt::format("it answered {} with HTTP {} {}", method, response.result_int(),
                                     std::string_view(response.reason().data(), response.reason().size())));
  xmlrpc::Limits limits;
  limits.max_bytes = max_bytes_;
  try {
    return xmlrpc::parse_response(response.body(), limits);
  } catch (const xmlrpc::LimitError& e) {
    throw LimitExceeded(fmt::format("The classic remote server at {} answered {} beyond what the bridge takes in "
                                    "one answer: {}. An answer holds at most max_answer_bytes = {} bytes, at most "
                                    "one value per {} bytes of it, and arrays and structs nested at most {} deep.",
                                    url(), method, e.what(), max_bytes_, limits.bytes_per_value, limits.max_depth));
  } catch (const xmlrpc::ParseError& e) {
    throw TransportError(TransportError::Kind::not_xml_rpc,
                         fmt::format("its answer to {} is not XML-RPC: {}", method, e.what()));
  }
}

sdk::RpcError unreachable(const XmlRpcServer& server, const TransportError& e) {
  return sdk::RpcError(protocol::kWorkerFailed,
                       fmt::format("The classic remote server at {} failed: {}. Check that it runs and that the URL "
                                   "(upstream) is right.",
                                   server.url(), e.what()));
}

std::string latin1_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (const unsigned char c : bytes) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

std::string text_of(const xmlrpc::Value& v) {
  if (const auto* s = std::get_if<std::string>(&v.v)) return *s;
  if (const auto* b = std::get_if<xmlrpc::Binary>(&v.v)) return latin1_text(b->bytes);
  return rjg::pickle::py_str(xmlrpc::to_python(v));
}

}  // namespace rjg::classic_bridge
