#include "common/xmlrpc/xmlrpc.hpp"

#include <expat.h>
#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
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

// The document as a small tree first (elements, their text), then read as XML-RPC: expat's callbacks stay
// simple, and every shape error is found in one place with its line.
struct Node {
  std::string name;
  std::string text;  // character data directly inside
  std::vector<Node> children;
  long line = 0;
};

class TreeBuilder {
 public:
  TreeBuilder(const Limits& limits) : limits_(limits), parser_(XML_ParserCreate(nullptr)) {
    if (!parser_) throw ParseError("out of memory creating the XML parser");
    XML_SetUserData(parser_.get(), this);
    XML_SetElementHandler(parser_.get(), &TreeBuilder::on_start, &TreeBuilder::on_end);
    XML_SetCharacterDataHandler(parser_.get(), &TreeBuilder::on_text);
    // Nothing outside the document is ever read, and no entity can be declared: a DOCTYPE ends the parse.
    XML_SetStartDoctypeDeclHandler(parser_.get(), &TreeBuilder::on_doctype);
    XML_SetEntityDeclHandler(parser_.get(), &TreeBuilder::on_entity);
    XML_SetExternalEntityRefHandler(parser_.get(), [](XML_Parser, const XML_Char*, const XML_Char*, const XML_Char*,
                                                      const XML_Char*) { return int(XML_STATUS_ERROR); });
    XML_SetParamEntityParsing(parser_.get(), XML_PARAM_ENTITY_PARSING_NEVER);
  }

  Node parse(std::string_view document) {
    if (document.size() > limits_.max_bytes)
      throw ParseError(fmt::format("the document has {} bytes, more than the limit of {}", document.size(),
                                   limits_.max_bytes));
    // expat takes an int length: the limit above keeps it in range for any sane setting.
    if (XML_Parse(parser_.get(), document.data(), static_cast<int>(document.size()), XML_TRUE) != XML_STATUS_OK) {
      const long line = static_cast<long>(XML_GetCurrentLineNumber(parser_.get()));
      if (!refusal_.empty()) throw ParseError(fmt::format("line {}: {}", line, refusal_));
      throw ParseError(fmt::format("line {}: not well-formed XML: {}", line, XML_ErrorString(XML_GetErrorCode(parser_.get()))));
    }
    if (stack_.size() != 1 || root_.children.size() != 1) throw ParseError("the document has no root element");
    return std::move(root_.children.front());
  }

 private:
  static void on_start(void* self_ptr, const XML_Char* name, const XML_Char**) {
    auto* self = static_cast<TreeBuilder*>(self_ptr);
    if (self->stack_.size() > self->limits_.max_depth * 3 + 8) return self->stop("nesting deeper than the limit");
    if (++self->elements_ > self->limits_.max_values * 2 + 16) return self->stop("more elements than the limit");
    Node& parent = *self->stack_.back();
    parent.children.push_back(Node{name, {}, {}, static_cast<long>(XML_GetCurrentLineNumber(self->parser_.get()))});
    self->stack_.push_back(&parent.children.back());
  }
  static void on_end(void* self_ptr, const XML_Char*) {
    auto* self = static_cast<TreeBuilder*>(self_ptr);
    if (self->stack_.size() > 1) self->stack_.pop_back();
  }
  static void on_text(void* self_ptr, const XML_Char* text, int length) {
    auto* self = static_cast<TreeBuilder*>(self_ptr);
    if (self->stack_.size() > 1) self->stack_.back()->text.append(text, static_cast<std::size_t>(length));
  }
  static void on_doctype(void* self_ptr, const XML_Char*, const XML_Char*, const XML_Char*, int) {
    static_cast<TreeBuilder*>(self_ptr)->stop("a DOCTYPE is not accepted (no DTD, no entities)");
  }
  static void on_entity(void* self_ptr, const XML_Char*, int, const XML_Char*, int, const XML_Char*, const XML_Char*,
                        const XML_Char*, const XML_Char*) {
    static_cast<TreeBuilder*>(self_ptr)->stop("an entity declaration is not accepted");
  }
  void stop(std::string why) {
    if (refusal_.empty()) refusal_ = std::move(why);
    XML_StopParser(parser_.get(), XML_FALSE);
  }

