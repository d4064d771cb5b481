// Fuzzes the data-only pickle scanner: raw bytes, and the same bytes as {"__pickled__": hex} inside a
// message through the JSON inspector.
//
// Input: a pickle (any bytes). Invariants: no crash, hang or sanitizer report; a refusal has a reason
// and an offset inside the pickle; the verdict is deterministic; tighter limits never admit what the
// default limits refuse; the JSON inspector agrees with the raw scanner (same verdict, reason and
// offset, at the right path), "deny" refuses and "allow" admits; the decoder, which runs the checker's
// machine on values, gives the checker's refusal or reads the pickle without an internal error, and what
// the encoder writes of the value the checker admits.
#include "common/pickle/pickle_policy.hpp"
#include "common/pickle/pickle_value.hpp"
#include "common/protocol/json_text.hpp"

#include "fuzz_common.hpp"

#include <boost/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

namespace {

namespace json = boost::json;

// Small enough that short inputs reach every limit.
const rjg::pickle::PickleLimits kTight{
    .max_bytes = 1 << 16,
    .max_opcodes = 4096,
    .max_stack = 64,
    .max_memo = 64,
    .max_containers = 64,
    .max_depth = 8,
    .max_expanded = 4096,
    .max_long_bytes = 16,
};

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);

  std::size_t offset = 0;
  const auto why = rjg::pickle::check_pickle_data_only(bytes, &offset);
  if (why) {
    RJG_FUZZ_CHECK(!why->empty(), "a refusal without a reason");
    RJG_FUZZ_CHECK(offset <= bytes.size(), "refusal offset " + std::to_string(offset) + " is past the end: " + *why);
  }
  const auto again = rjg::pickle::check_pickle_data_only(bytes);
  RJG_FUZZ_CHECK(again == why, "the verdict is not deterministic");

  std::size_t tight_offset = 0;
  const auto tight = rjg::pickle::check_pickle_data_only(bytes, &tight_offset, kTight);
  if (why) RJG_FUZZ_CHECK(tight.has_value(), "tighter limits admitted what the defaults refuse: " + *why);
  if (tight) RJG_FUZZ_CHECK(tight_offset <= bytes.size(), "refusal offset past the end: " + *tight);

  // The decoder under the tight limits (the default ones let a few bytes of memo references expand to
  // millions of copies).
  const auto decoded = rjg::pickle::decode_pickle(bytes, kTight);
  if (tight) {
    const auto* error = std::get_if<std::string>(&decoded);
    RJG_FUZZ_CHECK(error && *error == "byte " + std::to_string(tight_offset) + ": " + *tight,
                   "the decoder does not give the checker's refusal: " + *tight);
  } else if (const auto* error = std::get_if<std::string>(&decoded)) {
    RJG_FUZZ_CHECK(error->find("internal error") == std::string::npos, "the decoder disagrees with the checker: " + *error);
  } else {
    try {
      const std::string again = rjg::pickle::encode_pickle(std::get<rjg::pickle::PyValue>(decoded));
      const auto reencoded = rjg::pickle::check_pickle_data_only(again);
      RJG_FUZZ_CHECK(!reencoded, "the checker refuses what the encoder wrote: " + reencoded.value_or(""));
    } catch (const std::invalid_argument& e) {
      RJG_FUZZ_CHECK(false, std::string("the encoder cannot write a decoded value: ") + e.what());
    }
  }

  // The same pickle as the only argument of a keyword call.
  const json::value message = {{"args", json::array{json::object{{"__pickled__", to_hex(bytes)}}}}, {"kwargs", json::object{}}};
  const auto inspected = rjg::pickle::inspect_pickles(message, rjg::pickle::PickleMode::data_only, "");
  RJG_FUZZ_CHECK(inspected.has_value() == why.has_value(), "the JSON inspector and the scanner disagree");
  if (inspected) {
    RJG_FUZZ_CHECK(inspected->reason == *why, "the JSON inspector gives another reason: " + inspected->reason);
    RJG_FUZZ_CHECK(inspected->offset == offset, "the JSON inspector gives another offset");
    RJG_FUZZ_CHECK(inspected->path == "args[0]", "the JSON inspector names the wrong path: " + inspected->path);
    RJG_FUZZ_CHECK(!rjg::pickle::describe(*inspected, "Lib").empty(), "an empty description");
  }
  // The text inspector (the gateway's) agrees with the tree inspector on the same value, and on the
  // input itself taken as a JSON text it never crashes, and refuses what is not JSON.
  const auto text_inspected = rjg::pickle::inspect_pickles_text(json::serialize(message), rjg::pickle::PickleMode::data_only, "");
  RJG_FUZZ_CHECK(text_inspected.has_value() == inspected.has_value(), "the text and tree inspectors disagree");
  if (text_inspected && inspected)
    RJG_FUZZ_CHECK(text_inspected->reason == inspected->reason && text_inspected->path == inspected->path &&
                       text_inspected->offset == inspected->offset,
                   "the text inspector gives another verdict: " + text_inspected->path + ": " + text_inspected->reason);
  const bool is_json = rjg::protocol::scan(bytes).first.has_value();
  const auto as_text = rjg::pickle::inspect_pickles_text(bytes, rjg::pickle::PickleMode::data_only, "v");
  if (!is_json) RJG_FUZZ_CHECK(as_text.has_value(), "the text inspector admitted a text that is not JSON");
  const auto denied = rjg::pickle::inspect_pickles(message, rjg::pickle::PickleMode::deny, "params");
  RJG_FUZZ_CHECK(denied.has_value() && denied->path == "params.args[0]", "deny did not refuse at params.args[0]");
  RJG_FUZZ_CHECK(!rjg::pickle::inspect_pickles(message, rjg::pickle::PickleMode::allow, "").has_value(), "allow refused");
  return 0;
}
