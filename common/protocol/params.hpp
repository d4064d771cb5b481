// Typed params of the robot/* methods a client sends, bound once from a message's text.
//
// Each struct keeps the params object's text as sent and records where its values are, so a relay
// can rewrite one field (the library token) and pass every other byte on. Binding fails with one
// -32602 message that names the method, the field and what was expected.
#pragma once

#include "common/protocol/message.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace rjg::protocol {

// The params object as sent, and places in it.
struct Object {
  std::string text;  // "{...}"; "{}" when the message had no params
  std::string_view of(const std::optional<Slice>& slice, std::string_view absent = {}) const {
    return slice ? slice->of(text) : absent;
  }
  // The same object with each slice replaced by a new JSON text.
  std::string with(std::vector<std::pair<Slice, std::string>> edits) const {
    return protocol::splice(text, std::move(edits));
  }
};

// robot/initialize: the client's capabilities and info are not needed by either side.
struct Initialize : Object {};

// robot/import_library {name: string, args?: list, kw_args?: object}
struct ImportLibrary : Object {
  std::string name;
  Slice name_value;             // the name's JSON text
  std::optional<Slice> args;    // absent or null: none
  std::optional<Slice> kw_args;
};

// robot/run_keyword {library_token: string, name: string, args?: list, kwargs?: object}
struct RunKeyword : Object {
  std::string library_token;
  Slice library_token_value;
  std::string name;
  std::optional<Slice> args;
  std::optional<Slice> kwargs;
};

// robot/finalize_library {token: string}
struct FinalizeLibrary : Object {
  std::string token;
};

// What is wrong with a message's params: the -32602 answer's message.
struct Invalid {
  std::string message;
};

template <typename P>
using Bound = std::variant<P, Invalid>;

Bound<Initialize> bind_initialize(const Message& m);
Bound<ImportLibrary> bind_import_library(const Message& m);
Bound<RunKeyword> bind_run_keyword(const Message& m);
Bound<FinalizeLibrary> bind_finalize_library(const Message& m);

}  // namespace rjg::protocol
