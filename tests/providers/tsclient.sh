#!/bin/sh
# tsclient.sh BUILD_DIR TMPDIR - the TypeScript client (client/js, npm package
# `sbxd`) and its Mastra adapters against a real sbxd:
#   - npm ci of client/js's pinned devDependencies (typescript, @mastra/core,
#     @mastra/docker; package-lock.json), offline-friendly
#   - tsc builds client/js/dist (ESM + .d.ts)
#   - one sbxd with the duktape and js providers, the modal provider on the
#     local fake Modal control plane (tests/modal/fake, as modal.sh runs it)
#     and, when a Docker engine answers or can be started (as
#     tests/providers/docker.sh does), the docker provider with the test
#     images including sbx-test/debian:bookworm
#   - node client/js/test/run.mjs; tests that cannot run here are printed as
#     "SKIPPED - NAME (why)" and counted. With CI=true a missing engine fails.
# Prints "N passed, N failed, N skipped" last.
B=${1:-build}
T=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
[ -n "$T" ] || T=$(mktemp -d /tmp/sbxd-tsclient.XXXXXX)
mkdir -p "$T" || exit 1
T=$(cd "$T" && pwd)
JS=client/js
# Live credentials in the caller's environment must not reach this sbxd.
unset MODAL_TOKEN_ID MODAL_TOKEN_SECRET MODAL_SERVER_URL MODAL_ENVIRONMENT
SBXD_PID=""
DK=$(mktemp -d /tmp/sbxdt.XXXXXX)
PRIVATE=0

FAKE_PID=""
cleanup() {
    exec 8>&- 2>/dev/null # the fake exits at EOF on its stdin
    [ -n "$FAKE_PID" ] && kill -TERM "$FAKE_PID" 2>/dev/null && wait "$FAKE_PID" 2>/dev/null
    # The restart test replaces the daemon: its pid is in the file.
    [ -f "$T/sbxd.pid" ] && SBXD_PID=$(cat "$T/sbxd.pid")
    if [ -n "$SBXD_PID" ]; then
        kill -TERM "$SBXD_PID" 2>/dev/null
        i=0
        while kill -0 "$SBXD_PID" 2>/dev/null && [ $i -lt 200 ]; do
            sleep 0.05
            i=$((i + 1))
        done
    fi
    if [ "$PRIVATE" = 1 ]; then
        sh tests/docker/dockerd.sh stop "$DK" >"$T/dockerd-stop.log" 2>&1
    fi
    rm -rf "$DK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail_all() { # reason
    echo "FAILED - tsclient: $1"
    echo "0 passed, 1 failed"
    exit 1
}

command -v node >/dev/null 2>&1 || fail_all "node is required (tests/deps.sh test installs it)"
[ -x "$B/sbxd" ] || fail_all "$B/sbxd is not built"

# -- npm packages: reinstalled when package-lock.json changes -------------------------
stamp="$JS/node_modules/.sbxd-lock"
if ! cmp -s "$JS/package-lock.json" "$stamp" 2>/dev/null; then
    echo "tsclient: installing client/js's npm packages (npm ci)"
    (cd "$JS" && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline) >"$T/npm.log" 2>&1 ||
        { tail -n 20 "$T/npm.log"; fail_all "npm ci in client/js"; }
    cp "$JS/package-lock.json" "$stamp"
fi
(cd "$JS" && ./node_modules/.bin/tsc -p tsconfig.json) >"$T/tsc.log" 2>&1 ||
    { cat "$T/tsc.log"; fail_all "tsc in client/js"; }

