// Every configuration key, declared once (keys.cpp): its table, type, default, allowed values, a line of
// documentation and how it fills the model. The loader (config.cpp) and the reference in doc/configuration.md
// (reference.cpp) both come from these tables.
#pragma once

#include "config/config.hpp"
#include "config/reader.hpp"

#include <toml++/toml.h>

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rjg::config::detail {

// One key of a table whose values fill a Model: Gateway ([gateway]), Library ([[library]] and [defaults])
// or ResourceLimits (rlimits).
template <class Model>
struct Key {
  std::string_view name;
  // For the reference: the type ("duration", "array of strings"), the built-in default as written in the
  // file ("`\"30s\"`", or "required"), the allowed values ("1 to 64"; "" when any value of the type is) and
  // what the key does, in one line.
  std::string type;
  std::string default_text;
  std::string range;
  std::string_view doc;
  // Library keys: may also be set in [defaults], which every [[library]] starts from.
  bool in_defaults = false;
  // Required keys: what the problem for a table without the key expects ("the name clients import, ...").
  std::string_view missing;
  // Reads a value present in the file into the model, or reports what is wrong with it. `key` names it in
  // messages ("library[2].prewarm").
  std::function<void(Reader&, const toml::node&, const std::string& key, Model&)> load;
};

// The keys of each table, in documentation order (which is also the order of "known keys are: ...").
const std::vector<Key<Gateway>>& gateway_keys();
const std::vector<Key<Admin>>& admin_keys();
const std::vector<Key<Classic>>& classic_keys();
const std::vector<Key<Library>>& library_keys();
const std::vector<Key<ResourceLimits>>& rlimit_keys();

inline constexpr std::pair<std::string_view, Isolation> kIsolations[] = {{"session", Isolation::session},
                                                                         {"shared", Isolation::shared}};
inline constexpr std::pair<std::string_view, PicklePolicy> kPicklePolicies[] = {
    {"allow", PicklePolicy::allow}, {"data-only", PicklePolicy::data_only}, {"deny", PicklePolicy::deny}};
inline constexpr std::pair<std::string_view, Arguments> kArgumentModes[] = {
    {"auto", Arguments::auto_}, {"escape", Arguments::escape}, {"as-is", Arguments::as_is}};
inline constexpr std::pair<std::string_view, CpuAffinity> kCpuAffinities[] = {{"any", CpuAffinity::any},
                                                                             {"one", CpuAffinity::one}};
inline constexpr std::pair<std::string_view, WorkerLoss> kWorkerLossModes[] = {{"reimport", WorkerLoss::reimport},
                                                                            {"fail", WorkerLoss::fail}};

// Every key of `table` must be in `known`: a typo would otherwise silently fall back to a default. An
// unknown key is reported with the table it belongs in, or the known key it was surely meant to be.
// `context` names the table in messages ("[gateway]", "[[library]] table library[0]").
void check_keys(Reader& reader, const toml::table& table, std::string_view context,
                const std::vector<std::string_view>& known);

// Checks the keys of `table`, then loads each key present into `model` in declaration order, and reports
// each required key that is missing. `prefix` starts the key names in messages ("library[0]");
// defaults_only: only the keys that [defaults] may set.
template <class Model>
void load_table(Reader& reader, const toml::table& table, std::string_view context, std::string_view prefix,
                const std::vector<Key<Model>>& keys, Model& model, bool defaults_only = false) {
  std::vector<std::string_view> known;
  for (const auto& key : keys)
    if (!defaults_only || key.in_defaults) known.push_back(key.name);
  check_keys(reader, table, context, known);
  for (const auto& key : keys) {
    if (defaults_only && !key.in_defaults) continue;
    if (auto* node = table.get(key.name))
      key.load(reader, *node, std::string(prefix) + "." + std::string(key.name), model);
    else if (!key.missing.empty())
      reader.problem(table.source(), std::string(context) + " has no '" + std::string(key.name) + "'; expected " +
                                         std::string(key.missing));
  }
}

}  // namespace rjg::config::detail
