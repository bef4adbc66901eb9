#!/bin/sh
# docker_recovery.sh BUILD_DIR TMPDIR - issue 16's restart window and per-uid
# memory total on a real Docker engine (ptest_docker_recovery.c).
#
# The engine: the one at $DOCKER_HOST (unix://) or /var/run/docker.sock when it
# answers, else a private one it starts (tests/docker/dockerd.sh).
B=${1:-build}
T=${2:-$(mktemp -d /tmp/sbxd-dkrec.XXXXXX)}
DK_WHAT="docker recovery tests"
# shellcheck source=tests/docker/runner.sh
. "$(dirname "$0")/../docker/runner.sh"

need_built "$B/sbxd" "$B/sbx-init" "$B/tests/ptest_docker_recovery"
engine_or_private
build_images

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
