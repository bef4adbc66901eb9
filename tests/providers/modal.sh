#!/bin/sh
# modal.sh BUILD_DIR TMPDIR - the Modal provider against the local fake Modal
# control plane (tests/modal/fake/server.js):
#   1. the official JS SDK's faithfulness test of the fake (run_sdk_test.sh)
#   2. the C provider tests (ptest_modal and its parts _life, _outage, _restart)
#      through a real sbxd, and fs.* (ptest_modal_fs),
#      and fs.rename/fs.watch, snapshot ttl, stdin after a restart (ptest_modal_misc)
#      and tar archives (ptest_modal_tar, on a fake of its own)
#   3. `sbxctl run --provider modal -- echo hi`, and Ctrl-C on `sbxctl exec`
# Everything started here is stopped on exit, even on failure. Prints
# "N passed, N failed" last; exits non-zero on any failure.
# SBX_VALGRIND=1 runs the sbxd daemons under valgrind (leaks are errors).
B=${1:-build}
T=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
[ -n "$T" ] || T=$(mktemp -d /tmp/sbxd-modal.XXXXXX)
mkdir -p "$T" || exit 1
T=$(cd "$T" && pwd)
# The tests connect as a second uid too: it must reach the sockets in here.
chmod 755 "$T"
PASSED=0
FAILED=0
SKIPPED=0
PIDS=""
FAKE_PIDS=""
VG=""
if [ -n "$SBX_VALGRIND" ]; then
    VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --track-origins=yes"
fi

pass() { PASSED=$((PASSED + 1)); echo "ok - $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAILED - $1"; }

cleanup() {
    for p in $PIDS; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in $PIDS; do
        wait "$p" 2>/dev/null
    done
    PIDS=""
    # Closing the pipes makes the fakes exit (--exit-on-stdin-eof).
    exec 7>&- 8>&- 9>&-
}
trap cleanup EXIT
trap 'exit 130' INT TERM

finish() {
    echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    [ "$FAILED" -eq 0 ]
    exit $?
}

# Live credentials in the caller's environment must not leak into the fakes' daemons.
unset MODAL_TOKEN_ID MODAL_TOKEN_SECRET MODAL_SERVER_URL MODAL_ENVIRONMENT

if ! command -v node >/dev/null 2>&1; then
    fail "node is required for the fake Modal server (tests/deps.sh test installs it)"
    finish
fi

# -- npm packages (the same check and install as run_sdk_test.sh) -------------------
if [ ! -d tests/modal/fake/node_modules/@grpc/grpc-js ]; then
    echo "modal: installing the fake's npm packages (npm ci)"
    (cd tests/modal/fake && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline) \
        >"$T/npm.log" 2>&1 || { tail -n 20 "$T/npm.log"; fail "npm ci in tests/modal/fake"; finish; }
fi

# -- fakes ------------------------------------------------------------------------
# start_fake NAME FD [args]: the fake reads a fifo that this shell holds open on
# FD, so it exits when we do, however we end.
start_fake() {
    name=$1
    fd=$2
    shift 2
    rm -f "$T/$name.fifo"
    mkfifo "$T/$name.fifo" || return 1
    node tests/modal/fake/server.js --port 0 --state "$T/$name-state" --exit-on-stdin-eof "$@" \
        <"$T/$name.fifo" >"$T/$name.out" 2>"$T/$name.err" &
    PIDS="$PIDS $!"
    FAKE_PIDS="$FAKE_PIDS $!"
    eval "exec $fd>\"\$T/\$name.fifo\""
    i=0
    while ! grep -q '^CONTROL ' "$T/$name.out" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    grep -q '^CONTROL ' "$T/$name.out" || { cat "$T/$name.err"; return 1; }
}

start_fake fake 8 --token-ttl 8 --router-token-ttl 8 || { fail "the fake Modal server did not start"; finish; }
start_fake fakeauth 9 --token-id ak-right --token-secret as-right ||
    { fail "the fake Modal server with tokens did not start"; finish; }