  struct Free {
    void operator()(XML_Parser p) const { XML_ParserFree(p); }
  };
  const Limits& limits_;
  std::unique_ptr<std::remove_pointer_t<XML_Parser>, Free> parser_;
  Node root_;
  std::vector<Node*> stack_{&root_};
  std::size_t elements_ = 0;
  std::string refusal_;
};

bool blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

[[noreturn]] void fail(const Node& at, std::string_view what) {
  throw ParseError(fmt::format("line {}: {}", at.line, what));
}

// Elements only (whitespace between them is layout); text among elements is an error.
const std::vector<Node>& elements_of(const Node& node) {
  if (!node.children.empty() && !blank(node.text)) fail(node, fmt::format("<{}> mixes text and elements", node.name));
  return node.children;
}

const Node& only_child(const Node& node, std::string_view name) {
  const auto& children = elements_of(node);
  if (children.size() != 1 || children.front().name != name)
    fail(node, fmt::format("<{}> must hold exactly one <{}>", node.name, name));
  return children.front();
}

class Reader {
 public:
  explicit Reader(const Limits& limits) : limits_(limits) {}

  Value value(const Node& node, std::size_t depth = 0) {
    if (node.name != "value") fail(node, fmt::format("expected <value>, found <{}>", node.name));
    if (++values_ > limits_.max_values) fail(node, "more values than the limit");
    if (node.children.empty()) return Value(node.text);  // no type element: a string
    const Node& typed = only_child(node, node.children.front().name);
    const std::string& type = typed.name;
    const std::string& text = typed.text;
    if (type == "string") {
      if (!typed.children.empty()) fail(typed, "<string> holds elements");
      return Value(text);
    }
    if (type == "int" || type == "i4" || type == "i8" || type == "i1" || type == "i2" || type == "biginteger")
      return Value(integer(typed));
    if (type == "boolean") {
      if (text == "1") return Value(true);
      if (text == "0") return Value(false);
      fail(typed, fmt::format("<boolean> is '{}', expected 0 or 1", text.substr(0, 40)));
    }
    if (type == "double" || type == "float") return Value(real(typed));
    if (type == "dateTime.iso8601") return Value(DateTime{trimmed(text)});
    if (type == "base64") return Value(Binary{base64_decode(text)});
    if (type == "nil") {
      if (!blank(text) || !typed.children.empty()) fail(typed, "<nil/> holds something");
      return Value(Nil{});
    }
    if (type == "array") {
      if (depth >= limits_.max_depth) fail(typed, "arrays and structs nested deeper than the limit");
      const Node& data = only_child(typed, "data");
      Array items;
      for (const Node& child : elements_of(data)) items.push_back(value(child, depth + 1));
      return Value(std::move(items));
    }
    if (type == "struct") {
      if (depth >= limits_.max_depth) fail(typed, "arrays and structs nested deeper than the limit");
      Struct members;
      for (const Node& member : elements_of(typed)) {
        if (member.name != "member") fail(member, fmt::format("<struct> holds <{}>, expected <member>", member.name));
        const auto& parts = elements_of(member);
        const Node* name = nullptr;
        const Node* val = nullptr;
        for (const Node& part : parts) {
          if (part.name == "name" && !name) name = &part;
          else if (part.name == "value" && !val) val = &part;
          else fail(part, fmt::format("<member> holds an unexpected <{}>", part.name));
        }
        if (!name || !val) fail(member, "<member> needs one <name> and one <value>");
        members.emplace_back(name->text, value(*val, depth + 1));
      }
      return Value(std::move(members));
    }
    fail(typed, fmt::format("unknown value type <{}>", type));
  }

 private:
  static std::string trimmed(std::string_view text) {
    const auto begin = text.find_first_not_of(" \t\r\n");
    if (begin == std::string_view::npos) return {};
    const auto end = text.find_last_not_of(" \t\r\n");
    return std::string(text.substr(begin, end - begin + 1));
  }
  static std::int64_t integer(const Node& node) {
    std::string text = trimmed(node.text);
    std::string_view digits = text;
    if (digits.starts_with('+')) digits.remove_prefix(1);
    std::int64_t out = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      fail(node, fmt::format("<{}> is '{}', not an integer of at most 64 bits", node.name, text.substr(0, 40)));
    if ((node.name == "int" || node.name == "i4") && (out < INT32_MIN || out > INT32_MAX))
      fail(node, fmt::format("<{}> {} is outside 32 bits", node.name, out));
    return out;
  }
  static double real(const Node& node) {
    std::string text = trimmed(node.text);
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(text.c_str(), &end);
    // nan, inf and -inf too: Python's client writes repr() of a float, and reads them back.
    if (text.empty() || end != text.c_str() + text.size())
      fail(node, fmt::format("<{}> is '{}', not a number", node.name, text.substr(0, 40)));
    return d;
  }

