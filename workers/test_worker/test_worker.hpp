// What the test worker's keyword groups (protocol_keywords.cpp, process_keywords.cpp) share with its
// main() (test_worker.cpp): the process-wide state the keywords report or change, and two helpers.
#pragma once

#include "workers/sdk/sdk.hpp"

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace rjg::test_worker {

// --evaluate (robot_eval.hpp): arguments are resolved as Robot Framework resolves them in the reference
// server. The resolved import arguments of each instance, by the address of its ImportArgs.
inline bool g_evaluate = false;
inline std::map<const sdk::ImportArgs*, sdk::json::object> g_resolved_imports;
inline std::mutex g_resolved_imports_mutex;

// The descriptors open when main() began: what the worker inherited from whoever started it.
inline std::vector<int> g_fds_at_start;
// Set by 'Ignore Sigterm': after the session ends the worker keeps running until SIGKILL.
inline std::atomic<bool> g_linger{false};
// Library instances (imports) alive in this process, and keyword calls counted by 'Count Call'.
inline std::atomic<std::int64_t> g_live_instances{0};
inline std::atomic<std::int64_t> g_calls_counted{0};
// Imports this process has begun (its import hook ran), failed ones included ('Import Count').
inline std::atomic<std::int64_t> g_imports_handled{0};

// Open descriptors of this process, without the one used to list them.
std::vector<int> open_fds();
// Writes `text` to stderr (fd 2 itself, unbuffered).
void write_stderr(const std::string& text);

// Echo, failures, crashes, garbage, values as they travel and arguments as the library sees them.
void add_protocol_keywords(sdk::Library& lib);
// Pools, resource limits and process hygiene.
void add_process_keywords(sdk::Library& lib);

}  // namespace rjg::test_worker
