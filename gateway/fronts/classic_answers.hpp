// What the classic front answers with, made from what the protocol side gave: a library definition read as
// the classic API's library information, argument specs, types, tags and documentation, and a keyword's
// result and logs as the struct Robot's Remote reads. No I/O here: values in, XML-RPC values out.
#pragma once

#include "common/xmlrpc/xmlrpc.hpp"
#include "gateway/fronts/http_server.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace rjg::gateway::fronts {
namespace json = boost::json;

// What a keyword call returns to the classic client.
struct KeywordAnswer {
  std::optional<std::string> failure;  // the gateway could not run it (a JSON-RPC error): why
  std::string result_text;             // otherwise, the RunKeywordResult
  std::string output;
};

// A string as a JSON text.
std::string json_string(std::string_view text);
std::string string_member(const json::object& o, std::string_view key);
// One robot/log as Robot's classic output has it: a *LEVEL* marker at the start of a line.
std::string output_line(const json::value& params);

// The objects of the array `key` of an object (a definition's keywords, a keyword's args); f returns
// false to stop.
template <class F>
void each_object(const json::object* o, std::string_view key, F&& f) {
  const auto* list = o ? o->if_contains(key) : nullptr;
  if (!list || !list->is_array()) return;
  for (const auto& item : list->get_array())
    if (item.is_object() && !f(item.get_object())) return;
}

// ---- Library information from the library definition ----
const json::object* keyword_of(const json::value& definition, std::string_view name);
xmlrpc::Value argument_spec(const json::object& keyword);
xmlrpc::Value argument_types(const json::object& keyword);
xmlrpc::Value keyword_tags(const json::object& keyword);
std::string library_doc(const json::value& definition);
xmlrpc::Value library_information(const json::value& definition);

// ---- Answers ----
HttpResponse xml(std::string body);
HttpResponse fault(std::string_view message);
// The struct Robot's Remote reads: status, return, output, error, traceback, continuable, fatal.
xmlrpc::Value keyword_result(const KeywordAnswer& answer, const std::string& library, const std::string& keyword,
                             std::size_t max_depth);

}  // namespace rjg::gateway::fronts
