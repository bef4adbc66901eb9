#!/bin/sh
# modal_bench.sh BUILD_DIR - exec round trip through sbxd's Modal provider vs
# the newest official Modal JS SDK, modal@0.11.1 (sandbox.exec + read stdout +
# wait), both against the same local fake Modal server, both on the command
# router over verified TLS (the fake on 127.0.0.2 with its own CA: on
# 127.0.0.1 the SDK would dial the router in plain h2c); prints both and
# their ratio.
# MODAL_BENCH_N sets the number of execs (default 30). Skipped without node
# or without the fake's npm packages (tests/modal/run_sdk_test.sh installs them).
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
N=${MODAL_BENCH_N:-30}
if ! command -v node >/dev/null 2>&1 || [ ! -d tests/modal/fake/node_modules/modal ] ||
    [ ! -x "$B/bench/modal_bench" ]; then
    echo "modal bench: skipped (needs node, tests/modal/fake/node_modules and $B/bench/modal_bench)"
    exit 0
fi
T=$(mktemp -d /tmp/sbxd-modal-bench.XXXXXX)
PIDS=""
cleanup() {
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    for p in $PIDS; do wait "$p" 2>/dev/null; done
    exec 7>&-
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkfifo "$T/fifo"
HOST=127.0.0.2
node tests/modal/fake/server.js --port 0 --state "$T/state" --token-id ak-bench \
    --token-secret as-bench --tls --host $HOST --exit-on-stdin-eof <"$T/fifo" \
    >"$T/fake.out" 2>"$T/fake.err" &
PIDS="$PIDS $!"
exec 7>"$T/fifo"
i=0
while ! grep -q '^CONTROL ' "$T/fake.out" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
PORT=$(sed -n 's/^LISTENING //p' "$T/fake.out")
CA=$(sed -n 's/^CA //p' "$T/fake.out")
[ -n "$PORT" ] || { echo "modal bench: the fake did not start"; cat "$T/fake.err"; exit 1; }
cat >"$T/bench.yaml" <<YAML
log_level: warn
providers:
  modal:
    server_url: https://$HOST:$PORT
    ca_file: $CA
    token_id: ak-bench
    token_secret: as-bench
YAML
env -u MODAL_TOKEN_ID -u MODAL_TOKEN_SECRET -u MODAL_SERVER_URL SBXD_SOCKET="$T/sbxd.sock" \
    "$B/sbxd" -c "$T/bench.yaml" 2>"$T/sbxd.log" &
PIDS="$PIDS $!"
i=0
while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
echo "Modal exec round trip (echo hi, $N sequential execs, local fake Modal server):"
ours=$("$B/bench/modal_bench" "$T/sbxd.sock" "$N") || { echo "$ours"; tail -n 20 "$T/sbxd.log"; exit 1; }
theirs=$(MODAL_SERVER_URL="https://$HOST:$PORT" GRPC_DEFAULT_SSL_ROOTS_FILE_PATH="$CA" \
    MODAL_TOKEN_ID=ak-bench \
    MODAL_TOKEN_SECRET=as-bench MODAL_CONFIG_PATH="$T/none.toml" \
    node tests/bench/modal_bench_sdk.mjs "$N" 2>"$T/sdk.err") || { echo "$theirs"; cat "$T/sdk.err"; exit 1; }
echo "  sbxd:            ${ours#modal_bench: }"
echo "  JS SDK 0.11.1:   ${theirs#sdk_bench: }"
m1=$(echo "$ours" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
m2=$(echo "$theirs" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
awk -v a="$m1" -v b="$m2" 'BEGIN { if (b > 0) printf "  ratio (sbxd / SDK, median): %.2f\n", a / b }'
