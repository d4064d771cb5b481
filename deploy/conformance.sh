#!/usr/bin/env bash
# The conformance stage: the Robot Framework suites in tests/conformance, run by the real `robot` with the
# real peers (the stock JsonRpcRemote client, the reference server robot_jsonrpcremote_server as worker
# and upstream, Robot's own Remote library) against the gateway and workers in BUILD/bin. Everything it
# writes (robot's output.xml, log.html and report.html, the generated gateway configurations, the
# gateway's and the servers' logs) goes to BUILD/conformance.
#
# The peers are Python packages: `pip install robotframework robotframework-jsonrpcremote
# robotframework-jsonrpcremote-server`. Where python3 cannot import them, the stage says so in one line
# and passes; with RJG_REQUIRE_CONFORMANCE=1 (CI) it fails instead.
#
# A test tagged `gap` shows a known gap of issue 23 (its second tag says which). robot runs with
# --skiponfailure gap: such a test that fails is reported as skipped, with its failure message, and one
# that passes counts as passed, so closing a gap turns its tests green by itself. Every other test must
# pass. Then the reference server's suites run again with fork_server = true, the fork server's unittest
# tests (tests/fork_server) run, then the gateway's supervision of forked workers with the real reference
# server (ReferenceForkServerTest), each with one line, and the Python benchmark's smoke run
# (rjg-bench-python --quick). The last line is robot's `conformance: N
# passed, N failed, N skipped`.
#
#   deploy/conformance.sh                          every suite
#   deploy/conformance.sh --suite Values           robot's own options: one suite, --test NAME, ...
#   RJG_BIN_DIR=build-asan/bin deploy/conformance.sh   another build's gateway and workers
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
out=$build/conformance
python=${PYTHON:-python3}
peers="robotframework robotframework-jsonrpcremote robotframework-jsonrpcremote-server"

if ! problem=$("$python" -c 'import robot, JsonRpcRemote, robot_jsonrpcremote_server' 2>&1); then
  problem=$(tail -n 1 <<<"$problem")
  if [[ ${RJG_REQUIRE_CONFORMANCE:-0} == 1 ]]; then
    echo "conformance: FAILED: $python cannot import the real peers ($problem) and RJG_REQUIRE_CONFORMANCE=1;" \
      "pip install $peers, or put them on PYTHONPATH" >&2
    exit 1
  fi
  echo "conformance: skipped: $python cannot import the real peers ($problem); pip install $peers" >&2
  exit 0
fi

rm -rf "$out"
mkdir -p "$out"
export RJG_BIN_DIR=${RJG_BIN_DIR:-$build/bin}
# Nothing is written next to the suites' Python files (the work tree stays clean) or into the peers.
export PYTHONDONTWRITEBYTECODE=1
# Every process the run starts inherits this; whatever still carries it after robot has exited is
# a leftover (the lab's own teardown ends them normally).
marker=$$-$RANDOM$RANDOM
export RJG_CONFORMANCE_LAB=$marker

started=$SECONDS
status=0
# Robot's console (dots, then each failure with its message) goes to a file and is printed below
# without its statistics line, so that the one "N passed, N failed" line of this stage is the closing
# one. Its stderr (warnings the suites log on purpose, the peers' own tracebacks) stays in a file.
"$python" -m robot --outputdir "$out" --skiponfailure gap --console dotted \
  --consolewidth 100 "$@" "$top/tests/conformance" >"$out/console.log" 2>"$out/stderr.log" || status=$?
grep -avE '^[0-9]+ tests?, [0-9]+ passed, [0-9]+ failed' "$out/console.log" >&2 || true
echo "conformance: robot's stderr (warnings, the peers' tracebacks): $out/stderr.log" >&2

