// What the bridge's parts share: the classic remote server as XML-RPC calls (xmlrpc_server.cpp), its
// library information as a definition (library_information.cpp) and a keyword call as Robot's Remote
// library makes it (keyword_calls.cpp); classic_bridge.cpp serves them as a worker.
#pragma once

#include "common/xmlrpc/xmlrpc.hpp"
#include "config/network.hpp"
#include "workers/sdk/sdk.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rjg::classic_bridge {

namespace json = boost::json;

// The server did not answer with XML-RPC: refused, unreachable, timed out, broken (connection), an HTTP
// error (http_status), not XML-RPC (not_xml_rpc). Robot's Remote library words a keyword's failure after
// the kind (RemoteClient.run_keyword).
struct TransportError : std::runtime_error {
  enum class Kind { not_connected, connection, http_status, not_xml_rpc };
  TransportError(Kind kind, const std::string& what) : std::runtime_error(what), kind(kind) {}
  Kind kind;
};
// The server answered, beyond what the bridge takes in one answer (its bytes, values or nesting): what()
// says so, naming the server and the limit. Not a broken server: its import stays usable.
struct LimitExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class XmlRpcServer {
 public:
  XmlRpcServer(rjg::config::UpstreamAddress address, std::chrono::milliseconds connect_timeout, std::size_t max_bytes)
      : address_(std::move(address)), connect_timeout_(connect_timeout), max_bytes_(max_bytes) {}

  const std::string& url() const { return address_.text; }

  // One call on a connection of its own. A fault is an answer (Response::is_fault); an answer beyond the
  // limits throws LimitExceeded, anything else that goes wrong TransportError. An answer is parsed straight
  // into its values, at most one per 16 bytes of it, so it holds a small multiple of max_bytes at most.
  xmlrpc::Response call(std::string_view method, const xmlrpc::Array& params);

 private:
  rjg::config::UpstreamAddress address_;
  std::chrono::milliseconds connect_timeout_;
  std::size_t max_bytes_;
};

// What a call to the server that could not be made becomes: a JSON-RPC error naming the server.
sdk::RpcError unreachable(const XmlRpcServer& server, const TransportError& e);

// bytes.decode("latin-1"): each byte the code point of its value, as UTF-8.
std::string latin1_text(std::string_view bytes);

// A value as text, as Robot's Remote library reads a message (robot.utils.safe_str): base64 (a server
// sends text XML cannot carry so) as its Latin-1 characters, anything else as Python's str().
std::string text_of(const xmlrpc::Value& v);

// ---- Library information ----

struct KeywordInfo {
  std::string name;
  xmlrpc::Array args{xmlrpc::Value("*args")};  // a server that does not say takes anything
  xmlrpc::Value types;                         // a struct by argument name, or an array by position
  xmlrpc::Array tags;
  std::string doc;
};
struct LibraryInfo {
  std::vector<KeywordInfo> keywords;
  std::string doc;
};

// The server's library information: get_library_information, or one call per keyword and field.
LibraryInfo fetch_information(XmlRpcServer& server);
// The library's definition, as the protocol's import answers it.
json::object definition(const std::string& name, const LibraryInfo& info);

// ---- Keyword calls ----

// The keyword's run_keyword on the server, as Robot's Remote library makes the call and reads its result.
json::value run_keyword(XmlRpcServer& server, sdk::Call& call);

}  // namespace rjg::classic_bridge
