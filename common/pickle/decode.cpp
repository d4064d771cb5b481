// The decoder: the data-only machine run on plain values, and the tree made of them at STOP.
#include "common/pickle/decode.hpp"

#include "common/log.hpp"
#include "common/pickle/python_semantics.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace rjg::pickle {
namespace {

// Decimal conversions of long integers cost the square of their length; this bounds their sum in one
// pickle (in 32-bit words squared: 64 integers of the checker's largest size, 4096 bytes).
constexpr std::uint64_t kBigIntWork = std::uint64_t{1} << 26;

}  // namespace

Value Values::make(Tag tag) const {
  Value v;
  v.tag = tag;
  v.at = static_cast<std::uint32_t>(reader_.op_start());
  return v;
}
Value Values::make_seq(Tag tag, std::vector<Value> items, PyDict::Kind kind) {
  Value v = make(tag);
  v.i = static_cast<std::int64_t>(seqs_.size());
  seqs_.push_back(Seq{std::move(items), {}, kind});
  return v;
}
Value Values::make_scalar(PyValue value) {
  Value v = make(Tag::scalar);
  v.i = static_cast<std::int64_t>(scalars_.size());
  scalars_.push_back(std::move(value));
  return v;
}

bool Values::none(Value& v) {
  v = make(Tag::none);
  return true;
}
bool Values::boolean(bool b, Value& v) {
  v = make(Tag::boolean);
  v.i = b;
  return true;
}
bool Values::integer(std::int64_t i, Value& v) {
  v = make(Tag::integer);
  v.i = i;
  return true;
}
bool Values::long_int(std::string_view bytes, Value& v) {
  bool negative;
  Words w = words_from_twos_complement(bytes, negative);
  v = make(Tag::integer);
  if (fits_int64(w, negative, v.i)) return true;
  bigint_work_ += static_cast<std::uint64_t>(w.size()) * w.size();
  if (bigint_work_ > kBigIntWork) return fail("the integers of this pickle are too long in total to convert to decimal");
  v = make_scalar(PyBigInt{(negative ? "-" : "") + words_to_decimal(w)});
  v.tag = Tag::bigint;
  v.text = bytes;
  return true;
}
bool Values::floating(double x, Value& v) {
  v = make(Tag::floating);
  v.f = x;
  return true;
}
bool Values::text(Text text, std::string_view s, Value& v) {
  v = make(text == Text::str ? Tag::str : text == Text::bytes ? Tag::bytes : Tag::bytearray);
  v.text = s;
  return true;
}

bool Values::empty_tuple(Value& v) {
  v = make_seq(Tag::tuple);
  return true;
}
bool Values::tuple(std::span<const Value> items, bool frozen, Value& v) {
  if (!frozen) {
    v = make_seq(Tag::tuple, std::vector<Value>(items.begin(), items.end()));
    return true;
  }
  v = make_seq(Tag::frozenset);
  Seq& set = seqs_.back();
  for (const Value& item : items)
    if (!add_item(set, item)) return false;
  set.index.clear();
  return true;
}
bool Values::container(Mutable m, Value& v) {
  v = make_seq(m == Mutable::list ? Tag::list : m == Mutable::dict ? Tag::dict : Tag::set);
  return true;
}

bool Values::fill(const Value& target, std::span<const Value> items, Mutable m) {
  if (target.tag != (m == Mutable::list ? Tag::list : m == Mutable::dict ? Tag::dict : Tag::set))
    return fail("internal error: unexpected type after the data-only check");
  Seq& seq = seqs_[static_cast<std::size_t>(target.i)];
  if (m == Mutable::list) {
    seq.items.insert(seq.items.end(), items.begin(), items.end());
  } else if (m == Mutable::dict) {
    for (std::size_t j = 0; j + 1 < items.size(); j += 2)
      if (!set_item(seq, items[j], items[j + 1])) return false;
  } else {
    for (const Value& item : items)
      if (!add_item(seq, item)) return false;
  }
  return true;
}

bool Values::stack_global(const Value& module, const Value& name, Value& v) {
  const AllowedClass* allowed = find_class(module.text, name.text);
  if (!allowed) return fail("internal error: class not allowed after the data-only check");
  v = make(Tag::cls);
  v.i = static_cast<std::int64_t>(allowed->cls);
  return true;
}

