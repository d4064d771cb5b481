#!/usr/bin/env bash
# Builds the gateway and the test worker with ThreadSanitizer into build-tsan/ (or $BUILD_DIR) and runs
# the integration suite of the normal build (build/, or $TESTS_BUILD_DIR: built with deploy/build.sh
# -DRJG_BUILD_TESTS=ON, or by deploy/test.sh) against them (RJG_BIN_DIR=BUILD/bin-mix, or
# BUILD/bin-mix-gateway: below). Those are the programs whose threads the suite drives: the gateway's
# event loops, offload and reaper threads, and the worker SDK's I/O and keyword threads (the test worker
# is built on it). The other programs come from the normal build: the adapters' only other thread relays
# stderr or waits for a signal, and each program built here costs this stage build time. Fails if a test
# fails or if any process wrote a TSan report. deploy/test.sh runs it beside the ASan tests.
#
#   deploy/tsan.sh                      the CI subset (below: the tests where threads meet)
#   deploy/tsan.sh -R 'Offload|Soak'    only these tests (any ctest arguments replace the subset's)
#   RJG_CHURN_SESSIONS=1000 RJG_SOAK_SECONDS=40 deploy/tsan.sh -L integration     all of it, in full
#   TSAN_STEP=build deploy/tsan.sh      only build (deploy/test.sh builds it while the ASan tests run)
#   TSAN_STEP=run deploy/tsan.sh        only run what was built
#
# Every report (a data race, a lock-order inversion, a thread leak, ...) is a file
# BUILD/tsan-reports/report.PID, kept after the run; the script prints them.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build-tsan}
tests_build=${TESTS_BUILD_DIR:-$top/build}
reports=$build/tsan-reports
log=$build/ctest.log

# The CI subset: the tests where threads meet. Left out are those TSan cannot add to, because every
# process it instruments runs several times slower and the whole suite made this the longest stage
# (380 s of the test command's 15 minutes): the pool tests with one event loop (the same tests with
# four run), the adapters' tests (their servers are Python and Node, the adapters uninstrumented), the
# memory limits and input checks of one session (MemoryTest, BadInputs, PickleTest, JsonTest,
# ArgumentsTest, GlobRouteTest, CheckConfig, the CLI's), start failures, HAProxy and classic upstreams.
# ASan runs every test; `deploy/tsan.sh -L integration` runs all of them here too. The churn test opens
# 100 sessions instead of 1000 and the soak starts new episodes for 10 s instead of 40: both still run
# every kind of session and fault.
left_out='threads1\.|AnsibleTest|McpTest|MemoryTest|BadInputs|PickleTest|CliTest|GlobRouteTest|JsonTest|ArgumentsTest|HaProxyTest|CheckConfig|StartFailureTest|ClassicUpstreamTest|PrewarmImportTest'
churn_sessions=${RJG_CHURN_SESSIONS:-100}
soak_seconds=${RJG_SOAK_SECONDS:-10}

instrumented=(robot-jsonrpc-gateway robot-test-worker)
# The subset runs against an instrumented gateway and the normal build's test worker; the suites that
# drive the worker SDK's two threads (its I/O thread writing logs and answers while its session thread
# runs a keyword: sessions with logs and large values, back pressure, the end of a session, stray
# output) run a second time with the worker instrumented too. An instrumented worker costs a few tenths
# of a CPU-second to start and stop, and the suite starts hundreds: with it everywhere, the subset took
# 224 CPU-seconds, without it 111.
sdk_suites='\.(SessionTest|BackPressureTest|LifecycleTest|StrayOutputTest)\.'
# Integration tests at once: four on two cores. They spend much of their time waiting for processes and
# sockets; with two, the stage took a third longer.
jobs=${TSAN_JOBS:-4}

step=${TSAN_STEP:-all}
if [[ $step != run ]]; then
  "$top/deploy/install-deps.sh"
  echo "tsan: building the gateway with ThreadSanitizer into $build" >&2
  # -O1: instrumented code at -O0 is much slower still (TSan's own advice is -O1 or more). -g1: line
  # tables, all a report needs. No tests: the normal build's run against this gateway.
  # TSAN_CMAKE_ARGS: more configure arguments (deploy/test.sh links with lld).
  # shellcheck disable=SC2086
  BUILD_DIR=$build TARGETS="${instrumented[*]}" "$top/deploy/build.sh" -DRJG_BUILD_TESTS=OFF -DRJG_TSAN=ON \
    -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" ${TSAN_CMAKE_ARGS:-}
  [[ $step == build ]] && exit 0
fi

