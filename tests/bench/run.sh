#!/bin/sh
# run.sh BUILD_DIR - starts a private sbxd and prints the benchmark figures.
B=${1:-build}
T=$(mktemp -d /tmp/sbxd-bench.XXXXXX)
. tests/sbxd_kit.sh
sbxd_kit_start "$B/sbxd" "$T/sbxd.sock" "$T/sbxd.log" -c tests/bench/bench.yaml
PID=$SBXD_KIT_PID
echo "sbxd benchmark ($(nproc) cores, $(uname -r))"
"$B/bench/bench" "$T/sbxd.sock" $BENCH_QUICK
for t in tests/bench/*.sh; do
    case "$t" in tests/bench/run.sh | tests/bench/base.sh) continue ;; esac
    [ -f "$t" ] && sh "$t" "$B"
done
sbxd_kit_stop $PID
rm -rf "$T"