// Appends the canonical key of a hashable value (see put_double_key).
bool Values::key_of(const Value& v, std::string& out) {
  switch (v.tag) {
    case Tag::none: out += 'N'; return true;
    case Tag::boolean:
    case Tag::integer: put_int_key(out, v.i); return true;
    case Tag::floating: put_double_key(out, v.f, v.at); return true;
    case Tag::bigint: {
      bool negative;
      Words w = words_from_twos_complement(v.text, negative);
      const std::string& decimal = std::get<PyBigInt>(scalars_[static_cast<std::size_t>(v.i)].v).decimal;
      put_bigint_key(out, w, negative, std::string_view(decimal).substr(negative ? 1 : 0));
      return true;
    }
    case Tag::str:
    case Tag::bytes:
      out += fmt::format("{}{}:", v.tag == Tag::str ? 's' : 'b', v.text.size());
      out += v.text;
      return true;
    case Tag::tuple:
    case Tag::frozenset: {
      std::vector<std::string> keys;
      for (const Value& item : seqs_[static_cast<std::size_t>(v.i)].items) {
        keys.emplace_back();
        if (!key_of(item, keys.back())) return false;
      }
      if (v.tag == Tag::frozenset) std::sort(keys.begin(), keys.end());
      out += fmt::format("{}{}(", v.tag == Tag::tuple ? 't' : 'z', keys.size());
      for (const auto& k : keys) out += fmt::format("{}:{}", k.size(), k);
      out += ')';
      return true;
    }
    case Tag::scalar: return scalar_key(v, out);
    case Tag::timezone:
      return fail_at(v.at, "a datetime.timezone on its own is not supported (only inside a datetime or time)");
    default:
      return fail_at(v.at, "internal error: unhashable value after the data-only check");
  }
}

bool Values::scalar_key(const Value& v, std::string& out) {
  const PyValue& s = scalars_[static_cast<std::size_t>(v.i)];
  if (const auto* dt = s.get<PyDateTime>()) {
    if (!dt->utc_offset_seconds) {
      out += fmt::format("T{},{},{},{},{},{},{}", dt->year, dt->month, dt->day, dt->hour, dt->minute, dt->second,
                         dt->microsecond);
    } else {
      std::int64_t seconds = days_before(dt->year, dt->month, dt->day) * 86400 + dt->hour * 3600 +
                             dt->minute * 60 + dt->second - *dt->utc_offset_seconds;
      out += fmt::format("U{}", seconds * 1000000 + dt->microsecond);
    }
  } else if (const auto* d = s.get<PyDate>()) {
    out += fmt::format("D{},{},{}", d->year, d->month, d->day);
  } else if (const auto* t = s.get<PyTime>()) {
    std::int64_t us = (t->hour * 3600 + t->minute * 60 + t->second) * std::int64_t{1000000} + t->microsecond;
    if (!t->utc_offset_seconds) out += fmt::format("H{}", us);
    else out += fmt::format("h{}", us - *t->utc_offset_seconds * std::int64_t{1000000});
  } else if (const auto* td = s.get<PyTimedelta>()) {
    out += fmt::format("R{},{},{}", td->days, td->seconds, td->microseconds);
  } else if (const auto* c = s.get<PyComplex>()) {
    // complex(x, 0) == x (and hashes alike); otherwise equal only to the same pair.
    if (c->imag == 0) {
      put_double_key(out, c->real, v.at);
    } else {
      out += 'j';
      put_double_key(out, c->real, v.at);
      out += ',';
      put_double_key(out, c->imag, v.at);
    }
  } else if (const auto* path = s.get<PyPath>()) {
    // PosixPath('a') == PurePosixPath('a'): the same text is the same key.
    out += fmt::format("P{}:", path->path.size());
    out += path->path;
  } else if (const auto* dec = s.get<PyDecimal>()) {
    auto parsed = parse_decimal(dec->text);
    if (!parsed || !put_decimal_key(out, *parsed, v.at))
      return fail_at(v.at, fmt::format("Decimal('{}') cannot be a dict key or set element (Python cannot hash a "
                                       "signaling NaN)",
                                       dec->text));
  } else {
    return fail_at(v.at, "internal error: unhashable value after the data-only check");
  }
  return true;
}

// d[key] = value: a key already there keeps its place and its first object, and takes the new value.
bool Values::set_item(Seq& dict, const Value& key, const Value& value) {
  std::string k;
  if (!key_of(key, k)) return false;
  auto [it, fresh] = dict.index.try_emplace(std::move(k), dict.items.size());
  if (fresh) {
    dict.items.push_back(key);
    dict.items.push_back(value);
  } else {
    dict.items[it->second + 1] = value;
  }
  return true;
}
bool Values::add_item(Seq& set, const Value& item) {
  std::string k;
  if (!key_of(item, k)) return false;
  if (set.index.try_emplace(std::move(k), set.items.size()).second) set.items.push_back(item);
  return true;
}

// An object's state dict, as (key, value) pairs of the decoder's values.
const std::vector<Value>& Values::state_of(const Value& object) const {
  return seqs_[static_cast<std::size_t>(objects_[static_cast<std::size_t>(object.i)].i)].items;
}

bool Values::materialize_secret(const Value& v, PyValue& out) {
  const auto& items = state_of(v);
  if (items.size() != 2 || items[1].tag != Tag::str)
    return fail_at(v.at, "internal error: Secret state after the data-only check");
  out = PySecret{std::string(items[1].text)};
  return true;
}

