#include "common/pickle/python_json.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <unordered_map>
#include <variant>
#include <vector>

namespace rjg::pickle {
namespace json = boost::json;

namespace {

bool scalar(const PyValue& value) {
  return std::visit(Overloaded{
                        [](const PyNone&) { return true; },
                        [](bool) { return true; },
                        [](std::int64_t) { return true; },
                        [](double d) { return std::isfinite(d); },
                        [](const std::string&) { return true; },
                        [](const auto&) { return false; },
                    },
                    value.v);
}

json::value json_form(const PyValue& value) {
  return std::visit(Overloaded{
                        [](const PyNone&) { return json::value(nullptr); },
                        [](bool b) { return json::value(b); },
                        [](std::int64_t i) { return json::value(i); },
                        [](double d) { return json::value(d); },
                        [](const std::string& s) { return json::value(s); },
                        [](const PyList& l) {
                          json::array a;
                          a.reserve(l.items.size());
                          for (const auto& item : l.items) a.push_back(json_form(item));
                          return json::value(std::move(a));
                        },
                        [](const PyDict& d) {
                          json::object o;
                          for (const auto& [k, v] : d.items) o[std::get<std::string>(k.v)] = json_form(v);
                          return json::value(std::move(o));
                        },
                        [](const auto&) -> json::value { throw std::logic_error("json_form of a value without one"); },
                    },
                    value.v);
}

}  // namespace

bool has_json_form(const PyValue& value) {
  if (scalar(value)) return true;
  if (const auto* l = value.get<PyList>()) {
    for (const auto& item : l->items)
      if (!scalar(item)) return false;
    return true;
  }
  if (const auto* d = value.get<PyDict>(); d && d->kind == PyDict::Kind::dict) {
    // A "__pickled__" member would make the peer unpickle its value instead of reading the dict.
    for (const auto& [k, v] : d->items) {
      const auto* key = k.get<std::string>();
      if (!key || *key == kPickledKey || !scalar(v)) return false;
    }
    return true;
  }
  return false;
}

std::string dialect_text(const PyValue& value) {
  if (has_json_form(value)) return json::serialize(json_form(value));
  try {
    return json::serialize(json::object{{kPickledKey, encode_pickle_hex(value)}});
  } catch (const std::invalid_argument& e) {
    throw ValueError(fmt::format("a value Python cannot hold: {}", e.what()));
  }
}

namespace {
// Builds the value as walk() reports it: a stack of open containers.
class Builder final : public protocol::Visitor {
 public:
  Builder(std::string_view text, std::string_view path, const PickleLimits& limits)
      : text_(text), path_(path), limits_(limits) {}

