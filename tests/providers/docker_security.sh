#!/bin/sh
# docker_security.sh BUILD_DIR TMPDIR - issue 16's Docker reproductions
# (tests/providers/ptest_docker_security.c) against a real engine: the one at
# $DOCKER_HOST (unix://) or /var/run/docker.sock, else a private one it starts
# (tests/docker/dockerd.sh). Needs root: the attacker is a second uid.
#
# Prints the test binary's lines and a final "N passed, N failed[, N skipped]".
B=${1:-build}
T=${2:-$(mktemp -d /tmp/sbxd-docksec.XXXXXX)}
DK_WHAT="docker security tests"
# shellcheck source=tests/docker/runner.sh
. "$(dirname "$0")/../docker/runner.sh"

need_built "$B/sbxd" "$B/sbx-init" "$B/tests/ptest_docker_security"
[ "$(id -u)" = 0 ] || skip_or_fail "a second uid needs root"
engine_or_private
build_images

# the second uid reaches the sockets and configs in here
chmod 0755 "$T"
"$B/tests/ptest_docker_security" "$B/sbxd" "$B" "$T" | tee "$T/ptest.out"
tally=$(last_tally "$T/ptest.out")
case "$tally" in
*", 0 failed" | *", 0 failed, "*) exit 0 ;;
"") echo "0 passed, 1 failed"; exit 1 ;;
*) exit 1 ;;
esac
