#include "gateway/session/argument_guard.hpp"

#include "common/log.hpp"
#include "common/pickle/pickle_policy.hpp"
#include "common/protocol/robot_escape.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

namespace rjg::gateway::session {
namespace {

namespace json = boost::json;
using Edits = std::vector<std::pair<protocol::Slice, std::string>>;

// The replacement of one string literal, when escaping changes it.
void escape_literal(std::string_view text, protocol::Slice literal, Edits& edits) {
  const std::string value = protocol::decode_string(literal.of(text));
  if (protocol::holds_syntax(value)) edits.emplace_back(literal, protocol::quote(protocol::escape(value)));
}

// Walks one value of the params (slices are made absolute with `base`) and collects the edits of the
// strings the worker evaluates: the elements of a list (positional) or the keys and values of an object
// (named), one level deep; what is nested deeper reaches the worker as objects, not as Robot data.
class TopLevelStrings final : public protocol::Visitor {
 public:
  TopLevelStrings(std::string_view text, std::size_t base, Edits& edits) : text_(text), base_(base), edits_(edits) {}
  bool begin(protocol::Kind, std::size_t) override {
    ++depth_;
    return true;
  }
  bool key(protocol::Slice literal) override {
    if (depth_ == 1) escape_literal(text_, at(literal), edits_);
    return true;
  }
  bool scalar(protocol::Kind kind, protocol::Slice value) override {
    if (depth_ == 1 && kind == protocol::Kind::string) escape_literal(text_, at(value), edits_);
    return true;
  }
  bool end(protocol::Kind, protocol::Slice) override {
    --depth_;
    return true;
  }

 private:
  protocol::Slice at(protocol::Slice s) const { return {s.offset + base_, s.size}; }
  std::string_view text_;
  std::size_t base_;
  Edits& edits_;
  int depth_ = 0;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The decoded bytes of a pickle's hex, or nullopt when it is not even-length hex.
std::optional<std::string> unhex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string bytes(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  return bytes;
}

// A string that the worker would evaluate, found in an argument value that becomes text.
struct Finding {
  std::string path;    // "kw_args.options", "kw_args.options (pickled)"
  std::string text;    // the string, printable and shortened
  std::string reason;  // from protocol::evaluated_in_text, or why a pickle cannot be read
};

class PickleStrings final : public pickle::PickleTextVisitor {
 public:
  bool text(std::string_view value, bool is_bytes) override {
    if (auto why = protocol::evaluated_in_text(value, is_bytes)) {
      found = std::pair{log::printable(value, 80), std::move(*why)};
      return false;
    }
    return true;
  }
  std::optional<std::pair<std::string, std::string>> found;
};

// Every string in an import argument that becomes text (a list or an object, possibly holding
// pickles), checked as part of the value's Python text.
class NestedStrings final : public protocol::Visitor {
 public:
  NestedStrings(std::string_view text, std::string path) : text_(text), path_(std::move(path)) {}
  bool begin(protocol::Kind, std::size_t) override { return true; }
  bool key(protocol::Slice literal) override {
    const std::string key = protocol::decode_string(literal.of(text_));
    pickle_next_ = key == "__pickled__";
    return check(key);
  }
  bool scalar(protocol::Kind kind, protocol::Slice value) override {
    const bool pickle = std::exchange(pickle_next_, false);
    if (kind != protocol::Kind::string) return true;
    const std::string s = protocol::decode_string(value.of(text_));
    return pickle ? check_pickle(s) : check(s);
  }
  bool end(protocol::Kind, protocol::Slice) override {
    pickle_next_ = false;
    return true;
  }
  std::optional<Finding> finding;

