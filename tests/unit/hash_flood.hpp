// Keys that collide in Boost.JSON 1.81's object hash table, for the tests and the benchmark that show
// the gateway's scanner does the same work for them as for any keys.
//
// Boost.JSON hashes a key with FNV-1a from (offset basis + salt), where the salt is the address of the
// table, and picks the bucket as hash % capacity; a parsed object's capacity is its member count. Two
// facts make the salt matter little: a difference in the state above its lowest byte only adds a
// constant (the same for every key of one length) to the final hash, and the low bits of the hash
// depend only on the low bits of the state. So keys of one length whose hashes agree modulo 2^20 from
// a start whose lowest byte is known agree modulo 2^20 for every salt with that lowest byte, and fall
// into one bucket of any table of 2^k <= 2^20 buckets. A table of 2^17 members is allocated with
// mmap, at a page boundary plus malloc's 16-byte header: its salt's lowest byte is 0x10.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rjg::test {

inline constexpr std::uint64_t kFnvPrime = 0x100000001B3ULL;
inline constexpr std::uint64_t kFnvBasis = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t kFloodModulus = std::uint64_t{1} << 20;

inline std::uint64_t fnv_step(std::uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) h = (h ^ c) * kFnvPrime;
  return h;
}

// 2^stages keys of 4 * stages lowercase letters, all with one Boost.JSON hash modulo 2^20 for every salt
// whose lowest byte is `salt_low_byte`. Each stage offers two 4-letter blocks that lead from the state
// before them to one state modulo 2^20 (found by a birthday search); a key picks one block per stage.
inline std::vector<std::string> colliding_keys(unsigned stages, unsigned char salt_low_byte = 0x10) {
  std::uint64_t state = kFnvBasis + salt_low_byte;  // the salt's higher bytes only add a constant
  std::vector<std::pair<std::string, std::string>> choices;
  std::vector<std::uint32_t> seen(kFloodModulus, 0);  // state mod 2^20 -> block number + 1
  for (unsigned stage = 0; stage < stages; ++stage) {
    std::fill(seen.begin(), seen.end(), 0);
    auto block_of = [](std::uint32_t n) {
      std::string b(4, 'a');
      for (int i = 3; i >= 0; --i, n /= 26) b[static_cast<std::size_t>(i)] = static_cast<char>('a' + n % 26);
      return b;
    };
    bool found = false;
    for (std::uint32_t n = 0; n < 26u * 26 * 26 * 26 && !found; ++n) {
      const std::string block = block_of(n);
      const auto low = static_cast<std::uint32_t>(fnv_step(state, block) % kFloodModulus);
      if (seen[low] != 0) {
        choices.emplace_back(block_of(seen[low] - 1), block);
        state = fnv_step(state, block);
        found = true;
      } else {
        seen[low] = n + 1;
      }
    }
    if (!found) throw std::runtime_error("colliding_keys: no colliding pair of blocks");
  }
  std::vector<std::string> keys;
  keys.reserve(std::size_t{1} << stages);
  for (std::size_t pick = 0; pick < (std::size_t{1} << stages); ++pick) {
    std::string key;
    for (unsigned stage = 0; stage < stages; ++stage)
      key += (pick >> stage & 1) ? choices[stage].second : choices[stage].first;
    keys.push_back(std::move(key));
  }
  return keys;
}

// As many keys of the same length as colliding_keys(stages), spread over the hash as any keys are.
inline std::vector<std::string> ordinary_keys(unsigned stages) {
  std::vector<std::string> keys;
  keys.reserve(std::size_t{1} << stages);
  for (std::size_t i = 0; i < (std::size_t{1} << stages); ++i) {
    std::string key(4 * stages, 'a');
    std::size_t n = i;
    for (std::size_t k = key.size(); k-- > 0 && n > 0; n /= 26) key[k] = static_cast<char>('a' + n % 26);
    keys.push_back(std::move(key));
  }
  return keys;
}

// {"k1":0,"k2":0,...}
inline std::string object_of_keys(const std::vector<std::string>& keys) {
  std::string out = "{";
  for (const auto& k : keys) {
    if (out.size() > 1) out += ',';
    out += '"';
    out += k;
    out += "\":0";
  }
  out += '}';
  return out;
}

}  // namespace rjg::test
