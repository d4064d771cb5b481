// The data-only check: the machine run on types. Every rule is at least as strict as both CPython
// unpicklers (C and pure Python), so an admitted pickle means the same thing to either of them as it
// does here.
#include "common/pickle/allowlist.hpp"
#include "common/pickle/machine.hpp"
#include "common/pickle/pickle_policy.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace rjg::pickle {
namespace {

// Values that refer to an entry of the container table (shared by every reference to them).
bool has_entry(Kind k) { return is_container(k) || is_object(k); }

std::uint64_t saturating_add(std::uint64_t x, std::uint64_t y) {
  return x > std::numeric_limits<std::uint64_t>::max() - y ? std::numeric_limits<std::uint64_t>::max() : x + y;
}

// One value on the stack or in the memo. Immutable values carry their own depth and expanded size;
// mutable containers refer to an entry of the container table, shared by every reference to them.
struct Type {
  Kind kind = Kind::none;
  std::uint8_t cls = 0;  // Kind::cls: allowed_class() index
  bool hashable = true;
  ArgsShape tuple;             // Kind::tuple: its arity and item kinds, as REDUCE's checks need them
  std::uint32_t depth = 0;     // nesting: 0 for scalars, 1 for an empty tuple
  std::uint32_t a = 0;         // str, bytes: offset of the text in the pickle; containers: table index
  std::uint32_t b = 0;         // str, bytes: length
  std::uint64_t size = 1;      // expanded size
};

struct Container {
  std::uint64_t size = 1;
  std::uint32_t depth = 1;
  bool nested = false;  // placed inside another value: its contents are final from then on
  bool built = false;   // element, secret: BUILD has given it its state
  // What a container holds, for BUILD's checks of a state dict and what it refers to.
  bool other_keys = false;        // dict: a key that is not one of kStateKeys
  std::uint8_t state_keys = 0;    // dict: which of kStateKeys it has (bit i)
  std::uint32_t key_kinds = 0;    // dict: bit(kind) of its keys; list, set: of its items
  std::uint32_t value_kinds = 0;  // dict: of its values
  std::array<Kind, kStateKeyCount> state_kind{};  // dict: the kind of the value under each of kStateKeys
  std::uint32_t attrib = 0, children = 0;        // dict: the entries of the "attrib" and "_children" values
};

class Types {
 public:
  using Value = Type;

  explicit Types(Reader& reader) : reader_(reader), limits_(reader.limits()) {}

  bool none(Type& v) { return scalar(Kind::none, 0, v); }
  bool boolean(bool, Type& v) { return scalar(Kind::boolean, 0, v); }
  bool integer(std::int64_t, Type& v) { return scalar(Kind::integer, 0, v); }
  bool long_int(std::string_view bytes, Type& v) { return scalar(Kind::integer, bytes.size(), v); }
  bool floating(double, Type& v) { return scalar(Kind::floating, 0, v); }
  bool text(Text text, std::string_view s, Type& v) {
    v.kind = text == Text::str ? Kind::str : text == Text::bytes ? Kind::bytes : Kind::bytearray;
    v.hashable = v.kind != Kind::bytearray;
    v.a = static_cast<std::uint32_t>(s.data() - reader_.input().data());
    v.b = static_cast<std::uint32_t>(s.size());
    v.size = 1 + s.size();
    return true;
  }

