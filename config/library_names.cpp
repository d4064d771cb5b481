// Library names: glob routes, what a glob may import (names, the deny list), and the concrete
// library a glob entry becomes for one name. The loader that reads them is config.cpp.
#include "config/config.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::config {
bool same_settings(const Library& a, const Library& b) {
  Library moved = b;
  moved.source_line = a.source_line;
  return a == moved;
}

std::optional<ReferenceServerCommand> reference_server_command(const std::vector<std::string>& command) {
  if (command.empty()) return std::nullopt;
  ReferenceServerCommand out{{command.front()}, {}};
  std::size_t i = 1;
  // The interpreter's own options before -m: flags ("-u", "-OO", "-I"), and -X and -W with their value.
  while (i < command.size() && command[i] != "-m") {
    const std::string& option = command[i];
    if (option.size() < 2 || option[0] != '-' || option == "-c" || option == "--") return std::nullopt;
    const bool takes_value = option == "-X" || option == "-W";
    if (takes_value && i + 1 >= command.size()) return std::nullopt;
    out.interpreter.insert(out.interpreter.end(), command.begin() + static_cast<std::ptrdiff_t>(i),
                           command.begin() + static_cast<std::ptrdiff_t>(i + (takes_value ? 2 : 1)));
    i += takes_value ? 2 : 1;
  }
  if (i + 1 >= command.size() || command[i + 1] != kReferenceServerModule) return std::nullopt;
  out.server_args.assign(command.begin() + static_cast<std::ptrdiff_t>(i + 2), command.end());
  if (std::find(out.server_args.begin(), out.server_args.end(), "--stdio") == out.server_args.end()) return std::nullopt;
  return out;
}

bool is_glob(std::string_view name) { return name.find_first_of("*?") != std::string_view::npos; }
bool Library::is_glob() const { return config::is_glob(name); }

bool glob_match(std::string_view glob, std::string_view name) {
  // '*' is '?' followed by a run of any length.
  std::string pattern;
  for (char c : glob) pattern += c == '*' ? std::string_view("?*") : std::string_view(&c, 1);
  // Iterative, with one backtrack point: linear in practice, never exponential.
  std::size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool valid_import_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxImportName) return false;
  bool part_start = true;
  for (char c : name) {
    const bool letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (c == '.') {
      if (part_start) return false;  // a leading '.', or ".."
      part_start = true;
      continue;
    }
    if (!letter && !digit) return false;
    if (part_start && (digit || c == '_')) return false;
    part_start = false;
  }
  return !part_start;  // not ending with '.'
}

const std::vector<std::string>& default_deny() {
  // Robot Framework's standard libraries (robot/libraries: STDLIBS) and robot itself, and the top-level
  // modules of Python 3's standard library (sys.stdlib_module_names of 3.12; private ones, with a leading
  // '_', are refused by valid_import_name already).
  static const std::vector<std::string> names = {
      "BuiltIn", "Collections", "DateTime", "Dialogs", "Easter", "OperatingSystem", "Process", "Remote",
      "Reserved", "Screenshot", "String", "Telnet", "XML", "robot", "JsonRpcRemote", "robotframework_jsonrpcremote",
      "__future__", "__main__", "_thread", "abc", "aifc", "antigravity", "argparse", "array", "ast", "asynchat",
      "asyncio", "asyncore", "atexit", "audioop", "base64", "bdb", "binascii", "bisect", "builtins", "bz2",
      "cProfile", "calendar", "cgi", "cgitb", "chunk", "cmath", "cmd", "code", "codecs", "codeop", "collections",
      "colorsys", "compileall", "concurrent", "configparser", "contextlib", "contextvars", "copy", "copyreg",
      "crypt", "csv", "ctypes", "curses", "dataclasses", "datetime", "dbm", "decimal", "difflib", "dis",
      "distutils", "doctest", "email", "encodings", "ensurepip", "enum", "errno", "faulthandler", "fcntl",
      "filecmp", "fileinput", "fnmatch", "fractions", "ftplib", "functools", "gc", "genericpath", "getopt",
      "getpass", "gettext", "glob", "graphlib", "grp", "gzip", "hashlib", "heapq", "hmac", "html", "http",
      "idlelib", "imaplib", "imghdr", "imp", "importlib", "inspect", "io", "ipaddress", "itertools", "json",
      "keyword", "lib2to3", "linecache", "locale", "logging", "lzma", "mailbox", "mailcap", "marshal", "math",
      "mimetypes", "mmap", "modulefinder", "msilib", "msvcrt", "multiprocessing", "netrc", "nis", "nntplib",
      "nt", "ntpath", "nturl2path", "numbers", "opcode", "operator", "optparse", "os", "ossaudiodev", "pathlib",
      "pdb", "pickle", "pickletools", "pipes", "pkgutil", "platform", "plistlib", "poplib", "posix", "posixpath",
      "pprint", "profile", "pstats", "pty", "pwd", "py_compile", "pyclbr", "pydoc", "pydoc_data", "pyexpat",
      "queue", "quopri", "random", "re", "readline", "reprlib", "resource", "rlcompleter", "runpy", "sched",
      "secrets", "select", "selectors", "shelve", "shlex", "shutil", "signal", "site", "smtpd", "smtplib",
      "sndhdr", "socket", "socketserver", "spwd", "sqlite3", "sre_compile", "sre_constants", "sre_parse", "ssl",
      "stat", "statistics", "string", "stringprep", "struct", "subprocess", "sunau", "symtable", "sys",
      "sysconfig", "syslog", "tabnanny", "tarfile", "telnetlib", "tempfile", "termios", "textwrap", "this",
      "threading", "time", "timeit", "tkinter", "token", "tokenize", "tomllib", "trace", "traceback",
      "tracemalloc", "tty", "turtle", "turtledemo", "types", "typing", "unicodedata", "unittest", "urllib", "uu",
      "uuid", "venv", "warnings", "wave", "weakref", "webbrowser", "winreg", "winsound", "wsgiref", "xdrlib",
      "xml", "xmlrpc", "zipapp", "zipfile", "zipimport", "zlib", "zoneinfo"};
  return names;
}

