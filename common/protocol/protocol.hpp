// Names and codes of the Robot Framework JSON-RPC remote protocol (the protocol specification of
// robotframework-jsonrpcremote).
#pragma once

#include <optional>
#include <string_view>

namespace rjg::protocol {

inline constexpr std::string_view kInitialize = "robot/initialize";
inline constexpr std::string_view kInitialized = "robot/initialized";
inline constexpr std::string_view kImportLibrary = "robot/import_library";
inline constexpr std::string_view kRunKeyword = "robot/run_keyword";
inline constexpr std::string_view kLog = "robot/log";
inline constexpr std::string_view kTrace = "robot/trace";
inline constexpr std::string_view kFinalizeLibrary = "robot/finalize_library";
inline constexpr std::string_view kShutdown = "robot/shutdown";
inline constexpr std::string_view kExit = "robot/exit";

// The methods a client sends to a server: true for a request (it is answered), false for a
// notification; nullopt for a method the protocol does not define.
inline std::optional<bool> client_method_is_request(std::string_view method) {
  if (method == kInitialize || method == kImportLibrary || method == kRunKeyword || method == kFinalizeLibrary ||
      method == kShutdown)
    return true;
  if (method == kInitialized || method == kExit) return false;
  return std::nullopt;
}

// JSON-RPC 2.0 standard codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;

// RobotJsonRpcErrorCode from robot_jsonrpcremote_protocol.
inline constexpr int kNotInitialized = -32000;
inline constexpr int kKeywordNotFound = -32001;
inline constexpr int kArgumentMismatch = -32002;

// The gateway's own codes, in the JSON-RPC server-error range (-32000 to -32099).
inline constexpr int kUnknownLibrary = -32010;   // import of a library the configuration does not serve
inline constexpr int kUnknownToken = -32011;     // token not issued on this connection, or finalized
inline constexpr int kWorkerFailed = -32012;     // worker could not start, died, or broke the protocol
inline constexpr int kWorkerTimeout = -32013;    // worker too slow (start-up, keyword)
inline constexpr int kAtCapacity = -32014;       // limits reached
inline constexpr int kShuttingDown = -32015;     // the gateway is stopping
inline constexpr int kSessionTimeout = -32016;   // handshake_timeout, read_timeout or idle_timeout passed
inline constexpr int kPickleRefused = -32017;    // a pickled value the library's pickle policy does not admit

// robot/run_keyword is always answered with a result: a failure of one keyword call, the worker's or the
// gateway's own decision, is {"error": {"message", "type"}} in it, as the reference server answers (the
// stock client ends its whole session on a JSON-RPC error answer). The type names what happened, as an
// exception's class would; these are the gateway's, by the code the failure would have had as an error.
inline std::string_view keyword_error_type(int code) {
  switch (code) {
    case kWorkerFailed: return "WorkerFailed";
    case kWorkerTimeout: return "KeywordTimeout";
    case kUnknownToken: return "UnknownLibraryToken";
    case kShuttingDown: return "GatewayStopping";
    case kAtCapacity: return "GatewayAtCapacity";
    case kPickleRefused: return "PickleRefused";
    case kKeywordNotFound: return "KeywordNotFound";
    case kArgumentMismatch: return "ArgumentMismatch";
    case kInternalError: return "GatewayInternalError";
    default: return "RemoteError";
  }
}
// Whether a keyword failure of that type is the gateway's word that the import is gone (its worker died,
// overran keyword_timeout, or the token is not known). For a reader of answers (the tests): the gateway
// itself knows from the session, as a library may name its own exception so.
inline bool keyword_error_ends_import(std::string_view type) {
  return type == "WorkerFailed" || type == "KeywordTimeout" || type == "UnknownLibraryToken" || type == "GatewayStopping";
}

}  // namespace rjg::protocol
