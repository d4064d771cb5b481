#include "gateway/session/pickle_guard.hpp"

#include "common/pickle/pickle_policy.hpp"
#include "common/protocol/message.hpp"

#include <fmt/format.h>

namespace rjg::gateway::session {
namespace json = boost::json;
namespace {

pickle::PickleMode pickle_mode(const config::Library& library) {
  switch (library.pickle) {
    case config::PicklePolicy::allow: return pickle::PickleMode::allow;
    case config::PicklePolicy::deny: return pickle::PickleMode::deny;
    case config::PicklePolicy::data_only: break;
  }
  return pickle::PickleMode::data_only;
}

}  // namespace

std::optional<PickleRefusal> refuse_pickles(
    const config::Library& library, std::initializer_list<std::pair<std::string_view, std::string_view>> values) {
  const auto mode = pickle_mode(library);
  if (mode == pickle::PickleMode::allow) return std::nullopt;
  for (const auto& [path, text] : values) {
    // No substring shortcut: a key may spell __pickled__ with \u escapes. No tree either: the text is
    // walked as it is (NaN, 40-digit integers and all), in time linear in its size.
    if (text.empty()) continue;
    if (auto refusal = pickle::inspect_pickles_text(text, mode, path)) {
      json::object data{{"library", library.name}, {"path", refusal->path}, {"reason", refusal->reason}};
      if (refusal->offset) data["offset"] = *refusal->offset;
      // Behind a classic upstream the bridge carries plain data only, whatever the policy says: "allow"
      // would not help there, so the advice is what to send instead.
      const std::string hint =
          library.classic_upstream.empty() || mode != pickle::PickleMode::data_only
              ? std::string()
              : fmt::format("library '{}' is a classic remote server ({}), which takes plain data only (Robot's "
                            "Remote sends no other objects either): pass text, numbers, bytes, dates, or lists "
                            "and dictionaries of them",
                            library.name, library.classic_upstream);
      return PickleRefusal{describe(*refusal, library.name, hint), json::serialize(data)};
    }
  }
  return std::nullopt;
}

}  // namespace rjg::gateway::session