  const Limits& limits_;
  std::size_t values_ = 0;
};

// Calls f(code point, bytes) for each code point of UTF-8 text, and f(nullopt, bytes) for each byte
// that does not begin a valid sequence (surrogates and overlong forms are not valid).
template <class F>
void each_code_point(std::string_view s, F&& f) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    unsigned c = p[i], cp;
    std::size_t more;
    if (c < 0x80) cp = c, more = 0;
    else if (c >= 0xc2 && c <= 0xdf) cp = c & 0x1f, more = 1;
    else if (c >= 0xe0 && c <= 0xef) cp = c & 0x0f, more = 2;
    else if (c >= 0xf0 && c <= 0xf4) cp = c & 0x07, more = 3;
    else more = 4;  // never valid
    bool ok = more < 4 && n - i > more;
    for (std::size_t k = 1; ok && k <= more; ++k) {
      ok = (p[i + k] & 0xc0) == 0x80;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    ok = ok && !(more == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) &&
         !(more == 3 && (cp < 0x10000 || cp > 0x10ffff));
    if (!ok) {
      f(std::nullopt, s.substr(i, 1));
      ++i;
      continue;
    }
    f(std::optional<unsigned>(cp), s.substr(i, more + 1));
    i += more + 1;
  }
}

bool xml_char(unsigned cp) {
  return cp == '\t' || cp == '\n' || cp == '\r' || (cp >= 0x20 && cp != 0xfffe && cp != 0xffff);
}

// Text as XML 1.0 can carry it: what it cannot (C0 controls, bytes that are not UTF-8) becomes U+FFFD.
// Values that may hold such text travel as base64 instead (see the classic front); this is the last
// guard, for names and messages.
void escape_into(std::string& out, std::string_view text) {
  each_code_point(text, [&](std::optional<unsigned> cp, std::string_view bytes) {
    if (!cp || !xml_char(*cp)) {
      out += "\xEF\xBF\xBD";
      return;
    }
    switch (*cp) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\r': out += "&#13;"; break;  // kept through a parser's line-end normalisation
      default: out += bytes;
    }
  });
}

void write_value(std::string& out, const Value& value) {
  out += "<value>";
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Nil>) {
          out += "<nil/>";
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "<boolean>1</boolean>" : "<boolean>0</boolean>";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          const bool small = v >= INT32_MIN && v <= INT32_MAX;
          out += small ? fmt::format("<int>{}</int>", v) : fmt::format("<i8>{}</i8>", v);
        } else if constexpr (std::is_same_v<T, double>) {
          // Shortest text that reads back as the same double, as Python's repr.
          out += fmt::format("<double>{}</double>", v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out += "<string>";
          escape_into(out, v);
          out += "</string>";
        } else if constexpr (std::is_same_v<T, Binary>) {
          out += "<base64>" + base64_encode(v.bytes) + "</base64>";
        } else if constexpr (std::is_same_v<T, DateTime>) {
          out += "<dateTime.iso8601>";
          escape_into(out, v.text);
          out += "</dateTime.iso8601>";
        } else if constexpr (std::is_same_v<T, Array>) {
          out += "<array><data>\n";
          for (const auto& item : v) {
            write_value(out, item);
            out += '\n';
          }
          out += "</data></array>";
        } else if constexpr (std::is_same_v<T, Struct>) {
          out += "<struct>\n";
          for (const auto& [key, member] : v) {
            out += "<member>\n<name>";
            escape_into(out, key);
            out += "</name>\n";
            write_value(out, member);
            out += "\n</member>\n";
          }
          out += "</struct>";
        }
      },
      value.v);
  out += "</value>";
}

constexpr std::string_view kProlog = "<?xml version='1.0'?>\n";

}  // namespace

