#!/bin/sh
# ws_bench.sh BUILD_DIR - terminals and ports (issue 18) on a Docker engine
# that answers at $DOCKER_HOST or /var/run/docker.sock, each figure beside
# its peer (ws_bench.c). BENCH_QUICK=quick: a smaller download. Prints;
# never fails.
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 0
echo "workspace benchmark (terminals, ports)"
[ -x "$B/bench/ws_bench" ] && [ -x "$B/sbx-init" ] ||
    { echo "  (skipped: build $B/bench/ws_bench and $B/sbx-init first)"; exit 0; }
ping_unix() { curl -s --max-time 3 --unix-socket "$1" http://localhost/_ping 2>/dev/null | grep -q OK; }
ENGINE=""
case "${DOCKER_HOST:-}" in unix://*) ping_unix "${DOCKER_HOST#unix://}" && ENGINE=$DOCKER_HOST ;; esac
[ -z "$ENGINE" ] && ping_unix /var/run/docker.sock && ENGINE=unix:///var/run/docker.sock
[ -n "$ENGINE" ] || { echo "  (skipped: no Docker engine answers)"; exit 0; }
command -v busybox >/dev/null 2>&1 || { echo "  (skipped: no busybox on the host for the peer)"; exit 0; }
sh tests/docker/images.sh "$ENGINE" >/dev/null 2>&1 || { echo "  (skipped: no test image)"; exit 0; }
T=$(mktemp -d /tmp/sbxd-wsbench.XXXXXX)
SPID=""
HPID=""
cleanup() {
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
    [ -n "$HPID" ] && kill "$HPID" 2>/dev/null && wait "$HPID" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
MB=200
[ -n "$BENCH_QUICK" ] && MB=50
mkdir -p "$T/www"
head -c $((MB * 1048576)) /dev/zero >"$T/www/big"
# The peer: the same server program on the host, on a free loopback port.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
busybox httpd -f -p "127.0.0.1:$PORT" -h "$T/www" &
HPID=$!
cat >"$T/ws.yaml" <<YAML
log_level: warn
socket:
  mode: "0600"
providers:
  docker:
    host: $ENGINE
    agent_path: $B/sbx-init
    image: sbx-test/busybox
    network: none
    memory: 512m
    egress:
      allow: ["localhost:$PORT"]
      allow_private_addresses: true
YAML
SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/ws.yaml" 2>"$T/sbxd.log" &
SPID=$!
"$B/bench/ws_bench" "$T/sbxd.sock" "$PORT" "$MB"
