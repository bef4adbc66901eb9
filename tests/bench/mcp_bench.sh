#!/bin/sh
# mcp_bench.sh BUILD_DIR - `sbxctl mcp` figures (tests/mcp/bench.mjs): a tools/call
# round trip through the official MCP SDK beside the same exec sent straight to
# sbxd from the same Node process, and concurrent calls; SBX_BENCH_OLD=DIR adds
# that build's sbxctl mcp, interleaved with the others. Prints; never fails.
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 0
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
echo "sbxctl mcp benchmark"
if ! command -v node >/dev/null 2>&1 || [ ! -d tests/mcp/node_modules/@modelcontextprotocol/sdk ]; then
    (cd tests/mcp && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline) >/dev/null 2>&1 ||
        { echo "  (skipped: node and the pinned npm packages of tests/mcp are needed)"; exit 0; }
fi
T=$(mktemp -d /tmp/sbxd-mbench.XXXXXX)
printf 'log_level: warn\nproviders:\n  duktape:\n    pool_size: 4\n' >"$T/bench.yaml"
SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/bench.yaml" 2>"$T/sbxd.log" &
PID=$!
i=0
while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
SBXD_SOCKET="$T/sbxd.sock" SBXCTL="$B/sbxctl" SBXCTL_OLD="${SBX_BENCH_OLD:+$SBX_BENCH_OLD/sbxctl}" node tests/mcp/bench.mjs || echo "  (the MCP benchmark failed)"
kill $PID
wait $PID 2>/dev/null
rm -rf "$T"
exit 0
