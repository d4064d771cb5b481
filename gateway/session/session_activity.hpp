// What a session is doing, for /status and the status page: the libraries it holds and the keywords it
// is running, each since when. The session writes it on its own loop; the server reads it on loop 0, so
// a mutex guards it (a few short critical sections per keyword, none while one runs).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rjg::gateway::session {

class SessionActivity {
 public:
  using clock = std::chrono::steady_clock;
  struct Running {
    std::string library;  // as the client imported it (a glob entry's imported name)
    std::string keyword;  // as the client sent it, at most kKeywordShown bytes: client text, escaped where shown
    clock::time_point since;
  };
  struct Snapshot {
    std::map<std::string, std::size_t> libraries;  // imported name: imports held
    std::vector<Running> keywords;                 // oldest first
  };

  // A keyword's name is the client's choice and may be as long as a message: what is kept of it for
  // the page is bounded (cut at a character boundary), so no page costs memory that the request did not.
  static constexpr std::size_t kKeywordShown = 200;

  // Ends the keyword's entry when it goes out of scope, however the keyword ends.
  class KeywordScope {
   public:
    KeywordScope(SessionActivity& activity, std::uint64_t id) : activity_(&activity), id_(id) {}
    KeywordScope(KeywordScope&& other) noexcept : activity_(std::exchange(other.activity_, nullptr)), id_(other.id_) {}
    KeywordScope(const KeywordScope&) = delete;
    KeywordScope& operator=(const KeywordScope&) = delete;
    KeywordScope& operator=(KeywordScope&&) = delete;
    ~KeywordScope() {
      if (activity_) activity_->keyword_ended(id_);
    }

   private:
    SessionActivity* activity_;
    std::uint64_t id_;
  };

  void library_imported(const std::string& library) {
    std::lock_guard lock(mutex_);
    ++libraries_[library];
  }
  void library_finalized(const std::string& library) {
    std::lock_guard lock(mutex_);
    if (auto it = libraries_.find(library); it != libraries_.end() && --it->second == 0) libraries_.erase(it);
  }
  // The keyword counts as running (waiting for its worker included) until the scope ends.
  [[nodiscard]] KeywordScope keyword_started(std::string library, std::string keyword) {
    if (keyword.size() > kKeywordShown) {
      std::size_t cut = kKeywordShown;
      while (cut > 0 && (static_cast<unsigned char>(keyword[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
      keyword.resize(cut);
      keyword += "\xe2\x80\xa6";  // …
    }
    std::lock_guard lock(mutex_);
    const auto id = next_id_++;
    keywords_.emplace(id, Running{std::move(library), std::move(keyword), clock::now()});
    return KeywordScope(*this, id);
  }

  Snapshot snapshot() const {
    std::lock_guard lock(mutex_);
    Snapshot out{libraries_, {}};
    out.keywords.reserve(keywords_.size());
    for (const auto& [id, running] : keywords_) out.keywords.push_back(running);  // ids grow: oldest first
    return out;
  }

 private:
  void keyword_ended(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    keywords_.erase(id);
  }

  mutable std::mutex mutex_;
  std::map<std::string, std::size_t> libraries_;
  std::map<std::uint64_t, Running> keywords_;
  std::uint64_t next_id_ = 0;
};

}  // namespace rjg::gateway::session
