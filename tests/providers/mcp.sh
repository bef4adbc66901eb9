#!/bin/sh
# mcp.sh BUILD_DIR TMPDIR - `sbxctl mcp` driven by the official MCP TypeScript SDK
# (@modelcontextprotocol/sdk, pinned in tests/mcp/package-lock.json) against a
# real sbxd with the duktape provider and, when an engine is there, docker.
#
# The Docker engine is found or started as tests/providers/docker.sh does it
# (tests/docker/dockerd.sh: the engine at $DOCKER_HOST or /var/run/docker.sock,
# else a private dockerd as root) with the offline test images. Without one the
# Docker tests are skipped and counted as such; with CI=true that is a failure.
#
# Prints the test lines and "N passed, N failed, N skipped" last.
B=${1:-build}
T=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
[ -n "$T" ] || T=$(mktemp -d /tmp/sbxd-mcp.XXXXXX)
mkdir -p "$T" || exit 1
T=$(cd "$T" && pwd)
PASSED=0
FAILED=0
SKIPPED=0
SBXD_PID=""
DK=""
PRIVATE=0
VG=""
if [ -n "$SBX_VALGRIND" ]; then
    VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
fi

finish() {
    echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    [ "$FAILED" -eq 0 ]
    exit $?
}
cleanup() {
    for p in $SBXD_PID; do
        kill -TERM "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    # sbxd removes its unused warm-pool containers at SIGTERM; what it could
    # not (killed, or past limits.shutdown_drain_ms) the next sbxd on the same
    # socket would, and none comes back to this one.
    if [ -n "$host" ] && [ "$PRIVATE" != 1 ] && [ -n "$SOCK" ]; then
        ids=$(docker -H "$host" ps -aq --filter label=sbxd.pool --filter "label=sbxd.socket=$SOCK" 2>/dev/null)
        # shellcheck disable=SC2086
        [ -n "$ids" ] && docker -H "$host" rm -f $ids >/dev/null 2>&1
    fi
    if [ "$PRIVATE" = 1 ]; then
        sh tests/docker/dockerd.sh stop "$DK" >"$T/dockerd-stop.log" 2>&1
    fi
    [ -n "$DK" ] && rm -rf "$DK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v node >/dev/null 2>&1 || { echo "FAILED - node is not installed"; FAILED=1; finish; }

# -- npm packages: install the pinned ones when node_modules does not match -----------
up_to_date() {
    node -e '
        const fs = require("fs");
        const dir = process.argv[1];
        let want, have;
        try {
            want = JSON.parse(fs.readFileSync(dir + "/package-lock.json", "utf8")).packages;
            have = JSON.parse(fs.readFileSync(dir + "/node_modules/.package-lock.json", "utf8")).packages;
        } catch { process.exit(1); }
        for (const [k, w] of Object.entries(want)) {
            if (k === "" || w.optional) continue;
            if (!have[k] || have[k].version !== w.version) process.exit(1);
        }
    ' "$1"
}
if ! up_to_date tests/mcp; then
    echo "mcp: installing the pinned npm packages in tests/mcp (npm ci)"
    (cd tests/mcp && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline) \
        >"$T/npm.log" 2>&1 || { tail -n 20 "$T/npm.log"; echo "FAILED - npm ci in tests/mcp"; FAILED=1; finish; }
fi

# -- a Docker engine, if there is one ---------------------------------------------------
MCP_DOCKER=""
docker_yaml=""
if [ -x "$B/sbx-init" ]; then
    DK=$(mktemp -d /tmp/sbxmk.XXXXXX)
    if sh tests/docker/dockerd.sh start "$DK" >"$T/dockerd.env" 2>"$T/dockerd-start.log"; then
        host=$(sed -n 's/^DOCKER_HOST=//p' "$T/dockerd.env")
        case "$host" in "unix://$DK/"*) PRIVATE=1 ;; esac
        if sh tests/docker/images.sh "$host" >"$T/images.log" 2>&1; then
            MCP_DOCKER=1
            echo "mcp: Docker engine at $host"
            docker_yaml="  docker:
    host: $host
    agent_path: $B/sbx-init
    image: sbx-test/busybox
    network: none
    memory: 256m
    pids_limit: 128
    cap_drop: [ALL]
    security_opt: [no-new-privileges]
    tmpfs:
      /tmp: \"rw,nosuid,nodev,size=16m\"
    # A warm pool: a bare sbxctl mcp's sandbox comes from it (defaults_test).
    pools:
      - name: warm
        size: 2"
        else
            tail -n 10 "$T/images.log"
            MCP_DOCKER="the test images could not be built"
        fi
    else
        tail -n 10 "$T/dockerd-start.log"
        MCP_DOCKER="no engine answers and none could be started"
    fi
else
    MCP_DOCKER="$B/sbx-init is not built"
