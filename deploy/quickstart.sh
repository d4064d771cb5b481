#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the gateway on the bundled example
# configuration (native example libraries on tcp://127.0.0.1:8271) in the foreground. Ctrl-C stops it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/deploy/install-deps.sh"
BUILD_DIR=${BUILD_DIR:-$top/build} "$top/deploy/build.sh" -DRJG_BUILD_TESTS=OFF
build=${BUILD_DIR:-$top/build}
echo "gateway: $build/bin/robot-jsonrpc-gateway --config $top/config/example.toml" >&2
echo "try, in another terminal: $build/bin/robot-jsonrpc-cli run Calculator Add 1 2" >&2
exec "$build/bin/robot-jsonrpc-gateway" --config "$top/config/example.toml"
