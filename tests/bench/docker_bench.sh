#!/bin/sh
# docker_bench.sh BUILD_DIR - Docker provider figures, each beside the same
# operation through the docker CLI in the same run. Prints; never fails.
#
# Engine: $DOCKER_HOST (unix://) or /var/run/docker.sock when one answers,
# else (as root) a private dockerd for the run (tests/docker/dockerd.sh).
# BENCH_QUICK=quick shortens every figure; BENCH_ONLY=stream (or roundtrip,
# concurrent, lifecycle, runsc) runs only those sections. runsc: the exec round
# trip in a gVisor sandbox beside docker exec into the same runsc container
# (noted as not measured where the engine has no runsc). After the figures against
# the docker CLI, exec and stream again with direct_channel: false.
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 0
echo "docker provider benchmark"
if [ ! -x "$B/bench/docker_bench" ] || [ ! -x "$B/sbx-init" ]; then
    echo "  (skipped: build $B/bench/docker_bench and $B/sbx-init first)"
    exit 0
fi
CLI=""
for c in /usr/local/bin/docker "$(command -v docker 2>/dev/null)"; do
    [ -n "$c" ] && [ -x "$c" ] && { CLI=$c; break; }
done
if [ -z "$CLI" ]; then
    echo "  (skipped: no docker CLI to compare with)"
    exit 0
fi

T=$(mktemp -d /tmp/sbxd-dbench.XXXXXX)
DK=$(mktemp -d /tmp/sbxdb.XXXXXX)
PRIVATE=0
SPID=""
cleanup() {
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
    [ "$PRIVATE" = 1 ] && sh tests/docker/dockerd.sh stop "$DK" >/dev/null 2>&1
    rm -rf "$T" "$DK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ping_unix() { curl -s --max-time 3 --unix-socket "$1" http://localhost/_ping 2>/dev/null | grep -q OK; }
ENGINE=""
case "${DOCKER_HOST:-}" in unix://*) ping_unix "${DOCKER_HOST#unix://}" && ENGINE=$DOCKER_HOST ;; esac
[ -z "$ENGINE" ] && ping_unix /var/run/docker.sock && ENGINE=unix:///var/run/docker.sock
if [ -z "$ENGINE" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "  (skipped: no engine answers and starting one needs root)"
        exit 0
    fi
    env -u DOCKER_HOST sh tests/docker/dockerd.sh start "$DK" >"$T/env" 2>"$T/dockerd.log" ||
        { echo "  (skipped: the private dockerd did not start)"; exit 0; }
    PRIVATE=1
    ENGINE=$(sed -n 's/^DOCKER_HOST=//p' "$T/env")
fi
sh tests/docker/images.sh "$ENGINE" >"$T/images.log" 2>&1 || { echo "  (skipped: no test image)"; exit 0; }

cat >"$T/bench.yaml" <<YAML
log_level: warn
socket:
  mode: "0600"
limits:
  max_sandboxes_per_uid: 64
providers:
  duktape:
    pool_size: 1
  docker:
    host: $ENGINE
    agent_path: $ROOT/$B/sbx-init
    image: sbx-test/busybox
    network: none
    pids_limit: 256
    cap_drop: [ALL]
    security_opt: [no-new-privileges]
YAML
SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/bench.yaml" 2>"$T/sbxd.log" &
SPID=$!
i=0
while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
echo "  engine $ENGINE, $(nproc) cores; docker CLI $CLI"
DOCKER_CLI=$CLI "$B/bench/docker_bench" "$T/sbxd.sock" "$ENGINE" sbx-test/busybox $BENCH_QUICK >"$T/main.out"
grep -v '^BENCHJSON' "$T/main.out"

# A warm pool of 3 containers of the same options: create answers from it.
case "${BENCH_ONLY:-lifecycle}" in *lifecycle* | *pool*)
    kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
    rm -f "$T/sbxd.sock"
    { cat "$T/bench.yaml"; printf '    pools:\n      - {name: bench, size: 3}\n'; } >"$T/pool.yaml"
    SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/pool.yaml" 2>"$T/sbxd-pool.log" &
    SPID=$!
    i=0
    while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
    BENCH_POOL=1 "$B/bench/docker_bench" "$T/sbxd.sock" "$ENGINE" sbx-test/busybox $BENCH_QUICK >"$T/pool.out"
    grep -v '^BENCHJSON' "$T/pool.out"
    ;;
esac

# Mastra's DockerSandbox from npm (pinned lockfile) against the same engine.
case "${BENCH_ONLY:-lifecycle}" in *lifecycle* | *mastra*)
    SBXJSON=$(sed -n 's/^BENCHJSON //p' "$T/main.out" "$T/pool.out" 2>/dev/null |
        node -e 'let a={};require("fs").readFileSync(0,"utf8").split("\n").filter(Boolean).forEach(l=>Object.assign(a,JSON.parse(l)));console.log(JSON.stringify(a))' 2>/dev/null)
    M=tests/bench/mastra
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "  (Mastra DockerSandbox not measured: node/npm are not installed)"
    elif [ ! -d "$M/node_modules/@mastra/docker" ] &&
        ! (cd "$M" && npm ci --no-audit --no-fund --ignore-scripts >"$T/npm.log" 2>&1); then
        echo "  (Mastra DockerSandbox not measured: npm ci in $M failed: $(tail -n 1 "$T/npm.log"))"
    else
        N=8
        [ -n "$BENCH_QUICK" ] && N=3
        timeout 600 node "$M/bench.mjs" "${ENGINE#unix://}" sbx-test/busybox $N "$SBXJSON" 2>"$T/mastra.err" ||
            echo "  (Mastra DockerSandbox failed here: $(tail -n 1 "$T/mastra.err"); sbxd figures above stand alone)"
    fi
    ;;
esac

# The same exec and stream with the channel on Docker's attach stream
# (direct_channel: false), as on a remote engine: what the direct socket buys.
case "${BENCH_ONLY:-stream}" in *stream* | *roundtrip*) ;; *) exit 0 ;; esac
kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
rm -f "$T/sbxd.sock"
sed 's/^  docker:$/  docker:\n    direct_channel: false/' "$T/bench.yaml" >"$T/attach.yaml"
SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/attach.yaml" 2>"$T/sbxd-attach.log" &
SPID=$!
i=0
while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
echo "  with direct_channel: false (everything through Docker's attach stream):"
BENCH_ONLY=${BENCH_ONLY:-roundtrip,stream} BENCH_VARIANT=attach \
    DOCKER_CLI=$CLI "$B/bench/docker_bench" "$T/sbxd.sock" "$ENGINE" sbx-test/busybox $BENCH_QUICK
exit 0
