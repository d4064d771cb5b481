#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs every test: against the normal build what only
# it can show (below) and then the Robot Framework suites of tests/conformance with the real Python peers
# (deploy/conformance.sh, BUILD/conformance/); the unit tests and the integration suite with
# AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/, clang); the integration tests where
# threads meet again with ThreadSanitizer (deploy/tsan.sh, build-tsan/); and each fuzz target briefly
# (deploy/fuzz.sh, on the ASan build's fuzzers). Fails if any stage fails; prints
# each stage's time at the end.
#
# Two builds of the tree (the TSan build holds only the gateway and the test worker), and each test
# program is compiled once. The integration tests are built in the first build and run against the
# gateway and workers of the ASan and the TSan build (RJG_BIN_DIR, a mix made by deploy/bin-mix.sh: the
# processes they start are what the sanitizers must see; with SANITIZE=0, against the first build's
# own, every test); the unit tests, which
# test code in-process, and the fuzz targets are built and run in the ASan build, one clang build with
# ASan, UBSan and libFuzzer's coverage (the unit tests run in the first build with SANITIZE=0).
# Node's MCP reference server, which the MCP adapter's tests run, is installed with npm into BUILD/npm
# (a pinned version) and named to every stage's tests in RJG_MCP_SERVER.
#
# The machine's two cores are kept busy from start to end: each sanitizer build runs, at the lowest CPU
# priority, beside the stage before it (the ASan build beside the first build's tests and the
# conformance suites, whose Python processes leave much of the CPU idle; the TSan build beside the ASan
# tests), and the TSan tests and the fuzzers, which run for a fixed time, beside the ASan tests' end.
#
#   SANITIZE=0    skip the ASan/UBSan build (and the fuzzers)   FUZZ_SECONDS=N  seconds per fuzz target (default 5; 0 skips)
#   TSAN=0        skip the ThreadSanitizer build
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
asan_build=${ASAN_BUILD_DIR:-$build-asan}
tsan_build=${TSAN_BUILD_DIR:-$build-tsan}
fuzz_seconds=${FUZZ_SECONDS:-5}
mcp_server_package=@modelcontextprotocol/server-everything@2026.8.31

# What the adapter workers' tests run, beyond the build's packages (the quick start needs neither):
# lld, LLVM's linker, for the two sanitizer builds (their 40-odd programs link in a quarter of GNU ld's
# time; the first build, which the package is made from, keeps the toolchain's own); ansible-core for
# robot-ansible-worker; Node.js and npm for Node's MCP reference server, installed
# below. Debian's nodejs and npm, unless a Node.js with npm is already there (NodeSource's nodejs
# package carries its own npm and conflicts with Debian's).
# A Node.js whose package left npm's own files without the command (/usr/lib/node_modules/npm) is used with
# them as they are: installing Debian's npm beside it would conflict.
test_packages=(lld ansible-core)
npm_cli=/usr/lib/node_modules/npm/bin/npm-cli.js
if ! command -v npm >/dev/null 2>&1 && ! { command -v node >/dev/null 2>&1 && [[ -f $npm_cli ]]; }; then
  test_packages+=(nodejs npm)