Call parse_call(std::string_view document, const Limits& limits) {
  TreeBuilder builder(limits);
  const Node root = builder.parse(document);
  if (root.name != "methodCall") fail(root, fmt::format("expected <methodCall>, found <{}>", root.name));
  Call call;
  const Node* name = nullptr;
  const Node* params = nullptr;
  for (const Node& child : elements_of(root)) {
    if (child.name == "methodName" && !name) name = &child;
    else if (child.name == "params" && !params) params = &child;
    else fail(child, fmt::format("<methodCall> holds an unexpected <{}>", child.name));
  }
  if (!name || name->text.empty()) fail(root, "<methodCall> has no <methodName>");
  call.method = name->text;
  Reader reader(limits);
  if (params)
    for (const Node& param : elements_of(*params)) {
      if (param.name != "param") fail(param, fmt::format("<params> holds <{}>, expected <param>", param.name));
      call.params.push_back(reader.value(only_child(param, "value")));
    }
  return call;
}

Response parse_response(std::string_view document, const Limits& limits) {
  TreeBuilder builder(limits);
  const Node root = builder.parse(document);
  if (root.name != "methodResponse") fail(root, fmt::format("expected <methodResponse>, found <{}>", root.name));
  const auto& children = elements_of(root);
  if (children.size() != 1) fail(root, "<methodResponse> must hold one <params> or one <fault>");
  Reader reader(limits);
  Response response;
  const Node& body = children.front();
  if (body.name == "fault") {
    Value fault = reader.value(only_child(body, "value"));
    const Value* code = fault.member("faultCode");
    const Value* message = fault.member("faultString");
    if (!code || !code->is<std::int64_t>() || !message || !message->is<std::string>())
      fail(body, "<fault> needs an integer faultCode and a string faultString");
    response.is_fault = true;
    response.fault = Fault{code->as<std::int64_t>(), message->as<std::string>()};
    return response;
  }
  if (body.name != "params") fail(body, fmt::format("<methodResponse> holds <{}>", body.name));
  const Node& param = only_child(body, "param");
  response.value = reader.value(only_child(param, "value"));
  return response;
}

std::string write_call(std::string_view method, const Array& params) {
  std::string out(kProlog);
  out += "<methodCall>\n<methodName>";
  escape_into(out, method);
  out += "</methodName>\n<params>\n";
  for (const auto& param : params) {
    out += "<param>\n";
    write_value(out, param);
    out += "\n</param>\n";
  }
  out += "</params>\n</methodCall>\n";
  return out;
}

std::string write_response(const Value& value) {
  std::string out(kProlog);
  out += "<methodResponse>\n<params>\n<param>\n";
  write_value(out, value);
  out += "\n</param>\n</params>\n</methodResponse>\n";
  return out;
}

std::string write_fault(std::int64_t code, std::string_view message) {
  std::string out(kProlog);
  out += "<methodResponse>\n<fault>\n";
  write_value(out, Value(Struct{{"faultCode", Value(code)}, {"faultString", Value(std::string(message))}}));
  out += "\n</fault>\n</methodResponse>\n";
  return out;
}

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const unsigned n = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += {kAlphabet[n >> 18], kAlphabet[(n >> 12) & 63], kAlphabet[(n >> 6) & 63], kAlphabet[n & 63]};
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  std::size_t padding = 0, symbols = 0;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const char* at = std::char_traits<char>::find(kAlphabet, 64, c);
    if (!at || padding) throw ParseError(fmt::format("<base64> holds '{}', not base64", c == '\0' ? ' ' : c));
    buffer = (buffer << 6) | static_cast<unsigned>(at - kAlphabet);
    bits += 6;
    ++symbols;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  if ((symbols + padding) % 4 != 0 || padding > 2) throw ParseError("<base64> has a length that is not a multiple of 4");
  return out;
}

bool xml_safe(std::string_view text) {
  bool safe = true;
  each_code_point(text, [&](std::optional<unsigned> cp, std::string_view) { safe = safe && cp && xml_char(*cp); });
  return safe;
}

std::optional<std::string> to_latin1(std::string_view text) {
  std::string out;
  bool fits = true;
  each_code_point(text, [&](std::optional<unsigned> cp, std::string_view) {
    if (cp && *cp < 256) out += static_cast<char>(*cp);
    else fits = false;
  });
  if (!fits) return std::nullopt;
  return out;
}

}  // namespace rjg::xmlrpc