bool denied(const Library& library, std::string_view name) {
  const auto& list = library.deny ? *library.deny : default_deny();
  auto listed = [&](std::string_view text) { return std::find(list.begin(), list.end(), text) != list.end(); };
  if (listed(name)) return true;
  // Each dotted prefix ("a", "a.b" of "a.b.c") and each part ("b", "c"): a library that imports os makes
  // "Lib.os" the module os itself.
  for (std::size_t start = 0, dot;; start = dot + 1) {
    dot = name.find('.', start);
    if (listed(name.substr(0, dot)) || listed(name.substr(start, dot - start))) return true;
    if (dot == std::string_view::npos) return false;
  }
}

GlobRefusal glob_refusal(const Library& entry, std::string_view name) {
  if (!valid_import_name(name)) return GlobRefusal::not_a_name;
  if (denied(entry, name)) return GlobRefusal::denied;
  // Every literal '.' of the pattern matches a '.' of the name: more dots in the name than in the pattern
  // means a wildcard took one, so the client chose a dotted part.
  const auto dots = [](std::string_view text) { return std::count(text.begin(), text.end(), '.'); };
  const bool client_dot = dots(name) > dots(entry.name);
  if (client_dot && !entry.dotted) return GlobRefusal::dotted;
  // The host of a tcp:// or a classic http:// upstream: what lies between "://" and the next ':' or '/'.
  const std::string_view address = entry.upstream.empty() ? entry.classic_upstream : entry.upstream;
  const auto scheme = address.find("://");
  const auto host_start = scheme == std::string_view::npos ? 0 : scheme + 3;
  const auto host = address.substr(host_start, address.find_first_of(":/", host_start) - host_start);
  if (name.find('.') != std::string_view::npos && host.find("{library}") != std::string_view::npos)
    return GlobRefusal::chooses_host;
  return GlobRefusal::none;
}

namespace {
void substitute(std::string& text, std::string_view name) {
  for (std::size_t at = 0; (at = text.find("{library}", at)) != std::string::npos; at += name.size())
    text.replace(at, 9, name);
}
}  // namespace

std::string Library::import_name() const {
  if (is_upstream()) return upstream_name.empty() ? label() : upstream_name;
  if (!imported.empty() && !name_in_command) return imported;
  return "";
}

Library concrete(const Library& entry, std::string_view name) {
  Library library = entry;
  library.imported = std::string(name);
  auto names = [](const std::string& item) { return item.find("{library}") != std::string::npos; };
  library.name_in_command = std::any_of(entry.command.begin(), entry.command.end(), names);
  library.name_dependent = library.name_in_command || names(entry.upstream) ||
                           std::any_of(entry.env.begin(), entry.env.end(), [&](const auto& e) { return names(e.second); });
  for (auto& item : library.command) substitute(item, name);
  for (auto& [key, value] : library.env) substitute(value, name);
  substitute(library.upstream, name);
  substitute(library.upstream_name, name);
  return library;
}

}  // namespace rjg::config