fi
"$top/deploy/install-deps.sh" "${test_packages[@]}"
npm() {  # (type -P: a binary only; command -v would find this function)
  if type -P npm >/dev/null; then command npm "$@"; else node "$npm_cli" "$@"; fi
}
# Each stage's build runs while the stage before it tests, at the lowest CPU priority: the tests spend
# much of their time waiting on processes and sockets, and take the CPU back whenever they need it. A
# background build writes its own log (BUILD/build.log: nothing beside the sources), printed only when it
# fails. (The tests assert no timings, so
# a busier machine cannot fail them; it only makes them take a little longer.)
background=
background_log=
start_build() {  # NAME LOG COMMAND...: starts COMMAND in the background at the lowest priority
  background_name=$1 background_log=$2
  shift 2
  mkdir -p "$(dirname "$background_log")"
  # Its own process group (setsid), so that an early exit can stop all of it.
  setsid "$top/deploy/lowest-priority.sh" "$@" >"$background_log" 2>&1 &
  background=$!
}
finish_build() {  # waits for the background build; fails the run if it failed
  [[ -z $background ]] && return 0
  if ! wait "$background"; then
    tail -n 80 "$background_log" >&2
    echo "$background_name: build FAILED (log: $background_log)" >&2
    exit 1
  fi
  background=
}
# Each stage's wall time, printed at the end (and on a failure, up to the stage that failed): where a
# run's minutes go. A stage's time includes waiting for its build when that build was not done yet.
stage_times=()
stage_started=$SECONDS
stage_name="install and build"
stage() {  # NAME: ends the current stage and starts NAME
  stage_times+=("$(printf '%-28s %4d s' "$stage_name" $((SECONDS - stage_started)))")
  stage_name=$1 stage_started=$SECONDS
}
print_stage_times() {
  stage_times+=("$(printf '%-28s %4d s' "$stage_name" $((SECONDS - stage_started)))")
  echo "test: time per stage (total $((SECONDS)) s):" >&2
  printf '  %s\n' "${stage_times[@]}" >&2
}
# On an early exit the background build and fuzzers (each its own process group) and npm are stopped.
# (Under set -e a failed kill, of one that had ended, would end the trap before the times: hence || true.)
fuzz=
npm_job=
trap 'for group in $background $fuzz; do kill -- "-$group" 2>/dev/null || true; done
      [[ -n $npm_job ]] && { kill "$npm_job" 2>/dev/null || true; }; print_stage_times' EXIT

# Line tables (-g1) rather than full debug info: a backtrace still names file and line, and the build,
# most of it test code, takes about a quarter less time. (deploy/build.sh alone builds with -g.) Test code
# at -O0 (RJG_TEST_OPTIMIZATION, -O1 by default): here the integration tests only drive the gateway and
# wait on it, and -O0 compiles them in 40% less CPU (the gateway and the workers keep -O2).
# The MCP reference server is installed by npm (whose registry is the only network this needs) beside
# the build, once for every stage.
mcp_prefix=$build/npm
mcp_version=${mcp_server_package##*@}
if ! grep -qs "\"version\": \"$mcp_version\"" "$mcp_prefix/node_modules/@modelcontextprotocol/server-everything/package.json"; then
  echo "test: installing $mcp_server_package into $mcp_prefix (npm, beside the build)" >&2
  mkdir -p "$mcp_prefix"
  npm install --prefix "$mcp_prefix" --no-audit --no-fund --loglevel=error "$mcp_server_package" \
    >"$mcp_prefix/install.log" 2>&1 &
  npm_job=$!
fi
BUILD_DIR=$build "$top/deploy/build.sh" -DRJG_BUILD_TESTS=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DRJG_TEST_OPTIMIZATION=-O0 -DRJG_UNIT_TESTS=$([[ ${SANITIZE:-1} != 0 ]] && echo OFF || echo ON)
if [[ -n $npm_job ]] && ! wait "$npm_job"; then
  cat "$mcp_prefix/install.log" >&2
  echo "test: npm could not install $mcp_server_package (log: $mcp_prefix/install.log)" >&2
  exit 1
fi
npm_job=
export RJG_MCP_SERVER=$mcp_prefix/node_modules/.bin/mcp-server-everything

# The sanitizer builds link with lld (see test_packages above).
fast_link=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld)
if [[ ${SANITIZE:-1} != 0 ]]; then
  # clang, because libFuzzer is clang's: the same build carries the fuzzers (RJG_FUZZ, which implies ASan
  # and UBSan), so the tree is compiled three times, not four. -O1 -g1: ASan at -O2 compiles several times
  # slower (the GoogleTest files most); -O1 still inlines enough to run the integration tests quickly,
  # and line tables are all a report needs.
  echo "sanitizers: building the suite and the fuzzers with ASan and UBSan into $asan_build (in the background)" >&2
  start_build sanitizers "$asan_build/build.log" env BUILD_DIR="$asan_build" "$top/deploy/build.sh" -DCMAKE_CXX_COMPILER=clang++ \
    -DRJG_BUILD_TESTS=ON -DRJG_UNIT_TEST_CASES=OFF -DRJG_INTEGRATION_TESTS=OFF -DRJG_BUILD_BENCH=OFF -DRJG_FUZZ=ON -DRJG_TEST_OPTIMIZATION=-O0 -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1 -D_GLIBCXX_ASSERTIONS" "${fast_link[@]}"
