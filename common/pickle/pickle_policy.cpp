// The pickle policy over JSON: every {"__pickled__": "<hex>"} object of a value (a tree, or a text walked
// without one) found, its form checked and its pickle given to the data-only check (check.cpp).
#include "common/pickle/pickle_policy.hpp"

#include "common/log.hpp"
#include "common/pickle/reader.hpp"
#include "common/protocol/json_text.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace rjg::pickle {
namespace {

namespace json = boost::json;

bool is_identifier(std::string_view key) {
  if (key.empty() || (key[0] >= '0' && key[0] <= '9')) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// The data-only check of one "__pickled__" value's hex text, once its object has the exact form: why it
// is refused, or nullopt. Decodes into `bytes` (reused across values); sets `offset` to the byte of
// the pickle a refusal is about, when it is about one.
std::optional<std::string> check_pickled_hex(std::string_view hex, const PickleLimits& limits, std::string& bytes,
                                             std::optional<std::size_t>& offset) {
  if (auto malformed = pickle::hex_to_bytes(hex, limits, bytes)) return malformed;
  std::size_t at = 0;
  if (auto why = check_pickle_data_only(bytes, &at, limits)) {
    offset = at;
    return why;
  }
  return std::nullopt;
}

class PickleWalker {
 public:
  PickleWalker(PickleMode mode, std::string_view base, const PickleLimits& limits)
      : mode_(mode), base_(base), limits_(limits) {}

  std::optional<PickleRefusal> walk(const json::value& v) {
    if (visit(v)) return std::nullopt;
    return PickleRefusal{path(), std::move(reason_), offset_, mode_};
  }

 private:
  struct Step {
    std::string_view key;  // object member, when index is npos
    std::size_t index;
  };
  static constexpr std::size_t kKey = static_cast<std::size_t>(-1);

  bool visit(const json::value& v) {
    if (const auto* o = v.if_object()) {
      if (const auto* p = o->if_contains(kPickledKey)) return check(*o, *p);
      for (const auto& member : *o) {
        steps_.push_back({member.key(), kKey});
        if (!visit(member.value())) return false;
        steps_.pop_back();
      }
    } else if (const auto* a = v.if_array()) {
      for (std::size_t i = 0; i < a->size(); ++i) {
        steps_.push_back({{}, i});
        if (!visit((*a)[i])) return false;
        steps_.pop_back();
      }
    }
    return true;
  }

  bool refuse(std::string reason) {
    reason_ = std::move(reason);
    return false;
  }

  // An object with a "__pickled__" member: a Python peer would likely unpickle it whatever else it holds,
  // so only the exact form is checked as a pickle, and every other form is refused.
  bool check(const json::object& o, const json::value& pickled) {
    if (mode_ == PickleMode::deny) return refuse("pickle = \"deny\" refuses every pickled value");
    if (o.size() != 1) {
      std::string others;
      for (const auto& member : o)
        if (member.key() != kPickledKey) others += fmt::format("{}\"{}\"", others.empty() ? "" : ", ",
                                                               log::printable(member.key(), 40));
      return refuse(fmt::format("malformed pickled value: \"__pickled__\" comes with other members ({})", others));
    }
    const auto* hex = pickled.if_string();
    if (!hex) return refuse("malformed pickled value: \"__pickled__\" is not a string");
    if (auto why = check_pickled_hex(*hex, limits_, bytes_, offset_)) return refuse(std::move(*why));
    return true;
  }

  std::string path() const {
    std::string out(base_);
    for (const auto& s : steps_) {
      if (s.index != kKey) out += fmt::format("[{}]", s.index);
      else if (!is_identifier(s.key)) out += fmt::format("[{}]", json::serialize(json::string_view(s.key)));
      else {
        if (!out.empty()) out += '.';
        out += s.key;
      }
    }
    return out;
  }

  PickleMode mode_;
  std::string_view base_;
  const PickleLimits& limits_;
  std::vector<Step> steps_;
  std::string bytes_;  // the decoded pickle, reused across values
  std::string reason_;
  std::optional<std::size_t> offset_;
};

// The same check over a JSON text, driven by the scanner's events. An object's members are only all
// known when it closes, so that is where an object with "__pickled__" is judged.
class TextPickleWalker final : public protocol::Visitor {
 public:
  TextPickleWalker(std::string_view text, PickleMode mode, std::string_view base, const PickleLimits& limits)
      : text_(text), mode_(mode), base_(base), limits_(limits) {}

  std::optional<PickleRefusal> walk() {
    if (auto error = protocol::walk(text_, *this, protocol::Limits{std::numeric_limits<std::size_t>::max()}))
      return PickleRefusal{std::string(base_),
                           fmt::format("the value is not valid JSON: {} (at byte {})", error->message, error->offset),
                           std::nullopt, mode_};
    return std::move(refusal_);
  }

  bool begin(protocol::Kind kind, std::size_t) override {
    if (!frames_.empty()) {
      Frame& parent = frames_.back();
      steps_.push_back(parent.object ? Step{parent.key, 0, true} : Step{{}, parent.index, false});
      if (parent.object && parent.key_is_pickled) parent.pickled_kind = kind;
    }
    Frame frame;
    frame.object = kind == protocol::Kind::object;
    frames_.push_back(std::move(frame));
    return true;
  }

  bool key(protocol::Slice literal) override {
    Frame& f = frames_.back();
    f.key = literal;
    f.key_is_pickled = is_pickled_key(literal.of(text_));
    if (f.key_is_pickled) ++f.pickled;
    else if (f.others.size() < 8) f.others.push_back(literal);
    else ++f.more_others;
    return true;
  }

  bool scalar(protocol::Kind kind, protocol::Slice value) override {
    if (frames_.empty()) return true;
    Frame& parent = frames_.back();
    if (parent.object && parent.key_is_pickled) {
      parent.pickled_kind = kind;
      parent.pickled_value = value;
    }
    ++parent.index;
    return true;
  }

  // A pickled object is judged as a whole, as the tree walker does: its verdict replaces whatever was
  // found inside it. Otherwise the first refusal found inside a container is the container's. The walk
  // goes on to the end (an enclosing object may yet turn out to be pickled).
  bool end(protocol::Kind, protocol::Slice) override {
    Frame& f = frames_.back();
    std::optional<PickleRefusal> refusal = std::move(f.refusal);
    const bool wanted = frames_.size() == 1 ? !refusal_ : !frames_[frames_.size() - 2].refusal;
    if (f.object && f.pickled > 0) {
      refusal.reset();
      // (A refusal is kept only when none was found before it at its level: later ones are not checked.)
      if (wanted && !check(f)) refusal = PickleRefusal{path(), std::move(reason_), offset_, mode_};
      offset_.reset();
    }
    frames_.pop_back();
    if (!steps_.empty()) steps_.pop_back();
    if (frames_.empty()) {
      if (!refusal_) refusal_ = std::move(refusal);
    } else {
      Frame& parent = frames_.back();
      if (!parent.refusal) parent.refusal = std::move(refusal);
      ++parent.index;
    }
    return true;
  }

 private:
  struct Frame {
    bool object = false;
    std::size_t index = 0;  // arrays: the element being read
    protocol::Slice key;    // objects: the member being read
    bool key_is_pickled = false;
    std::size_t pickled = 0;                // "__pickled__" members
    protocol::Kind pickled_kind = protocol::Kind::null;  // of the last one
    protocol::Slice pickled_value;          // of the last one, when a string
    std::vector<protocol::Slice> others;    // the first few other keys, for the message
    std::size_t more_others = 0;
    std::optional<PickleRefusal> refusal;   // the first one found inside
  };
  struct Step {
    protocol::Slice key;
    std::size_t index;
    bool is_key;
  };

  // Only a key whose literal could spell __pickled__ (13 bytes, or up to 6 per character when
  // escaped) is decoded.
  static bool is_pickled_key(std::string_view literal) {
    if (literal == "\"__pickled__\"") return true;
    if (literal.size() <= 13 || literal.size() > 2 + 6 * kPickledKey.size() ||
        literal.find('\\') == std::string_view::npos)
      return false;
    return protocol::decode_string(literal) == kPickledKey;
  }

  bool refuse(std::string reason) {
    reason_ = std::move(reason);
    return false;
  }

  bool check(const Frame& f) {
    if (mode_ == PickleMode::deny) return refuse("pickle = \"deny\" refuses every pickled value");
    if (!f.others.empty()) {
      std::string others;
      for (const auto& key : f.others)
        others += fmt::format("{}\"{}\"", others.empty() ? "" : ", ",
                              log::printable(protocol::decode_string(key.of(text_)), 40));
      if (f.more_others) others += fmt::format(" and {} more", f.more_others);
      return refuse(fmt::format("malformed pickled value: \"__pickled__\" comes with other members ({})", others));
    }
    if (f.pickled_kind != protocol::Kind::string)
      return refuse("malformed pickled value: \"__pickled__\" is not a string");
    const std::string hex = protocol::decode_string(f.pickled_value.of(text_));
    std::string bytes;
    if (auto why = check_pickled_hex(hex, limits_, bytes, offset_)) return refuse(std::move(*why));
    return true;
  }

  // Where the walk stopped: the object being judged (its steps are still on the stack).
  std::string path() const {
    std::string out(base_);
    for (const auto& s : steps_) {
      if (!s.is_key) {
        out += fmt::format("[{}]", s.index);
        continue;
      }
      const std::string key = protocol::decode_string(s.key.of(text_));
      if (!is_identifier(key)) {
        out += fmt::format("[{}]", protocol::quote(key));
      } else {
        if (!out.empty()) out += '.';
        out += key;
      }
    }
    return out;
  }

  std::string_view text_;
  PickleMode mode_;
  std::string_view base_;
  const PickleLimits& limits_;
  std::vector<Frame> frames_;
  std::vector<Step> steps_;
  std::string reason_;
  std::optional<std::size_t> offset_;
  std::optional<PickleRefusal> refusal_;  // the root's
};

}  // namespace

std::optional<PickleRefusal> inspect_pickles(const boost::json::value& v, PickleMode mode, std::string_view path,
                                             const PickleLimits& limits) {
  if (mode == PickleMode::allow) return std::nullopt;
  return PickleWalker(mode, path, limits).walk(v);
}

std::optional<PickleRefusal> inspect_pickles_text(std::string_view json_text, PickleMode mode, std::string_view path,
                                                  const PickleLimits& limits) {
  if (mode == PickleMode::allow) return std::nullopt;
  return TextPickleWalker(json_text, mode, path, limits).walk();
}

std::string describe(const PickleRefusal& r, std::string_view library, std::string_view given_hint) {
  std::string where = r.path.empty() ? "a pickled value" : fmt::format("the pickled value at {}", r.path);
  std::string at = r.offset ? fmt::format(" (pickle byte {})", *r.offset) : "";
  std::string hint =
      r.mode == PickleMode::deny
          ? fmt::format("set pickle = \"data-only\" (plain data) or \"allow\" (unchecked) for library '{}' to let "
                        "pickled values through",
                        library)
          : fmt::format("set pickle = \"allow\" for library '{}' to pass it unchecked", library);
  return fmt::format("{} was refused: {}{}; {}", where, r.reason, at, given_hint.empty() ? hint : std::string(given_hint));
}

}  // namespace rjg::pickle
