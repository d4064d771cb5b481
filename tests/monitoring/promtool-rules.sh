#!/usr/bin/env bash
# promtool's syntax check of the shipped alerting rules, then its unit tests of them (rules_test.yml:
# each rule fires where it should, with its annotations as an operator reads them, and stays quiet just
# below its bound). The ctest test monitoring.rules runs it; by hand: tests/monitoring/promtool-rules.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v promtool >/dev/null || {
  echo "FAIL: promtool is missing: install the Debian package prometheus (deploy/install-deps.sh does)" >&2
  exit 1
}
promtool check rules "$here/../../deploy/prometheus/robot-jsonrpc-gateway.rules.yml"
# Relative to the test file: rule_files names ../../deploy/prometheus/robot-jsonrpc-gateway.rules.yml.
promtool test rules "$here/rules_test.yml"
