// What each client holds of the gateway, against [gateway] max_sessions_per_client: its JSON-RPC sessions and
// the classic front's imports made for its calls, in one count, so that neither front lets one address take
// more than the other would. A client is a source address (IPv4-mapped ones as IPv4: address_text) or
// "uid N" on a Unix socket. Loop 0's: the listeners and the classic front count there.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

namespace rjg::gateway::fronts {

class ClientCounts {
 public:
  std::size_t held(const std::string& client) const {
    auto it = counts_.find(client);
    return it == counts_.end() ? 0 : it->second;
  }
  void add(const std::string& client) { ++counts_[client]; }
  // Forgets a client once it holds nothing, so the table does not grow with every address ever seen.
  void remove(const std::string& client) {
    if (auto it = counts_.find(client); it != counts_.end() && --it->second == 0) counts_.erase(it);
  }

 private:
  std::unordered_map<std::string, std::size_t> counts_;
};

// One thing a client holds, counted while this lives. Shares the counts: it may be let go of by a coroutine
// frame destroyed after whatever charged it (the classic front at exit).
class ClientCharge {
 public:
  ClientCharge() = default;
  ClientCharge(std::shared_ptr<ClientCounts> counts, std::string client)
      : counts_(std::move(counts)), client_(std::move(client)) {
    counts_->add(client_);
  }
  ClientCharge(ClientCharge&& other) noexcept
      : counts_(std::move(other.counts_)), client_(std::move(other.client_)) {}
  ClientCharge& operator=(ClientCharge&& other) noexcept {
    if (this != &other) {
      release();
      counts_ = std::move(other.counts_);
      client_ = std::move(other.client_);
    }
    return *this;
  }
  ClientCharge(const ClientCharge&) = delete;
  ClientCharge& operator=(const ClientCharge&) = delete;
  ~ClientCharge() { release(); }

  const std::string& client() const { return client_; }
  void release() {
    if (auto counts = std::exchange(counts_, nullptr)) counts->remove(client_);
  }

 private:
  std::shared_ptr<ClientCounts> counts_;
  std::string client_;
};

}  // namespace rjg::gateway::fronts
