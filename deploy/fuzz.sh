#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan into build-fuzz/ (or $BUILD_DIR),
# writes their seed corpora from tests/data and config/, and runs each for FUZZ_SECONDS (default 20).
# Exits non-zero if any target crashes, hangs, leaks or breaks an invariant, naming the reproducer.
#
#   deploy/fuzz.sh                          every target, 20 s each
#   FUZZ_SECONDS=3600 deploy/fuzz.sh        an hour each
#   deploy/fuzz.sh fuzz_pickle              one target
#   FUZZ_STEP=build deploy/fuzz.sh          only build (deploy/test.sh builds it while the TSan tests run)
#   FUZZ_STEP=run deploy/fuzz.sh            only run what was built
#
# The corpus of each target lives in BUILD/fuzz/corpus/TARGET and grows from run to run; crash inputs
# go to BUILD/fuzz/artifacts/TARGET/. Reproduce one with: BUILD/bin/TARGET ARTIFACT
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build-fuzz}
seconds=${FUZZ_SECONDS:-20}
data=$top/tests/data

step=${FUZZ_STEP:-all}
if [[ $step != run ]]; then
  "$top/deploy/install-deps.sh"
  cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DRJG_FUZZ=ON -DRJG_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target fuzz_all
  [[ $step == build ]] && exit 0
fi

corpus=$build/fuzz/corpus
"$build/bin/fuzz_make_corpus" "$corpus" "$data" "$top/config"

if (($#)); then
  targets=("$@")
else
  targets=()
  for f in "$build"/bin/fuzz_*; do
    name=$(basename "$f")
    [[ $name != fuzz_make_corpus ]] && targets+=("$name")
  done
fi

# File and line in the stacks: llvm-symbolizer when installed (package llvm-14), else binutils' addr2line.
if [[ -z ${ASAN_SYMBOLIZER_PATH:-} ]] && ! command -v llvm-symbolizer >/dev/null; then
  if [[ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]]; then
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
  elif command -v addr2line >/dev/null; then
    export ASAN_SYMBOLIZER_PATH=$(command -v addr2line)
  fi
fi
export ASAN_OPTIONS=${FUZZ_ASAN_OPTIONS:-detect_leaks=1:check_initialization_order=1:strict_string_checks=1}
export UBSAN_OPTIONS=${FUZZ_UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# One target per core at a time (each libFuzzer process runs one thread): the stage takes half as long on
# two cores. A target's report goes out as one block once it ends, so that two never interleave.
fuzz_one() {  # TARGET: runs it; its report on stderr; fails if it found something
  local t=$1 max_len artifacts log runs size reproducer
  # Longest input: a few frames of the recorded sessions; a configuration file; a pickle.
  case $t in
    fuzz_frame_reader | fuzz_message) max_len=65536 ;;
    fuzz_config) max_len=8192 ;;
    *) max_len=16384 ;;
  esac
  artifacts=$build/fuzz/artifacts/$t
  log=$build/fuzz/$t.log
  mkdir -p "$artifacts" "$corpus/$t"
  if "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    size=$(find "$corpus/$t" -type f | wc -l)
    echo "fuzz: $t passed in ${seconds}s: ${runs:-?} inputs, corpus $size files (log $log)" >&2
    return 0
  fi
  {
    # The sanitizer or invariant report, then where the input is.
    grep -v -E '^#[0-9]+|^INFO:|^	NEW_FUNC' "$log" | tail -n 60
    reproducer=$(sed -n "s/.*Test unit written to //p" "$log" | tail -n 1)
    echo "fuzz: $t FAILED; reproducer: ${reproducer:-none written (see $log)}"
    [[ -n $reproducer ]] && echo "fuzz: reproduce with: $build/bin/$t $reproducer"
  } >&2
  return 1
}

failed=()
running=()  # "pid target"
wait_one() {  # waits for the oldest running target
  local pid=${running[0]%% *} t=${running[0]#* }
  running=("${running[@]:1}")
  wait "$pid" || failed+=("$t")
}
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, $(nproc) at a time (corpora in $corpus)" >&2
for t in "${targets[@]}"; do
  ((${#running[@]} >= $(nproc))) && wait_one
  fuzz_one "$t" &
  running+=("$! $t")
done
while ((${#running[@]})); do wait_one; done

if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets passed (${seconds}s each)" >&2
