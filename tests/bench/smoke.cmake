# ctest's bench.smoke: runs `rjg-bench --quick --data DIR` and checks that it exits with 0, prints every
# row of its table and writes every data file. No figure is checked: machines are shared and noisy.
#   cmake -DBENCH=path/to/rjg-bench -P smoke.cmake
if(NOT BENCH)
  message(FATAL_ERROR "smoke.cmake: pass -DBENCH=path/to/rjg-bench")
endif()
string(RANDOM LENGTH 8 suffix)
set(data "$ENV{TMPDIR}")
if(NOT data)
  set(data "/tmp")
endif()
set(data "${data}/rjg-bench-smoke-${suffix}")

execute_process(COMMAND "${BENCH}" --quick --data "${data}"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 110)
message("${out}")
if(NOT rc STREQUAL "0")
  file(REMOVE_RECURSE "${data}")
  message(FATAL_ERROR "rjg-bench --quick ended with ${rc}\nstderr:\n${err}")
endif()

set(rows
  "parser: Boost.JSON json::parse"
  "parser: gateway relay path"
  "floor: TCP loopback ping-pong"
  "floor: pipe ping-pong"
  "latency: direct (TCP to the worker)"
  "latency: gateway"
  "added over direct (p50 us)"
  "added over floor (pipe round trips)"
  "direct over floor (TCP round trips)"
  "throughput: 1 session "
  "throughput: 4 sessions"
  "cpu: gateway per relayed keyword"
  "cpu: direct worker per keyword over TCP"
  "cpu: the gateway's worker"
  "cpu target: gateway <= direct TCP + worker pipe"
  "rss per idle session (initialized)"
  "rss per idle session, imported (shared worker)"
  "setup: cold (prewarm = 0)"
  "setup: prewarmed (prewarm = 2)"
  "setup: imported ahead (prewarm_import)")
# Without strace (or where it may not trace) the system-call rows are replaced by one line saying so.
string(FIND "${out}" "strace not found" no_strace)
string(FIND "${out}" "strace not usable here" strace_unusable)
if(no_strace EQUAL -1 AND strace_unusable EQUAL -1)
  list(APPEND rows "syscalls: total per keyword" "syscalls target: <= 7 per keyword")
endif()
set(missing "")
foreach(row IN LISTS rows)
  string(FIND "${out}" "${row}" at)
  if(at EQUAL -1)
    string(APPEND missing "\n  ${row}")
  endif()
endforeach()
foreach(file latency.dat throughput.dat cpu.dat syscalls.dat rss.dat setup.dat)
  if(NOT EXISTS "${data}/${file}")
    string(APPEND missing "\n  data file ${file}")
  endif()
endforeach()
file(REMOVE_RECURSE "${data}")
if(missing)
  message(FATAL_ERROR "rjg-bench --quick did not print these rows:${missing}\nstderr:\n${err}")
endif()
