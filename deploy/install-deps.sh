#!/usr/bin/env bash
# Installs the Debian 12 packages the project builds with, only those that are missing; packages named
# as arguments too (deploy/bench.sh adds gnuplot). Used by quickstart.sh, test.sh and bench.sh; safe to
# run again.
#
#   deploy/install-deps.sh [PACKAGE...]          what building and testing everything needs
#   deploy/install-deps.sh --build [PACKAGE...]  what building the programs needs, no more (the quick start)
set -euo pipefail

# What the gateway, its client and its workers are built from.
packages=(
  g++ cmake ninja-build pkg-config
  libboost1.81-dev libboost-json1.81-dev   # Asio, Beast (headers) and JSON
  libfmt-dev                               # formatting for log lines and messages
  libtomlplusplus-dev                      # the configuration file
  libexpat1-dev                            # XML-RPC for the classic Remote bridge (common/xmlrpc)
)
# What the tests, the fuzz targets and the package's check need besides.
test_packages=(
  libgtest-dev                             # unit and integration tests
  procps                                   # pgrep/ps for the quick start's checks
  strace                                   # counting the relay's system calls (a test and the benchmark)
  clang libclang-rt-14-dev                 # fuzz targets (deploy/fuzz.sh): clang, libFuzzer and its ASan/UBSan runtimes
  dpkg-dev file                            # the Debian package: cpack's dependency list (dpkg-shlibdeps, which needs file)
  lintian                                  # the package's test (deploy/package-check.sh): no lintian errors
  systemd                                  # systemd-analyze (unit security rating, verify), systemd-sysusers/-tmpfiles
                                           # (package test), systemd-socket-activate (socket activation tests)
  prometheus                               # promtool checks /metrics (admin_test) and the shipped alerting rules
                                           # (tests/monitoring); its server is not wanted here
  haproxy                                  # two gateways behind a real HAProxy (haproxy_test); its service is not wanted
  python3                                  # the classic Remote tests: Python's own xmlrpc.client and xmlrpc.server,
                                           # and the pickle codec's check against CPython (nothing is installed into it)
  python3-yaml                             # tests/monitoring reads the alerting rules' expressions
  chromium                                 # the status page in a real browser (tests/browser): the DOM it renders,
                                           # its console and its requests, which only a browser can tell
)
if [[ ${1:-} == --build ]]; then
  shift
else
  packages+=("${test_packages[@]}")
fi

packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing packages: ${missing[*]}; run as root (or install them) first" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Only promtool is used: a Prometheus server the package started would scrape and listen for nothing.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [[ -d /run/systemd/system ]]; then
    systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
  fi
  if [[ " ${missing[*]} " == *" haproxy "* ]] && [[ -d /run/systemd/system ]]; then
    systemctl disable --now haproxy >/dev/null 2>&1 || true
  fi
fi