 private:
  bool check(const std::string& s) {
    if (auto why = protocol::evaluated_in_text(s)) {
      finding = Finding{path_, log::printable(s, 80), std::move(*why)};
      return false;
    }
    return true;
  }
  bool check_pickle(const std::string& hex) {
    const std::string path = path_ + " (pickled)";
    const auto bytes = unhex(hex);
    if (!bytes) {
      finding = Finding{path, {}, "its pickle is not hex, so the strings in it cannot be checked"};
      return false;
    }
    PickleStrings strings;
    if (auto error = pickle::visit_pickle_strings(*bytes, strings)) {
      finding = Finding{path, {}, fmt::format("its pickle cannot be read ({}), so the strings in it cannot be checked",
                                              *error)};
      return false;
    }
    if (strings.found) {
      finding = Finding{path, std::move(strings.found->first), std::move(strings.found->second)};
      return false;
    }
    return true;
  }

  std::string_view text_;
  std::string path_;
  bool pickle_next_ = false;
};

// Whether a pickle is one str (or bytes) and nothing else, and that text: PROTO, FRAME and the memo
// opcodes only keep books (pickletools), so a pickle of a plain string is its one text opcode and STOP.
class RootText final : public pickle::PickleTextVisitor {
 public:
  void opcode(unsigned char op) override {
    constexpr unsigned char kProto = 0x80, kFrame = 0x95, kMemoize = 0x94, kBinput = 'q', kLongBinput = 'r',
                            kPut = 'p', kStop = '.';
    if (op == kProto || op == kFrame || op == kMemoize || op == kBinput || op == kLongBinput || op == kPut ||
        op == kStop)
      return;
    ++values_;
  }
  bool text(std::string_view value, bool is_bytes) override {
    if (values_ == 1) text_ = value, is_bytes_ = is_bytes;
    return true;
  }
  // The text when the whole pickle is that one str. Not bytes: Robot's argument resolution replaces
  // variables and unescapes backslashes in str arguments only, so b'\\x00 ${x}' reaches the keyword as the
  // bytes it is.
  std::optional<std::string_view> root() const { return values_ == 1 && !is_bytes_ ? text_ : std::nullopt; }

 private:
  std::size_t values_ = 0;
  std::optional<std::string_view> text_;
  bool is_bytes_ = false;
};

// A pickle at the top level of run_keyword args or a kwargs value reaches the keyword as the object it
// builds, and Robot's argument resolution evaluates it like any other argument when that object is a
// str: such a string cannot be escaped inside the pickle, so it is refused when Robot would change it.
// (Strings inside a pickled list or dict are not resolved: replace_list and replace_scalar do not
// recurse.)
std::optional<Finding> evaluated_pickled_string(std::string_view value_text, std::string path) {
  const auto members = protocol::members(value_text);
  if (members.size() != 1 || members[0].key != "__pickled__" || members[0].kind != protocol::Kind::string)
    return std::nullopt;  // not a pickle (a malformed look-alike is the pickle policy's to refuse)
  const auto bytes = unhex(protocol::decode_string(members[0].value.of(value_text)));
  if (!bytes) return std::nullopt;
  RootText root;
  if (pickle::visit_pickle_strings(*bytes, root)) return std::nullopt;  // unreadable: the pickle policy decides
  if (auto text = root.root(); text && protocol::holds_syntax(*text))
    return Finding{std::move(path), log::printable(*text, 80),
                   "holds Robot Framework syntax, which its worker would evaluate"};
  return std::nullopt;
}

// The values at the top level of a list or object that are lists or objects, with their place (index
// or key), for checks of their own.
class TopLevelContainers final : public protocol::Visitor {
 public:
  explicit TopLevelContainers(std::string_view text) : text_(text) {}
  bool begin(protocol::Kind, std::size_t) override {
    ++depth_;
    return true;
  }
  bool key(protocol::Slice literal) override {
    if (depth_ == 1) key_ = protocol::decode_string(literal.of(text_));
    return true;
  }
  bool scalar(protocol::Kind, protocol::Slice) override {
    if (depth_ == 1) ++index_;
    return true;
  }
  bool end(protocol::Kind, protocol::Slice value) override {
    if (--depth_ == 1) found.push_back({index_++, key_, value});
    return true;
  }
  struct Found {
    std::size_t index;
    std::string key;  // in an object
    protocol::Slice value;
  };
  std::vector<Found> found;

