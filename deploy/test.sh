#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs every test (unit and integration).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/deploy/install-deps.sh"
BUILD_DIR=$build "$top/deploy/build.sh" -DRJG_BUILD_TESTS=ON
cd "$build"
ctest --output-on-failure --timeout 300 -j2
