#include "gateway/session/token_map.hpp"

#include <sys/random.h>

#include <cerrno>
#include <stdexcept>

namespace rjg::gateway::session {

std::string TokenMap::new_token(std::string_view library) {
  unsigned char bytes[16];
  std::size_t filled = 0;
  while (filled < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("getrandom failed: cannot issue a library token");
    }
    filled += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token(library);
  token += '-';
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

void TokenMap::add(Import import) {
  auto key = import.token;
  imports_.emplace(std::move(key), std::move(import));
}

const Import* TokenMap::find(std::string_view token) const {
  auto it = imports_.find(std::string(token));
  return it == imports_.end() ? nullptr : &it->second;
}

Import* TokenMap::find(std::string_view token) {
  auto it = imports_.find(std::string(token));
  return it == imports_.end() ? nullptr : &it->second;
}

std::optional<Import> TokenMap::remove(std::string_view token) {
  auto it = imports_.find(std::string(token));
  if (it == imports_.end()) return std::nullopt;
  Import import = std::move(it->second);
  imports_.erase(it);
  return import;
}

std::vector<Import> TokenMap::take_all() {
  std::vector<Import> all;
  all.reserve(imports_.size());
  for (auto& [token, import] : imports_) all.push_back(std::move(import));
  imports_.clear();
  return all;
}

std::string to_worker(const protocol::RunKeyword& params, const Import& import) {
  return params.with({{params.library_token_value, protocol::quote(import.worker_token)}});
}

std::string finalize_params(const Import& import) {
  return "{\"token\":" + protocol::quote(import.worker_token) + "}";
}

std::optional<WorkerToken> worker_token_of(const protocol::Message& import_answer) {
  auto result = import_answer.result_slice();
  if (!result) return std::nullopt;
  const std::string_view text = result->of(import_answer.text());
  const auto members = protocol::members(text);
  const auto* token = protocol::find(members, "token");
  if (!token || token->kind != protocol::Kind::string) return std::nullopt;
  WorkerToken found{protocol::decode_string(token->value.of(text)), {result->offset + token->value.offset, token->value.size}};
  if (found.token.empty()) return std::nullopt;
  return found;
}

std::string to_client(const protocol::Message& import_answer, const WorkerToken& worker_token, std::string_view client_id_text,
                      std::string_view gateway_token) {
  return import_answer.with_id(client_id_text, {{worker_token.where, protocol::quote(gateway_token)}});
}

}  // namespace rjg::gateway::session
