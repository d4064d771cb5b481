// Fuzzes the XML-RPC codec (common/xmlrpc), which reads what classic Remote clients and classic remote
// servers send.
//
// Input: a document (any bytes); the first byte chooses a call or a response. Invariants: parsing
// returns or throws ParseError, nothing else (no crash, no sanitizer report, no other exception, no
// unbounded work); whatever parses, written back by the codec, parses again to the same method, values
// and fault.
#include "common/xmlrpc/xmlrpc.hpp"

#include "fuzz_common.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

using namespace rjg::xmlrpc;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool as_call = data[0] & 1;
  const std::string_view document(reinterpret_cast<const char*>(data) + 1, size - 1);
  Limits limits;
  limits.max_bytes = 1 << 20;
  limits.max_depth = 32;
  limits.max_values = 100000;
  try {
    if (as_call) {
      const Call call = parse_call(document, limits);
      const Call again = parse_call(write_call(call.method, call.params), limits);
      RJG_FUZZ_CHECK(again.method == call.method, call.method);
      RJG_FUZZ_CHECK(again.params == call.params, "params differ after a round trip");
    } else {
      const Response response = parse_response(document, limits);
      const std::string written =
          response.is_fault ? write_fault(response.fault.code, response.fault.message) : write_response(response.value);
      const Response again = parse_response(written, limits);
      RJG_FUZZ_CHECK(again.is_fault == response.is_fault, written);
      RJG_FUZZ_CHECK(again.value == response.value, "value differs after a round trip");
      RJG_FUZZ_CHECK(again.fault.code == response.fault.code && again.fault.message == response.fault.message, written);
    }
  } catch (const ParseError&) {
    // Refused with a reason: fine.
  }
  return 0;
}
