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
  // What the writer wrote must parse: only the fuzzer's own document may be refused.
  auto reparse = [&](auto parse, const std::string& written) {
    try {
      return parse(written, limits);
    } catch (const ParseError& e) {
      rjg::fuzz::invariant_failed(e.what(), written, __FILE__, __LINE__);
    }
  };
  if (as_call) {
    Call call;
    try {
      call = parse_call(document, limits);
    } catch (const ParseError&) {
      return 0;  // refused with a reason: fine
    }
    const std::string written = write_call(call.method, call.params);
    const Call again = reparse([](std::string_view d, const Limits& l) { return parse_call(d, l); }, written);
    RJG_FUZZ_CHECK(again.method == call.method, call.method);
    // Compared as written: a NaN is unequal to itself, but writes the same text.
    RJG_FUZZ_CHECK(write_call(again.method, again.params) == written, "params differ after a round trip");
  } else {
    Response response;
    try {
      response = parse_response(document, limits);
    } catch (const ParseError&) {
      return 0;
    }
    const std::string written =
        response.is_fault ? write_fault(response.fault.code, response.fault.message) : write_response(response.value);
    const Response again = reparse([](std::string_view d, const Limits& l) { return parse_response(d, l); }, written);
    RJG_FUZZ_CHECK(again.is_fault == response.is_fault, written);
    RJG_FUZZ_CHECK(again.is_fault || write_response(again.value) == written, "value differs after a round trip");
    RJG_FUZZ_CHECK(again.fault.code == response.fault.code && again.fault.message == response.fault.message, written);
  }
  return 0;
}