PORT=$(sed -n 's/^LISTENING //p' "$T/fake.out")
CPORT=$(sed -n 's/^CONTROL //p' "$T/fake.out")
APORT=$(sed -n 's/^LISTENING //p' "$T/fakeauth.out")
echo "modal: fake on $PORT (control $CPORT), fake with tokens on $APORT"

# -- daemons ---------------------------------------------------------------------
write_cfg() { # file, then the providers.modal lines
    f=$1
    shift
    {
        echo 'socket:'
        echo '  mode: "0666"'
        echo 'limits:'
        echo '  session_output_high: 2M'
        echo '  session_output_hard: 256M'
        echo '  exec_output_bytes: 2M'
        echo '  op_timeout_ms: 60000'
        echo 'providers:'
        echo '  duktape:'
        echo '    pool_size: 1'
        echo '  modal:'
        for l in "$@"; do echo "    $l"; done
    } >"$f"
}
# The fake's command router is TLS only, with the fake's own CA.
CA="$T/fake-state/tls/ca.pem"
# egress: the ceiling ptest_modal_ws's options.egress is clamped by.
write_cfg "$T/main.yaml" "server_url: http://127.0.0.1:$PORT" "token_id: ak-test" \
    "token_secret: as-test" "app_name: sbxd-test" "image: ubuntu:22.04" "ca_file: $CA" \
    'egress: {allow: ["pypi.org", "*.example.com", "203.0.113.0/24", "10.1.0.0/16"]}'
write_cfg "$T/short.yaml" "server_url: http://127.0.0.1:$PORT" "token_id: ak-test" \
    "token_secret: as-test" "app_name: sbxd-test" "retry_budget_ms: 5000" "ca_file: $CA" \
    "backend: v1"
write_cfg "$T/nocred.yaml" "server_url: http://127.0.0.1:$PORT"
write_cfg "$T/badcred.yaml" "server_url: http://127.0.0.1:$APORT" "token_id: ak-wrong" \
    "token_secret: as-wrong"
write_cfg "$T/down.yaml" "server_url: http://127.0.0.1:1" "token_id: ak-test" "token_secret: as-test"

DAEMON_PIDS=""
. tests/sbxd_kit.sh
start_sbxd() { # name
    : >"$T/$1.log"
    sbxd_kit_start "$B/sbxd" "$T/$1.sock" "$T/$1.log" -c "$T/$1.yaml" --log-level debug
    st=$?
    PIDS="$PIDS $SBXD_KIT_PID"
    DAEMON_PIDS="$DAEMON_PIDS $1:$SBXD_KIT_PID"
    pid=$SBXD_KIT_PID
    return $st
}
for d in main nocred badcred down short; do
    start_sbxd $d || { fail "sbxd ($d) did not start"; finish; }
done

# -- 1. the SDK accepts the fake ------------------------------------------------------
if sh tests/modal/run_sdk_test.sh >"$T/sdk.log" 2>&1; then
    pass "modal@0.11.1 SDK faithfulness test against the fake ($(grep -c '^ *ok ' "$T/sdk.log") checks)"
else
    tail -n 40 "$T/sdk.log"
    fail "modal@0.11.1 SDK faithfulness test against the fake"
fi

