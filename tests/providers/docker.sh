#!/bin/sh
# docker.sh BUILD_DIR TMPDIR - the Docker provider against a real engine.
#
# The engine: the one at $DOCKER_HOST (unix://) or /var/run/docker.sock when it
# answers; otherwise, as root, a private dockerd (tests/docker/dockerd.sh, with
# a TLS endpoint on loopback) that is stopped again when the script exits.
# Test images are built offline (tests/docker/images.sh). With CI=true the
# tests always run: no engine is a failure, not a skip.
#
# Prints the test binaries' lines and a final "N passed, N failed, N skipped".
# ptest_docker is the main suite: it runs with its parts by feature
# (ptest_docker_proc, _policy, _restart, _stream, _engine) and the runsc pass.
# SBX_PTEST_BIN names another test binary of build/tests to run the same way
# (docker_fs.sh: ptest_docker_fs; docker_ws.sh: ptest_docker_ws).
PTEST=${SBX_PTEST_BIN:-ptest_docker}
B=${1:-build}
T=${2:-$(mktemp -d /tmp/sbxd-docker.XXXXXX)}
# The cross-uid tests connect as another uid to a socket in here (run.sh's
# folder is 0755 too; a bare mktemp -d is 0700).
chmod 755 "$T"
DK_WHAT="docker tests"
# shellcheck source=tests/docker/runner.sh
. "$(dirname "$0")/../docker/runner.sh"

# The main suite is one binary per feature (tests/providers/dk_suite.h), run in
# turn, each with its own sbxd; ptest_docker_engine last (it may stop the engine).
PARTS=$PTEST
[ "$PTEST" = ptest_docker ] && PARTS="ptest_docker ptest_docker_proc ptest_docker_policy
    ptest_docker_restart ptest_docker_stream ptest_docker_engine"
# shellcheck disable=SC2046
need_built "$B/sbxd" "$B/sbx-init" $(for part in $PARTS; do echo "$B/tests/$part"; done)

# A short directory for the private engine: unix socket paths are limited.
DK=$(mktemp -d /tmp/sbxdk.XXXXXX)
PRIVATE=0
cleanup() {
    if [ "$PRIVATE" = 1 ]; then
        sh tests/docker/dockerd.sh stop "$DK" >"$T/dockerd-stop.log" 2>&1
    fi
    rm -rf "$DK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

find_engine
if [ -n "$ENGINE" ]; then
    use_engine
else
    [ "$(id -u)" = 0 ] || skip_or_fail "no Docker engine answers and starting one needs root"
    env -u DOCKER_HOST sh tests/docker/dockerd.sh start "$DK" --tls >"$T/dockerd.env" 2>"$T/dockerd-start.log" ||
        { tail -n 20 "$T/dockerd-start.log"; skip_or_fail "the private dockerd did not start"; }
    PRIVATE=1
    # shellcheck disable=SC2046
    export $(cat "$T/dockerd.env")
    export SBX_DOCKERD_PRIVATE=1 SBX_DOCKERD_DIR="$DK"
    echo "private engine: $DOCKER_HOST (TLS ${DOCKER_TLS_HOST:-none})"
fi

build_images

num() { # TALLY WORD: the count before WORD, 0 when absent
    v=$(echo "$1" | sed -n "s/.*\([^0-9]\|^\)\([0-9][0-9]*\) $2.*/\2/p")
    echo "${v:-0}"
}
p=0
f=0
s=0
st=0
for part in $PARTS; do
    [ "$part" = "$PTEST" ] || echo "--- $part (tests/providers/$part.c)"
    "$B/tests/$part" "$B/sbxd" "$B" "$T" | tee "$T/$part.out"
    tally=$(last_tally "$T/$part.out")
    case "$tally" in
    *", 0 failed" | *", 0 failed, "*) ;;
    *)
        [ -n "$tally" ] || tally="0 passed, 1 failed"
        st=1
        echo "--- sbxd log (tail)"
        tail -n 60 "$T"/sbxd-main*.log "$T/sbxd-fs.log" 2>/dev/null
        echo "$tally"
        ;;
    esac
    p=$((p + $(num "$tally" passed)))
    f=$((f + $(num "$tally" failed)))
    s=$((s + $(num "$tally" skipped)))
done

# -- the runsc pass (gVisor): lifecycle, exec, stdin, kill, stream, snapshot and
# restart again with runtime: runsc, on the same engine (with ptest_docker only,
# not again for SBX_PTEST_BIN); skipped where the
# engine has no runsc or runsc cannot run here. One tally for all the binaries.
if [ "$PTEST" = ptest_docker ] && [ -x "$B/tests/ptest_docker_runsc" ]; then
    echo "--- runsc pass (tests/providers/ptest_docker_runsc.c)"
    "$B/tests/ptest_docker_runsc" "$B/sbxd" "$B" "$T/runsc" | tee "$T/runsc.out"
    rt=$(last_tally "$T/runsc.out")
    [ -n "$rt" ] || rt="0 passed, 1 failed"
    p=$((p + $(num "$rt" passed)))
    f=$((f + $(num "$rt" failed)))
    s=$((s + $(num "$rt" skipped)))
    case "$rt" in *", 0 failed"*) ;; *)
        st=1
        echo "--- runsc sbxd log (tail)"
        tail -n 60 "$T/runsc/sbxd-runsc.log" 2>/dev/null
        ;;
    esac
fi
[ "$PTEST" = ptest_docker ] && echo "$p passed, $f failed, $s skipped"
exit $st
