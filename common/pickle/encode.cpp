// The encoder: CPython's C pickler at protocol 4 (Modules/_pickle.c), for plain values. It names
// classes only through the allowlist, so whatever it writes the data-only check admits.
#include "common/pickle/allowlist.hpp"
#include "common/pickle/opcodes.hpp"
#include "common/pickle/pickle_value.hpp"
#include "common/pickle/python_semantics.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <bit>
#include <limits>
#include <map>
#include <stdexcept>

namespace rjg::pickle {
namespace {

constexpr std::size_t kBatchSize = 1000;         // CPython's pickler: items per APPENDS, SETITEMS, ADDITEMS
constexpr std::size_t kFrameTarget = 64 * 1024;  // CPython's _FRAME_SIZE_TARGET
constexpr std::size_t kFrameMin = 4;             // smaller frames get no FRAME opcode

[[noreturn]] void invalid(std::string what) { throw std::invalid_argument(std::move(what)); }

std::string checked_decimal_text(const PyDecimal& d) {
  auto parsed = parse_decimal(d.text);
  if (!parsed) invalid(fmt::format("Decimal text '{}' is not a number", log::printable(d.text, 80)));
  return decimal_text(*parsed);
}

// What Python can put in a set or use as a dict key.
void check_hashable(const PyValue& v, std::string_view as) {
  // Elements and Secrets hash by identity in Python; the checker refuses them as keys.
  if (v.get<PyList>() || v.get<PyDict>() || (v.get<PySet>() && !v.get<PySet>()->frozen) ||
      (v.get<PyBytes>() && v.get<PyBytes>()->bytearray) || v.get<PyElement>() || v.get<PySecret>())
    invalid(fmt::format("{} is unhashable and cannot be a {}", py_repr(v).substr(0, 80), as));
  if (const auto* t = v.get<PyTuple>())
    for (const auto& item : t->items) check_hashable(item, as);
  if (const auto* d = v.get<PyDecimal>()) {
    auto parsed = parse_decimal(d->text);
    if (parsed && parsed->kind == DecimalNumber::Kind::snan)
      invalid(fmt::format("Decimal('{}') cannot be a {} (Python cannot hash a signaling NaN)", d->text, as));
  }
}

class Pickler {
 public:
  std::string run(const PyValue& v) {
    out_.assign("\x80\x04", 2);
    save(v, 0);
    op(STOP);
    commit();
    return std::move(out_);
  }

 private:
  // Frames are cut between values once they reach 64 KiB; a str or bytes that long goes outside any.
  void commit() {
    if (frame_.size() >= kFrameMin) {
      out_ += static_cast<char>(FRAME);
      put_le(out_, frame_.size(), 8);
    }
    out_ += frame_;
    frame_.clear();
  }
  void op(unsigned char c) { frame_ += static_cast<char>(c); }
  void memoize() {
    op(MEMOIZE);
    ++memo_;
  }
  void get(std::uint32_t index) {
    if (index < 256) {
      op(BINGET);
      op(static_cast<unsigned char>(index));
    } else {
      op(LONG_BINGET);
      put_le(frame_, index, 4);
    }
  }
  void counted(unsigned char op1, unsigned char op4, unsigned char op8, std::string_view data) {
    std::string header;
    if (data.size() < 256) {
      header += static_cast<char>(op1);
      put_le(header, data.size(), 1);
    } else if (data.size() <= 0xffffffffu) {
      header += static_cast<char>(op4);
      put_le(header, data.size(), 4);
    } else {
      header += static_cast<char>(op8);
      put_le(header, data.size(), 8);
    }
    if (data.size() >= kFrameTarget) {
      commit();
      out_ += header;
      out_ += data;
    } else {
      frame_ += header;
      frame_ += data;
    }
  }