fi
stage "tests (first build)"
if [[ ${SANITIZE:-1} != 0 ]]; then
  # The integration suite runs against the ASan and the TSan build's programs below. Against the optimized
  # ones users run, this stage runs what those cannot show: the gateway's peak memory against
  # doc/security.md's formula (MemoryTest), RLIMIT_AS on a worker (PoolRlimitTest: a sanitized worker
  # dies under it), the churn at full length (1000 sessions) and the soak for 10 s (40 when run alone:
  # its two dozen clients keep both cores busy, here at the ASan build's expense; the sanitizer stages
  # run it for 10 s more each), the package, the monitoring files, the status page in a browser and the
  # benchmark's smoke run; the conformance stage next runs the real peers against them too. Every other
  # integration test runs twice (ASan, TSan), not three times: three runs of the suite were the longest
  # part of this command.
  (cd "$build" && RJG_SOAK_SECONDS=${RJG_SOAK_SECONDS:-10} ctest --output-on-failure --timeout 300 -j2 \
    -R '^(package|monitoring|browser|bench)\.|MemoryTest|PoolRlimitTest|SoakTest|ChurnTest')
else
  (cd "$build" && ctest --output-on-failure --timeout 300 -j2)
fi

# The real Python peers (Robot Framework, the stock client, the reference server) against the first
# build's gateway; where python3 cannot import them it says so in one line and passes, unless
# RJG_REQUIRE_CONFORMANCE=1 (.ci/run). It runs while the ASan build goes on: its Python processes leave
# much of the two cores idle, which the build takes. A failure is reported at the end, after the other
# stages have run too.
stage "conformance"
conformance_status=0
BUILD_DIR=$build "$top/deploy/conformance.sh" || conformance_status=$?

