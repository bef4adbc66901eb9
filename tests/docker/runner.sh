# shellcheck shell=sh
# runner.sh - sourced (not run) by the Docker provider runners,
# tests/providers/docker.sh and docker_security.sh: the setup they share.
# It lives here, not in tests/providers/, because tests/run.sh runs every
# script there.
#
# Set before sourcing it:
#   DK_WHAT  what the runner tests, for its skip lines ("docker tests")
#   B, T     the build dir and the temporary dir (made here, and absolute)
# It changes to the tree's root.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
mkdir -p "$T"
T=$(cd "$T" && pwd)

# A counted skip; with CI=true the tests always run, so a failure.
skip_or_fail() { # reason
    if [ "${CI:-}" = true ]; then
        echo "$DK_WHAT cannot run: $1"
        echo "0 passed, 1 failed"
        exit 1
    fi
    echo "$DK_WHAT skipped: $1"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}

need_built() { # FILE...
    for f in "$@"; do
        [ -x "$f" ] || skip_or_fail "$f is not built (make $f)"
    done
}

ping_unix() { curl -s --max-time 3 --unix-socket "$1" http://localhost/_ping 2>/dev/null | grep -q OK; }

# ENGINE: the engine that answers at $DOCKER_HOST (unix://) or else at
# /var/run/docker.sock, as unix://...; "" when neither does.
find_engine() {
    ENGINE=""
    case "${DOCKER_HOST:-}" in
    unix://*) ping_unix "${DOCKER_HOST#unix://}" && ENGINE=$DOCKER_HOST ;;
    esac
    if [ -z "$ENGINE" ] && ping_unix /var/run/docker.sock; then
        ENGINE=unix:///var/run/docker.sock
    fi
}

use_engine() {
    echo "using the engine at $ENGINE"
    DOCKER_HOST=$ENGINE
    export DOCKER_HOST
}

# The engine of find_engine, else (as root) a private dockerd in $T/dk, as a
# fresh machine or CI needs; it is stopped when the runner exits.
engine_or_private() {
    find_engine
    if [ -n "$ENGINE" ]; then
        use_engine
        return
    fi
    [ "$(id -u)" = 0 ] || skip_or_fail "no Docker engine answers and starting one needs root"
    DK_PRIVATE_DIR="$T/dk"
    env -u DOCKER_HOST sh tests/docker/dockerd.sh start "$DK_PRIVATE_DIR" >"$T/dockerd.env" \
        2>"$T/dockerd-start.log" ||
        { tail -n 20 "$T/dockerd-start.log"; skip_or_fail "the private dockerd did not start"; }
    trap 'sh tests/docker/dockerd.sh stop "$DK_PRIVATE_DIR" >/dev/null 2>&1' EXIT
    trap 'exit 130' INT TERM
    # shellcheck disable=SC2046
    export $(cat "$T/dockerd.env")
    echo "private engine: $DOCKER_HOST"
}

# The test images, built offline (tests/docker/images.sh) on $DOCKER_HOST.
build_images() {
    sh tests/docker/images.sh "$DOCKER_HOST" >"$T/images.log" 2>&1 ||
        { tail -n 20 "$T/images.log"; skip_or_fail "the test images could not be built"; }
}

# The last "N passed, N failed[, N skipped]" line of FILE, or "".
last_tally() { # FILE
    grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1
}