  bool begin(protocol::Kind container, std::size_t) override {
    open_.push_back(Open{container == protocol::Kind::array ? PyValue{PyList{}} : PyValue{PyDict{}}, {}, where(), {}});
    return true;
  }
  bool key(protocol::Slice literal) override {
    open_.back().key = protocol::decode_string(literal.of(text_));
    return true;
  }
  bool scalar(protocol::Kind kind, protocol::Slice value) override {
    const auto t = value.of(text_);
    switch (kind) {
      case protocol::Kind::null: return place(PyValue{PyNone{}});
      case protocol::Kind::boolean: return place(PyValue{t == "true"});
      case protocol::Kind::string: return place(PyValue{protocol::decode_string(t)});
      case protocol::Kind::number: return place(number(t));
      default: return true;
    }
  }
  bool end(protocol::Kind container, protocol::Slice) override {
    Open done = std::move(open_.back());
    open_.pop_back();
    if (auto* dict = std::get_if<PyDict>(&done.value.v); dict && dict->items.size() == 1) {
      const auto& [k, v] = dict->items.front();
      if (k == PyValue{std::string("__pickled__")}) {
        const auto* hex = std::get_if<std::string>(&v.v);
        if (!hex) throw ValueError(fmt::format("{}: \"__pickled__\" does not hold a string", done.path));
        auto decoded = decode_pickle_hex(*hex, limits_);
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
    if (const auto* list = std::get_if<PyList>(&top.value.v)) return fmt::format("{}[{}]", top.path, list->items.size());
    return fmt::format("{}.{}", top.path, top.key);
  }

  bool place(PyValue value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return true;
    }
    auto& top = open_.back();
    if (auto* list = std::get_if<PyList>(&top.value.v)) {
      list->items.push_back(std::move(value));
      return true;
    }
    auto& items = std::get<PyDict>(top.value.v).items;
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
      return PyValue{PyBigInt{copy}};
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
  protocol::Limits json_limits;
  json_limits.max_depth = max_depth;
  if (auto error = protocol::walk(json_text, builder, json_limits))
    throw ValueError(fmt::format("{}: not valid JSON at byte {}: {}", path, error->offset, error->message));
  return builder.take();
}


namespace {
bool json_scalar(const json::value& v) {
  // uint64 above int64's range: from_json would read it as a big int, which the dialect pickles.
  return v.is_null() || v.is_bool() || v.is_int64() || (v.is_double() && std::isfinite(v.get_double())) ||
         v.is_string();
}

bool pickle_object(const json::object& o) {
  const auto* hex = o.size() == 1 ? o.if_contains(kPickledKey) : nullptr;
  return hex && hex->is_string();
}
}  // namespace

bool holds_pickle(const json::value& value) {
  std::vector<const json::value*> todo{&value};
  while (!todo.empty()) {
    const json::value* x = todo.back();
    todo.pop_back();
    if (const auto* a = x->if_array()) {
      for (const auto& e : *a) todo.push_back(&e);
    } else if (const auto* o = x->if_object()) {
      if (o->contains(kPickledKey)) return true;
      for (const auto& m : *o) todo.push_back(&m.value());
    }
  }
  return false;
}

bool in_python_dialect(const json::value& value) {
  if (json_scalar(value)) return true;
  if (const auto* a = value.if_array()) {
    for (const auto& item : *a)
      if (!json_scalar(item)) return false;
    return true;
  }
  if (const auto* o = value.if_object()) {
    if (pickle_object(*o)) return true;
    for (const auto& member : *o)
      if (member.key() == kPickledKey || !json_scalar(member.value())) return false;
    return true;
  }
  return false;
}

namespace {
// How deep a JSON value nests (a scalar 0, [] 1, [[1]] 2), without recursion.
std::size_t nesting(const json::value& value) {
  std::size_t deepest = 0;
  std::vector<std::pair<const json::value*, std::size_t>> todo{{&value, 0}};
  while (!todo.empty()) {
    auto [v, depth] = todo.back();
    todo.pop_back();
    if (const auto* a = v->if_array()) {
      deepest = std::max(deepest, depth + 1);
      for (const auto& e : *a) todo.emplace_back(&e, depth + 1);
    } else if (const auto* o = v->if_object()) {
      deepest = std::max(deepest, depth + 1);
      for (const auto& m : *o) todo.emplace_back(&m.value(), depth + 1);
    }
  }
  return deepest;
}
}  // namespace

json::value python_dialect(const json::value& value, std::string_view path) {
  if (in_python_dialect(value)) return value;
  // A value built in code (a keyword's result, a default) is valid JSON: what can fail is its depth,
  // bounded by what a pickle for a Python peer may hold (the data-only check's max_depth).
  const std::size_t max_depth = PickleLimits{}.max_depth;
  if (const std::size_t depth = nesting(value); depth > max_depth)
    throw ValueError(fmt::format("{}: nested {} levels deep, deeper than the {} levels a value for a Python peer "
                                 "may hold; return a flatter value",
                                 path, depth, max_depth));
  try {
    return json::parse(dialect_text(from_json(json::serialize(value), path, max_depth)));
  } catch (const ValueError&) {
    throw;
  } catch (const std::exception& e) {
    throw ValueError(fmt::format("{}: {}", path, e.what()));
  }
}

std::optional<json::value> definition_default(const json::value& value, std::string_view argument) {
  try {
    return python_dialect(value, fmt::format("{}'s default", argument));
  } catch (const ValueError& e) {
    log::warn("the default of argument '{}' is left out of its keyword's definition (the argument stays optional): "
              "it cannot be sent to Python clients: {}",
              argument, e.what());
    return std::nullopt;
  }
}

std::string python_dialect(std::string_view json_text, std::string_view path) {
  try {
    return dialect_text(from_json(json_text, path));
  } catch (const ValueError& e) {
    const std::string what = e.what();
    if (what.starts_with(path)) throw;
    throw ValueError(fmt::format("{}: {}", path, what));
  }
}

namespace {
// json.dumps's text for a dict key that is not a str (it refuses the others).
std::string plain_key(const PyValue& key, const std::string& where) {
  return std::visit(Overloaded{
                        [](const std::string& s) { return s; },
                        [](const PyNone&) { return std::string("null"); },
                        [](bool b) { return std::string(b ? "true" : "false"); },
                        [](std::int64_t i) { return std::to_string(i); },
                        [&](double d) -> std::string {
                          if (!std::isfinite(d))
                            throw ValueError(fmt::format("{}: the key {} has no JSON form", where, py_repr(key)));
                          return py_repr(key);
                        },
                        [&](const auto&) -> std::string {
                          throw ValueError(fmt::format("{}: a dictionary key must be a string, number, boolean or "
                                                       "None to be sent as JSON, not {}",
                                                       where, py_repr(key)));
                        },
                    },
                    key.v);
}

// "args[1]['when']": where an element sits, in Python's notation.
std::string element_path(std::string_view path, const PyValue& key) { return fmt::format("{}[{}]", path, py_repr(key)); }
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
                        [](const PyNone&) { return json::value(nullptr); },
                        [](bool b) { return json::value(b); },
                        [](std::int64_t i) { return json::value(i); },
                        [&](const PyBigInt& b) { return refuse(fmt::format("the integer {} (beyond 64 bits)", b.decimal)); },
                        [&](double d) { return std::isfinite(d) ? json::value(d) : refuse(py_repr(PyValue{d})); },
                        [](const std::string& s) { return json::value(s); },
                        [&](const PyBytes& b) { return refuse(b.bytearray ? "a bytearray" : "a bytes value"); },
                        [&](const PyList& l) { return items(l.items); },
                        [&](const PyTuple& t) { return items(t.items); },
                        [&](const PySet& s) { return items(s.items); },
                        [&](const PyDict& d) {
                          json::object out;
                          out.reserve(d.items.size());
                          for (const auto& [k, v] : d.items) {
                            const std::string where = element_path(path, k);
                            out[plain_key(k, where)] = to_plain_json(v, where);
                          }
                          return json::value(std::move(out));
                        },
                        [](const PyDateTime& t) {
                          // isoformat(): str() with a "T" between date and time.
                          std::string text = py_str(PyValue{t});
                          if (text.size() > 10 && text[10] == ' ') text[10] = 'T';
                          return json::value(text);
                        },
                        [](const PyDate& d) { return json::value(py_str(PyValue{d})); },
                        [](const PyTime& t) { return json::value(py_str(PyValue{t})); },
                        [](const PyTimedelta& t) {
                          return json::value(static_cast<double>(t.days) * 86400.0 + t.seconds + t.microseconds / 1e6);
                        },
                        [&](const PyDecimal& d) { return refuse(fmt::format("Decimal('{}')", d.text)); },
                        // json.dumps refuses these too (TypeError); a Secret's value is never printed.
                        [&](const PyComplex& c) { return refuse(py_repr(PyValue{c})); },
                        [&](const PyPath& p) { return refuse(py_repr(PyValue{p})); },
                        [&](const PyElement& e) { return refuse("the XML element " + py_repr(PyValue{e})); },
                        [&](const PySecret&) { return refuse("a robot.utils.secret.Secret"); },
                    },
                    value.v);
}

json::value plain_json(std::string_view json_text, std::string_view path) {
  return to_plain_json(from_json(json_text, path), path);
}

}  // namespace rjg::pickle
