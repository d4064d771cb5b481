// The decoder's domain of the data-only machine (machine.hpp): the machine run on plain values, once
// the checker has admitted the stream. decode.cpp holds the values and the tree made of them at STOP,
// decode_classes.cpp what each allowlisted class builds.
#pragma once

#include "common/pickle/allowlist.hpp"
#include "common/pickle/machine.hpp"
#include "common/pickle/pickle_value.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::pickle {

enum class Tag : std::uint8_t {
  none, boolean, integer, bigint, floating, str, bytes, bytearray,
  tuple, frozenset, list, dict, set,  // in seqs_
  scalar,                             // a finished datetime, date, time, timedelta, Decimal, complex or path in scalars_
  timezone, cls,
  element, secret,  // in objects_
};

// One value on the stack or in the memo. Containers live in seqs_ and every reference shares them, as
// Python objects do; the tree is only built at STOP, so it holds each container's final contents.
struct Value {
  Tag tag = Tag::none;
  std::uint32_t at = 0;  // offset of the opcode that made it: its identity (a memo GET shares it)
  std::int64_t i = 0;    // boolean, integer: the value; seq tags: index in seqs_; scalar, bigint: in
                         // scalars_; timezone: in zones_; cls: Class; element, secret: in objects_
  double f = 0;
  std::string_view text;  // str, bytes, bytearray; bigint: its LONG bytes
};

struct Seq {
  std::vector<Value> items;                  // dict: key, value, key, value, ...
  std::map<std::string, std::size_t> index;  // dict, set: canonical key -> position in items
  PyDict::Kind kind = PyDict::Kind::dict;
};

struct Zone {
  int offset_seconds = 0;
  std::string_view name;
};

class Values {
 public:
  using Value = pickle::Value;

  explicit Values(Reader& reader) : reader_(reader) {}

  // The machine's hooks (see machine.hpp). The checker admitted the stream, so the "internal error"
  // refusals only guard against the two disagreeing.
  bool none(Value& v);
  bool boolean(bool b, Value& v);
  bool integer(std::int64_t i, Value& v);
  bool long_int(std::string_view bytes, Value& v);
  bool floating(double x, Value& v);
  bool text(Text text, std::string_view s, Value& v);
  bool empty_tuple(Value& v);
  bool tuple(std::span<const Value> items, bool frozen, Value& v);
  bool container(Mutable m, Value& v);
  bool fill(const Value& target, std::span<const Value> items, Mutable m);
  bool stack_global(const Value& module, const Value& name, Value& v);
  bool reduce(const Value& callable, const Value& args, Value& v);  // decode_classes.cpp
  bool newobj(const Value& callable, const Value& args, Value& v);  // decode_classes.cpp
  bool build(const Value& object, const Value& state);              // decode_classes.cpp
  bool finish(const Value&) { return true; }

  // The tree of the value at STOP: shared references become copies.
  bool tree(const Value& top, PyValue& out);

 private:
  bool fail(std::string reason) { return reader_.fail(std::move(reason)); }
  bool fail_at(std::size_t at, std::string reason) { return reader_.fail_at(at, std::move(reason)); }

  Value make(Tag tag) const;
  Value make_seq(Tag tag, std::vector<Value> items = {}, PyDict::Kind kind = PyDict::Kind::dict);
  Value make_scalar(PyValue value);

  bool key_of(const Value& v, std::string& out);
  bool scalar_key(const Value& v, std::string& out);
  bool set_item(Seq& dict, const Value& key, const Value& value);
  bool add_item(Seq& set, const Value& item);

  bool int_arg(const Value& v, __int128& out);
  bool zone_arg(const std::vector<Value>& args, std::size_t i, std::optional<int>& offset, std::string& name);
  bool reduce_class(Class cls, const std::vector<Value>& a, Value& v);

  const std::vector<Value>& state_of(const Value& object) const;
  bool materialize_secret(const Value& v, PyValue& out);
  bool materialize_element(const Value& v, std::size_t depth, PyElement& out);
  bool materialize(const Value& v, std::size_t depth, PyValue& out);

  Reader& reader_;
  std::vector<Seq> seqs_;
  std::vector<PyValue> scalars_;
  std::vector<Zone> zones_;
  std::vector<Value> objects_;  // element, secret: the state dict BUILD gave each
  std::vector<bool> on_path_;
  std::uint64_t bigint_work_ = 0;
};

}  // namespace rjg::pickle