fi
if [ "$MCP_DOCKER" != 1 ] && [ "${CI:-}" = true ]; then
    echo "FAILED - docker: $MCP_DOCKER (CI=true: Docker tests must run)"
    FAILED=$((FAILED + 1))
fi

# -- sbxd --------------------------------------------------------------------------------
cat >"$T/sbxd.yaml" <<YAML
socket:
  mode: "0600"
limits:
  max_sandboxes_per_uid: 32
providers:
  duktape:
    pool_size: 1
$docker_yaml
YAML
# A second one that closes sessions idle for a second: sbxctl mcp reconnects.
cat >"$T/idle.yaml" <<YAML
socket:
  mode: "0600"
limits:
  session_idle_timeout_ms: 1000
providers:
  duktape:
    pool_size: 1
  # No shell provider here: a bare sbxctl mcp offers run_code only.
  docker:
    enabled: false
YAML
. tests/sbxd_kit.sh
start_sbxd() { # name -> pid in $pid
    : >"$T/$1.log"
    sbxd_kit_start "$B/sbxd" "$T/$1.sock" "$T/$1.log" -c "$T/$1.yaml" --log-level debug ||
        { echo "FAILED - sbxd ($1) did not start"; FAILED=$((FAILED + 1)); finish; }
    pid=$SBXD_KIT_PID
}
SOCK="$T/sbxd.sock"
start_sbxd sbxd
SBXD_PID=$pid
start_sbxd idle
SBXD_PID="$SBXD_PID $pid"

# -- the SDK tests --------------------------------------------------------------------------
SBXCTL="$B/sbxctl"
if [ -n "$VG" ]; then
    # sbxctl mcp itself under valgrind too: a wrapper with one log per process.
    mkdir -p "$T/vg"
    printf '#!/bin/sh\nexec %s --log-file=%s/vg/%%p.log %s "$@"\n' "$VG" "$T" "$B/sbxctl" >"$T/sbxctl-vg"
    chmod +x "$T/sbxctl-vg"
    SBXCTL="$T/sbxctl-vg"
fi
SBXD_SOCKET="$SOCK" SBXD_IDLE_SOCKET="$T/idle.sock" SBXCTL="$SBXCTL" MCP_DOCKER="$MCP_DOCKER" \
    timeout -k 10 900 node --test --test-reporter=tap tests/mcp/*_test.mjs >"$T/tap.out" 2>&1
st=$?
# One line per test: "ok - name", "FAILED - name" (with the error), "skipped - name".
node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n");
    for (let i = 0; i < lines.length; i++) {
        const m = /^ {4}(not ok|ok) \d+ - (.*?)( # SKIP.*)?$/.exec(lines[i]);
        if (!m) continue;
        if (m[3]) console.log("skipped - " + m[2] + m[3].replace(" # SKIP", ":"));
        else if (m[1] === "ok") console.log("ok - " + m[2]);
        else {
            console.log("FAILED - " + m[2]);
            for (let j = i + 1; j < lines.length && j < i + 14 && !/^ {4}(not )?ok /.test(lines[j]); j++)
                console.log("    " + lines[j].trim());
        }
    }
' "$T/tap.out"
count() { sed -n "s/^# $1 \([0-9]*\)$/\1/p" "$T/tap.out" | tail -n 1; }
p=$(count pass)
f=$(count fail)
s=$(count skipped)
c=$(count cancelled)
if [ -z "$p" ]; then
    tail -n 30 "$T/tap.out"
    FAILED=$((FAILED + 1))
else
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f + ${c:-0}))
    SKIPPED=$((SKIPPED + ${s:-0}))
    [ "$st" -ne 0 ] && [ "$((f + ${c:-0}))" -eq 0 ] && { echo "FAILED - node --test exited $st"; FAILED=$((FAILED + 1)); }
fi

# Under valgrind: every sbxctl mcp run left a log; any error in one fails.
if [ -n "$VG" ]; then
    bad=$(find "$T/vg" -type f -size +0 2>/dev/null | head -n 3)
    if [ -z "$bad" ]; then
        PASSED=$((PASSED + 1))
        echo "ok - sbxctl mcp: no valgrind errors"
    else
        FAILED=$((FAILED + 1))
        echo "FAILED - sbxctl mcp: valgrind errors"
        head -n 40 $bad
    fi
fi

# sbxd must still be healthy and exit cleanly.
for p in $SBXD_PID; do
    kill -TERM "$p" 2>/dev/null
    wait "$p"
    st=$?
    if [ "$st" -eq 0 ]; then
        PASSED=$((PASSED + 1))
        echo "ok - sbxd ($p) exits 0 after the MCP sessions"
    else
        FAILED=$((FAILED + 1))
        echo "FAILED - sbxd ($p) exited $st"
        tail -n 30 "$T/sbxd.log" "$T/idle.log"
    fi
done
SBXD_PID=""
finish