  void save_str(std::string_view s) {
    if (!valid_pickle_utf8(s)) invalid(fmt::format("str '{}' is not valid UTF-8", log::printable(s, 80)));
    counted(SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, s);
    memoize();
  }
  void save_bytes(std::string_view b) {
    counted(SHORT_BINBYTES, BINBYTES, BINBYTES8, b);
    memoize();
  }
  void save_int(std::int64_t v) {
    if (v >= 0 && v <= 0xff) {
      op(BININT1);
      put_le(frame_, static_cast<std::uint64_t>(v), 1);
    } else if (v >= 0 && v <= 0xffff) {
      op(BININT2);
      put_le(frame_, static_cast<std::uint64_t>(v), 2);
    } else if (v >= std::numeric_limits<std::int32_t>::min() && v <= std::numeric_limits<std::int32_t>::max()) {
      op(BININT);
      put_le(frame_, static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    } else {
      const std::uint64_t m = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
      save_long(words_from_u64(m), v < 0);
    }
  }
  void save_long(const Words& w, bool negative) {
    const std::string b = twos_complement(w, negative);
    if (b.size() > PickleLimits{}.max_long_bytes)
      invalid(
          fmt::format("integer of {} bytes is longer than the limit of {}", b.size(), PickleLimits{}.max_long_bytes));
    if (b.size() < 256) {
      op(LONG1);
      put_le(frame_, b.size(), 1);
    } else {
      op(LONG4);
      put_le(frame_, b.size(), 4);
    }
    frame_ += b;
  }
  void save_bigint(const PyBigInt& v) {
    std::string_view digits = v.decimal;
    // 4096 bytes of two's complement hold under 9865 digits: no need to convert more to find out.
    if (digits.size() > 10000) invalid(fmt::format("integer of {} digits is too long", digits.size()));
    bool negative;
    Words w;
    if (!parse_big_decimal(digits, negative, w))
      invalid(fmt::format("'{}' is not an integer", log::printable(digits, 80)));
    std::int64_t small;
    if (fits_int64(w, negative, small)) save_int(small);
    else save_long(w, negative);
  }
  void save_float(double x) {
    op(BINFLOAT);
    const auto bits = std::bit_cast<std::uint64_t>(x);
    for (int i = 7; i >= 0; --i) frame_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }

  // module.name, memoized as CPython does: the class object, and each module name's string.
  void save_global(Class c) {
    const AllowedClass& allowed = class_for_writing(c);
    const std::string_view module = allowed.module, name = allowed.name;
    auto cls = classes_.find(std::pair{std::string(module), std::string(name)});
    if (cls != classes_.end()) {
      get(cls->second);
      return;
    }
    auto m = modules_.find(module);
    if (m != modules_.end()) {
      get(m->second);
    } else {
      counted(SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, module);
      modules_.emplace(std::string(module), memo_);
      memoize();
    }
    counted(SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, name);
    memoize();
    op(STACK_GLOBAL);
    classes_.emplace(std::pair{std::string(module), std::string(name)}, memo_);
    memoize();
  }
  // The end of save_reduce: arguments already saved, the call and its result memoized.
  void reduce_args(unsigned char tuple_op) {
    op(tuple_op);
    memoize();
    op(REDUCE);
    memoize();
  }

  void save_timedelta(std::int64_t days, std::int64_t seconds, std::int64_t micros) {
    PyTimedelta td;
    if (!normalize_timedelta(days, seconds, micros, td))
      invalid(fmt::format("timedelta({}, {}, {}) is beyond 999999999 days", days, seconds, micros));
    save_global(Class::timedelta);
    save_int(td.days);
    save_int(td.seconds);
    save_int(td.microseconds);
    reduce_args(TUPLE3);
  }
  // The tzinfo argument of a datetime or time; false when naive.
  bool save_zone(const std::optional<int>& offset, const std::string& name) {
    if (!offset) {
      if (!name.empty()) invalid(fmt::format("time zone name '{}' without an offset", log::printable(name, 80)));
      return false;
    }
    if (!valid_offset(*offset)) invalid(fmt::format("UTC offset of {} seconds is not strictly within a day", *offset));
    save_global(Class::timezone);
    save_timedelta(0, *offset, 0);
    if (name.empty()) {
      reduce_args(TUPLE1);
    } else {
      save_str(name);
      reduce_args(TUPLE2);
    }
    return true;
  }

  // Lists stop after their last item; sets (and plain dicts below) loop while a batch was full, so a
  // size that is a multiple of 1000 ends with an empty MARK ADDITEMS, as CPython writes it.
  void save_seq_items(const std::vector<PyValue>& items, std::size_t depth, unsigned char batch_op) {
    const bool list = batch_op == APPENDS;
    std::size_t i = 0, batch = 0;
    do {
      op(MARK);
      for (batch = 0; i < items.size() && batch < kBatchSize; ++i, ++batch) save(items[i], depth);
      op(batch_op);
    } while (list ? i < items.size() : batch == kBatchSize);
  }
  void save_item(const std::pair<PyValue, PyValue>& item, std::size_t depth) {
    check_hashable(item.first, "dict key");
    save(item.first, depth);
    save(item.second, depth);
  }
  // A plain dict of one item is a SETITEM. OrderedDict's items come from an iterator: a last batch of
  // one is a SETITEM too, and no batch is empty.
  void save_dict_items(const PyDict& d, std::size_t depth, bool iterator) {
    const auto& items = d.items;
    if (items.empty()) return;
    if (items.size() == 1 && !iterator) {
      save_item(items[0], depth);
      op(SETITEM);
      return;
    }
    std::size_t i = 0, batch = 0;
    do {
      if (iterator && items.size() - i == 1) {
        save_item(items[i], depth);
        op(SETITEM);
        return;
      }
      op(MARK);
      for (batch = 0; i < items.size() && batch < kBatchSize; ++i, ++batch) save_item(items[i], depth);
      op(SETITEMS);
    } while (iterator ? i < items.size() : batch == kBatchSize);
  }

  // What the C pickler writes for an Element: NEWOBJ, then BUILD with __getstate__'s dict (tag,
  // _children, attrib, text, tail). The checker counts two levels per element (the dict, the list).
  void save_element(const PyElement& e, std::size_t depth) {
    if (depth + 2 > PickleLimits{}.max_depth)
      invalid(fmt::format("elements nested deeper than the checker's {} levels (two per element)",
                          PickleLimits{}.max_depth));
    save_global(Class::element);
    op(EMPTY_TUPLE);
    op(NEWOBJ);
    memoize();
    op(EMPTY_DICT);
    memoize();
    op(MARK);
    save_str("tag");
    save_str(e.tag);
    save_str("_children");
    op(EMPTY_LIST);
    memoize();
    std::size_t i = 0;
    if (e.children.size() == 1) {
      save_element(e.children[0], depth + 2);
      op(APPEND);
    } else if (!e.children.empty()) {
      do {
        op(MARK);
        for (std::size_t batch = 0; i < e.children.size() && batch < kBatchSize; ++i, ++batch) {
          if (frame_.size() >= kFrameTarget) commit();
          save_element(e.children[i], depth + 2);
        }
        op(APPENDS);
      } while (i < e.children.size());
    }
    save_str("attrib");
    PyDict attrib;
    for (const auto& [k, v] : e.attrib) attrib.items.emplace_back(k, v);
    op(EMPTY_DICT);
    memoize();
    save_dict_items(attrib, depth + 2, false);
    for (const auto* field : {&e.text, &e.tail}) {
      save_str(field == &e.text ? "text" : "tail");
      if (*field) save_str(**field);
      else op(NONE);
    }
    op(SETITEMS);
    op(BUILD);
  }

  void save(const PyValue& v, std::size_t depth) {
    if (frame_.size() >= kFrameTarget) commit();
    const bool container =
        v.get<PyList>() || v.get<PyTuple>() || v.get<PySet>() || v.get<PyDict>() || v.get<PySecret>();
    if (container && depth + 1 > PickleLimits{}.max_depth)
      invalid(fmt::format("nesting deeper than {} levels", PickleLimits{}.max_depth));
    const std::size_t inner = depth + 1;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, PyNone>) {
            op(NONE);
          } else if constexpr (std::is_same_v<T, bool>) {
            op(x ? NEWTRUE : NEWFALSE);
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            save_int(x);
          } else if constexpr (std::is_same_v<T, PyBigInt>) {
            save_bigint(x);
          } else if constexpr (std::is_same_v<T, double>) {
            save_float(x);
          } else if constexpr (std::is_same_v<T, std::string>) {
            save_str(x);
          } else if constexpr (std::is_same_v<T, PyBytes>) {
            if (!x.bytearray) {
              save_bytes(x.bytes);
            } else {
              save_global(Class::bytearray);
              if (x.bytes.empty()) {
                op(EMPTY_TUPLE);
                op(REDUCE);
                memoize();
              } else {
                save_bytes(x.bytes);
                reduce_args(TUPLE1);
              }
            }
          } else if constexpr (std::is_same_v<T, PyList>) {
            op(EMPTY_LIST);
            memoize();
            if (x.items.size() == 1) {
              save(x.items[0], inner);
              op(APPEND);
            } else if (!x.items.empty()) {
              save_seq_items(x.items, inner, APPENDS);
            }
          } else if constexpr (std::is_same_v<T, PyTuple>) {
            const std::size_t n = x.items.size();
            if (n == 0) {
              op(EMPTY_TUPLE);
              return;
            }
            if (n > 3) op(MARK);
            for (const auto& item : x.items) save(item, inner);
            op(n == 1 ? TUPLE1 : n == 2 ? TUPLE2 : n == 3 ? TUPLE3 : TUPLE);
            memoize();
          } else if constexpr (std::is_same_v<T, PySet>) {
            for (const auto& item : x.items) check_hashable(item, "set element");
            if (x.frozen) {
              op(MARK);
              for (const auto& item : x.items) save(item, inner);
              op(FROZENSET);
              memoize();
            } else {
              op(EMPTY_SET);
              memoize();
              if (!x.items.empty()) save_seq_items(x.items, inner, ADDITEMS);
            }
          } else if constexpr (std::is_same_v<T, PyDict>) {
            if (x.kind == PyDict::Kind::dict) {
              op(EMPTY_DICT);
              memoize();
            } else {
              if (x.kind == PyDict::Kind::dot_dict) save_global(Class::dot_dict);
              else save_global(Class::ordered_dict);
              op(EMPTY_TUPLE);
              op(REDUCE);
              memoize();
            }
            save_dict_items(x, inner, x.kind != PyDict::Kind::dict);
          } else if constexpr (std::is_same_v<T, PyDateTime>) {
            if (!valid_date(x.year, x.month, x.day) || !valid_time(x.hour, x.minute, x.second, x.microsecond, x.fold))
              invalid(fmt::format("{} is not a valid datetime", py_repr(v)));
            save_global(Class::datetime);
            save_bytes(date_state(x.year, x.month | (x.fold << 7), x.day) +
                       time_state(x.hour, x.minute, x.second, x.microsecond));
            reduce_args(save_zone(x.utc_offset_seconds, x.tz_name) ? TUPLE2 : TUPLE1);
          } else if constexpr (std::is_same_v<T, PyDate>) {
            if (!valid_date(x.year, x.month, x.day)) invalid(fmt::format("{} is not a valid date", py_repr(v)));
            save_global(Class::date);
            save_bytes(date_state(x.year, x.month, x.day));
            reduce_args(TUPLE1);
          } else if constexpr (std::is_same_v<T, PyTime>) {
            if (!valid_time(x.hour, x.minute, x.second, x.microsecond, x.fold))
              invalid(fmt::format("{} is not a valid time", py_repr(v)));
            save_global(Class::time);
            save_bytes(time_state(x.hour | (x.fold << 7), x.minute, x.second, x.microsecond));
            reduce_args(save_zone(x.utc_offset_seconds, x.tz_name) ? TUPLE2 : TUPLE1);
          } else if constexpr (std::is_same_v<T, PyTimedelta>) {
            save_timedelta(x.days, x.seconds, x.microseconds);
          } else if constexpr (std::is_same_v<T, PyDecimal>) {
            const std::string text = checked_decimal_text(x);
            save_global(Class::decimal);
            save_str(text);
            reduce_args(TUPLE1);
          } else if constexpr (std::is_same_v<T, PyComplex>) {
            save_global(Class::complex);
            save_float(x.real);
            save_float(x.imag);
            reduce_args(TUPLE2);
          } else if constexpr (std::is_same_v<T, PyPath>) {
            // As 3.8 to 3.12 write it (module pathlib, the parts), which every version reads.
            if (!valid_pickle_utf8(x.path)) invalid(fmt::format("path '{}' is not valid UTF-8", log::printable(x.path, 80)));
            save_global(x.pure ? Class::pure_posix_path : Class::posix_path);
            const auto parts = posix_path_parts(x.path);
            if (parts.empty()) {
              op(EMPTY_TUPLE);
              op(REDUCE);
              memoize();
              return;
            }
            if (parts.size() > 3) op(MARK);
            for (const auto& part : parts) save_str(part);
            const auto n = parts.size();
            reduce_args(n == 1 ? TUPLE1 : n == 2 ? TUPLE2 : n == 3 ? TUPLE3 : TUPLE);
          } else if constexpr (std::is_same_v<T, PyElement>) {
            save_element(x, depth);
          } else if constexpr (std::is_same_v<T, PySecret>) {
            save_global(Class::secret);
            op(EMPTY_TUPLE);
            op(NEWOBJ);
            memoize();
            op(EMPTY_DICT);
            memoize();
            save_str("value");
            save_str(x.value);
            op(SETITEM);
            op(BUILD);
          }
        },
        v.v);
  }

  std::string out_;    // PROTO and committed frames
  std::string frame_;  // the current frame
  std::uint32_t memo_ = 0;
  std::map<std::string, std::uint32_t, std::less<>> modules_;
  std::map<std::pair<std::string, std::string>, std::uint32_t> classes_;
};

}  // namespace

std::string encode_pickle(const PyValue& value) { return Pickler().run(value); }

std::string encode_pickle_hex(const PyValue& value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::string bytes = encode_pickle(value);
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

}  // namespace rjg::pickle
