#!/usr/bin/env bash
# Makes DEST a bin directory for RJG_BIN_DIR that runs some programs from one build and the rest from
# another: deploy/bin-mix.sh DEST BASE_BIN OTHER_BIN PROGRAM...
#
# Every program of BASE_BIN is linked into DEST (symbolic links), then each PROGRAM of OTHER_BIN replaces
# its namesake as a hard link (a copy across file systems). The sanitizer stages of deploy/test.sh use it:
# the gateway from the sanitizer build, the test worker from the normal one. A replaced program is not a
# symbolic link because the gateway finds a library's bare command name next to its own executable, and
# the kernel resolves symbolic links in /proc/self/exe: through one it would look in the other build.
# BASE_BIN's folders (fork_server/, the fork server's program, which the gateway also looks for next to
# itself) are linked too.
set -euo pipefail
if (($# < 4)); then
  echo "usage: $0 DEST BASE_BIN OTHER_BIN PROGRAM..." >&2
  exit 2
fi
dest=$1 base=$2 other=$3
shift 3
rm -rf "$dest"
mkdir -p "$dest"
for program in "$base"/*; do
  [[ -f $program && -x $program ]] && ln -s "$(realpath "$program")" "$dest/"
  # Folders of data the programs look for next to themselves (fork_server/: the fork server's program)
  [[ -d $program ]] && ln -s "$(realpath "$program")" "$dest/"
done
for name in "$@"; do
  if [[ ! -x $other/$name ]]; then
    echo "bin-mix: $other/$name is missing: build it first" >&2
    exit 1
  fi
  rm -f "$dest/$name"
  ln "$other/$name" "$dest/$name" 2>/dev/null || cp "$other/$name" "$dest/$name"
done
