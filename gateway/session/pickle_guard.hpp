// The library's pickle policy applied to values that travel as JSON texts, in either direction.
#pragma once

#include "config/config.hpp"

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace rjg::gateway::session {

struct PickleRefusal {
  std::string message;    // for the -32017 answer and the log
  std::string data_json;  // the answer's data: {"library", "path", "reason", "offset"?}
};

// Each value is (its path for messages: "args", "kwargs", "result", "error.data", "" for a whole
// message; its JSON text, "" when absent). nullopt when every pickled value in them is admitted.
std::optional<PickleRefusal> refuse_pickles(const config::Library& library,
                                            std::initializer_list<std::pair<std::string_view, std::string_view>> values);

}  // namespace rjg::gateway::session
