#!/bin/sh
# modal_live.sh BUILD_DIR TMPDIR - the Modal provider against real Modal.
# Runs only when MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are set (MODAL_SERVER_URL
# and MODAL_ENVIRONMENT are honoured); otherwise it says why and counts nothing.
# It creates sandboxes in the app "sbxd-live-test" (billed to that account) and
# destroys them again, also on failure. MODAL_LIVE_IMAGE picks the image
# (default python:3.12-slim); MODAL_LIVE_BACKEND (v1|v2|auto, default auto)
# the sandbox backend. The flow: create -> exec -> output -> stdin -> wait ->
# kill -> timeout -> files -> snapshot -> restore -> snapshot-rm -> terminate,
# printing what the service said about the transport (sandbox.get's
# exec_transport: the command router, or ContainerExec when it is refused).
# Prints "N passed, N failed[, N skipped]" last.
B=${1:-build}
T=${2:-}
if [ -z "$MODAL_TOKEN_ID" ] || [ -z "$MODAL_TOKEN_SECRET" ]; then
    echo "modal live: skipped (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET not set)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
[ -n "$T" ] || T=$(mktemp -d /tmp/sbxd-modal-live.XXXXXX)
mkdir -p "$T" || exit 1
PASSED=0
FAILED=0
SBXD_PID=""
SOCK="$T/live.sock"
ID="live-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
IMAGE=${MODAL_LIVE_IMAGE:-python:3.12-slim}

pass() { PASSED=$((PASSED + 1)); echo "ok - $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAILED - $1"; }
ctl() { timeout 600 "$B/sbxctl" -s "$SOCK" "$@"; }

cleanup() {
    if [ -n "$SBXD_PID" ]; then
        ctl rm "$ID" >/dev/null 2>&1
        ctl rm "$ID-2" >/dev/null 2>&1
        kill -TERM "$SBXD_PID" 2>/dev/null
        wait "$SBXD_PID" 2>/dev/null
        SBXD_PID=""
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$T/live.yaml" <<YAML
socket:
  mode: "0600"
providers:
  modal:
    app_name: sbxd-live-test
    image: $IMAGE
    backend: ${MODAL_LIVE_BACKEND:-auto}
YAML
SBXD_SOCKET="$SOCK" "$B/sbxd" -c "$T/live.yaml" --log-level debug >"$T/sbxd.log" 2>&1 &
SBXD_PID=$!
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 200 ]; do
    sleep 0.05
    i=$((i + 1))
done
if [ ! -S "$SOCK" ]; then
    tail -n 20 "$T/sbxd.log"
    fail "sbxd did not start"
    echo "$PASSED passed, $FAILED failed"
    exit 1
fi

if ctl create --provider modal --id "$ID" --env GREETING=hello --workdir /work >"$T/create.out" 2>&1; then
    pass "create a Modal sandbox ($IMAGE)"
else
    cat "$T/create.out"
    fail "create a Modal sandbox"
fi
ctl --json get "$ID" >"$T/get.json" 2>&1
echo "modal live: $(tr -d '\n' <"$T/get.json" | grep -o '"\(sandbox_id\|exec_transport\|command_router_url\|exec_fallback_reason\)": *"[^"]*"' | tr '\n' ' ')"
grep -q '"exec_transport": *"task_command_router"' "$T/get.json" &&
    pass "sandbox.get: exec on the TaskCommandRouter" ||
    echo "modal live: note: exec is not on the command router (see above)"
out=$(ctl exec "$ID" -- 'echo "$GREETING from $(pwd)"' 2>&1)
[ "$out" = "hello from /work" ] && pass "exec: env and working_dir" || fail "exec: got '$out'"
ctl exec "$ID" -- 'echo oops >&2; exit 3' >/dev/null 2>&1
st=$?
[ "$st" -eq 3 ] && pass "exec: exit code" || fail "exec: exit code $st"
out=$(printf 'abc' | ctl exec "$ID" --stdin -- cat 2>&1)
[ "$out" = "abc" ] && pass "exec: stdin" || fail "exec: stdin got '$out'"
pid=$(ctl spawn "$ID" -- sleep 300 2>/dev/null)
if [ -n "$pid" ] && ctl kill "$ID" "$pid" >/dev/null 2>&1; then
    ctl wait "$ID" "$pid" >/dev/null 2>&1
    st=$?
    [ "$st" -eq 137 ] && pass "kill: the remote process ended (137)" || fail "kill: wait gave $st"
else
    fail "kill: spawn/kill"
fi
out=$(ctl exec "$ID" -- 'i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done' 2>&1 | tail -n 1)
[ "$out" = "line1999" ] && pass "exec: streamed output to its end" || fail "exec: output ended with '$out'"
ctl exec "$ID" --timeout 2000 -- sleep 30 >/dev/null 2>&1
st=$?
[ "$st" -eq 124 ] && pass "exec: timeout (124)" || fail "exec: timeout gave $st"
ctl exec "$ID" -- 'echo kept > /work/f.txt' >/dev/null 2>&1
if ctl stop "$ID" >/dev/null 2>&1 && ctl start "$ID" >/dev/null 2>&1; then
    out=$(ctl exec "$ID" -- cat /work/f.txt 2>&1)
    [ "$out" = "kept" ] && pass "stop/start keeps files" || fail "stop/start: got '$out'"
else
    fail "stop/start"
fi
snap=$(ctl snapshot "$ID" 2>"$T/snap.err")
if [ -n "$snap" ] && ctl create --id "$ID-2" --snapshot "$snap" >/dev/null 2>&1; then
    out=$(ctl exec "$ID-2" -- cat /work/f.txt 2>&1)
    [ "$out" = "kept" ] && pass "snapshot + create from it" || fail "snapshot: got '$out'"
    ctl rm "$ID-2" >/dev/null 2>&1
    ctl snapshot-rm "$snap" >/dev/null 2>&1 && pass "snapshot-rm (ImageDelete)" || fail "snapshot-rm"
else
    cat "$T/snap.err"
    fail "snapshot"
fi
ctl rm "$ID" >/dev/null 2>&1 && pass "destroy" || fail "destroy"
cleanup
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
