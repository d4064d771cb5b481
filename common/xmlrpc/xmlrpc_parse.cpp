// Reading XML-RPC documents (calls and responses) on expat; xmlrpc.cpp writes them.
#include "common/xmlrpc/xmlrpc.hpp"

#include <expat.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <memory>

namespace rjg::xmlrpc {

const Value* Value::member(std::string_view name) const {
  if (!is<Struct>()) return nullptr;
  // The last of equal names wins, as in Python's unmarshaller (a dict).
  const Value* found = nullptr;
  for (const auto& [key, value] : as<Struct>())
    if (key == name) found = &value;
  return found;
}

namespace {

bool blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string trimmed(std::string_view text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  const auto end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

[[noreturn]] void fail(long line, std::string_view what) { throw ParseError(fmt::format("line {}: {}", line, what)); }
[[noreturn]] void fail_limit(long line, std::string_view what) {
  throw LimitError(fmt::format("line {}: {}", line, what));
}

// The document read as XML-RPC while expat reads it: one frame per open element, each knowing what may
// stand inside it, so a misplaced element is refused where it starts and nothing but the values is kept.
// (Building a tree of the document first cost some 100 bytes per element: 2,000,000 empty elements in
// 8 MB held 213 MB before they were refused.)
class StreamParser {
 public:
  enum class Mode { call, response };

  StreamParser(const Limits& limits, Mode mode, std::size_t document_bytes)
      : limits_(limits), mode_(mode), parser_(XML_ParserCreate(nullptr)) {
    if (!parser_) throw ParseError("out of memory creating the XML parser");
    max_values_ = limits.max_values;
    if (limits.bytes_per_value > 0) {
      const std::size_t by_size = std::max<std::size_t>(1, document_bytes / limits.bytes_per_value);
      if (by_size < max_values_) {
        max_values_ = by_size;
        values_by_size_ = true;
      }
    }
    XML_SetUserData(parser_.get(), this);
    XML_SetElementHandler(parser_.get(), &StreamParser::on_start, &StreamParser::on_end);
    XML_SetCharacterDataHandler(parser_.get(), &StreamParser::on_text);
    // Nothing outside the document is ever read, and no entity can be declared: a DOCTYPE ends the parse.
    XML_SetStartDoctypeDeclHandler(parser_.get(), &StreamParser::on_doctype);
    XML_SetEntityDeclHandler(parser_.get(), &StreamParser::on_entity);
    XML_SetExternalEntityRefHandler(parser_.get(), [](XML_Parser, const XML_Char*, const XML_Char*, const XML_Char*,
                                                      const XML_Char*) { return int(XML_STATUS_ERROR); });
    XML_SetParamEntityParsing(parser_.get(), XML_PARAM_ENTITY_PARSING_NEVER);
  }

  void parse(std::string_view document) {
    if (document.size() > limits_.max_bytes)
      throw LimitError(fmt::format("the document has {} bytes, more than the limit of {}", document.size(),
                                   limits_.max_bytes));
    // expat takes an int length: the limit above keeps it in range for any sane setting.
    if (XML_Parse(parser_.get(), document.data(), static_cast<int>(document.size()), XML_TRUE) != XML_STATUS_OK) {
      if (error_) std::rethrow_exception(error_);
      const long line = static_cast<long>(XML_GetCurrentLineNumber(parser_.get()));
      throw ParseError(fmt::format("line {}: not well-formed XML: {}", line, XML_ErrorString(XML_GetErrorCode(parser_.get()))));
    }
    if (error_) std::rethrow_exception(error_);
    if (!done_) throw ParseError("the document has no root element");
  }

  Call call;
  Response response;

 private:
  enum class Kind {
    method_call, method_name, params, param,           // a call
    method_response, fault,                            // a response (and params, param)
    value, scalar, array, data, struct_, member, name  // values
  };
  // One open element.
  struct Frame {
    Kind kind = Kind::value;
    long line = 0;
    std::string tag;            // as written (a scalar's type: "int", "i4", ...)
    std::size_t depth = 0;      // value, array, data, struct, member: arrays and structs around it
    std::size_t children = 0;   // elements directly inside
    unsigned seen = 0;          // method_call, member: which of their two children came (bits 1 and 2)
    bool text_seen = false;     // non-blank text directly inside (an error next to elements)
    std::string text;           // method_name, name, scalar, and value until it has a typed element
    std::string type;           // value: the name of its typed element
    Value value;                // value: its result; array, data: the items; struct: the members
    std::optional<std::string> member_name;
    std::optional<Value> member_value;
  };

  // expat calls C functions: nothing may be thrown through it. What a handler throws stops the parse and
  // is thrown again by parse().
  template <class F>
  void guarded(F&& f) {
    if (error_) return;  // a callback expat still delivers after a stop
    try {
      f();
    } catch (...) {
      error_ = std::current_exception();
      XML_StopParser(parser_.get(), XML_FALSE);
    }
  }
  long line() const { return static_cast<long>(XML_GetCurrentLineNumber(parser_.get())); }

  static void on_start(void* self, const XML_Char* name, const XML_Char**) {
    auto* p = static_cast<StreamParser*>(self);
    p->guarded([&] { p->start(name); });
  }
  static void on_end(void* self, const XML_Char*) {
    auto* p = static_cast<StreamParser*>(self);
    p->guarded([&] { p->end(); });
  }
  static void on_text(void* self, const XML_Char* text, int length) {
    auto* p = static_cast<StreamParser*>(self);
    p->guarded([&] { p->text({text, static_cast<std::size_t>(length)}); });
  }
  static void on_doctype(void* self, const XML_Char*, const XML_Char*, const XML_Char*, int) {
    auto* p = static_cast<StreamParser*>(self);
    p->guarded([&] { fail(p->line(), "a DOCTYPE is not accepted (no DTD, no entities)"); });
  }
  static void on_entity(void* self, const XML_Char*, int, const XML_Char*, int, const XML_Char*, const XML_Char*,
                        const XML_Char*, const XML_Char*) {
    auto* p = static_cast<StreamParser*>(self);
    p->guarded([&] { fail(p->line(), "an entity declaration is not accepted"); });
  }

  // Text and elements side by side (whitespace between elements is layout): an error in the container.
  static void no_mixing(const Frame& f) {
    if (f.text_seen && f.children > 0) fail(f.line, fmt::format("<{}> mixes text and elements", f.tag));
  }

  void push(Kind kind, std::string_view tag, std::size_t depth = 0) {
    // Each level of arrays and structs is three elements (value, array or struct, data or member); the
    // depth check below refuses before this, which guards the stack whatever the document.
    if (stack_.size() > limits_.max_depth * 3 + 8) fail_limit(line(), "nesting deeper than the limit");
    Frame f;
    f.kind = kind;
    f.line = line();
    f.tag = std::string(tag);
    f.depth = depth;
    if (kind == Kind::array || kind == Kind::data) f.value = Value(Array{});
    if (kind == Kind::struct_) f.value = Value(Struct{});
    stack_.push_back(std::move(f));
  }

  void start(std::string_view tag) {
    if (stack_.empty()) {
      const std::string_view root = mode_ == Mode::call ? "methodCall" : "methodResponse";
      if (tag != root) fail(line(), fmt::format("expected <{}>, found <{}>", root, tag));
      push(mode_ == Mode::call ? Kind::method_call : Kind::method_response, tag);
      return;
    }
    Frame& parent = stack_.back();
    ++parent.children;
    no_mixing(parent);
    switch (parent.kind) {
      case Kind::method_call:
        if (tag == "methodName" && !seen(parent, 1)) return push(Kind::method_name, tag);
        if (tag == "params" && !seen(parent, 2)) return push(Kind::params, tag);
        fail(line(), fmt::format("<methodCall> holds an unexpected <{}>", tag));
      case Kind::method_response:
        if (parent.children > 1) fail(parent.line, "<methodResponse> must hold one <params> or one <fault>");
        if (tag == "params") return push(Kind::params, tag);
        if (tag == "fault") return push(Kind::fault, tag);
        fail(line(), fmt::format("<methodResponse> holds <{}>", tag));
      case Kind::params:
        if (mode_ == Mode::response && (parent.children > 1 || tag != "param"))
          fail(parent.line, "<params> must hold exactly one <param>");
        if (tag != "param") fail(line(), fmt::format("<params> holds <{}>, expected <param>", tag));
        return push(Kind::param, tag);
      case Kind::param:
      case Kind::fault:
        if (parent.children > 1 || tag != "value")
          fail(parent.line, fmt::format("<{}> must hold exactly one <value>", parent.tag));
        return start_value(tag, 0);
      case Kind::data:
        return start_value(tag, parent.depth + 1);
      case Kind::array:
        if (parent.children > 1 || tag != "data") fail(parent.line, "<array> must hold exactly one <data>");
        return push(Kind::data, tag, parent.depth);
      case Kind::struct_:
        if (tag != "member") fail(line(), fmt::format("<struct> holds <{}>, expected <member>", tag));
        return push(Kind::member, tag, parent.depth);
      case Kind::member:
        if (tag == "name" && !seen(parent, 1)) return push(Kind::name, tag);
        if (tag == "value" && !seen(parent, 2)) return start_value(tag, parent.depth + 1);
        fail(line(), fmt::format("<member> holds an unexpected <{}>", tag));
      case Kind::value: {
        if (parent.children > 1) fail(parent.line, fmt::format("<value> must hold exactly one <{}>", parent.type));
        // Its text so far was layout around the typed element (no_mixing refused anything else).
        parent.text = std::string();
        parent.type = std::string(tag);
        const std::size_t depth = parent.depth;
        if (tag == "array" || tag == "struct") {
          if (depth >= limits_.max_depth) fail_limit(line(), "arrays and structs nested deeper than the limit");
          return push(tag == "array" ? Kind::array : Kind::struct_, tag, depth);
        }
        static constexpr std::string_view kScalars[] = {
            "string", "int", "i4", "i8", "i1", "i2", "biginteger", "boolean", "double", "float",
            "dateTime.iso8601", "base64", "nil"};
        if (std::find(std::begin(kScalars), std::end(kScalars), tag) == std::end(kScalars))
          fail(line(), fmt::format("unknown value type <{}>", tag));
        return push(Kind::scalar, tag, depth);
      }
      case Kind::scalar:
        if (parent.tag == "nil") fail(parent.line, "<nil/> holds something");
        fail(parent.line, fmt::format("<{}> holds elements", parent.tag));
      case Kind::method_name:
      case Kind::name:
        fail(parent.line, fmt::format("<{}> holds elements", parent.tag));
    }
  }

  // Whether the container already had the child `bit` stands for; marks it.
  static bool seen(Frame& f, unsigned bit) {
    const bool was = f.seen & bit;
    f.seen |= bit;
    return was;
  }

  void start_value(std::string_view tag, std::size_t depth) {
    if (tag != "value") fail(line(), fmt::format("expected <value>, found <{}>", tag));
    if (++values_ > max_values_) {
      if (values_by_size_)
        fail_limit(line(), fmt::format("more values than the limit: at most one value per {} bytes of the "
                                       "document, {} here",
                                       limits_.bytes_per_value, max_values_));
      fail_limit(line(), fmt::format("more values than the limit of {}", max_values_));
    }
    push(Kind::value, tag, depth);
  }

  void text(std::string_view text) {
    if (stack_.empty()) return;
    Frame& f = stack_.back();
    switch (f.kind) {
      case Kind::method_name:
      case Kind::name:
      case Kind::scalar:
        f.text.append(text);
        return;
      case Kind::value:
        if (f.children == 0) {
          // A string, unless a typed element follows: then it must have been layout.
          f.text.append(text);
          f.text_seen = f.text_seen || !blank(text);
          return;
        }
        [[fallthrough]];
      default:
        if (!f.text_seen && !blank(text)) {
          f.text_seen = true;
          no_mixing(f);
        }
        return;
    }
  }

  void end() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (stack_.empty()) {
      finish_root(f);
      done_ = true;
      return;
    }
    Frame& parent = stack_.back();
    switch (f.kind) {
      case Kind::method_name:
        call.method = std::move(f.text);
        return;
      case Kind::params:
        if (mode_ == Mode::response && f.children != 1) fail(f.line, "<params> must hold exactly one <param>");
        return;
      case Kind::param:
      case Kind::fault:
        if (f.children != 1) fail(f.line, fmt::format("<{}> must hold exactly one <value>", f.tag));
        if (f.kind == Kind::fault) finish_fault(f);
        return;
      case Kind::scalar:
        parent.value = scalar(f);
        return;
      case Kind::array:
        if (f.children != 1) fail(f.line, "<array> must hold exactly one <data>");
        parent.value = std::move(f.value);
        return;
      case Kind::data:
      case Kind::struct_:
        parent.value = std::move(f.value);
        return;
      case Kind::name:
        parent.member_name = std::move(f.text);
        return;
      case Kind::member:
        if (!f.member_name || !f.member_value) fail(f.line, "<member> needs one <name> and one <value>");
        parent.value.as<Struct>().emplace_back(std::move(*f.member_name), std::move(*f.member_value));
        return;
      case Kind::value: {
        Value v = f.children == 0 ? Value(std::move(f.text)) : std::move(f.value);  // no type element: a string
        switch (parent.kind) {
          case Kind::param:
            if (mode_ == Mode::call) call.params.push_back(std::move(v));
            else response.value = std::move(v);
            return;
          case Kind::fault: parent.value = std::move(v); return;
          case Kind::data: parent.value.as<Array>().push_back(std::move(v)); return;
          case Kind::member: parent.member_value = std::move(v); return;
          default: return;  // start() puts a value nowhere else
        }
      }
      case Kind::method_call:
      case Kind::method_response:
        return;  // the root: finish_root()
    }
  }

  void finish_root(const Frame& root) {
    if (root.kind == Kind::method_call) {
      if (call.method.empty()) fail(root.line, "<methodCall> has no <methodName>");
    } else if (root.children != 1) {
      fail(root.line, "<methodResponse> must hold one <params> or one <fault>");
    }
  }

  void finish_fault(Frame& f) {
    const Value* code = f.value.member("faultCode");
    const Value* message = f.value.member("faultString");
    if (!code || !code->is<std::int64_t>() || !message || !message->is<std::string>())
      fail(f.line, "<fault> needs an integer faultCode and a string faultString");
    response.is_fault = true;
    response.fault = Fault{code->as<std::int64_t>(), message->as<std::string>()};
  }

  static Value scalar(Frame& f) {
    const std::string& type = f.tag;
    std::string& text = f.text;
    if (type == "string") return Value(std::move(text));
    if (type == "boolean") {
      if (text == "1") return Value(true);
      if (text == "0") return Value(false);
      fail(f.line, fmt::format("<boolean> is '{}', expected 0 or 1", text.substr(0, 40)));
    }
    if (type == "double" || type == "float") return Value(real(f));
    if (type == "dateTime.iso8601") return Value(DateTime{trimmed(text)});
    if (type == "base64") return Value(Binary{base64_decode(text)});
    if (type == "nil") {
      if (!blank(text)) fail(f.line, "<nil/> holds something");
      return Value(Nil{});
    }
    return Value(integer(f));  // int, i4, i8, i1, i2, biginteger: start() admits no other type
  }
  static std::int64_t integer(const Frame& f) {
    std::string text = trimmed(f.text);
    std::string_view digits = text;
    if (digits.starts_with('+')) digits.remove_prefix(1);
    std::int64_t out = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      fail(f.line, fmt::format("<{}> is '{}', not an integer of at most 64 bits", f.tag, text.substr(0, 40)));
    if ((f.tag == "int" || f.tag == "i4") && (out < INT32_MIN || out > INT32_MAX))
      fail(f.line, fmt::format("<{}> {} is outside 32 bits", f.tag, out));
    return out;
  }
  static double real(const Frame& f) {
    std::string text = trimmed(f.text);
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(text.c_str(), &end);
    // nan, inf and -inf too: Python's client writes repr() of a float, and reads them back.
    if (text.empty() || end != text.c_str() + text.size())
      fail(f.line, fmt::format("<{}> is '{}', not a number", f.tag, text.substr(0, 40)));
    return d;
  }

  struct Free {
    void operator()(XML_Parser p) const { XML_ParserFree(p); }
  };
  const Limits& limits_;
  const Mode mode_;
  std::unique_ptr<std::remove_pointer_t<XML_Parser>, Free> parser_;
  std::vector<Frame> stack_;
  std::size_t values_ = 0;
  std::size_t max_values_ = 0;
  bool values_by_size_ = false;  // max_values_ comes from bytes_per_value
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace

Call parse_call(std::string_view document, const Limits& limits) {
  StreamParser parser(limits, StreamParser::Mode::call, document.size());
  parser.parse(document);
  return std::move(parser.call);
}

Response parse_response(std::string_view document, const Limits& limits) {
  StreamParser parser(limits, StreamParser::Mode::response, document.size());
  parser.parse(document);
  return std::move(parser.response);
}

}  // namespace rjg::xmlrpc