 private:
  std::string_view text_;
  int depth_ = 0;
  std::size_t index_ = 0;
  std::string key_;
};

std::string path_of(std::string_view key) {
  return std::all_of(key.begin(), key.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) && !key.empty()
             ? fmt::format("kw_args.{}", key)
             : fmt::format("kw_args[{}]", protocol::quote(key));
}

// The top-level kw_args: names and string values are escaped; list and object values are checked.
class KwArgs final : public protocol::Visitor {
 public:
  KwArgs(std::string_view text, std::size_t base, Edits& edits) : text_(text), base_(base), edits_(edits) {}
  bool begin(protocol::Kind, std::size_t) override {
    ++depth_;
    return true;
  }
  bool key(protocol::Slice literal) override {
    if (depth_ == 1) {
      key_ = protocol::decode_string(at(literal).of(text_));
      escape_literal(text_, at(literal), edits_);
    }
    return true;
  }
  bool scalar(protocol::Kind kind, protocol::Slice value) override {
    if (depth_ == 1 && kind == protocol::Kind::string) escape_literal(text_, at(value), edits_);
    return true;
  }
  bool end(protocol::Kind, protocol::Slice value) override {
    if (depth_-- == 2) {
      // A list or object value: the worker formats it as its Python text, which it then evaluates.
      const std::string_view nested = at(value).of(text_);
      NestedStrings strings(nested, path_of(key_));
      protocol::walk(nested, strings);
      if (strings.finding) {
        finding = std::move(strings.finding);
        return false;
      }
    }
    return true;
  }
  std::optional<Finding> finding;

