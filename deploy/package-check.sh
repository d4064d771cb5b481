#!/usr/bin/env bash
# Builds the Debian package from a build directory and checks it: lintian without errors or warnings,
# the files it must hold (a man page for every program, the licence named in the copyright file), the
# configuration it ships (robot-jsonrpc-gateway --check-config), the sysusers.d and tmpfiles.d files
# (applied to a scratch root), the unit's required settings, `systemd-analyze verify`, and
# `systemd-analyze security --offline=true` at 2.0 or better. Prints the lintian output and the
# exposure figure. The ctest test package.deb runs it (tests/package); by hand:
#
#   deploy/package-check.sh BUILD_DIR          (the gateway, cli and example workers built in it)
#
# Needs cpack (cmake), dpkg-deb and dpkg-shlibdeps (dpkg-dev), file, lintian and systemd-analyze
# (systemd): deploy/install-deps.sh installs them. No running systemd and no network.
set -euo pipefail

if [[ $# -ne 1 || ! -f $1/CPackConfig.cmake ]]; then
  echo "usage: $0 BUILD_DIR (a configured build directory, with CPackConfig.cmake)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
for tool in cpack dpkg-deb dpkg-shlibdeps file lintian systemd-analyze systemd-sysusers systemd-tmpfiles; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing; run deploy/install-deps.sh" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rjg-package.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

# --- Build the package ---------------------------------------------------------------------------------
if ! cpack --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1; then
  cat "$tmp/cpack.log" >&2
  echo "FAIL: cpack could not build the package (are the binaries built? cmake --build $build)" >&2
  exit 1
fi
arch=$(dpkg --print-architecture)
debs=("$tmp"/out/robot-jsonrpc-gateway_*_"$arch".deb)
if [[ ${#debs[@]} -ne 1 || ! -f ${debs[0]} ]]; then
  ls -l "$tmp/out" >&2
  echo "FAIL: expected one robot-jsonrpc-gateway_VERSION_$arch.deb from cpack" >&2
  exit 1
fi
deb=${debs[0]}
ok "built $(basename "$deb") ($(stat -c %s "$deb") bytes)"

# --- lintian: no errors and no warnings (info tags are not shown) ------------------------------------
echo "--- lintian $(lintian --version | awk '{print $2}') ---"
# lintian warns on stderr that it runs as root (CI does); that line is noise here.
if lintian --fail-on error,warning --tag-display-limit 0 "$deb" >"$tmp/lintian.log" 2>&1; then lint=0; else lint=$?; fi
grep -v '^running with root privileges is not recommended!$' "$tmp/lintian.log" || true
echo "---"
if [[ $lint -ne 0 ]] || grep -q '^[EW]: ' "$tmp/lintian.log"; then
  fail "lintian reports errors or warnings (exit $lint): fix what each tag above names (lintian-explain-tags TAG)"
else
  ok "lintian: no errors, no warnings"
fi

# --- Contents --------------------------------------------------------------------------------------------
root=$tmp/root
control=$tmp/control
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$control"
unit=$root/lib/systemd/system/robot-jsonrpc-gateway.service
socket=$root/lib/systemd/system/robot-jsonrpc-gateway.socket
conf=$root/etc/robot-jsonrpc-gateway/gateway.toml
for f in usr/bin/robot-jsonrpc-gateway usr/bin/robot-jsonrpc-cli usr/bin/robot-example-calculator \
         usr/bin/robot-example-strings usr/bin/robot-classic-bridge usr/bin/robot-mcp-worker \
         usr/bin/robot-ansible-worker; do
  [[ -f $root/$f && -x $root/$f ]] || fail "/$f missing or not executable"
done
for f in lib/systemd/system/robot-jsonrpc-gateway.service lib/systemd/system/robot-jsonrpc-gateway.socket \
         usr/lib/sysusers.d/robot-jsonrpc-gateway.conf usr/lib/tmpfiles.d/robot-jsonrpc-gateway.conf \
         etc/robot-jsonrpc-gateway/gateway.toml usr/share/doc/robot-jsonrpc-gateway/README.md \
         usr/share/doc/robot-jsonrpc-gateway/copyright usr/share/doc/robot-jsonrpc-gateway/changelog.gz \
         usr/share/doc/robot-jsonrpc-gateway/doc/status-page.png usr/share/doc/robot-jsonrpc-gateway/doc/configuration.md \
         usr/share/doc/robot-jsonrpc-gateway/doc/operations.md \
         usr/share/robot-jsonrpc-gateway/prometheus/robot-jsonrpc-gateway.rules.yml \
         usr/share/robot-jsonrpc-gateway/grafana/robot-jsonrpc-gateway.json \
         usr/share/robot-jsonrpc-gateway/fork_server/robot_jsonrpc_fork_server.py \
         usr/share/robot-jsonrpc-gateway/fork_server/robot_jsonrpc_fork_control.py \
         usr/share/robot-jsonrpc-gateway/fork_server/robot_jsonrpc_fork_startup.py; do
  [[ -f $root/$f ]] || fail "/$f missing"
done
# The shipped rules and dashboard are the tested ones (tests/monitoring), byte for byte.
for f in prometheus/robot-jsonrpc-gateway.rules.yml grafana/robot-jsonrpc-gateway.json; do
  cmp -s "$root/usr/share/robot-jsonrpc-gateway/$f" "$(dirname "$0")/$f" ||
    fail "/usr/share/robot-jsonrpc-gateway/$f is not deploy/$f: deploy/package.cmake installs another file"
done
grep -qx /etc/robot-jsonrpc-gateway/gateway.toml "$control/conffiles" 2>/dev/null ||
  fail "conffiles does not list /etc/robot-jsonrpc-gateway/gateway.toml"
for f in postinst prerm postrm; do
  [[ -x $control/$f ]] || fail "maintainer script $f missing or not executable"
done
grep -q 'systemd-sysusers robot-jsonrpc-gateway.conf' "$control/postinst" 2>/dev/null ||
  fail "postinst does not run systemd-sysusers"
grep -q 'systemd-tmpfiles --create robot-jsonrpc-gateway.conf' "$control/postinst" 2>/dev/null ||
  fail "postinst does not run systemd-tmpfiles --create"
depends=$(dpkg-deb -f "$deb" Depends)
for d in systemd libc6; do
  [[ ", $depends," == *", $d "* || ", $depends," == *", $d,"* ]] || fail "Depends lacks $d: $depends"
done
# Every program gets a man page (section 1, or 8 for the gateway), so that `man PROGRAM` works.
for f in "$root"/usr/bin/*; do
  name=$(basename "$f")
  compgen -G "$root/usr/share/man/man[18]/$name.[18].gz" >/dev/null ||
    fail "/usr/bin/$name has no man page: write doc/man/$name.1 and add it to deploy/package.cmake"
done
# The licence, in the machine-readable format, named as the LICENSE file at the top of the tree.
copyright=$root/usr/share/doc/robot-jsonrpc-gateway/copyright
grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/$' "$copyright" 2>/dev/null ||
  fail "the copyright file is not in the machine-readable format (Format: line)"
grep -qx 'License: Apache-2.0' "$copyright" 2>/dev/null || fail "the copyright file does not name the licence Apache-2.0"
ok "contents: binaries and their man pages, units, sysusers.d, tmpfiles.d, /etc config (conffile), docs, licence, alerting rules and dashboard, the fork server's program; Depends: $depends"

# --- The packaged configuration: valid, and its workers found (pointed at the extracted tree) ----------
sed "s#\"/usr/bin/#\"$root/usr/bin/#g" "$conf" >"$tmp/gateway.toml"
if out=$("$root/usr/bin/robot-jsonrpc-gateway" --check-config "$tmp/gateway.toml" 2>&1); then
  ok "check-config: ${out#"$tmp/"}"
else
  echo "$out" >&2
  fail "robot-jsonrpc-gateway --check-config rejects the packaged gateway.toml (paths moved to $root)"
fi
grep -qx 'listen = \["tcp://127.0.0.1:8271"\]' "$conf" || fail "gateway.toml does not listen on tcp://127.0.0.1:8271"
grep -q 'listen = \["systemd:gateway"\]' "$conf" || fail "gateway.toml does not explain listen = [\"systemd:gateway\"]"

# --- sysusers.d and tmpfiles.d, applied to a scratch root ----------------------------------------------
sys=$tmp/sysroot
mkdir -p "$sys/etc"
if systemd-sysusers --root="$sys" "$root/usr/lib/sysusers.d/robot-jsonrpc-gateway.conf" >"$tmp/sysusers.log" 2>&1 &&
   systemd-tmpfiles --root="$sys" --create "$root/usr/lib/tmpfiles.d/robot-jsonrpc-gateway.conf" >>"$tmp/sysusers.log" 2>&1; then
  uid=$(awk -F: '$1 == "robot-gateway" {print $3}' "$sys/etc/passwd")
  home=$(awk -F: '$1 == "robot-gateway" {print $6}' "$sys/etc/passwd")
  if [[ -z $uid ]]; then
    fail "sysusers.d creates no user robot-gateway"
  else
    for d in /run/robot-jsonrpc-gateway /var/lib/robot-jsonrpc-gateway; do
      [[ -d $sys$d && $(stat -c %u "$sys$d") == "$uid" ]] || fail "tmpfiles.d does not create $d owned by robot-gateway"
    done
    ok "sysusers.d: user robot-gateway (home $home); tmpfiles.d: /run/robot-jsonrpc-gateway, /var/lib/robot-jsonrpc-gateway"
  fi
else
  cat "$tmp/sysusers.log" >&2
  fail "systemd-sysusers or systemd-tmpfiles rejects the packaged files"
fi

# --- The units: required settings --------------------------------------------------------------------
# The last assignment of KEY in FILE (a later one wins in systemd), "<unset>" if none.
setting() { awk -v k="$2" 'index($0, k "=") == 1 {v = substr($0, length(k) + 2); found = 1} END {print found ? v : "<unset>"}' "$1"; }
expect() {  # FILE KEY VALUE
  local got
  got=$(setting "$1" "$2")
  [[ $got == "$3" ]] || fail "$(basename "$1"): $2=$got, expected $2=$3"
}
for kv in Type=notify NotifyAccess=main Restart=on-failure KillMode=mixed User=robot-gateway \
          "ExecStart=/usr/bin/robot-jsonrpc-gateway --config /etc/robot-jsonrpc-gateway/gateway.toml" \
          "ExecStartPre=/usr/bin/robot-jsonrpc-gateway --check-config /etc/robot-jsonrpc-gateway/gateway.toml" \
          NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
          ProtectKernelTunables=yes ProtectKernelModules=yes ProtectKernelLogs=yes ProtectControlGroups=yes \
          RestrictNamespaces=yes LockPersonality=yes SystemCallFilter=@system-service CapabilityBoundingSet=; do
  expect "$unit" "${kv%%=*}" "${kv#*=}"
done
# Both ExecReload= lines, in this order: the check, then the HUP.
reload=$(grep '^ExecReload=' "$unit" || true)
[[ $reload == $'ExecReload=/usr/bin/robot-jsonrpc-gateway --check-config /etc/robot-jsonrpc-gateway/gateway.toml\nExecReload=/bin/kill -HUP $MAINPID' ]] ||
  fail "ExecReload= is not --check-config followed by /bin/kill -HUP \$MAINPID: $reload"
for k in WatchdogSec LimitNOFILE RestrictAddressFamilies; do
  [[ $(setting "$unit" $k) != "<unset>" ]] || fail "$k= is not set"
done
families=$(setting "$unit" RestrictAddressFamilies)
for f in AF_UNIX AF_INET AF_INET6; do
  [[ " $families " == *" $f "* ]] || fail "RestrictAddressFamilies= lacks $f (TCP listeners, NOTIFY_SOCKET)"
done
case $(setting "$unit" MemoryDenyWriteExecute) in
  yes | true | on | 1) fail "MemoryDenyWriteExecute= breaks Python's ctypes/libffi and JIT runtimes" ;;
esac
grep -q '^Requires=.*robot-jsonrpc-gateway.socket' "$unit" && fail "the service must not Require= the socket"
# TimeoutStopSec must exceed drain_timeout + 2 x shutdown_grace of the packaged configuration.
seconds() {  # a systemd or gateway duration: 90, 90s, 2min, 2m, 1h, 500ms
  local v=${1//\"/}
  case $v in
    *ms) echo $((${v%ms} / 1000)) ;;
    *min) echo $((${v%min} * 60)) ;;
    *m) echo $((${v%m} * 60)) ;;
    *h) echo $((${v%h} * 3600)) ;;
    *s) echo "${v%s}" ;;
    *) echo "$v" ;;
  esac
}
stop=$(seconds "$(setting "$unit" TimeoutStopSec)")
drain=$(seconds "$(awk -F' = ' '$1 == "drain_timeout" {print $2}' "$conf")")
grace=$(seconds "$(awk -F' = ' '$1 == "shutdown_grace" {print $2}' "$conf")")
if [[ -z $drain || -z $grace || -z $stop ]] || ((stop <= drain + 2 * grace)); then
  fail "TimeoutStopSec=${stop:-?}s must exceed drain_timeout ${drain:-?}s + 2 x shutdown_grace ${grace:-?}s"
fi
# SystemCallFilter=@system-service must keep what the gateway and its workers call.
calls=$(systemd-analyze syscall-filter --no-pager 2>/dev/null | awk '
  /^@/ { g = $1; next }
  NF == 1 && $1 !~ /^#/ { m[g] = m[g] " " $1 }
  END {
    q[n = 1] = "@system-service"; seen["@system-service"] = 1
    while (n > 0) {
      k = split(m[q[n--]], items, " ")
      for (i = 1; i <= k; i++)
        if (items[i] ~ /^@/) { if (!(items[i] in seen)) { seen[items[i]] = 1; q[++n] = items[i] } }
        else out[items[i]] = 1
    }
    for (s in out) print s
  }')
for c in prctl setpgid setsid kill fork vfork clone clone3 execve wait4 waitid pidfd_open prlimit64 setrlimit \
         socket bind listen accept4 sendmsg sched_getaffinity; do
  grep -qx "$c" <<<"$calls" || fail "@system-service lacks $c (the gateway needs it)"
done
expect "$socket" ListenStream 127.0.0.1:8271
expect "$socket" FileDescriptorName gateway
expect "$socket" Service robot-jsonrpc-gateway.service
expect "$socket" WantedBy sockets.target
ok "unit settings: Type=notify, --check-config before start and reload, KillMode=mixed, TimeoutStopSec=${stop}s > drain ${drain}s + 2 x ${grace}s, hardening; socket unit"

# --- systemd-analyze verify (offline: the unit files, binaries pointed at the extracted tree) ----------
mkdir -p "$tmp/verify"
for u in "$unit" "$socket"; do
  sed -E "s#^((Exec[A-Za-z]+)=[-+!@:]*)/usr/bin/#\\1$root/usr/bin/#" "$u" >"$tmp/verify/$(basename "$u")"
done
if systemd-analyze verify "$tmp/verify/robot-jsonrpc-gateway.service" "$tmp/verify/robot-jsonrpc-gateway.socket" \
     >"$tmp/verify.log" 2>&1 && [[ ! -s $tmp/verify.log ]]; then
  ok "systemd-analyze verify: no complaints"
elif grep -qiE 'bus|connect|PID 1|not booted|Failed to (initialize|set up) manager' "$tmp/verify.log" &&
     ! grep -q 'robot-jsonrpc-gateway' "$tmp/verify.log"; then
  # Only if it cannot run at all here (it needs no running systemd on Debian 12; this is a safety net).
  echo "skip: systemd-analyze verify cannot run in this environment: $(head -1 "$tmp/verify.log")"
else
  cat "$tmp/verify.log" >&2
  fail "systemd-analyze verify complains about the units"
fi

# --- systemd-analyze security: 2.0 or better ("OK") ---------------------------------------------------
# systemd 252 takes the unit file path with --offline=true; --threshold= is on its 0-100 scale (20: 2.0).
if systemd-analyze security --offline=true --threshold=20 --no-pager "$unit" >"$tmp/security.log" 2>&1; then sec=0; else sec=$?; fi
exposure=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) \([A-Z]*\).*/\1 \2/p' "$tmp/security.log")
if [[ $sec -ne 0 || -z $exposure ]] || awk -v e="${exposure%% *}" 'BEGIN {exit !(e > 2.0)}'; then
  grep -E '✗|Overall' "$tmp/security.log" >&2 || cat "$tmp/security.log" >&2
  fail "systemd-analyze security: exposure ${exposure:-unknown}, above 2.0 (exit $sec)"
else
  echo "--- systemd-analyze security: settings that still count ---"
  grep '✗' "$tmp/security.log" | sed 's/ \{2,\}/  /g' || true
  ok "systemd-analyze security --offline=true: exposure $exposure (at most 2.0 required)"
fi

if ((failures)); then
  echo "package check: $failures failure(s)" >&2
  exit 1
fi
echo "package check: $(basename "$deb") passes (lintian: clean; exposure $exposure)"
