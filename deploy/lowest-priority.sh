#!/usr/bin/env bash
# lowest-priority.sh COMMAND...: runs COMMAND at the lowest CPU priority, so that it takes only the CPU
# that the rest of the machine leaves. deploy/test.sh starts its background builds and the fuzzers with
# it, each in a session of its own (setsid). nice alone is not enough there: with the scheduler's
# autogroups (kernel.sched_autogroup_enabled, on in most distributions' kernels) every session is a
# group of its own, groups share the CPU equally, and a nice value counts only within its group; so the
# group's own nice value is set too (/proc/self/autogroup: raising it needs no privilege). A run of
# deploy/test.sh without it: the "niced" builds and fuzzers took half the CPU whenever the tests
# wanted it, and the ASan unit tests beside them ran 48 s instead of 17.
{ echo 19 >/proc/self/autogroup; } 2>/dev/null || true  # no autogroups: nice alone does it
exec nice -n 19 "$@"