  bool empty_tuple(Type& v) {
    v.kind = Kind::tuple;
    v.depth = 1;
    return true;
  }
  // The tuple (or frozenset) of items.
  bool tuple(std::span<const Type> items, bool frozen, Type& t) {
    t.kind = frozen ? Kind::frozenset : Kind::tuple;
    const std::size_t n = items.size();
    t.tuple.arity = n <= 3 ? static_cast<std::uint8_t>(n) : kManyItems;
    std::uint64_t depth = 0, size = 1;
    for (std::size_t i = 0; i < n; ++i) {
      const Type& item = items[i];
      if (frozen && !item.hashable)
        return fail(fmt::format("unhashable {} as a frozenset element", kind_name(item.kind)));
      if (!nest(item)) return false;
      t.hashable = t.hashable && item.hashable;
      t.tuple.item_kinds |= bit(item.kind);
      if (i < 3) t.tuple.item[i] = item.kind;
      if (i == 0 && (item.kind == Kind::bytes || item.kind == Kind::str)) t.tuple.first_length = item.b;
      depth = std::max<std::uint64_t>(depth, depth_of(item));
      size = saturating_add(size, size_of(item));
    }
    if (!check_bounds(depth + 1, size)) return false;
    t.depth = static_cast<std::uint32_t>(depth + 1);
    t.size = size;
    return true;
  }

  bool container(Mutable m, Type& v) {
    return new_entry(m == Mutable::list ? Kind::list : m == Mutable::dict ? Kind::dict : Kind::set, v);
  }

  // Adds items to the container `target` (APPEND(S), SETITEM(S), ADDITEMS).
  bool fill(const Type& target, std::span<const Type> items, Mutable m) {
    const bool dict = m == Mutable::dict;
    const Kind wanted = m == Mutable::list ? Kind::list : dict ? Kind::dict : Kind::set;
    if (!(dict ? is_mapping(target.kind) : target.kind == wanted))
      return fail(fmt::format("opcode {} on a {} (only {})", op_name(reader_.op()), kind_name(target.kind),
                              dict ? "dict, OrderedDict or DotDict" : kind_name(wanted)));
    std::uint64_t depth = 0, size = 0;
    std::uint32_t key_kinds = 0, value_kinds = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const Type& item = items[i];
      const bool is_key = dict && i % 2 == 0;
      if ((is_key || wanted == Kind::set) && !item.hashable)
        return fail(fmt::format("unhashable {} as a {}", kind_name(item.kind), is_key ? "dict key" : "set element"));
      if (!nest(item)) return false;
      depth = std::max<std::uint64_t>(depth, depth_of(item));
      size = saturating_add(size, size_of(item));
      (!dict || is_key ? key_kinds : value_kinds) |= bit(item.kind);
    }
    Container& c = containers_[target.a];
    if (c.nested)
      return fail(fmt::format("{} changed after it was placed in another value (cycles are not plain data)",
                              kind_name(target.kind)));
    c.depth = static_cast<std::uint32_t>(std::max<std::uint64_t>(c.depth, depth + 1));
    c.size = saturating_add(c.size, size);
    c.key_kinds |= key_kinds;
    c.value_kinds |= value_kinds;
    if (dict)
      for (std::size_t i = 0; i + 1 < items.size(); i += 2) note_member(c, items[i], items[i + 1]);
    return check_bounds(c.depth, c.size);
  }

  bool stack_global(const Type& module, const Type& name, Type& c) {
    if (module.kind != Kind::str || name.kind != Kind::str)
      return fail(fmt::format("STACK_GLOBAL needs two string constants, got {} and {}", kind_name(module.kind),
                              kind_name(name.kind)));
    const auto m = text_of(module), n = text_of(name);
    const AllowedClass* allowed = find_class(m, n);
    if (!allowed) return fail(fmt::format("class {}.{} is not allowed", log::printable(m, 80), log::printable(n, 80)));
    c.kind = Kind::cls;
    c.cls = class_index(*allowed);
    return true;
  }

  bool reduce(const Type& callable, const Type& args, Type& out) {
    if (callable.kind != Kind::cls)
      return fail(fmt::format("REDUCE calls a {} (only allowed classes may be called)", kind_name(callable.kind)));
    const AllowedClass& cls = allowed_class(callable.cls);
    std::string_view expected;
    if (args.kind != Kind::tuple || !reduce_shape_ok(cls.makes, args.tuple, expected))
      return fail(fmt::format("REDUCE on {} with arguments {} is not allowed (expected {})", class_name(cls),
                              describe_args(args), expected));
    if (is_container(cls.makes)) return new_entry(cls.makes, out);
    return scalar(cls.makes, args.size, out);
  }