# -- a Docker engine (as tests/providers/docker.sh finds or starts one) ----------------
DOCKER_SKIP=""
ping_unix() { curl -s --max-time 3 --unix-socket "$1" http://localhost/_ping 2>/dev/null | grep -q OK; }
ENGINE=""
case "${DOCKER_HOST:-}" in
unix://*) ping_unix "${DOCKER_HOST#unix://}" && ENGINE=$DOCKER_HOST ;;
esac
if [ -z "$ENGINE" ] && ping_unix /var/run/docker.sock; then
    ENGINE=unix:///var/run/docker.sock
fi
if [ -z "$ENGINE" ]; then
    if [ "$(id -u)" != 0 ]; then
        DOCKER_SKIP="no Docker engine answers and starting one needs root"
    elif env -u DOCKER_HOST sh tests/docker/dockerd.sh start "$DK" >"$T/dockerd.env" 2>"$T/dockerd-start.log"; then
        PRIVATE=1
        ENGINE=$(sed -n 's/^DOCKER_HOST=//p' "$T/dockerd.env")
    else
        tail -n 20 "$T/dockerd-start.log"
        DOCKER_SKIP="the private dockerd did not start"
    fi
fi
if [ -n "$ENGINE" ]; then
    t0=$(date +%s)
    if sh tests/docker/images.sh "$ENGINE" debian >"$T/images.log" 2>&1; then
        echo "tsclient: engine $ENGINE, test images ready in $(($(date +%s) - t0)) s"
        grep 'built\|imported' "$T/images.log"
    else
        tail -n 20 "$T/images.log"
        DOCKER_SKIP="the test images could not be built"
        ENGINE=""
    fi
fi
if [ -n "$DOCKER_SKIP" ] && [ "${CI:-}" = true ]; then
    fail_all "docker tests cannot run: $DOCKER_SKIP"
fi

# -- the fake Modal control plane ------------------------------------------------------------
MODAL_SKIP=""
if [ ! -d tests/modal/fake/node_modules/@grpc/grpc-js ]; then
    (cd tests/modal/fake && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline) \
        >"$T/npm-fake.log" 2>&1 || MODAL_SKIP="npm ci in tests/modal/fake failed"
fi
PORT=""
if [ -z "$MODAL_SKIP" ]; then
    rm -f "$T/fake.fifo"
    mkfifo "$T/fake.fifo"
    node tests/modal/fake/server.js --port 0 --state "$T/fake-state" --exit-on-stdin-eof \
        <"$T/fake.fifo" >"$T/fake.out" 2>"$T/fake.err" &
    FAKE_PID=$!
    exec 8>"$T/fake.fifo"
    i=0
    while ! grep -q '^CONTROL ' "$T/fake.out" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    PORT=$(sed -n 's/^LISTENING //p' "$T/fake.out")
    [ -n "$PORT" ] || { tail -n 5 "$T/fake.err"; MODAL_SKIP="the fake Modal server did not start"; }
fi
if [ -n "$MODAL_SKIP" ] && [ "${CI:-}" = true ]; then
    fail_all "modal tests cannot run: $MODAL_SKIP"
fi

# -- sbxd ---------------------------------------------------------------------------------
mkdir -p "$T/granted"
{
    echo 'socket:'
    echo '  mode: "0666"'
    echo 'limits:'
    echo '  max_sandboxes_per_uid: 64'
    echo '  session_output_high: 8M'
    echo '  session_output_hard: 64M'
    echo 'providers:'
    echo '  duktape:'
    echo '    pool_size: 1'
    if [ -n "$PORT" ]; then
        echo '  modal:'
        echo "    server_url: http://127.0.0.1:$PORT"
        echo '    token_id: ak-test'
        echo '    token_secret: as-test'
        echo '    app_name: sbxd-tsclient'
        echo '    image: ubuntu:22.04'
        # the fake's command router speaks TLS only, under a CA of its own
        echo "    ca_file: $T/fake-state/tls/ca.pem"
    fi
    if [ -n "$ENGINE" ]; then
        echo '  docker:'
        echo "    host: $ENGINE"
        echo "    agent_path: $B/sbx-init"
        echo '    image: sbx-test/debian:bookworm'
        echo '    network: none'
        echo '    memory: 512m'
        echo '    pids_limit: 256'
        echo '    cap_drop: [ALL]'
        echo '    security_opt: [no-new-privileges]'
        # mastra_mount.test.mjs: a client of uid 65534 may bind $T/granted only
        echo '    policy:'
        echo '      rules:'
        echo '        - users: [65534]'
        echo '          volumes:'
        echo "            - \"$T/granted:rw\""
    fi
} >"$T/sbxd.yaml"
SOCK="$T/sbxd.sock"
# $T/restart.sh stops this sbxd and starts another on the same socket and
# config (the client's reconnect test across a daemon restart runs it).
cat >"$T/restart.sh" <<EOF
#!/bin/sh
pid=\$(cat "$T/sbxd.pid" 2>/dev/null)
if [ -n "\$pid" ]; then
    kill -TERM "\$pid" 2>/dev/null
    i=0
    while kill -0 "\$pid" 2>/dev/null && [ \$i -lt 400 ]; do sleep 0.05; i=\$((i + 1)); done
fi
rm -f "$SOCK"
SBXD_SOCKET="$SOCK" "$B/sbxd" -c "$T/sbxd.yaml" --log-level debug </dev/null >>"$T/sbxd.log" 2>&1 &
echo \$! >"$T/sbxd.pid"
i=0
while [ ! -S "$SOCK" ] && [ \$i -lt 200 ]; do sleep 0.05; i=\$((i + 1)); done
[ -S "$SOCK" ]
EOF
sh "$T/restart.sh" || { tail -n 20 "$T/sbxd.log"; fail_all "sbxd did not start"; }
SBXD_PID=$(cat "$T/sbxd.pid")

# -- the tests ------------------------------------------------------------------------------
export SBXD_SOCKET="$SOCK" SBXD_PROTOCOL_MD="$ROOT/proto/PROTOCOL.md" SBXD_BUILD_DIR="$B"
export SBXD_RESTART_CMD="sh $T/restart.sh"
# The mount test's client of uid 65534 reaches the socket through $T.
chmod 711 "$T"
export SBXD_MOUNT_GRANTED="$T/granted"
if [ -n "$ENGINE" ]; then
    export SBXD_DOCKER_SOCKET="$SOCK" SBXD_DOCKER_HOST="$ENGINE"
else
    export SBXD_DOCKER_SKIP="${DOCKER_SKIP:-no Docker engine}"
fi
if [ -n "$PORT" ]; then
    export SBXD_MODAL_SOCKET="$SOCK"
else
    export SBXD_MODAL_SKIP="$MODAL_SKIP"
fi
(cd "$JS" && node test/run.mjs) >"$T/js.log" 2>&1
st=$?
grep -vE '^[0-9]+ passed, [0-9]+ failed' "$T/js.log"
tally=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$T/js.log" | tail -n 1)
if [ -z "$tally" ] || [ "$st" -ne 0 ]; then
    echo "--- sbxd log (tail)"
    tail -n 40 "$T/sbxd.log"
    [ -n "$tally" ] || fail_all "node test/run.mjs printed no result (exit $st)"
fi
# The daemon ends now, so that a sanitizer's report (make asan) is in its log.
SBXD_PID=$(cat "$T/sbxd.pid")
kill -TERM "$SBXD_PID" 2>/dev/null
i=0
while kill -0 "$SBXD_PID" 2>/dev/null && [ $i -lt 400 ]; do
    sleep 0.05
    i=$((i + 1))
done
rm -f "$T/sbxd.pid"
SBXD_PID=""
p=${tally%% passed*}
f=${tally#*, }
f=${f%% failed*}
sk=0
case "$tally" in
*skipped*)
    sk=${tally##*failed, }
    sk=${sk%% skipped*}
    ;;
esac
if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$T/sbxd.log"; then
    echo "FAILED - tsclient: sbxd reported a sanitizer error"
    grep -E -A12 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$T/sbxd.log" | head -n 40
    f=$((f + 1))
    st=1
elif [ -n "${SBX_SANITIZED:-}" ]; then
    echo "ok - tsclient: the sanitized sbxd ended without a report"
    p=$((p + 1))
fi
echo "$p passed, $f failed, $sk skipped"
exit $st