// One level of the tree per element (the checker counts two: its state dict and children list).
bool Values::materialize_element(const Value& v, std::size_t depth, PyElement& out) {
  if (depth > reader_.limits().max_depth + 1)
    return fail_at(v.at, fmt::format("nesting deeper than {} levels", reader_.limits().max_depth));
  const auto& items = state_of(v);
  const auto bad = [&] { return fail_at(v.at, "internal error: Element state after the data-only check"); };
  for (std::size_t j = 0; j + 1 < items.size(); j += 2) {
    const std::string_view key = items[j].text;
    const Value& value = items[j + 1];
    const auto optional_text = [&](std::optional<std::string>& field) {
      if (value.tag == Tag::str) field = std::string(value.text);
      else if (value.tag == Tag::none) field.reset();
      else return false;
      return true;
    };
    if (key == "tag") {
      if (value.tag != Tag::str) return bad();
      out.tag = std::string(value.text);
    } else if (key == "text" || key == "tail") {
      if (!optional_text(key == "text" ? out.text : out.tail)) return bad();
    } else if (key == "attrib") {
      if (value.tag != Tag::dict) return bad();
      const auto& attrib = seqs_[static_cast<std::size_t>(value.i)].items;
      out.attrib.clear();
      for (std::size_t k = 0; k + 1 < attrib.size(); k += 2) {
        if (attrib[k].tag != Tag::str || attrib[k + 1].tag != Tag::str) return bad();
        out.attrib.emplace_back(std::string(attrib[k].text), std::string(attrib[k + 1].text));
      }
    } else if (key == "_children") {
      if (value.tag != Tag::list) return bad();
      const auto& children = seqs_[static_cast<std::size_t>(value.i)].items;
      out.children.assign(children.size(), PyElement{});
      for (std::size_t k = 0; k < children.size(); ++k)
        if (children[k].tag != Tag::element || !materialize_element(children[k], depth + 1, out.children[k]))
          return reader_.error().empty() ? bad() : false;
    } else {
      return bad();
    }
  }
  return true;
}

bool Values::materialize(const Value& v, std::size_t depth, PyValue& out) {
  // The checker bounds nesting and refuses cycles; these guard the recursion should that ever change.
  if (depth > reader_.limits().max_depth + 1)
    return fail_at(v.at, fmt::format("nesting deeper than {} levels", reader_.limits().max_depth));
  switch (v.tag) {
    case Tag::none: out = PyNone{}; return true;
    case Tag::boolean: out = v.i != 0; return true;
    case Tag::integer: out = v.i; return true;
    case Tag::floating: out = v.f; return true;
    case Tag::bigint:
    case Tag::scalar: out = scalars_[static_cast<std::size_t>(v.i)]; return true;
    case Tag::str: out = std::string(v.text); return true;
    case Tag::bytes:
    case Tag::bytearray: out = PyBytes{std::string(v.text), v.tag == Tag::bytearray}; return true;
    case Tag::timezone:
      return fail_at(v.at, "a datetime.timezone on its own is not supported (only inside a datetime or time)");
    case Tag::cls: return fail_at(v.at, "internal error: a class as a value after the data-only check");
    case Tag::secret: return materialize_secret(v, out);
    case Tag::element: {
      PyElement e;
      if (!materialize_element(v, depth, e)) return false;
      out = std::move(e);
      return true;
    }
    case Tag::tuple:
    case Tag::frozenset:
    case Tag::list:
    case Tag::dict:
    case Tag::set: break;
  }
  const auto index = static_cast<std::size_t>(v.i);
  if (on_path_[index])
    return fail_at(v.at, "a container that contains itself cannot be made a tree of values");
  on_path_[index] = true;
  const Seq& seq = seqs_[index];
  std::vector<PyValue> items(seq.items.size());
  for (std::size_t j = 0; j < items.size(); ++j)
    if (!materialize(seq.items[j], depth + 1, items[j])) return false;
  on_path_[index] = false;
  switch (v.tag) {
    case Tag::tuple: out = PyTuple{std::move(items)}; break;
    case Tag::list: out = PyList{std::move(items)}; break;
    case Tag::set:
    case Tag::frozenset: out = PySet{std::move(items), v.tag == Tag::frozenset}; break;
    default: {
      PyDict d;
      d.kind = seq.kind;
      d.items.reserve(items.size() / 2);
      for (std::size_t j = 0; j + 1 < items.size(); j += 2)
        d.items.emplace_back(std::move(items[j]), std::move(items[j + 1]));
      out = std::move(d);
    }
  }
  return true;
}

bool Values::tree(const Value& top, PyValue& out) {
  on_path_.assign(seqs_.size(), false);
  return materialize(top, 0, out);
}

std::variant<PyValue, std::string> decode_pickle(std::string_view bytes, const PickleLimits& limits) {
  std::size_t offset = 0;
  if (auto why = check_pickle_data_only(bytes, &offset, limits)) return fmt::format("byte {}: {}", offset, *why);
  Reader reader(bytes, limits, /*admitted=*/true);
  Values values(reader);
  Machine<Values> machine(reader, values);
  PyValue out;
  if (!machine.run() || !values.tree(machine.result(), out))
    return fmt::format("byte {}: {}", reader.error_at(), reader.error());
  return out;
}

std::variant<PyValue, std::string> decode_pickle_hex(std::string_view hex, const PickleLimits& limits) {
  std::string bytes;
  if (auto malformed = hex_to_bytes(hex, limits, bytes)) return std::move(*malformed);
  return decode_pickle(bytes, limits);
}

}  // namespace rjg::pickle
