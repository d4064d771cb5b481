#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the gateway on the bundled example
# configuration (native example libraries on tcp://127.0.0.1:8271) in the foreground. Ctrl-C stops it.
# It installs only the build's packages and builds only what it runs: the gateway, the two example
# workers config/example.toml serves and the command-line client (deploy/build.sh builds the rest).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/deploy/install-deps.sh" --build
BUILD_DIR=$build TARGETS="robot-jsonrpc-gateway robot-example-calculator robot-example-strings robot-jsonrpc-cli" \
  "$top/deploy/build.sh" -DRJG_BUILD_TESTS=OFF
echo "gateway: $build/bin/robot-jsonrpc-gateway --config $top/config/example.toml" >&2
echo "try, in another terminal: $build/bin/robot-jsonrpc-cli run Calculator Add 1 2" >&2
exec "$build/bin/robot-jsonrpc-gateway" --config "$top/config/example.toml"
