#include "workers/ansible/workspace.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string_view>
#include <system_error>

extern char** environ;

namespace rjg::ansible {
namespace {
namespace fs = std::filesystem;

// Writes the one task's outcome where the worker reads it. Ansible's own json callback lives in the
// ansible.posix collection, which ansible-core alone does not have.
constexpr std::string_view kCallback = R"(# Written by robot-ansible-worker: records the task's outcome in $RJG_ANSIBLE_RESULT.
import json
import os

from ansible.module_utils.common.json import AnsibleJSONEncoder
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'rjg_result'

    def _record(self, status, result):
        with open(os.environ['RJG_ANSIBLE_RESULT'], 'w') as f:
            json.dump({'status': status, 'result': result._result}, f, cls=AnsibleJSONEncoder)

    def v2_runner_on_ok(self, result):
        self._record('ok', result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record('failed', result)

    def v2_runner_on_unreachable(self, result):
        self._record('unreachable', result)

    def v2_runner_on_skipped(self, result):
        self._record('skipped', result)
)";

}  // namespace

void Workspace::create() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = fmt::format("{}/robot-ansible-worker.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!::mkdtemp(pattern.data()))
    throw std::system_error(errno, std::generic_category(), "cannot create a private directory " + pattern);
  dir_ = pattern;
  fs::create_directories(dir_ / "callback");
  fs::create_directories(dir_ / "tmp");
  std::ofstream(dir_ / "callback" / "rjg_result.py") << kCallback;

  const char* home = std::getenv("HOME");
  home_writable_ = home && *home && ::access(home, W_OK) == 0 &&
                   (!fs::exists(fs::path(home) / ".ansible") || ::access((fs::path(home) / ".ansible").c_str(), W_OK) == 0);
  std::map<std::string, std::string> overrides{
      {"ANSIBLE_STDOUT_CALLBACK", "rjg_result"},
      {"ANSIBLE_NOCOLOR", "1"},
      {"ANSIBLE_RETRY_FILES_ENABLED", "0"},
      {"ANSIBLE_LOCAL_TEMP", (dir_ / "tmp").string()},
  };
  const char* callbacks = std::getenv("ANSIBLE_CALLBACK_PLUGINS");
  overrides["ANSIBLE_CALLBACK_PLUGINS"] =
      (dir_ / "callback").string() + ":" +
      (callbacks && *callbacks ? callbacks : "~/.ansible/plugins/callback:/usr/share/ansible/plugins/callback");
  // Ansible keeps its state under ~/.ansible; a service user's HOME is often missing or read-only.
  if (!home_writable_) overrides["ANSIBLE_HOME"] = (dir_ / "home").string();
  if (!std::getenv("LC_ALL") && !std::getenv("LC_CTYPE") && !std::getenv("LANG")) overrides["LANG"] = "C.UTF-8";
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    if (!overrides.count(std::string(entry.substr(0, entry.find('='))))) env_.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) env_.push_back(name + "=" + value);
}

void Workspace::remove() {
  std::error_code ignored;
  if (!dir_.empty()) fs::remove_all(dir_, ignored);
}

fs::path Workspace::new_run_dir() {
  std::string pattern = (dir_ / fmt::format("run-{}-XXXXXX", ++runs_)).string();
  if (!::mkdtemp(pattern.data()))
    throw std::system_error(errno, std::generic_category(), "cannot create a directory " + pattern);
  return pattern;
}

}  // namespace rjg::ansible
