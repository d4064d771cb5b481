// Text helpers that the parts of the Ansible adapter share (adapter.cpp, module_doc.cpp); not part of the
// adapter's interface.
#pragma once

#include <boost/json.hpp>

#include <string>
#include <string_view>

namespace rjg::ansible {

namespace json = boost::json;

inline std::string text_of(const json::value& v) {
  if (v.is_string()) return std::string(v.get_string());
  return json::serialize(v);
}

inline std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return std::string(s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1));
}

}  // namespace rjg::ansible
