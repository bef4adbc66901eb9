#!/bin/sh
# run.sh BUILD_DIR - the whole suite: unit binaries, then integration tests
# against a real sbxd on a temporary socket. Every test binary prints its own
# "N passed, N failed" (optionally ", N skipped"); this script adds them up and
# prints the total last. A test that cannot run here is a skip, counted and shown.
#
# SBX_VALGRIND=1 runs sbxd and the C tests under valgrind.
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
TMP=$(mktemp -d /tmp/sbxd-test.XXXXXX)
# Tests connect as a second, unprivileged uid too: it must reach the socket.
chmod 755 "$TMP"
PASSED=0
FAILED=0
SKIPPED=0
FAILED_NAMES=""
SKIPPED_NAMES=""
VG=""
if [ -n "$SBX_VALGRIND" ]; then
    VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --track-origins=yes"
    export SBX_NO_SECCOMP=1
    # 200 MB through valgrind takes many minutes; the same paths carry the
    # smaller streams of the other tests.
    export SBX_SKIP_FLOOD=1
fi
if [ -n "$SBX_SANITIZED" ]; then
    export SBX_NO_SECCOMP=1
fi

tally() { # name logfile status
    out=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    if [ -z "$out" ]; then
        echo "!! $1: no result line (exit $3)"
        FAILED=$((FAILED + 1))
        FAILED_NAMES="$FAILED_NAMES $1"
        return
    fi
    p=${out%% passed*}
    f=${out#*, }
    f=${f%% failed*}
    s=0
    case "$out" in
    *skipped*)
        s=${out##*failed, }
        s=${s%% skipped*}
        ;;
    esac
    if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "!! $1 exited $3"
        f=1
    fi
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f))
    SKIPPED=$((SKIPPED + s))
    [ "$f" -ne 0 ] && FAILED_NAMES="$FAILED_NAMES $1"
    [ "$s" -ne 0 ] && SKIPPED_NAMES="$SKIPPED_NAMES $1($s)"
    echo "== $1: $out"
}

run_test() { # name cmd...
    name=$1
    shift
    log="$TMP/$name.log"
    echo "-- $name"
    "$@" >"$log" 2>&1
    st=$?
    grep -E 'FAILED|SKIPPED|at .*:[0-9]+:|ERROR|error:' "$log" | grep -v ' PASSED$' | head -n 40
    tally "$name" "$log" $st
}

# -- the house style (make check-style) ---------------------------------------
run_test check-style env SBX_BUILD="$B" sh tests/style/check.sh

# -- unit tests ---------------------------------------------------------------
for t in "$B"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    run_test "$n" $VG "$t"
done

# -- integration: a real sbxd on a temporary socket ------------------------------
start_sbxd() { # dir [config]
    d=$1
    mkdir -p "$d"
    cfg=""
    [ -n "$2" ] && cfg="-c $2"
    # shellcheck disable=SC2086
    SBXD_SOCKET="$d/sbxd.sock" $VG "$B/sbxd" $cfg --log-level debug >"$d/sbxd.log" 2>&1 &
    echo $! >"$d/pid"
    i=0
    while [ ! -S "$d/sbxd.sock" ] && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    [ -S "$d/sbxd.sock" ] || { echo "sbxd did not start:"; cat "$d/sbxd.log"; return 1; }
}
stop_sbxd() { # dir
    pid=$(cat "$1/pid")
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    st=$?
    if [ "$st" -ne 0 ]; then
        echo "!! sbxd ($1) exited $st"
        tail -n 30 "$1/sbxd.log"
        FAILED=$((FAILED + 1))
        FAILED_NAMES="$FAILED_NAMES sbxd-exit"
    fi
}

cat >"$TMP/test.yaml" <<YAML
socket:
  mode: "0666"
limits:
  max_sandboxes_per_uid: 40
  max_processes_per_sandbox: 16
  max_queued_per_sandbox: 24
  exec_output_bytes: 1M
  session_output_high: 4M
  session_output_hard: 64M
providers:
  duktape:
    pool_size: 2
  js:
    pool_size: 2
YAML

D1="$TMP/d1"
if start_sbxd "$D1" "$TMP/test.yaml"; then
    export SBXD_SOCKET="$D1/sbxd.sock"
    for t in "$B"/tests/itest_*; do
        [ -x "$t" ] || continue
        n=$(basename "$t")
        run_test "$n" $VG "$t" "$SBXD_SOCKET" "$B"
    done
    for t in tests/integration/*.sh; do
        [ -f "$t" ] || continue
        n=$(basename "$t" .sh)
        run_test "$n" sh "$t" "$SBXD_SOCKET" "$B"
    done
    stop_sbxd "$D1"
else
    FAILED=$((FAILED + 1))
    FAILED_NAMES="$FAILED_NAMES sbxd-start"
fi

# -- libFuzzer harnesses, a few seconds each (make fuzz runs them longer) --------
run_test fuzz sh tests/fuzz/run.sh build-fuzz "${SBX_FUZZ_SECONDS:-3}"

# -- providers with their own fixtures ------------------------------------------
for t in tests/providers/*.sh; do
    [ -f "$t" ] || continue
    n=$(basename "$t" .sh)
    run_test "$n" sh "$t" "$B" "$TMP/$n"
done

[ -n "$SKIPPED_NAMES" ] && echo "skipped:$SKIPPED_NAMES"
[ -n "$FAILED_NAMES" ] && echo "failed:$FAILED_NAMES"
[ -z "$SBX_KEEP_TMP" ] && rm -rf "$TMP"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" -eq 0 ]
