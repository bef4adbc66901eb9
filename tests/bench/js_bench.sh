#!/bin/sh
# js_bench.sh BUILD_DIR - the js provider's figures (js_bench.c) against a
# private sbxd, beside isolated-vm measured in the same run when it can be
# installed here (npm, pinned in tests/bench/ivm/package-lock.json; its
# install script builds V8 bindings from source with node's headers, a few
# minutes once, kept in BUILD_DIR/ivm). Without it the reference figures
# and how they were measured are printed instead.
B=${1:-build}
T=$(mktemp -d /tmp/sbxd-jsbench.XXXXXX)
echo "js provider (code mode on JavaScriptCore)"
IVM=""
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    mkdir -p "$B/ivm"
    if ! cmp -s tests/bench/ivm/package-lock.json "$B/ivm/package-lock.json" ||
        [ ! -d "$B/ivm/node_modules/isolated-vm" ]; then
        cp tests/bench/ivm/package.json tests/bench/ivm/package-lock.json "$B/ivm/"
        (cd "$B/ivm" && npm ci --no-audit --no-fund --loglevel=error >"$T/ivm.log" 2>&1) ||
            rm -rf "$B/ivm/node_modules"
    fi
    [ -d "$B/ivm/node_modules/isolated-vm" ] &&
        IVM=$(node tests/bench/ivm_bench.mjs "$B/ivm" $BENCH_QUICK 2>"$T/ivm.err" | grep '^IVM ')
fi
cat >"$T/js.yaml" <<YAML
log_level: warn
limits:
  max_sessions: 4096
  max_sandboxes_per_uid: 256
providers:
  js:
    pool_size: 8
  duktape:
    pool_size: 8
YAML
SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/js.yaml" 2>"$T/sbxd.log" &
PID=$!
i=0
while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
SBX_IVM="$IVM" "$B/bench/js_bench" "$T/sbxd.sock" "$B/sbxd-jsworker" $BENCH_QUICK
kill $PID
wait $PID 2>/dev/null
rm -rf "$T"