tsan_status=0
fuzz_status=0
if [[ ${SANITIZE:-1} != 0 ]]; then
  stage "ASan and UBSan"
  finish_build
  # Inherited by the gateway and the workers the integration tests start. UBSan aborts on the first
  # report (the build uses -fno-sanitize-recover=all), so undefined behaviour fails the test. The
  # quarantine of freed memory is 16 MiB instead of 256: the soak's loose RSS bounds would otherwise
  # measure ASan's quarantine, not the gateway. (MemoryTest compares the peak with doc/security.md's
  # formula in the first build only: even 16 MiB of quarantine went over its tight bound once.)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1:quarantine_size_mb=16:allocator_release_to_os_interval_ms=500}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
  # Beside the ASan tests: the TSan build, niced, so that it takes only the CPU they leave while they
  # wait on processes and sockets; then the TSan tests, at normal priority (niced, a test could starve
  # past its deadlines), sharing the CPU with the ASan tests' last minute. And the fuzz targets, niced:
  # each runs for a fixed time, so they only lose a share of their inputs. Their reports follow the
  # ASan summary.
  if [[ ${TSAN:-1} != 0 ]]; then
    mkdir -p "$tsan_build"
    background_name=tsan background_log=$tsan_build/stage.log
    BUILD_DIR=$tsan_build TESTS_BUILD_DIR=$build TSAN_CMAKE_ARGS="${fast_link[*]}" setsid bash -c \
      '"$1" env TSAN_STEP=build "$0" && { { echo 0 >/proc/self/autogroup; } 2>/dev/null; TSAN_STEP=run "$0"; }' \
      "$top/deploy/tsan.sh" "$top/deploy/lowest-priority.sh" >"$background_log" 2>&1 &
    background=$!
  fi
  if [[ $fuzz_seconds != 0 ]]; then
    fuzz_log=$asan_build/fuzz/stage.log
    mkdir -p "$(dirname "$fuzz_log")"
    FUZZ_SECONDS=$fuzz_seconds BUILD_DIR=$asan_build FUZZ_STEP=run setsid "$top/deploy/lowest-priority.sh" "$top/deploy/fuzz.sh" \
      >"$fuzz_log" 2>&1 &
    fuzz=$!
  fi
  # Its own log, so that the ctest summary above stays the only one in this output. The soak and the churn
  # test run at full length in the build above; here they run as under TSan (10 s, 100 sessions: 500 made
  # the churn alone 158 s of this stage), which still goes through every kind of session and fault; the
  # tests' log floods and large bodies are a quarter of their size (volume_under_test in the harness).
  log=$asan_build/ctest.log
  # Every program the integration tests start comes from the ASan build but the test worker, a fake
  # whose code is the worker SDK's (which the unit tests check under ASan) and which the suite starts
  # hundreds of times: ASan's start-up and leak check at each exit made the worker, not the gateway, half
  # of this stage's CPU. Four tests at once on two cores: they spend much of their time waiting.
  "$top/deploy/bin-mix.sh" "$asan_build/bin-mix" "$asan_build/bin" "$build/bin" robot-test-worker
  if (cd "$asan_build" && ctest --output-on-failure --timeout 600 -j2 >"$log" 2>&1) &&
     (cd "$build" && RJG_BIN_DIR="$asan_build/bin-mix" RJG_SANITIZER=address RJG_SOAK_SECONDS=${RJG_SOAK_SECONDS:-10} \
        RJG_CHURN_SESSIONS=${RJG_CHURN_SESSIONS:-100} ctest -L integration --output-on-failure --timeout 600 -j4 \
        >>"$log" 2>&1); then
    passed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' "$log" || true)
    skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log" || true)
    echo "sanitizers: $passed tests clean under ASan and UBSan (each unit test program whole, each integration test on its own; $skipped skipped; log: $log)" >&2
  else
    # The failing tests with their output: the sanitizer report names the file, line and stack.
    grep -vE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' "$log" >&2 || true
    echo "sanitizers: FAILED (full log: $log)" >&2
    exit 1
  fi
fi

if [[ ${TSAN:-1} != 0 ]]; then
  stage "ThreadSanitizer and fuzz"
  # Its own build, log and summary lines; it says which tests it runs shorter, and why.
  if [[ ${SANITIZE:-1} != 0 ]]; then
    wait "$background" || tsan_status=$?
    background=
    grep -vE '^\[[0-9]+/[0-9]+\] ' "$tsan_build/stage.log" >&2 || true  # all but the build's progress
  else
    BUILD_DIR=$tsan_build TESTS_BUILD_DIR=$build TSAN_CMAKE_ARGS="${fast_link[*]}" "$top/deploy/tsan.sh" ||
      tsan_status=$?
  fi
elif [[ -n $fuzz ]]; then
  stage "fuzz"
fi
if [[ -n $fuzz ]]; then
  wait "$fuzz" || fuzz_status=$?
  fuzz=
  cat "$fuzz_log" >&2
fi
if ((conformance_status != 0)); then
  echo "test: the conformance stage FAILED (above; log: $build/conformance/log.html)" >&2
fi
exit $((conformance_status != 0 || tsan_status != 0 || fuzz_status != 0))
