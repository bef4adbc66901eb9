#!/bin/sh
# tsclient_bench.sh BUILD_DIR - the TypeScript client (client/js) beside libsbx
# in the same run, on a private sbxd with the duktape provider:
#   - daemon.ping round trip: TS SbxdClient.ping() vs libsbx sbx_call (p50/p99)
#   - stdout streaming of a Duktape program (64 KiB lines) into a consumer:
#     TS onStdout callback, web ReadableStream and async iterator vs
#     `sbxctl exec` (libsbx) > /dev/null; median of 3 each.
#   - Node's own floor: the same ping over a bare net.Socket, no client
# TSC_OLD_DIST=DIR (another build's client/js/dist, e.g. the commit before a
# change) adds its rows beside this build's, in the same run.
# Prints; never fails. client/js is built as `make test` builds it.
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 0
MB=${TSC_STREAM_MB:-256}
echo "TypeScript client benchmark (client/js beside libsbx, duktape, same run)"
if ! command -v node >/dev/null 2>&1 || [ ! -x "$B/bench/tsclient_rt" ] || [ ! -x "$B/sbxctl" ]; then
    echo "  (skipped: needs node and $B/bench/tsclient_rt, $B/sbxctl)"
    exit 0
fi
if [ ! -f client/js/dist/index.js ] || [ ! -x client/js/node_modules/.bin/tsc ]; then
    (cd client/js && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline >/dev/null 2>&1 &&
        ./node_modules/.bin/tsc -p tsconfig.json) || { echo "  (skipped: client/js did not build)"; exit 0; }
fi
T=$(mktemp -d /tmp/sbxd-tsbench.XXXXXX)
cat >"$T/bench.yaml" <<YAML
log_level: warn
providers:
  duktape:
    pool_size: 2
YAML
SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/bench.yaml" 2>"$T/sbxd.log" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$T"' EXIT
i=0
while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
S="$T/sbxd.sock"

median3() { sort -n | sed -n 2p; }

# -- round trip -----------------------------------------------------------------------
set -- $("$B/bench/tsclient_rt" "$S" 5000)
c50=$2 c99=$3
set -- $(node tests/bench/tsclient_bench.mjs rawrt "$S" 5000)
n50=$2 n99=$3
printf '  %-52s p50 %s us, p99 %s us (%s x libsbx)\n' "daemon.ping round trip, bare node net.Socket (floor)" \
    "$n50" "$n99" "$(awk -v a="$n50" -v b="$c50" 'BEGIN { printf "%.2f", a / b }')"
for dist in "" ${TSC_OLD_DIST:-}; do
    set -- $(SBXD_TS_DIST=$dist node tests/bench/tsclient_bench.mjs rt "$S" 5000)
    t50=$2 t99=$3
    printf '  %-52s p50 %s us, p99 %s us (libsbx sbx_call p50 %s us, p99 %s us; %s x)\n' \
        "daemon.ping round trip, TS client${dist:+ (old dist)}" "$t50" "$t99" "$c50" "$c99" \
        "$(awk -v a="$t50" -v b="$c50" 'BEGIN { printf "%.2f", a / b }')"
done

# -- streaming ----------------------------------------------------------------------------
SBXD_SOCKET=$S "$B/sbxctl" create --provider duktape --id tsbench >/dev/null
PROG="var s = new Array(65536).join('z'); for (var i = 0; i < $((MB * 16)); i++) console.log(s); 0"
for k in 1 2 3; do
    t0=$(date +%s.%N)
    SBXD_SOCKET=$S "$B/sbxctl" exec tsbench -- "$PROG" >/dev/null
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" -v mb="$MB" 'BEGIN { printf "%.1f\n", mb * 1048576 * 65535 / 65536 / 1e6 / (b - a) }'
done | median3 >"$T/c"
cmbs=$(cat "$T/c")
printf '  %-52s %s MB/s (%s MiB)\n' "stdout streaming, libsbx (sbxctl exec > /dev/null)" "$cmbs" "$MB"
for dist in "" ${TSC_OLD_DIST:-}; do
for consumer in callback bytes iter; do
    for k in 1 2 3; do
        SBXD_TS_DIST=$dist node tests/bench/tsclient_bench.mjs stream "$S" "$MB" "$consumer" | awk '{ print $2 }'
    done | median3 >"$T/t"
    tmbs=$(cat "$T/t")
    case $consumer in
    callback) what="TS client, onStdout callback" ;;
    bytes) what="TS client, web ReadableStream (bytes)" ;;
    iter) what="TS client, for await (async iterator)" ;;
    esac
    printf '  %-52s %s MB/s (%s x libsbx)\n' "stdout streaming, $what${dist:+ (old)}" "$tmbs" \
        "$(awk -v a="$tmbs" -v b="$cmbs" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }')"
done
done
