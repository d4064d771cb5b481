#include "common/protocol/params.hpp"

#include "common/protocol/protocol.hpp"

#include <fmt/format.h>

namespace rjg::protocol {
namespace {

// Reads the fields of one params object; the first problem becomes the answer.
class Fields {
 public:
  Fields(const Message& m, Object& out, std::string_view shape) : method_(m.method()), shape_(shape) {
    const bool absent = m.params_text().empty() || m.params_kind() == Kind::null;
    out.text = absent ? "{}" : std::string(m.params_text());
    text_ = out.text;
    if (!absent && m.params_kind() != Kind::object) {
      fail(fmt::format("params must be an object, not {}", protocol::to_string(m.params_kind())));
      return;
    }
    members_ = protocol::members(text_);
  }

  void required_string(std::string_view key, std::string& value, Slice* where = nullptr) {
    if (problem_) return;
    const auto* member = protocol::find(members_, key);
    if (!member) return fail(fmt::format("params.{} is missing (a string)", key));
    if (member->kind != Kind::string)
      return fail(fmt::format("params.{} must be a string, not {}", key, protocol::to_string(member->kind)));
    value = protocol::decode_string(member->value.of(text_));
    if (where) *where = member->value;
  }

  // Absent and null both mean "not given", as the real client sometimes leaves them out.
  void optional(std::string_view key, Kind kind, std::optional<Slice>& where) {
    if (problem_) return;
    const auto* member = protocol::find(members_, key);
    if (!member || member->kind == Kind::null) return;
    if (member->kind != kind)
      return fail(fmt::format("params.{} must be {}, not {}", key, protocol::to_string(kind),
                              protocol::to_string(member->kind)));
    where = member->value;
  }

  template <typename P>
  Bound<P> result(P&& bound) {
    if (problem_) return Invalid{std::move(*problem_)};
    return std::move(bound);
  }

 private:
  void fail(std::string what) {
    problem_ = fmt::format("{}: {}. Expected params {}.", method_, what, shape_);
  }

  std::string_view method_;
  std::string_view shape_;
  std::string_view text_;
  std::vector<protocol::Member> members_;
  std::optional<std::string> problem_;
};

}  // namespace

Bound<Initialize> bind_initialize(const Message& m) {
  // Neither side reads the client's capabilities or info: any params are taken, as they always were.
  Initialize p;
  const bool absent = m.params_text().empty() || m.params_kind() == Kind::null;
  p.text = absent ? "{}" : std::string(m.params_text());
  return p;
}

Bound<ImportLibrary> bind_import_library(const Message& m) {
  ImportLibrary p;
  Fields f(m, p, "{\"name\": string, \"args\"?: list, \"kw_args\"?: object}");
  f.required_string("name", p.name, &p.name_value);
  f.optional("args", Kind::array, p.args);
  f.optional("kw_args", Kind::object, p.kw_args);
  return f.result(std::move(p));
}

Bound<RunKeyword> bind_run_keyword(const Message& m) {
  RunKeyword p;
  Fields f(m, p, "{\"library_token\": string, \"name\": string, \"args\"?: list, \"kwargs\"?: object}");
  f.required_string("library_token", p.library_token, &p.library_token_value);
  f.required_string("name", p.name);
  f.optional("args", Kind::array, p.args);
  f.optional("kwargs", Kind::object, p.kwargs);
  return f.result(std::move(p));
}

Bound<FinalizeLibrary> bind_finalize_library(const Message& m) {
  FinalizeLibrary p;
  Fields f(m, p, "{\"token\": string}");
  f.required_string("token", p.token);
  return f.result(std::move(p));
}

}  // namespace rjg::protocol