# -- 2. the C provider tests ------------------------------------------------------------
# ptest NAME LOG ARGS...: runs build/tests/NAME ARGS (in the environment the
# caller gives), shows its lines and adds its tally to ours.
ptest() {
    name=$1
    log=$2
    shift 2
    if [ ! -x "$B/tests/$name" ]; then
        fail "$B/tests/$name is not built"
        return
    fi
    "$B/tests/$name" "$@" >"$log" 2>&1
    st=$?
    cat "$log"
    out=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -n "$out" ]; then
        p=${out%% passed*}
        f=${out#*, }
        f=${f%% failed*}
        PASSED=$((PASSED + p))
        FAILED=$((FAILED + f))
        case "$out" in
        *skipped*)
            s=${out##*failed, }
            SKIPPED=$((SKIPPED + ${s%% skipped*}))
            ;;
        esac
        [ "$st" -ne 0 ] && [ "$f" -eq 0 ] && fail "$name exited $st"
    else
        fail "$name printed no result (exit $st)"
    fi
}
# The main suite, one binary per feature (tests/providers/md_kit.h), in the
# order its checks always ran, on the same sbxd and fake.
for part in ptest_modal ptest_modal_life ptest_modal_outage ptest_modal_restart; do
    log="$T/$part.log"
    [ "$part" = ptest_modal ] && log="$T/ptest.log"
    PTEST_SBXD_CMD="exec $VG $B/sbxd -c $T/main.yaml --log-level debug" \
        PTEST_TMP="$T" PTEST_FAKE_STATE="$T/fake-state" \
        PTEST_NOCRED_SOCK="$T/nocred.sock" PTEST_BADCRED_SOCK="$T/badcred.sock" \
        PTEST_DOWN_SOCK="$T/down.sock" PTEST_SHORT_SOCK="$T/short.sock" \
        ptest "$part" "$log" "$T/main.sock" "$CPORT"
done

# -- 2b. files (fs.*) through modal-sandbox-fs-tools on the router ---------------------
ptest ptest_modal_fs "$T/ptest_fs.log" "$T/main.sock" "$CPORT"

# -- 2c. fs.rename, fs.watch, snapshot ttl, stdin after a restart (ptest_modal_misc) -------
# Its own sbxd: a small event queue and watch count (to reach them), and a
# snapshot ttl default and ceiling; PTEST_SBXD_CMD restarts one like it.
{
    echo 'socket:'
    echo '  mode: "0666"'
    echo 'limits:'
    echo '  op_timeout_ms: 60000'
    echo '  fs_event_queue: 4'
    echo '  fs_watches_per_sandbox: 2'
    echo 'providers:'
    echo '  duktape:'
    echo '    pool_size: 1'
    echo '  modal:'
    echo "    server_url: http://127.0.0.1:$PORT"
    echo '    token_id: ak-test'
    echo '    token_secret: as-test'
    echo '    app_name: sbxd-misc'
    echo "    ca_file: $CA"
    echo '    snapshot_ttl_s: 600'
    echo '    snapshot_ttl_max_s: 3600'
} >"$T/misc.yaml"
if start_sbxd misc; then
    PTEST_SBXD_CMD="exec $VG $B/sbxd -c $T/misc.yaml --log-level debug" PTEST_TMP="$T" \
        ptest ptest_modal_misc "$T/ptest_misc.log" "$T/misc.sock" "$CPORT"
else
    fail "ptest_modal_misc: its sbxd did not start"
fi

# -- 2d. terminals, tunnels, egress and stats (issue 18) ----------------------------------
PTEST_WS_SBXD="$VG $B/sbxd" PTEST_WS_CFG="$T/main.yaml" PTEST_TMP="$T" \
    ptest ptest_modal_ws "$T/ptest_ws.log" "$T/main.sock" "$CPORT" "$CA"

# -- 2e. tar archives (ptest_modal_tar): its own fake, whose router holds an
# exec's stdout back past 8 MiB unread (--stdio-window), and its own sbxd ------------
if start_fake tarfake 7 --stdio-window 8388608; then
    TPORT=$(sed -n 's/^LISTENING //p' "$T/tarfake.out")
    TCPORT=$(sed -n 's/^CONTROL //p' "$T/tarfake.out")
    write_cfg "$T/tar.yaml" "server_url: http://127.0.0.1:$TPORT" "token_id: ak-test" \
        "token_secret: as-test" "app_name: sbxd-tar" "ca_file: $T/tarfake-state/tls/ca.pem"
    if start_sbxd tar; then
        PTEST_TMP="$T" ptest ptest_modal_tar "$T/ptest_tar.log" "$T/tar.sock" "$TCPORT" \
            "$B/sbxctl" "$pid"
    else
        fail "ptest_modal_tar: its sbxd did not start"
    fi