  // NEWOBJ: cls.__new__(cls, *args), for the objects of the allowlist only, with no arguments. The
  // object is no value until BUILD gives it its state.
  bool newobj(const Type& callable, const Type& args, Type& out) {
    if (callable.kind != Kind::cls)
      return fail(fmt::format("NEWOBJ creates a {} (only allowed classes may be instantiated)", kind_name(callable.kind)));
    const AllowedClass& cls = allowed_class(callable.cls);
    if (!is_object(cls.makes)) return fail(fmt::format("NEWOBJ on {} is not allowed (only REDUCE builds it)", class_name(cls)));
    if (args.kind != Kind::tuple || args.tuple.arity != 0)
      return fail(fmt::format("NEWOBJ on {} with arguments {} is not allowed (expected ())", class_name(cls),
                              describe_args(args)));
    return new_entry(cls.makes, out);
  }

  // BUILD: inst.__setstate__(state), or its __dict__ updated, on an object NEWOBJ made, once.
  bool build(const Type& target, const Type& state) {
    if (!is_object(target.kind))
      return fail(fmt::format("BUILD on a {} (only on a new {} or {})", kind_name(target.kind),
                              kind_name(Kind::element), kind_name(Kind::secret)));
    if (containers_[target.a].built) return fail(fmt::format("second BUILD on one {}", kind_name(target.kind)));
    if (state.kind != Kind::dict)
      return fail(fmt::format("BUILD on {} with a {} as its state (expected a dict)", kind_name(target.kind),
                              kind_name(state.kind)));
    const Container& s = containers_[state.a];
    std::string problem;
    if (target.kind == Kind::element) problem = element_state_problem(s);
    else if (s.other_keys || s.state_keys != (1u << kValue) || s.state_kind[kValue] != Kind::str)
      problem = "the state must be exactly {\"value\": str}";
    if (!problem.empty())
      return fail(fmt::format("BUILD on {} with this state is not allowed: {}", kind_name(target.kind), problem));
    if (!nest(state)) return false;
    Container& object = containers_[target.a];
    object.built = true;
    object.depth = std::max<std::uint32_t>(1, s.depth);  // an Element's children are two levels down
    object.size = saturating_add(1, s.size);
    return check_bounds(object.depth, object.size);
  }

  bool finish(const Type& v) { return nest(v) && check_bounds(depth_of(v), size_of(v)); }

 private:
  bool fail(std::string reason) { return reader_.fail(std::move(reason)); }

  bool scalar(Kind kind, std::uint64_t extra_size, Type& v) {
    v.kind = kind;
    v.size = 1 + extra_size;
    v.hashable = kind != Kind::bytearray;
    return true;
  }

  // A mutable container, or an object (element, secret: NEWOBJ) whose BUILD is still to come.
  bool new_entry(Kind kind, Type& v) {
    if (containers_.size() >= limits_.max_containers)
      return fail(fmt::format("more than {} lists, dicts, sets and objects", limits_.max_containers));
    v.kind = kind;
    v.hashable = false;
    v.a = static_cast<std::uint32_t>(containers_.size());
    containers_.push_back({});
    return true;
  }

  std::string_view text_of(const Type& v) const { return reader_.input().substr(v.a, v.b); }
  std::uint32_t depth_of(const Type& v) const { return has_entry(v.kind) ? containers_[v.a].depth : v.depth; }
  std::uint64_t size_of(const Type& v) const { return has_entry(v.kind) ? containers_[v.a].size : v.size; }

  bool check_bounds(std::uint64_t depth, std::uint64_t size) {
    if (depth > limits_.max_depth) return fail(fmt::format("nesting deeper than {} levels", limits_.max_depth));
    if (size > limits_.max_expanded)
      return fail(fmt::format("value larger than {} elements and bytes when expanded", limits_.max_expanded));
    return true;
  }

