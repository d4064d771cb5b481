#include "gateway/supervisor/metrics.hpp"

#include <fmt/format.h>

namespace rjg::gateway::supervisor {

void Histogram::observe(std::chrono::steady_clock::duration d) {
  const double seconds = std::chrono::duration<double>(d).count();
  std::size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count()),
                    std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, std::string_view name, std::string_view labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, kBounds[i], cumulative);
  }
  cumulative += buckets_[kBounds.size()].load(std::memory_order_relaxed);
  // +Inf equals _count by construction only if read at one instant: use the bucket sum for both.
  out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, cumulative);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, static_cast<double>(sum_us_.load(std::memory_order_relaxed)) / 1e6);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, cumulative);
}

LibraryMetrics& Metrics::library(std::string_view name) {
  std::lock_guard lock(mutex_);
  auto it = libraries_.find(name);
  if (it == libraries_.end()) it = libraries_.emplace(std::string(name), std::make_unique<LibraryMetrics>()).first;
  return *it->second;
}

std::vector<std::pair<std::string, const LibraryMetrics*>> Metrics::libraries() const {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<std::string, const LibraryMetrics*>> out;
  for (const auto& [name, m] : libraries_) out.emplace_back(name, m.get());
  return out;
}

std::string label_value(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace rjg::gateway::supervisor