else
    fail "ptest_modal_tar: its fake did not start"
fi

# -- 3. sbxctl ----------------------------------------------------------------------------
if [ -x "$B/sbxctl" ]; then
    out=$(timeout 60 "$B/sbxctl" -s "$T/main.sock" run --provider modal -- echo hi 2>"$T/sbxctl.err")
    st=$?
    if [ "$st" -eq 0 ] && [ "$out" = "hi" ]; then
        pass "sbxctl run --provider modal -- echo hi"
    else
        cat "$T/sbxctl.err"
        fail "sbxctl run --provider modal -- echo hi (exit $st, output '$out')"
    fi
    out=$(timeout 60 "$B/sbxctl" -s "$T/main.sock" run --provider modal -- sh -c 'exit 7' 2>&1)
    st=$?
    if [ "$st" -eq 7 ]; then pass "sbxctl run passes the Modal exit code"; else fail "sbxctl run exit code ($st: $out)"; fi
    # Ctrl-C kills the Modal command; a second Ctrl-C right after detaches.
    C="$B/sbxctl -s $T/main.sock"
    $C create --provider modal --id ctlm >/dev/null 2>&1
    $C exec ctlm -- sh -c 'echo up; sleep 60' >"$T/ci.out" 2>"$T/ci.err" &
    cp=$!
    i=0
    while ! grep -q up "$T/ci.out" && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
    kill -INT "$cp"
    sleep 0.02
    kill -INT "$cp"
    wait "$cp"
    st=$?
    if [ "$st" -eq 130 ] && grep -q 'detached; the kill was already asked for' "$T/ci.err"; then
        pass "sbxctl exec on Modal: a second Ctrl-C detaches at once (130)"
    else
        cat "$T/ci.err"
        fail "sbxctl exec on Modal: second Ctrl-C (exit $st)"
    fi
    pid=$($C ps ctlm | awk 'NR > 1 { p = $1 } END { print p }')
    out=$(timeout 60 $C wait ctlm "$pid" 2>&1)
    st=$?
    if [ "$st" -eq 137 ]; then
        pass "sbxctl exec on Modal: ... and the first Ctrl-C killed the remote command (137)"
    else
        fail "sbxctl exec on Modal: the command was not killed (wait: $st $out)"
    fi
    # sbxctl snapshot --ttl (modalmisc): the ttl asked, and "never" clamped by
    # the default ceiling providers.modal.snapshot_ttl_max_s (30 days).
    a=$($C --json snapshot ctlm --ttl 120 2>&1 | tr -d ' \n')
    b=$($C --json snapshot ctlm --ttl never 2>&1 | tr -d ' \n')
    case "$a|$b" in
    *'"ttl_s":120'*'|'*'"ttl_s":2592000'*) pass "sbxctl snapshot --ttl on Modal: 120 as asked, never clamped to 30 days" ;;
    *) fail "sbxctl snapshot --ttl on Modal ($a | $b)" ;;
    esac
    $C rm ctlm >/dev/null 2>&1
fi

# -- the daemons exit cleanly (and, under valgrind, without leaks) ----------------------------
for e in $DAEMON_PIDS; do
    name=${e%%:*}
    pid=${e#*:}
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    st=$?
    if [ "$st" -eq 0 ]; then
        pass "sbxd ($name) exits cleanly${VG:+ under valgrind}"
    else
        tail -n 40 "$T/$name.log"
        fail "sbxd ($name) exited $st"
    fi
done
PIDS=$FAKE_PIDS
finish
