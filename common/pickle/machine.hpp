// The data-only machine: one interpreter of the admitted opcodes, parametrized on what it builds. The
// checker runs it on types (check.cpp: what a value is, how deep and large, whether a class's shape is
// the admitted one), the decoder on values (decode.cpp). The stack, the marks, the memo and every rule
// about them are here once, so that what the checker admits and what the decoder reads cannot drift.
//
// A Domain has a Value type and these hooks; each returns false after calling reader.fail():
//   none(v), boolean(b, v), integer(i, v), long_int(bytes, v), floating(x, v), text(Text, s, v)
//   empty_tuple(v), tuple(items, frozen, v), container(Mutable, v), fill(target, items, Mutable)
//   stack_global(module, name, v), reduce(callable, args, v), newobj(callable, args, v),
//   build(object, state), finish(value at STOP)
#pragma once

#include "common/pickle/reader.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rjg::pickle {

enum class Mutable : std::uint8_t { list, dict, set };

template <class Domain>
class Machine {
 public:
  using Value = typename Domain::Value;

  Machine(Reader& reader, Domain& domain) : reader_(reader), domain_(domain) {}

  // true: the stream reached STOP and its one value is result(); otherwise the reader holds the error.
  bool run() {
    Instruction ins;
    while (reader_.next(ins)) {
      if (ins.op == STOP) return stop();
      if (!step(ins)) return false;
    }
    return false;
  }
  const Value& result() const { return stack_.back(); }

 private:
  const PickleLimits& limits() const { return reader_.limits(); }
  bool fail(std::string reason) { return reader_.fail(std::move(reason)); }

  // Values above the innermost MARK: nothing below it may be popped or used.
  std::size_t available() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  bool need(std::size_t n) {
    if (available() < n) return fail(fmt::format("stack underflow at opcode {}", op_name(reader_.op())));
    return true;
  }
  bool push(const Value& v) {
    if (stack_.size() >= limits().max_stack)
      return fail(fmt::format("more than {} values on the stack", limits().max_stack));
    stack_.push_back(v);
    return true;
  }
  // Replaces stack_[first, end) by v, once the domain has made it.
  bool replace(std::size_t first, bool made, const Value& v) {
    if (!made) return false;
    stack_.resize(first);
    return push(v);
  }
  std::span<const Value> from(std::size_t first) const { return std::span<const Value>(stack_).subspan(first); }
  // Pops the innermost MARK; its items are stack_[begin, end).
  bool pop_mark(std::size_t& begin) {
    if (marks_.empty()) return fail(fmt::format("opcode {} without a MARK", op_name(reader_.op())));
    begin = marks_.back();
    marks_.pop_back();
    return true;
  }
  // Adds stack_[first, end) to the container just below them.
  bool fill(std::size_t first, Mutable wanted) {
    if (!domain_.fill(stack_[first - 1], from(first), wanted)) return false;
    stack_.resize(first);
    return true;
  }

  bool memo_put(std::uint64_t index) {
    if (!need(1)) return false;
    // A pickler numbers memo entries 0, 1, 2, ... in order; anything else (overwriting an entry, gaps)
    // only serves to make a reader lose track of what an index holds.
    if (index != memo_.size())
      return fail(fmt::format("memo index {} is not the next free one ({})", index, memo_.size()));
    if (memo_.size() >= limits().max_memo) return fail(fmt::format("more than {} memo entries", limits().max_memo));
    memo_.push_back(stack_.back());
    return true;
  }
  bool memo_get(std::uint64_t index) {
    if (index >= memo_.size()) return fail(fmt::format("memo index {} was never set", index));
    return push(memo_[static_cast<std::size_t>(index)]);
  }

  bool stop() {
    if (!marks_.empty()) return fail("STOP with an open MARK");
    if (stack_.size() != 1) return fail(fmt::format("STOP with {} values on the stack, not 1", stack_.size()));
    if (reader_.remaining() != 0) return fail(fmt::format("{} bytes after STOP", reader_.remaining()));
    return domain_.finish(stack_.back());
  }

