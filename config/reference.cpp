// The configuration reference in doc/configuration.md, rendered from the key tables in keys.cpp.
#include "config/config.hpp"
#include "config/keys.hpp"

#include <fmt/format.h>

namespace rjg::config {
namespace {

// A table cell: a '|' would end it.
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

template <class Model>
std::string table(const std::vector<detail::Key<Model>>& keys, bool in_defaults) {
  std::string out = "| key | type | default | range | what it does |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& key : keys)
    if (key.in_defaults == in_defaults)
      out += fmt::format("| `{}` | {} | {} | {} | {} |\n", key.name, cell(key.type), cell(key.default_text),
                         cell(key.range), cell(key.doc));
  return out;
}

}  // namespace

std::string reference_markdown() {
  return "\n### `[gateway]` (optional table)\n\n"
         "The gateway itself: where it listens, its limits, and who may connect.\n\n" +
         table(detail::gateway_keys(), false) +
         "\n### `[admin]` (optional table)\n\n"
         "The HTTP endpoint for operators: Prometheus metrics, health checks and a status page. Off when the "
         "table is absent.\n\n" +
         table(detail::admin_keys(), false) +
         "\n### `[classic]` (optional table)\n\n"
         "The front for Robot Framework's classic `Remote` library (XML-RPC over HTTP): see \"Classic Remote "
         "clients and servers\". Off when the table is absent.\n\n" +
         table(detail::classic_keys(), false) +
         "\n### `[[library]]` (one or more tables)\n\n"
         "Keys that each `[[library]]` sets for itself:\n\n" +
         table(detail::library_keys(), false) +
         "\n### `[defaults]` (optional table) and `[[library]]`\n\n"
         "Keys that a `[[library]]` sets, or else takes from `[defaults]`, or else the default below:\n\n" +
         table(detail::library_keys(), true) +
         "\n### `rlimits` (a table in `[defaults]` or `[[library]]`)\n\n"
         "Each key is optional; a key left out leaves that limit as the worker inherits it from the gateway:\n\n" +
         table(detail::rlimit_keys(), false) + "\n";
}

}  // namespace rjg::config