# GCC 12's TSan runtime expects the address layout of the kernel's default randomization (28 bits of
# mmap entropy on x86-64). Kernels set higher (vm.mmap_rnd_bits up to 32) make it die at start with
# "FATAL: ThreadSanitizer: unexpected memory mapping"; there the suite runs without address-space
# randomization (setarch -R), which every process the tests start inherits.
run=()
rnd_bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)
if ((rnd_bits > 28)); then
  run=(setarch "$(uname -m)" -R)
  echo "tsan: vm.mmap_rnd_bits is $rnd_bits (over 28): running without address-space randomization" >&2
fi
probe() { "${run[@]}" "$build/bin/robot-jsonrpc-gateway" --help 2>&1 >/dev/null; }
if ! out=$(probe); then
  if [[ $out == *"unexpected memory mapping"* && ${#run[@]} -eq 0 ]]; then
    run=(setarch "$(uname -m)" -R)
    echo "tsan: the TSan runtime cannot start with this address layout:" \
      "running without address-space randomization" >&2
  fi
  if ! out=$(probe); then
    echo "$out" >&2
    echo "tsan: FAILED: an instrumented program cannot start here (see above). If the message is about the" \
      "memory mapping and setarch -R is not allowed (a container's seccomp profile), run" \
      "'sysctl vm.mmap_rnd_bits=28' on the host, or skip this stage with TSAN=0" >&2
    exit 1
  fi
fi

# Inherited by the gateway and the workers the tests start. A report ends the process that wrote it
# (halt_on_error, exit code 66), so the test sees its gateway or worker die. Reports also go to files,
# which are checked after the run: a gateway that is only ever stopped with SIGTERM at the test's end
# still fails the stage.
rm -rf "$reports"
mkdir -p "$reports"
tsan_options="halt_on_error=1:exitcode=66:second_deadlock_stack=1:log_path=$reports/report"
export TSAN_OPTIONS=$tsan_options${TSAN_OPTIONS:+:$TSAN_OPTIONS}

if [[ ! -x $tests_build/bin/rjg-integration-tests ]]; then
  echo "tsan: FAILED: no integration tests in $tests_build: build them first" \
    "(BUILD_DIR=$tests_build deploy/build.sh -DRJG_BUILD_TESTS=ON), or set TESTS_BUILD_DIR" >&2
  exit 1
fi
"$top/deploy/bin-mix.sh" "$build/bin-mix" "$tests_build/bin" "$build/bin" "${instrumented[@]}"
"$top/deploy/bin-mix.sh" "$build/bin-mix-gateway" "$tests_build/bin" "$build/bin" robot-jsonrpc-gateway
suite() {  # BIN_DIR CTEST_ARGS...: the integration tests against the programs of BIN_DIR, appended to the log
  local bin_dir=$1
  shift
  (cd "$tests_build" && RJG_BIN_DIR="$bin_dir" RJG_SANITIZER=thread RJG_CHURN_SESSIONS=$churn_sessions \
    RJG_SOAK_SECONDS=$soak_seconds "${run[@]}" ctest --output-on-failure --timeout 600 -j"$jobs" -L integration "$@" \
    >>"$log" 2>&1)
}
: >"$log"
status=0
if (($#)); then
  echo "tsan: running the integration tests selected by: $* (the gateway and the test worker instrumented)" >&2
  suite "$build/bin-mix" "$@" || status=$?
else
  subset="; the tests where threads meet, churn $churn_sessions sessions, soak ${soak_seconds}s; the worker SDK's suites again with an instrumented test worker"
  echo "tsan: running the integration tests where threads meet (not: $left_out), the churn test with" \
    "$churn_sessions sessions (1000 in the normal build), the soak for ${soak_seconds}s (40); then the suites $sdk_suites" \
    "with the test worker instrumented too; see deploy/tsan.sh" >&2
  suite "$build/bin-mix-gateway" -E "$left_out" || status=$?
  suite "$build/bin-mix" -R "$sdk_suites" -E "$left_out" || status=$?
fi

found=()
while IFS= read -r -d '' f; do found+=("$f"); done < <(find "$reports" -type f -print0 | sort -z)
if ((${#found[@]})); then
  for f in "${found[@]}"; do
    echo "---- $f (its first 300 lines) ----" >&2
    head -n 300 "$f" >&2
  done
  echo "tsan: FAILED: ${#found[@]} ThreadSanitizer report(s) in $reports (log: $log)" >&2
  exit 1
fi
if ((status != 0)); then
  # The failing tests with their output.
  grep -vE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' "$log" >&2 || true
  echo "tsan: FAILED (full log: $log)" >&2
  exit 1
fi
passed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' "$log" || true)
skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log" || true)
echo "tsan: $passed integration tests clean under ThreadSanitizer ($skipped skipped${subset:-}; log: $log)" >&2
