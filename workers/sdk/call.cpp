// Call: what a keyword body sees of its invocation.
#include "workers/sdk/sdk.hpp"

#include "common/pickle/python_json.hpp"
#include "common/protocol/protocol.hpp"

#include <fmt/format.h>

namespace rjg::sdk {

const json::value& Call::value(std::string_view name) const {
  auto it = bound_.find(name);
  if (it == bound_.end())
    throw std::logic_error(fmt::format("keyword '{}.{}' has no argument named '{}'", library_, keyword_, name));
  return it->value();
}

json::value Call::plain(std::string_view name) const {
  const json::value& v = value(name);
  if (!pickle::holds_pickle(v)) return v;
  try {
    return pickle::plain_json(json::serialize(v), name);
  } catch (const pickle::ValueError& e) {
    throw KeywordError(fmt::format("Keyword '{}.{}': argument '{}' cannot be read as JSON: {}", library_, keyword_,
                                   name, e.what()),
                       "ValueError");
  }
}

namespace {
template <typename Converted>
Converted converted_or_throw(const std::string& library, const std::string& keyword, std::string_view name,
                             const json::value& v, std::string_view type) {
  auto c = convert(v, type);
  if (!c) {
    const std::string shown = v.is_string() ? std::string(v.get_string()) : json::serialize(v);
    throw KeywordError(fmt::format("Keyword '{}.{}': argument '{}' got value '{}' that cannot be converted to {}.",
                                   library, keyword, name, shown, type),
                       "ValueError");
  }
  if constexpr (std::is_same_v<Converted, std::string>) return std::string(c->get_string());
  else if constexpr (std::is_same_v<Converted, bool>) return c->get_bool();
  else if constexpr (std::is_same_v<Converted, double>) return c->get_double();
  else return c->get_int64();
}
}  // namespace

std::int64_t Call::as_int64(std::string_view name) const {
  return converted_or_throw<std::int64_t>(library_, keyword_, name, value(name), "int");
}

double Call::as_double(std::string_view name) const {
  return converted_or_throw<double>(library_, keyword_, name, value(name), "float");
}

bool Call::as_bool(std::string_view name) const {
  return converted_or_throw<bool>(library_, keyword_, name, value(name), "bool");
}

std::string Call::as_string(std::string_view name) const {
  return converted_or_throw<std::string>(library_, keyword_, name, value(name), "str");
}

void Call::out_of_range(std::string_view name, std::string_view type) const {
  throw KeywordError(fmt::format("Keyword '{}.{}': argument '{}' is out of range for {}.", library_, keyword_, name, type),
                     "ValueError");
}

namespace {
void send_log(Output& out, std::string_view message, std::string_view level, bool html, bool console) {
  json::object params;
  params["message"] = log::valid_utf8(message);  // a log line may quote any bytes a process printed
  params["level"] = level;
  params["html"] = html;
  params["console"] = console;
  out.send(protocol::make_notification(protocol::kLog, std::move(params)));
}
}  // namespace

void Call::log(std::string_view message, std::string_view level, bool html, bool console) {
  send_log(out_, message, level, html, console);
}

void ImportContext::log(std::string_view message, std::string_view level, bool html, bool console) {
  if (out) send_log(*out, message, level, html, console);
}

}  // namespace rjg::sdk
