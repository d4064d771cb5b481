#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR). Extra arguments go to the CMake configure step;
# TARGETS="a b" builds only those targets (and what they need) instead of everything. Files are compiled
# in batches (RJG_UNITY: a build from scratch takes about a third less compiler time); RJG_UNITY=OFF
# compiles each on its own, as a developer's incremental build wants.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DRJG_UNITY=${RJG_UNITY:-ON}" "$@" >/dev/null
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
