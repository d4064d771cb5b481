// Fuzzes the XML-RPC codec (common/xmlrpc), which reads what classic Remote clients and classic remote
// servers send.
//
// Input: a document (any bytes); the first byte chooses a call or a response. Invariants: parsing
// returns or throws ParseError, nothing else (no crash, no sanitizer report, no other exception, no
// unbounded work); what parses has at most one value per Limits::bytes_per_value bytes of the document;
// whatever parses, written back by the codec, parses again to the same method, values and fault.
#include "common/xmlrpc/xmlrpc.hpp"

#include "fuzz_common.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

using namespace rjg::xmlrpc;

namespace {
std::size_t values_in(const Value& v) {
  std::size_t n = 1;
  if (v.is<Array>())
    for (const auto& item : v.as<Array>()) n += values_in(item);
  if (v.is<Struct>())
    for (const auto& [key, member] : v.as<Struct>()) n += values_in(member);
  return n;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool as_call = data[0] & 1;
  const std::string_view document(reinterpret_cast<const char*>(data) + 1, size - 1);
  Limits limits;
  limits.max_bytes = 1 << 20;
  limits.max_depth = 32;
  limits.max_values = 100000;
  const std::size_t most_values = std::max<std::size_t>(1, document.size() / limits.bytes_per_value);
  // What the writer wrote must parse: only the fuzzer's own document may be refused. It may be larger than
  // the input (<value/> is written <value><string></string></value>): its size is not the fuzzer's.
  Limits written_limits = limits;
  written_limits.max_bytes = std::size_t{1} << 30;
  auto reparse = [&](auto parse, const std::string& written) {
    try {
      return parse(written, written_limits);
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
    std::size_t values = 0;
    for (const auto& param : call.params) values += values_in(param);
    RJG_FUZZ_CHECK(values <= most_values, "more values than one per bytes_per_value bytes");
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
    RJG_FUZZ_CHECK(response.is_fault || values_in(response.value) <= most_values,
                   "more values than one per bytes_per_value bytes");
    const std::string written =
        response.is_fault ? write_fault(response.fault.code, response.fault.message) : write_response(response.value);
    const Response again = reparse([](std::string_view d, const Limits& l) { return parse_response(d, l); }, written);
    RJG_FUZZ_CHECK(again.is_fault == response.is_fault, written);
    RJG_FUZZ_CHECK(again.is_fault || write_response(again.value) == written, "value differs after a round trip");
    RJG_FUZZ_CHECK(again.fault.code == response.fault.code && again.fault.message == response.fault.message, written);
  }
  return 0;
}
