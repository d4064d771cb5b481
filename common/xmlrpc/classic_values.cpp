#include "common/xmlrpc/classic_values.hpp"

#include "common/log.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

namespace rjg::xmlrpc {
namespace json = boost::json;
using pickle::PyValue;

namespace {
using pickle::Overloaded;

// "20240102T03:04:05", exactly as xmlrpc.client writes it and reads it (strptime "%Y%m%dT%H:%M:%S"), and a
// date that exists; anything else stays the text.
std::optional<pickle::PyDateTime> parse_datetime(std::string_view t) {
  if (t.size() != 17 || t[8] != 'T' || t[11] != ':' || t[14] != ':') return std::nullopt;
  auto number = [&](std::size_t at, std::size_t n) -> int {
    int v = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (t[i] < '0' || t[i] > '9') return -1;
      v = v * 10 + (t[i] - '0');
    }
    return v;
  };
  const int y = number(0, 4), mo = number(4, 2), d = number(6, 2), h = number(9, 2), mi = number(12, 2),
            s = number(15, 2);
  if (y < 1 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 59)
    return std::nullopt;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (d > kDays[mo - 1] + (mo == 2 && leap ? 1 : 0)) return std::nullopt;
  pickle::PyDateTime dt;
  dt.year = y, dt.month = mo, dt.day = d, dt.hour = h, dt.minute = mi, dt.second = s;
  return dt;
}

// A str XML cannot carry, as a classic server sends it: its Latin-1 bytes when it has them, else UTF-8.
xmlrpc::Value text_value(const std::string& s) {
  if (xmlrpc::xml_safe(s)) return xmlrpc::Value(s);
  auto latin1 = xmlrpc::to_latin1(s);
  return xmlrpc::Value(xmlrpc::Binary{latin1 ? std::move(*latin1) : s});
}

std::string two(int v) { return fmt::format("{:02}", v); }
}  // namespace

PyValue to_python(const xmlrpc::Value& value) {
  return std::visit(Overloaded{
                        [](const xmlrpc::Nil&) { return PyValue{pickle::PyNone{}}; },
                        [](bool b) { return PyValue{b}; },
                        [](std::int64_t i) { return PyValue{i}; },
                        [](double d) { return PyValue{d}; },
                        [](const std::string& s) { return PyValue{s}; },
                        [](const xmlrpc::Binary& b) { return PyValue{pickle::PyBytes{b.bytes}}; },
                        [](const xmlrpc::DateTime& t) {
                          // A text Python's xmlrpc.client would not read either stays a string.
                          if (auto dt = parse_datetime(t.text)) return PyValue{*dt};
                          return PyValue{t.text};
                        },
                        [](const xmlrpc::Array& a) {
                          pickle::PyList list;
                          list.items.reserve(a.size());
                          for (const auto& item : a) list.items.push_back(to_python(item));
                          return PyValue{std::move(list)};
                        },
                        [](const xmlrpc::Struct& s) {
                          pickle::PyDict dict;
                          dict.items.reserve(s.size());
                          for (const auto& [k, v] : s) dict.items.emplace_back(PyValue{k}, to_python(v));
                          return PyValue{std::move(dict)};
                        },
                    },
                    value.v);
}

xmlrpc::Value to_xmlrpc(const PyValue& value) {
  auto items = [](const std::vector<PyValue>& in) {
    xmlrpc::Array out;
    out.reserve(in.size());
    for (const auto& item : in) out.push_back(to_xmlrpc(item));
    return xmlrpc::Value(std::move(out));
  };
  return std::visit(Overloaded{
                        [](const pickle::PyNone&) { return xmlrpc::Value(std::string()); },
                        [](bool b) { return xmlrpc::Value(b); },
                        [](std::int64_t i) { return xmlrpc::Value(i); },
                        [](const pickle::PyBigInt& b) { return xmlrpc::Value(b.decimal); },
                        [](double d) { return xmlrpc::Value(d); },
                        [](const std::string& s) { return text_value(s); },
                        [](const pickle::PyBytes& b) { return xmlrpc::Value(xmlrpc::Binary{b.bytes}); },
                        [&](const pickle::PyList& l) { return items(l.items); },
                        [&](const pickle::PyTuple& t) { return items(t.items); },
                        [&](const pickle::PySet& s) { return items(s.items); },
                        [](const pickle::PyDict& d) {
                          xmlrpc::Struct out;
                          out.reserve(d.items.size());
                          for (const auto& [k, v] : d.items) {
                            // Keys are str() of the key, as PythonRemoteServer makes them; a key XML
                            // cannot carry has its unsafe characters replaced (a name cannot be base64).
                            std::string key = pickle::py_str(k);
                            if (!xmlrpc::xml_safe(key)) key = log::printable(key, key.size() * 4 + 16);
                            out.emplace_back(std::move(key), to_xmlrpc(v));
                          }
                          return xmlrpc::Value(std::move(out));
                        },
                        [](const pickle::PyDateTime& t) {
                          // xmlrpc.client's form: no fraction, no zone (it drops both too).
                          return xmlrpc::Value(xmlrpc::DateTime{fmt::format("{:04}{}{}T{}:{}:{}", t.year, two(t.month),
                                                                            two(t.day), two(t.hour), two(t.minute),
                                                                            two(t.second))});
                        },
                        [](const pickle::PyElement& e) -> xmlrpc::Value {
                          // A classic server sends str() of it, which holds the object's address: only
                          // that Python process could write that text.
                          throw ValueError(fmt::format(
                              "an xml.etree.ElementTree.Element ({}) has no XML-RPC form: a classic remote "
                              "server sends its str(), which only the Python process holding it can make (it "
                              "holds the object's address); return its text instead (XML's Element To String)",
                              pickle::py_repr(PyValue{e})));
                        },
                        // complex, PosixPath, Secret: str() as a classic server sends it ("(1+2j)",
                        // the path, "<secret>"); the other scalars' str() likewise.
                        [&](const auto& other) { return text_value(pickle::py_str(PyValue{other})); },
                    },
                    value.v);
}

std::string default_text(const PyValue& value) {
  if (const auto* s = std::get_if<std::string>(&value.v)) return *s;
  return pickle::py_repr(value);
}

}  // namespace rjg::xmlrpc