  // v becomes part of another value. A class is not data; a mutable container is final from now on,
  // which makes depths and sizes exact and refuses every cycle; an object must have its state already
  // (so it cannot be inside its own state).
  bool nest(const Type& v) {
    if (v.kind == Kind::cls) return fail(fmt::format("class {} used as a value", class_name(allowed_class(v.cls))));
    if (is_object(v.kind) && !containers_[v.a].built)
      return fail(fmt::format("{} used as a value before BUILD gave it its state", kind_name(v.kind)));
    if (has_entry(v.kind)) containers_[v.a].nested = true;
    return true;
  }

  // A dict's member key = value, as far as BUILD's checks need it.
  void note_member(Container& c, const Type& key, const Type& value) {
    const auto name = key.kind == Kind::str ? text_of(key) : std::string_view();
    const auto it = key.kind == Kind::str ? std::find(kStateKeys.begin(), kStateKeys.end(), name) : kStateKeys.end();
    if (it == kStateKeys.end()) {
      c.other_keys = true;
      return;
    }
    const auto i = static_cast<std::size_t>(it - kStateKeys.begin());
    c.state_keys = static_cast<std::uint8_t>(c.state_keys | (1u << i));
    c.state_kind[i] = value.kind;
    if (i == kAttrib) c.attrib = value.a;
    if (i == kChildren) c.children = value.a;
  }

  static std::string describe_args(const Type& args) {
    if (args.kind != Kind::tuple) return std::string(kind_name(args.kind));
    const ArgsShape& t = args.tuple;
    if (t.arity == kManyItems) return "a tuple of more than 3 items";
    std::string s = "(";
    for (std::uint8_t i = 0; i < t.arity; ++i) {
      if (i) s += ", ";
      s += kind_name(t.item[i]);
      if (i == 0 && (t.item[0] == Kind::bytes)) s += fmt::format("[{}]", t.first_length);
    }
    return s + (t.arity == 1 ? ",)" : ")");
  }

  // Why a state dict is not what an Element's __getstate__ writes, or "".
  std::string element_state_problem(const Container& s) const {
    if (s.other_keys || (s.state_keys & (1u << kValue))) return "a key other than tag, attrib, text, tail and _children";
    const auto has = [&](StateKey k) { return (s.state_keys & (1u << k)) != 0; };
    if (!has(kTag) || s.state_kind[kTag] != Kind::str) return "tag must be a str";
    if (has(kAttrib)) {
      const Container* a = s.state_kind[kAttrib] == Kind::dict ? &containers_[s.attrib] : nullptr;
      if (!a || (a->key_kinds & ~bit(Kind::str)) || (a->value_kinds & ~bit(Kind::str)))
        return "attrib must be a dict of str to str";
    }
    for (StateKey k : {kText, kTail})
      if (has(k) && s.state_kind[k] != Kind::str && s.state_kind[k] != Kind::none)
        return fmt::format("{} must be a str or None", kStateKeys[k]);
    if (has(kChildren)) {
      const Container* c = s.state_kind[kChildren] == Kind::list ? &containers_[s.children] : nullptr;
      if (!c || (c->key_kinds & ~bit(Kind::element))) return "_children must be a list of Elements";
    }
    return "";
  }

  Reader& reader_;
  const PickleLimits& limits_;
  std::vector<Container> containers_;
};

}  // namespace
}  // namespace rjg::pickle

namespace rjg::pickle {

std::optional<std::string> check_pickle_data_only(std::string_view bytes, std::size_t* offset,
                                                  const PickleLimits& limits) {
  pickle::Reader reader(bytes, limits);
  pickle::Types types(reader);
  const bool admitted = pickle::Machine<pickle::Types>(reader, types).run();
  if (offset) *offset = admitted ? 0 : reader.error_at();
  if (admitted) return std::nullopt;
  return std::move(reader.error());
}

}  // namespace rjg::pickle
