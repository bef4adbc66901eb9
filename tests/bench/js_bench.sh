#!/bin/sh
# js_bench.sh BUILD_DIR - the js provider's figures (js_bench.c) against a
# private sbxd, beside isolated-vm measured in the same run when it can be
# installed here (npm, pinned in tests/bench/ivm/package-lock.json; its
# install script builds V8 bindings from source with node's headers, a few
# minutes once, kept in BUILD_DIR/ivm). Without it the reference figures
# and how they were measured are printed instead.
#
# BENCH_ONLY=worker,roundtrip,concurrent picks sections. SBX_BENCH_OLD=DIR
# (the build dir of an older commit) measures that build's sbxd and worker
# beside this one in the same run, interleaved, SBX_BENCH_ROUNDS times (2),
# so that a change is measured against its parent on the same machine load.
B=${1:-build}
T=$(mktemp -d /tmp/sbxd-jsbench.XXXXXX)
echo "js provider (code mode on JavaScriptCore)"
IVM=""
case "${BENCH_ONLY:-worker}" in *worker*) WANT_IVM=1 ;; *) WANT_IVM="" ;; esac
if [ -n "$WANT_IVM" ] && command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
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
start() { # start BUILD_DIR NAME: a private sbxd of that build
    SBXD_SOCKET="$T/$2.sock" "$1/sbxd" -c "$T/js.yaml" 2>"$T/$2.log" &
    echo $! >"$T/$2.pid"
    i=0
    while [ ! -S "$T/$2.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
}
start "$B" new
if [ -z "$SBX_BENCH_OLD" ]; then
    SBXD_PID=$(cat "$T/new.pid") SBX_IVM="$IVM" "$B/bench/js_bench" "$T/new.sock" \
        "$B/sbxd-jsworker" $BENCH_QUICK
else
    start "$SBX_BENCH_OLD" old
    r=1
    while [ $r -le "${SBX_BENCH_ROUNDS:-2}" ]; do
        echo "-- round $r: old ($SBX_BENCH_OLD)"
        SBXD_PID=$(cat "$T/old.pid") SBX_IVM="$IVM" "$B/bench/js_bench" "$T/old.sock" \
            "$SBX_BENCH_OLD/sbxd-jsworker" $BENCH_QUICK
        echo "-- round $r: new ($B)"
        SBXD_PID=$(cat "$T/new.pid") SBX_IVM="$IVM" "$B/bench/js_bench" "$T/new.sock" \
            "$B/sbxd-jsworker" $BENCH_QUICK
        r=$((r + 1))
    done
    kill "$(cat "$T/old.pid")"
fi
kill "$(cat "$T/new.pid")"
wait 2>/dev/null
rm -rf "$T"
