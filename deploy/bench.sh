#!/usr/bin/env bash
# Builds the gateway and its benchmark, runs rjg-bench (the relay benchmark: floor, latency,
# throughput, CPU and system calls per keyword, memory per session, session set-up) and draws its
# latency and throughput figures with gnuplot into one SVG file. Arguments go to rjg-bench, e.g.
# --quick, --only latency,throughput, --sessions 1,16 (build/bin/rjg-bench --help lists them).
#
#   BUILD_DIR=DIR  build directory (default build/)      OUT_DIR=DIR  where the results go (default BUILD_DIR/bench)
#   SKIP_BUILD=1   use the binaries already built        PNG=1        also render relay.png from the SVG, to look at
#   PLOT_ONLY=1    only draw again, from the .dat files of an earlier run in OUT_DIR
#
# Results: OUT_DIR/relay.txt (the table), OUT_DIR/*.dat (the figures), OUT_DIR/relay.svg (the plots).
# Absolute numbers vary between runs and machines: compare the ratios, which the table prints.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
out=${OUT_DIR:-$build/bench}

# gnuplot draws the figures (strace, which counts the gateway's system calls, is a build dependency
# already): Debian packages, installed with the build's own when missing. Without root they cannot be;
# that is not fatal: without gnuplot there is no plot.
want=(gnuplot-nox)
[[ ${PNG:-0} != 0 ]] && want+=(librsvg2-bin)
"$top/deploy/install-deps.sh" "${want[@]}" || echo "bench: going on without the packages above" >&2

status=0
if [[ ${PLOT_ONLY:-0} == 0 ]]; then
  if [[ ${SKIP_BUILD:-0} == 0 ]]; then
    "$top/deploy/install-deps.sh"
    BUILD_DIR=$build "$top/deploy/build.sh" -DRJG_BUILD_TESTS=ON -DRJG_TEST_OPTIMIZATION=-O1
  fi
  mkdir -p "$out"
  rm -f "$out"/*.dat "$out/relay.svg" "$out/relay.png"
  set +e
  "$build/bin/rjg-bench" --data "$out" "$@" | tee "$out/relay.txt"
  status=${PIPESTATUS[0]}
  set -e
  if [[ $status -ne 0 ]]; then
    echo "rjg-bench ended with $status (a phase could not run; see $out/relay.txt); drawing what there is" >&2
  fi
fi

if ! command -v gnuplot >/dev/null; then
  echo "gnuplot not found: no plot (the figures are in $out/*.dat)" >&2
  exit "$status"
fi

# Rows of figures in a .dat file (comment lines left out).
rows() { [[ -f $1 ]] && grep -vc '^#' "$1" || echo 0; }
panels=()
(($(rows "$out/latency.dat") > 0)) && panels+=(latency)
(($(rows "$out/throughput.dat") > 0)) && panels+=(throughput)
if ((${#panels[@]} == 0)); then
  echo "no latency or throughput figures to draw (phases skipped?)" >&2
  exit "$status"
fi

machine="$(nproc) cores, $(uname -r), $(date -u +%Y-%m-%d)"
{
  cat <<EOF
set terminal svg size $((600 * ${#panels[@]})),520 dynamic enhanced font "Helvetica,12" background "white"
set output "$out/relay.svg"
set datafile missing "?"
set grid ytics
heading = "robot-jsonrpc-gateway relay benchmark ($machine)\\n"
heading = heading . "Absolute numbers vary between runs and machines; compare the ratios"
set multiplot layout 1,${#panels[@]} title heading
EOF
  if [[ " ${panels[*]} " == *" latency "* ]]; then
    cat <<EOF
set title "Round trip of one small message or keyword\\n(floor: two threads; keywords: Echo, one session)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
# Log scale: a p99 of milliseconds (a busy machine) must not flatten the p50 bars of microseconds.
set logscale y
set ylabel "microseconds (log scale)"
set yrange [1:*]
set xtics nomirror
set key outside bottom center horizontal
plot "$out/latency.dat" using 2:xtic(1) title "p50" linecolor rgb "#4e79a7", \\
     "" using 3 title "p99" linecolor rgb "#f28e2b", \\
     "" using (\$0 - 1/6.):2:(sprintf("%.1f", \$2)) with labels offset 0,0.7 font ",10" notitle, \\
     "" using (\$0 + 1/6.):3:(sprintf("%.1f", \$3)) with labels offset 0,0.7 font ",10" notitle
unset style
unset logscale y
set style data lines
EOF
  fi
  if [[ " ${panels[*]} " == *" throughput "* ]]; then
    cat <<EOF
set title "Throughput: N sessions calling Echo back to back\\n(gateway: one worker process per session)"
set logscale x 2
stats "$out/throughput.dat" using 1 nooutput
set xrange [STATS_min / 1.5 : STATS_max * 1.5]
set yrange [0:*]
set xlabel "concurrent sessions (log scale)"
set ylabel "keywords per second"
set key outside bottom center vertical maxrows 3
set xtics nomirror
set style data linespoints
plot "$out/throughput.dat" using 1:2:xtic(1) linewidth 2 pointtype 7 linecolor rgb "#59a14f" \\
       title "direct (TCP to the worker)", \\
     "" using 1:3 linewidth 2 pointtype 5 linecolor rgb "#e15759" title "gateway, threads = 1", \\
     "" using 1:4 linewidth 2 pointtype 9 linecolor rgb "#4e79a7" title "gateway, threads = default"
EOF
  fi
  echo "unset multiplot"
} >"$out/relay.gp"
gnuplot "$out/relay.gp"
echo "figures: $out/relay.svg (table: $out/relay.txt)" >&2

if [[ ${PNG:-0} != 0 ]]; then
  if command -v rsvg-convert >/dev/null; then
    rsvg-convert -o "$out/relay.png" "$out/relay.svg"
    echo "check image: $out/relay.png" >&2
  else
    echo "rsvg-convert not found: no PNG" >&2
  fi
fi
exit "$status"