  bool step(const Instruction& ins) {
    Value v;
    const std::size_t size = stack_.size();
    switch (ins.op) {
      case MARK:
        if (marks_.size() >= limits().max_depth) return fail(fmt::format("more than {} open MARKs", limits().max_depth));
        marks_.push_back(size);
        return true;
      case NONE: return domain_.none(v) && push(v);
      case NEWTRUE:
      case NEWFALSE: return domain_.boolean(ins.op == NEWTRUE, v) && push(v);
      case BININT1:
      case BININT2: return domain_.integer(static_cast<std::int64_t>(ins.n), v) && push(v);
      case BININT: return domain_.integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(ins.n)), v) && push(v);
      case LONG1:
      case LONG4: return domain_.long_int(ins.text, v) && push(v);
      case BINFLOAT: {
        std::uint64_t bits = 0;  // big endian, unlike every other argument
        for (char c : ins.text) bits = (bits << 8) | static_cast<unsigned char>(c);
        return domain_.floating(std::bit_cast<double>(bits), v) && push(v);
      }
      case EMPTY_TUPLE: return domain_.empty_tuple(v) && push(v);
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const std::size_t k = ins.op - TUPLE1 + 1u;
        return need(k) && replace(size - k, domain_.tuple(from(size - k), false, v), v);
      }
      case TUPLE:
      case FROZENSET: {
        std::size_t begin = 0;
        return pop_mark(begin) && replace(begin, domain_.tuple(from(begin), ins.op == FROZENSET, v), v);
      }
      case EMPTY_LIST: return domain_.container(Mutable::list, v) && push(v);
      case EMPTY_DICT: return domain_.container(Mutable::dict, v) && push(v);
      case EMPTY_SET: return domain_.container(Mutable::set, v) && push(v);
      case APPEND: return need(2) && fill(size - 1, Mutable::list);
      case SETITEM: return need(3) && fill(size - 2, Mutable::dict);
      case APPENDS:
      case SETITEMS:
      case ADDITEMS: {
        std::size_t begin = 0;
        if (!pop_mark(begin)) return false;
        // the target sits just below the popped MARK, and above the next one
        if (begin <= (marks_.empty() ? 0 : marks_.back()))
          return fail(fmt::format("stack underflow at opcode {}", op_name(ins.op)));
        if (ins.op == SETITEMS && (size - begin) % 2 != 0) return fail("SETITEMS with an odd number of items");
        return fill(begin, ins.op == APPENDS ? Mutable::list : ins.op == SETITEMS ? Mutable::dict : Mutable::set);
      }
      case STACK_GLOBAL:
        return need(2) && replace(size - 2, domain_.stack_global(stack_[size - 2], stack_[size - 1], v), v);
      case REDUCE: return need(2) && replace(size - 2, domain_.reduce(stack_[size - 2], stack_[size - 1], v), v);
      case NEWOBJ: return need(2) && replace(size - 2, domain_.newobj(stack_[size - 2], stack_[size - 1], v), v);
      case BUILD:
        if (!need(2) || !domain_.build(stack_[size - 2], stack_[size - 1])) return false;
        stack_.pop_back();
        return true;
      case MEMOIZE: return memo_put(memo_.size());
      case BINPUT:
      case LONG_BINPUT:
      case PUT: return memo_put(ins.n);
      case BINGET:
      case LONG_BINGET:
      case GET: return memo_get(ins.n);
      default: break;
    }
    if (const OpInfo* info = op_info(ins.op); info && info->text != Text::none)
      return domain_.text(info->text, ins.text, v) && push(v);
    return fail(fmt::format("internal error: opcode {} has no rule", op_name(ins.op)));
  }

  Reader& reader_;
  Domain& domain_;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;  // stack sizes at each open MARK
  std::vector<Value> memo_;
};

}  // namespace rjg::pickle
