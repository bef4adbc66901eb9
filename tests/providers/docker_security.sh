#!/bin/sh
# docker_security.sh BUILD_DIR TMPDIR - issue 16's Docker reproductions
# (tests/providers/ptest_docker_security.c) against a real engine: the one at
# $DOCKER_HOST (unix://) or /var/run/docker.sock. No engine = a counted skip
# (a failure with CI=true). Needs root: the attacker is a second uid.
#
# Prints the test binary's lines and a final "N passed, N failed[, N skipped]".
B=${1:-build}
T=${2:-$(mktemp -d /tmp/sbxd-docksec.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
mkdir -p "$T"
T=$(cd "$T" && pwd)

skip_or_fail() { # reason
    if [ "${CI:-}" = true ]; then
        echo "docker security tests cannot run: $1"
        echo "0 passed, 1 failed"
        exit 1
    fi
    echo "docker security tests skipped: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}

for f in "$B/sbxd" "$B/sbx-init" "$B/tests/ptest_docker_security"; do
    [ -x "$f" ] || skip_or_fail "$f is not built (make $f)"
done
[ "$(id -u)" = 0 ] || skip_or_fail "a second uid needs root"

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
echo "using the engine at $ENGINE"

sh tests/docker/images.sh "$DOCKER_HOST" >"$T/images.log" 2>&1 ||
    { tail -n 20 "$T/images.log"; skip_or_fail "the test images could not be built"; }

# the second uid reaches the sockets and configs in here
chmod 0755 "$T"
"$B/tests/ptest_docker_security" "$B/sbxd" "$B" "$T" | tee "$T/ptest.out"
tally=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$T/ptest.out" | tail -n 1)
case "$tally" in
*", 0 failed" | *", 0 failed, "*) exit 0 ;;
"") echo "0 passed, 1 failed"; exit 1 ;;
*) exit 1 ;;
esac
