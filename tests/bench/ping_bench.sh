#!/bin/sh
# ping_bench.sh BUILD_DIR - the daemon's round trip and the fairness figures of
# an older build beside this one, interleaved, in the same run (issue 21):
# SBX_BENCH_OLD=DIR (the build dir of the older commit) is required; without
# it this prints one line and leaves the figures to bench.c's own rows.
# SBX_BENCH_ROUNDS (3) rounds of old then new, each its own fresh sbxd;
# PING_BENCH_PARTS ("ping fairness") picks bench.c's SBX_BENCH_ONLY parts.
# The bench client is this build's for both, so only the daemon differs.
B=${1:-build}
if [ -z "$SBX_BENCH_OLD" ]; then
    echo "ping_bench: set SBX_BENCH_OLD=DIR to compare an older build's sbxd (skipped)"
    exit 0
fi
T=$(mktemp -d /tmp/sbxd-pingbench.XXXXXX)
cat >"$T/c.yaml" <<YAML
log_level: warn
limits:
  max_sessions: 4096
YAML
one() { # DIR LABEL PART
    SBXD_SOCKET="$T/s.sock" "$1/sbxd" -c "$T/c.yaml" 2>>"$T/sbxd.log" &
    pid=$!
    i=0
    while [ ! -S "$T/s.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
    echo "-- $2 ($1)"
    SBX_BENCH_ONLY=$3 "$B/bench/bench" "$T/s.sock" $BENCH_QUICK
    kill "$pid"
    wait "$pid" 2>/dev/null
    rm -f "$T/s.sock"
}
for part in ${PING_BENCH_PARTS:-ping fairness}; do
    r=1
    while [ $r -le "${SBX_BENCH_ROUNDS:-3}" ]; do
        one "$SBX_BENCH_OLD" "$part, round $r: old" "$part"
        one "$B" "$part, round $r: new" "$part"
        r=$((r + 1))
    done
done
rm -rf "$T"
