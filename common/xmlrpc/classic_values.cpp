#include "common/xmlrpc/classic_values.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <unordered_map>

namespace rjg::classic {
namespace json = boost::json;
using pickle::PyValue;

namespace {
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;  // clang 14 (the fuzz build) does not deduce it for aggregates

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

// Whether the value has a JSON form the Python peer reads back as the same value.
bool has_json_form(const PyValue& value) {
  return std::visit(Overloaded{
                        [](const pickle::PyNone&) { return true; },
                        [](bool) { return true; },
                        [](std::int64_t) { return true; },
                        [](double d) { return std::isfinite(d); },
                        [](const std::string& s) { return true; },
                        [](const pickle::PyList& l) {
                          for (const auto& item : l.items)
                            if (!has_json_form(item)) return false;
                          return true;
                        },
                        [](const pickle::PyDict& d) {
                          if (d.kind != pickle::PyDict::Kind::dict) return false;
                          for (const auto& [k, v] : d.items)
                            if (!std::holds_alternative<std::string>(k.v) || !has_json_form(v)) return false;
                          return true;
                        },
                        [](const auto&) { return false; },
                    },
                    value.v);
}

json::value json_form(const PyValue& value) {
  return std::visit(Overloaded{
                        [](const pickle::PyNone&) { return json::value(nullptr); },
                        [](bool b) { return json::value(b); },
                        [](std::int64_t i) { return json::value(i); },
                        [](double d) { return json::value(d); },
                        [](const std::string& s) { return json::value(s); },
                        [](const pickle::PyList& l) {
                          json::array a;
                          a.reserve(l.items.size());
                          for (const auto& item : l.items) a.push_back(json_form(item));
                          return json::value(std::move(a));
                        },
                        [](const pickle::PyDict& d) {
                          json::object o;
                          for (const auto& [k, v] : d.items) o[std::get<std::string>(k.v)] = json_form(v);
                          return json::value(std::move(o));
                        },
                        [](const auto&) -> json::value { throw std::logic_error("json_form of a value without one"); },
                    },
                    value.v);
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

std::string to_json_argument(const PyValue& value) {
  if (has_json_form(value)) return json::serialize(json_form(value));
  try {
    return json::serialize(json::object{{"__pickled__", pickle::encode_pickle_hex(value)}});
  } catch (const std::invalid_argument& e) {
    throw ValueError(fmt::format("a value Python cannot hold: {}", e.what()));
  }
}

namespace {
// Builds the value as walk() reports it: a stack of open containers.
class Builder final : public jsontext::Visitor {
 public:
  Builder(std::string_view text, std::string_view path, const PickleLimits& limits)
      : text_(text), path_(path), limits_(limits) {}

  bool begin(jsontext::Kind container, std::size_t) override {
    open_.push_back(Open{container == jsontext::Kind::array ? PyValue{pickle::PyList{}} : PyValue{pickle::PyDict{}}, {}, where(), {}});
    return true;
  }
  bool key(jsontext::Slice literal) override {
    open_.back().key = jsontext::decode_string(literal.of(text_));
    return true;
  }
  bool scalar(jsontext::Kind kind, jsontext::Slice value) override {
    const auto t = value.of(text_);
    switch (kind) {
      case jsontext::Kind::null: return place(PyValue{pickle::PyNone{}});
      case jsontext::Kind::boolean: return place(PyValue{t == "true"});
      case jsontext::Kind::string: return place(PyValue{jsontext::decode_string(t)});
      case jsontext::Kind::number: return place(number(t));
      default: return true;
    }
  }
  bool end(jsontext::Kind container, jsontext::Slice) override {
    Open done = std::move(open_.back());
    open_.pop_back();
    if (auto* dict = std::get_if<pickle::PyDict>(&done.value.v); dict && dict->items.size() == 1) {
      const auto& [k, v] = dict->items.front();
      if (k == PyValue{std::string("__pickled__")}) {
        const auto* hex = std::get_if<std::string>(&v.v);
        if (!hex) throw ValueError(fmt::format("{}: \"__pickled__\" does not hold a string", done.path));
        auto decoded = pickle::decode_pickle_hex(*hex, limits_);
        if (auto* error = std::get_if<std::string>(&decoded))
          throw ValueError(fmt::format("{}: a pickled value outside the data-only subset: {}", done.path, *error));
        return place(std::move(std::get<PyValue>(decoded)));
      }
    }
    return place(std::move(done.value));
  }

  PyValue take() { return std::move(root_); }

 private:
  struct Open {
    PyValue value;  // a PyList or a PyDict
    std::string key;
    std::string path;
    std::unordered_map<std::string, std::size_t> index;  // a dict's keys: where each is in items
  };

  std::string where() const {
    if (open_.empty()) return std::string(path_);
    const auto& top = open_.back();
    if (const auto* list = std::get_if<pickle::PyList>(&top.value.v)) return fmt::format("{}[{}]", top.path, list->items.size());
    return fmt::format("{}.{}", top.path, top.key);
  }

  bool place(PyValue value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return true;
    }
    auto& top = open_.back();
    if (auto* list = std::get_if<pickle::PyList>(&top.value.v)) {
      list->items.push_back(std::move(value));
      return true;
    }
    auto& items = std::get<pickle::PyDict>(top.value.v).items;
    if (auto [it, fresh] = top.index.try_emplace(top.key, items.size()); !fresh) {
      items[it->second].second = std::move(value);
      return true;
    }
    items.emplace_back(PyValue{std::move(top.key)}, std::move(value));
    return true;
  }

  // Integers as int (64 bits, or the digits beyond), the rest as float, as Python's json module reads them.
  static PyValue number(std::string_view t) {
    if (t == "NaN") return PyValue{std::numeric_limits<double>::quiet_NaN()};
    if (t == "Infinity") return PyValue{std::numeric_limits<double>::infinity()};
    if (t == "-Infinity") return PyValue{-std::numeric_limits<double>::infinity()};
    const std::string copy(t);
    if (t.find_first_of(".eE") == std::string_view::npos) {
      errno = 0;
      char* end = nullptr;
      const long long i = std::strtoll(copy.c_str(), &end, 10);
      if (errno != ERANGE && end == copy.c_str() + copy.size()) return PyValue{static_cast<std::int64_t>(i)};
      return PyValue{pickle::PyBigInt{copy}};
    }
    return PyValue{std::strtod(copy.c_str(), nullptr)};
  }

  std::string_view text_;
  std::string_view path_;
  const PickleLimits& limits_;
  std::vector<Open> open_;
  PyValue root_;
};
}  // namespace

PyValue from_json(std::string_view json_text, std::string_view path, std::size_t max_depth, const PickleLimits& limits) {
  Builder builder(json_text, path, limits);
  jsontext::Limits json_limits;
  json_limits.max_depth = max_depth;
  if (auto error = jsontext::walk(json_text, builder, json_limits))
    throw ValueError(fmt::format("{}: not valid JSON at byte {}: {}", path, error->offset, error->message));
  return builder.take();
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
                        [&](const auto& other) { return text_value(pickle::py_str(PyValue{other})); },
                    },
                    value.v);
}