 private:
  protocol::Slice at(protocol::Slice s) const { return {s.offset + base_, s.size}; }
  std::string_view text_;
  std::size_t base_;
  Edits& edits_;
  int depth_ = 0;
  std::string key_;
};

// A slice of the old text, moved to where the same bytes are after the edits (edits lie wholly inside
// or wholly outside it).
protocol::Slice moved(protocol::Slice s, const Edits& edits) {
  std::ptrdiff_t before = 0, inside = 0;
  for (const auto& [edit, replacement] : edits) {
    const auto delta = static_cast<std::ptrdiff_t>(replacement.size()) - static_cast<std::ptrdiff_t>(edit.size);
    if (edit.offset + edit.size <= s.offset) before += delta;
    else if (edit.offset >= s.offset && edit.offset + edit.size <= s.offset + s.size) inside += delta;
  }
  return {static_cast<std::size_t>(static_cast<std::ptrdiff_t>(s.offset) + before),
          static_cast<std::size_t>(static_cast<std::ptrdiff_t>(s.size) + inside)};
}
void move(std::optional<protocol::Slice>& s, const Edits& edits) {
  if (s) s = moved(*s, edits);
}

void walk_value(std::string_view text, const std::optional<protocol::Slice>& slice, protocol::Visitor& visitor) {
  if (slice) protocol::walk(slice->of(text), visitor);
}

}  // namespace

bool escapes_arguments(config::Arguments mode, std::string_view worker_server_name) {
  switch (mode) {
    case config::Arguments::escape: return true;
    case config::Arguments::as_is: return false;
    case config::Arguments::auto_: break;
  }
  return worker_server_name == kReferenceServerName;
}

std::size_t escape_arguments(protocol::RunKeyword& params) {
  Edits edits;
  if (params.args) {
    TopLevelStrings positional(params.text, params.args->offset, edits);
    walk_value(params.text, params.args, positional);
  }
  if (params.kwargs) {
    TopLevelStrings named(params.text, params.kwargs->offset, edits);
    walk_value(params.text, params.kwargs, named);
  }
  if (edits.empty()) return 0;
  params.library_token_value = moved(params.library_token_value, edits);
  move(params.args, edits);
  move(params.kwargs, edits);
  const std::size_t changed = edits.size();
  params.text = protocol::splice(params.text, std::move(edits));
  return changed;
}

std::optional<ArgumentRefusal> refuse_evaluated_pickles(const protocol::RunKeyword& params,
                                                        const config::Library& library, std::string_view keyword) {
  std::optional<Finding> finding;
  auto check = [&](const std::optional<protocol::Slice>& slice, bool named) {
    if (!slice || finding) return;
    const std::string_view values = slice->of(params.text);
    TopLevelContainers containers(values);
    protocol::walk(values, containers);
    for (const auto& c : containers.found) {
      std::string path = named ? fmt::format("kwargs[{}]", protocol::quote(c.key)) : fmt::format("args[{}]", c.index);
      if ((finding = evaluated_pickled_string(c.value.of(values), std::move(path)))) return;
    }
  };
  check(params.args, false);
  check(params.kwargs, true);
  if (!finding) return std::nullopt;
  ArgumentRefusal refusal;
  refusal.message = fmt::format(
      "Library '{}', keyword '{}': the argument {} was refused: it is a pickled string, '{}', that {}; a string "
      "inside a pickle cannot be escaped. Send it as a JSON string (the gateway escapes those), or set arguments "
      "= \"as-is\" for library '{}' if the worker is meant to evaluate it.",
      library.name, keyword, finding->path, finding->text, finding->reason, library.name);
  refusal.log = fmt::format("the argument {} was refused: a pickled string that {}", finding->path, finding->reason);
  refusal.data_json =
      json::serialize(json::object{{"library", library.name}, {"path", finding->path}, {"reason", finding->reason}});
  return refusal;
}

std::optional<ArgumentRefusal> escape_arguments(protocol::ImportLibrary& params, const config::Library& library,
                                                std::size_t* changed) {
  Edits edits;
  if (params.args) {
    TopLevelStrings positional(params.text, params.args->offset, edits);
    walk_value(params.text, params.args, positional);
  }
  std::optional<Finding> finding;
  // Each positional import argument becomes text with str() in the reference server before Robot
  // evaluates it: a list, object or pickle there cannot be escaped, so the strings in it are checked.
  if (params.args) {
    const std::string_view args = params.args->of(params.text);
    TopLevelContainers containers(args);
    protocol::walk(args, containers);
    for (const auto& c : containers.found) {
      const std::string_view nested = c.value.of(args);
      NestedStrings strings(nested, fmt::format("args[{}]", c.index));
      protocol::walk(nested, strings);
      if ((finding = std::move(strings.finding))) break;
    }
  }
  if (params.kw_args && !finding) {
    KwArgs named(params.text, params.kw_args->offset, edits);
    walk_value(params.text, params.kw_args, named);
    finding = std::move(named.finding);
  }
  if (finding) {
    auto& f = finding;
    const bool positional = f->path.starts_with("args");
    const std::string what = f->text.empty() ? f->reason : fmt::format("the string '{}' in it {}", f->text, f->reason);
    const std::string hint = fmt::format(
        "its worker turns {} into text and evaluates that text as Robot Framework data, so a list, dictionary or "
        "pickled value there cannot be passed on unchanged. Pass strings as separate {} (the gateway escapes "
        "those), or set arguments = \"as-is\" for library '{}' if the worker is meant to evaluate them",
        positional ? "each positional import argument" : "each kw_args entry (as \"name=value\")",
        positional ? "positional args" : "kw_args entries or positional args", library.name);
    ArgumentRefusal refusal;
    refusal.message =
        fmt::format("Library '{}': the import argument {} was refused: {}; {}.", library.name, f->path, what, hint);
    refusal.log = fmt::format("the import argument {} was refused: {}{}", f->path,
                              f->text.empty() ? "" : "a string in it ", f->reason);
    refusal.data_json =
        json::serialize(json::object{{"library", library.name}, {"path", f->path}, {"reason", f->reason}});
    return refusal;
  }
  if (changed) *changed = edits.size();
  if (edits.empty()) return std::nullopt;
  params.name_value = moved(params.name_value, edits);
  move(params.args, edits);
  move(params.kw_args, edits);
  params.text = protocol::splice(params.text, std::move(edits));
  return std::nullopt;
}

}  // namespace rjg::gateway::session
