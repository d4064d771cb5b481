// Writing XML-RPC documents, base64 and the UTF-8 checks; xmlrpc_parse.cpp reads documents.
#include "common/xmlrpc/xmlrpc.hpp"

#include <fmt/format.h>

#include <cstdint>

namespace rjg::xmlrpc {

namespace {

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
