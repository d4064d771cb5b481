// robot-ansible-worker's private directory and the environment of its Ansible processes.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace rjg::ansible {

// The worker's private directory (callback plugin, Ansible's local temp, one folder per run) and the
// environment every Ansible process gets.
class Workspace {
 public:
  void create();
  void remove();

  const std::filesystem::path& dir() const { return dir_; }
  bool home_writable() const { return home_writable_; }
  std::vector<std::string> env() const { return env_; }
  // A directory no one could have prepared (Ansible reads ./ansible.cfg and plugins next to the playbook).
  std::filesystem::path new_run_dir();

 private:
  std::filesystem::path dir_;
  bool home_writable_ = true;
  std::vector<std::string> env_;
  std::atomic<std::uint64_t> runs_{0};
};

}  // namespace rjg::ansible
