#!/bin/sh
# run.sh BUILD_DIR - starts a private sbxd and prints the benchmark figures.
B=${1:-build}
T=$(mktemp -d /tmp/sbxd-bench.XXXXXX)
cat >"$T/bench.yaml" <<YAML
log_level: warn
limits:
  max_sessions: 4096
  max_sandboxes_per_uid: 256
providers:
  duktape:
    pool_size: 8
YAML
SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/bench.yaml" 2>"$T/sbxd.log" &
PID=$!
i=0
while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
echo "sbxd benchmark ($(nproc) cores, $(uname -r))"
"$B/bench/bench" "$T/sbxd.sock" $BENCH_QUICK
for t in tests/bench/*.sh; do
    [ "$t" = tests/bench/run.sh ] && continue
    [ -f "$t" ] && sh "$t" "$B"
done
kill $PID
wait $PID 2>/dev/null
rm -rf "$T"
