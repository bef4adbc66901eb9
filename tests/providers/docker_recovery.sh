#!/bin/sh
# docker_recovery.sh BUILD_DIR TMPDIR - issue 16's restart window and per-uid
# memory total on a real Docker engine (ptest_docker_recovery.c).
#
# The engine: the one at $DOCKER_HOST (unix://) or /var/run/docker.sock when it
# answers; none is a counted skip (a failure with CI=true). docker.sh runs the
# private-engine case; this one needs an engine that is already there.
B=${1:-build}
T=${2:-$(mktemp -d /tmp/sbxd-dkrec.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
mkdir -p "$T"
T=$(cd "$T" && pwd)

skip_or_fail() { # reason
    if [ "${CI:-}" = true ]; then
        echo "docker recovery tests cannot run: $1"
        echo "0 passed, 1 failed"
        exit 1
    fi
    echo "docker recovery tests skipped: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}

for f in "$B/sbxd" "$B/sbx-init" "$B/tests/ptest_docker_recovery"; do
    [ -x "$f" ] || skip_or_fail "$f is not built (make $f)"
done
ping_unix() { curl -s --max-time 3 --unix-socket "$1" http://localhost/_ping 2>/dev/null | grep -q OK; }
ENGINE=""
case "${DOCKER_HOST:-}" in
unix://*) ping_unix "${DOCKER_HOST#unix://}" && ENGINE=$DOCKER_HOST ;;
esac
if [ -z "$ENGINE" ] && ping_unix /var/run/docker.sock; then
    ENGINE=unix:///var/run/docker.sock
fi
[ -n "$ENGINE" ] || skip_or_fail "no Docker engine answers"
DOCKER_HOST=$ENGINE
export DOCKER_HOST
sh tests/docker/images.sh "$DOCKER_HOST" >"$T/images.log" 2>&1 ||
    { tail -n 20 "$T/images.log"; skip_or_fail "the test images could not be built"; }

"$B/tests/ptest_docker_recovery" "$B/sbxd" "$B" "$T" | tee "$T/ptest.out"
tally=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$T/ptest.out" | tail -n 1)
case "$tally" in
*", 0 failed" | *", 0 failed, "*) exit 0 ;;
esac
[ -n "$tally" ] || echo "0 passed, 1 failed"
echo "--- sbxd log (tail)"
tail -n 60 "$T/sbxd-rec.log" 2>/dev/null
echo "${tally:-0 passed, 1 failed}"
exit 1
