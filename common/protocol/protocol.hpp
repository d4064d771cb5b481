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

}  // namespace rjg::protocol