namespace {
// json.dumps's text for a dict key that is not a str (it refuses the others).
std::string plain_key(const PyValue& key, const std::string& where) {
  return std::visit(Overloaded{
                        [](const std::string& s) { return s; },
                        [](const pickle::PyNone&) { return std::string("null"); },
                        [](bool b) { return std::string(b ? "true" : "false"); },
                        [](std::int64_t i) { return std::to_string(i); },
                        [&](double d) -> std::string {
                          if (!std::isfinite(d))
                            throw ValueError(fmt::format("{}: the key {} has no JSON form", where, pickle::py_repr(key)));
                          return pickle::py_repr(key);
                        },
                        [&](const auto&) -> std::string {
                          throw ValueError(fmt::format("{}: a dictionary key must be a string, number, boolean or "
                                                       "None to be sent as JSON, not {}",
                                                       where, pickle::py_repr(key)));
                        },
                    },
                    key.v);
}

// "args[1]['when']": where an element sits, in Python's notation.
std::string element_path(std::string_view path, const PyValue& key) { return fmt::format("{}[{}]", path, pickle::py_repr(key)); }
}  // namespace

json::value to_plain_json(const PyValue& value, std::string_view path) {
  auto items = [&](const std::vector<PyValue>& in) {
    json::array out;
    out.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) out.push_back(to_plain_json(in[i], fmt::format("{}[{}]", path, i)));
    return json::value(std::move(out));
  };
  auto refuse = [&](std::string_view what) -> json::value {
    throw ValueError(fmt::format("{}: {} has no JSON form; send it as text or as a number instead", path, what));
  };
  return std::visit(Overloaded{
                        [](const pickle::PyNone&) { return json::value(nullptr); },
                        [](bool b) { return json::value(b); },
                        [](std::int64_t i) { return json::value(i); },
                        [&](const pickle::PyBigInt& b) { return refuse(fmt::format("the integer {} (beyond 64 bits)", b.decimal)); },
                        [&](double d) { return std::isfinite(d) ? json::value(d) : refuse(pickle::py_repr(PyValue{d})); },
                        [](const std::string& s) { return json::value(s); },
                        [&](const pickle::PyBytes& b) { return refuse(b.bytearray ? "a bytearray" : "a bytes value"); },
                        [&](const pickle::PyList& l) { return items(l.items); },
                        [&](const pickle::PyTuple& t) { return items(t.items); },
                        [&](const pickle::PySet& s) { return items(s.items); },
                        [&](const pickle::PyDict& d) {
                          json::object out;
                          out.reserve(d.items.size());
                          for (const auto& [k, v] : d.items) {
                            const std::string where = element_path(path, k);
                            out[plain_key(k, where)] = to_plain_json(v, where);
                          }
                          return json::value(std::move(out));
                        },
                        [](const pickle::PyDateTime& t) {
                          // isoformat(): str() with a "T" between date and time.
                          std::string text = pickle::py_str(PyValue{t});
                          if (text.size() > 10 && text[10] == ' ') text[10] = 'T';
                          return json::value(text);
                        },
                        [](const pickle::PyDate& d) { return json::value(pickle::py_str(PyValue{d})); },
                        [](const pickle::PyTime& t) { return json::value(pickle::py_str(PyValue{t})); },
                        [](const pickle::PyTimedelta& t) {
                          return json::value(static_cast<double>(t.days) * 86400.0 + t.seconds + t.microseconds / 1e6);
                        },
                        [&](const pickle::PyDecimal& d) { return refuse(fmt::format("Decimal('{}')", d.text)); },
                    },
                    value.v);
}

json::value plain_json(std::string_view json_text, std::string_view path) {
  return to_plain_json(from_json(json_text, path), path);
}

std::string default_text(const PyValue& value) {
  if (const auto* s = std::get_if<std::string>(&value.v)) return *s;
  return pickle::py_repr(value);
}

}  // namespace rjg::classic