# The reference server's suites once more with its workers forked from a template (fork_server = true on
# Values, Fragile and the standard libraries): they must pass exactly as with plain starts, and the
# gateway must have forked. Only in a whole run (robot options given: the suites they chose, once).
forked_status=0
if (($# == 0)); then
  forked_out=$out/fork_server_suites
  RJG_CONFORMANCE_FORK_SERVER=1 "$python" -m robot --outputdir "$forked_out" --skiponfailure gap --console dotted \
    --consolewidth 100 --suite Values --suite "Logs And Failures" --suite "Lost Workers" \
    --suite "Standard Libraries" "$top/tests/conformance" >"$forked_out.console.log" 2>"$forked_out.stderr.log" ||
    forked_status=$?
  counts=$(grep -aE '^[0-9]+ tests?, [0-9]+ passed, [0-9]+ failed' "$forked_out.console.log" | tail -n 1 || true)
  forks=$(grep -c 'forked by the fork server pid' "$forked_out/lab/gateway.log" 2>/dev/null || true)
  if ((forked_status || ${forks:-0} == 0)); then
    grep -avE '^[0-9]+ tests?, [0-9]+ passed, [0-9]+ failed' "$forked_out.console.log" >&2 || true
    echo "conformance: FAILED: the reference server's suites with fork_server = true (robot's exit status" \
      "$forked_status; ${counts:-no counts}; ${forks:-0} workers forked); $forked_out" >&2
    forked_status=1
  else
    echo "conformance: the reference server's suites again with fork_server = true: $counts; $forks workers" \
      "forked; $forked_out" >&2
  fi
fi
# The fork server's template on its own, against the same reference server. Its tests skip where the
# peers are missing, and fail then under RJG_REQUIRE_CONFORMANCE=1, as above; they run inside the lab
# marker, so the scan below sees leftovers.
fork_status=0
"$python" -m unittest discover -s "$top/tests/fork_server" -v >"$out/fork_server.log" 2>&1 || fork_status=$?
if ((fork_status)); then
  grep -aE '^(FAIL|ERROR):' "$out/fork_server.log" >&2 || true
  echo "conformance: FAILED: the fork server's tests (exit status $fork_status); log $out/fork_server.log" >&2
else
  summary="$(grep -a '^Ran ' "$out/fork_server.log"), $(tail -n 1 "$out/fork_server.log")"
  echo "conformance: the fork server's tests: $summary; log $out/fork_server.log" >&2
fi

# The gateway's supervision of forked workers with the real template and reference server: a crash, a
# keyword timeout, a reload and a dead template (ReferenceForkServerTest in rjg-pool-tests, which skips
# where RJG_REFERENCE_PYTHON is not set). All four must run and pass.
supervision_status=0
if [[ -x $build/bin/rjg-pool-tests ]]; then
  RJG_REFERENCE_PYTHON=$(command -v "$python") "$build/bin/rjg-pool-tests" --gtest_filter='ReferenceForkServerTest.*' \
    >"$out/fork_server_supervision.log" 2>&1 || supervision_status=$?
  if ((supervision_status)) || ! grep -q '^\[  PASSED  \] 4 tests\.' "$out/fork_server_supervision.log" ||
    grep -q '^\[  SKIPPED \]' "$out/fork_server_supervision.log"; then
    grep -aE '^\[  (FAILED|SKIPPED) ' "$out/fork_server_supervision.log" >&2 || true
    echo "conformance: FAILED: the gateway's supervision of forked workers with the real reference server" \
      "(exit status $supervision_status); log $out/fork_server_supervision.log" >&2
    supervision_status=1
  else
    echo "conformance: a crash, a keyword timeout, a reload and a dead template with the real template and" \
      "reference server: 4 passed; log $out/fork_server_supervision.log" >&2
  fi
else
  echo "conformance: FAILED: $build/bin/rjg-pool-tests is missing: build the tests (deploy/build.sh)" >&2
  supervision_status=1
fi

# The Python benchmark's smoke run (rjg-bench-python --quick, about 30 s), here because the peers are:
# every row must be printed; no figure is checked.
bench_status=0
if [[ -x $build/bin/rjg-bench-python ]]; then
  "$build/bin/rjg-bench-python" --quick >"$out/bench_python.txt" 2>&1 || bench_status=$?
  rows=$(grep -cE '^(python latency: (direct|gateway|added)|python: [0-9]+ sessions?|total|python startup: (cold|prewarmed|forked)) ' \
    "$out/bench_python.txt" || true)
  if ((bench_status || rows != 10)); then
    tail -n 20 "$out/bench_python.txt" >&2
    echo "conformance: FAILED: rjg-bench-python --quick (exit status $bench_status, $rows of 10 rows);" \
      "$out/bench_python.txt" >&2
    bench_status=1
  else
    echo "conformance: rjg-bench-python --quick printed every row; $out/bench_python.txt" >&2
  fi
fi

unset RJG_CONFORMANCE_LAB  # not in the greps below
left=()
for environ in /proc/[0-9]*/environ; do
  if grep -qsxzF "RJG_CONFORMANCE_LAB=$marker" "$environ"; then
    pid=${environ#/proc/}
    left+=("${pid%/environ}")
  fi
done
if ((${#left[@]})); then
  echo "conformance: processes the run started were still running, now killed: ${left[*]}" >&2
  kill -KILL "${left[@]}" 2>/dev/null || true
fi

if [[ ! -f $out/output.xml ]]; then
  echo "conformance: FAILED: robot wrote no output.xml (exit status $status); its console: $out/console.log" >&2
  exit 1
fi
# The known gaps with their failures, the other skips, and the counts, from robot's output.xml.
"$python" - "$out" "$((SECONDS - started))" "$status" <<'EOF' >&2
import sys
from robot.api import ExecutionResult

out, seconds, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
result = ExecutionResult(out + "/output.xml")
gaps, skipped = [], []
for test in result.suite.all_tests:
    if test.status != "SKIP":
        continue
    # A failure that --skiponfailure turned into a skip keeps it after "Original failure:".
    reason, failed, failure = test.message.partition("Original failure:\n")
    line = "%s: %s" % (test.longname, " ".join((failure if failed else reason).split()))
    if failed:
        gaps.append("  %s  %s" % (" ".join(sorted(t for t in test.tags if t.startswith("gap-"))), line))
    else:
        skipped.append("  " + line)
if gaps:
    print("conformance: %d known gaps of issue 23 (tagged gap; skipped while they fail):" % len(gaps))
    print("\n".join(gaps))
if skipped:
    print("conformance: skipped for want of what they run:")
    print("\n".join(skipped))
print("conformance: %s s; log %s/log.html" % (seconds, out))
if status:
    print("conformance: FAILED (robot's exit status %d)" % status)
total = result.statistics.total
print("conformance: %d passed, %d failed, %d skipped" % (total.passed, total.failed, total.skipped))
EOF
exit $((status != 0 || forked_status != 0 || fork_status != 0 || supervision_status != 0 || bench_status != 0))
