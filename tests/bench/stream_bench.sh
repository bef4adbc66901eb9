#!/bin/sh
# stream_bench.sh BUILD_DIR - client streaming at full speed: the wall time of
# `sbxctl exec ID -- CMD > /dev/null` for ~200 MB of text lines, of NUL bytes
# and of random bytes from a Docker sandbox, beside dockerode (tests/bench/dockerode,
# npm, pinned lockfile) and the docker CLI reading the same command's output
# from the same engine in the same run. Median of 3. Prints; never fails.
#
# Engine: as tests/bench/docker_bench.sh ($DOCKER_HOST, /var/run/docker.sock,
# or a private dockerd when root). SBXCTL=path measures another sbxctl (an
# older build, for before/after figures).
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 0
SBXCTL=${SBXCTL:-$ROOT/$B/sbxctl}
MB=${STREAM_MB:-200}
echo "client streaming benchmark (sbxctl exec ... > /dev/null, ~$MB MB each, median of 3)"
if [ ! -x "$SBXCTL" ] || [ ! -x "$B/sbx-init" ]; then
    echo "  (skipped: build $B first)"
    exit 0
fi
CLI=""
for c in /usr/local/bin/docker "$(command -v docker 2>/dev/null)"; do
    [ -n "$c" ] && [ -x "$c" ] && { CLI=$c; break; }
done

T=$(mktemp -d /tmp/sbxd-sbench.XXXXXX)
DK=$(mktemp -d /tmp/sbxds.XXXXXX)
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
SOCK=${ENGINE#unix://}
sh tests/docker/images.sh "$ENGINE" >"$T/images.log" 2>&1 || { echo "  (skipped: no test image)"; exit 0; }

cat >"$T/bench.yaml" <<YAML
log_level: warn
socket:
  mode: "0600"
providers:
  docker:
    host: $ENGINE
    agent_path: $ROOT/$B/sbx-init
    image: sbx-test/busybox
    network: none
YAML
SBXD_SOCKET="$T/sbxd.sock" "$B/sbxd" -c "$T/bench.yaml" 2>"$T/sbxd.log" &
SPID=$!
i=0
while [ ! -S "$T/sbxd.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
export SBXD_SOCKET="$T/sbxd.sock"
if ! "$B/sbxctl" create --provider docker --id sbench >/dev/null 2>"$T/create.log"; then
    echo "  (skipped: sandbox create failed: $(tail -n 1 "$T/create.log"))"
    tail -n 5 "$T/sbxd.log" | sed 's/^/  | /'
    exit 0
fi
CID=$(curl -s --unix-socket "$SOCK" \
    'http://localhost/v1.41/containers/json?filters=%7B%22label%22%3A%5B%22sbxd.id%3Dsbench%22%5D%7D' |
    sed -n 's/^\[{"Id":"\([0-9a-f]*\)".*/\1/p')
# Text lines and random bytes are made once, inside the container (24 MiB
# files, read MB/24 times), so that the figures are about moving bytes, not
# about the program making them; NUL bytes come from dd. Both files must fit
# the sandbox's /tmp tmpfs (64 MiB by default): with two 64 MiB files the
# text file came out empty and the text row printed short(0).
FSZ=25165824
RMB=$(((MB + 12) / 24))
if ! "$B/sbxctl" exec sbench -- sh -c "head -c $FSZ /dev/urandom > /tmp/rnd &&
    yes 'the quick brown fox jumps over the lazy dog, 0123456789 times' |
    head -c $FSZ > /tmp/txt" >/dev/null 2>"$T/prep.log"; then
    echo "  (skipped: making the input files failed: $(tail -n 1 "$T/prep.log"))"
    exit 0
fi
COUNT=$((MB * 16))
loop() { echo "i=0; while [ \$i -lt $RMB ]; do cat $1; i=\$((i+1)); done"; }
TEXT=$(loop /tmp/txt)
NUL="dd if=/dev/zero bs=64k count=$COUNT 2>/dev/null"
RND=$(loop /tmp/rnd)

now() { date +%s.%N; }
mbs() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.1f\n", b / s / 1e6; else print 0 }'; }

# Output goes to /dev/null; the byte count is the command's (checked once
# through a pipe to wc, outside the timing). The three clients take turns,
# one run each per round, so that a machine whose load changes during the
# benchmark weighs on all three alike; each column is its median of 3.
timed() { # rate-file bytes cmd...
    f=$1
    b=$2
    shift 2
    t0=$(now)
    "$@" >/dev/null 2>&1
    t1=$(now)
    mbs "$b" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" >>"$f"
}
DN=tests/bench/dockerode
if [ -n "$CID" ] && command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
    { [ -d "$DN/node_modules/dockerode" ] ||
        (cd "$DN" && npm ci --no-audit --no-fund >"$T/npm.log" 2>&1); }; then
    HAVE_NODE=1
else
    HAVE_NODE=0
fi
rates() { # cmd bytes: the three medians, or short(N) / - for a client that cannot run
    rm -f "$T/r.sbx" "$T/r.node" "$T/r.cli"
    n=$("$SBXCTL" exec sbench -- sh -c "$1" 2>/dev/null | wc -c)
    [ "$n" -eq "$2" ] || echo "short($n)" >"$T/r.sbx"
    for k in 1 2 3; do
        [ "$n" -eq "$2" ] && timed "$T/r.sbx" "$2" "$SBXCTL" exec sbench -- sh -c "$1"
        [ "$HAVE_NODE" = 1 ] &&
            node "$DN/stream.mjs" "$SOCK" "$CID" "$1" 2>/dev/null |
            { read -r b s; mbs "$b" "$s"; } >>"$T/r.node"
        [ -n "$CLI" ] && [ -n "$CID" ] && timed "$T/r.cli" "$2" "$CLI" -H "$ENGINE" exec "$CID" sh -c "$1"
    done
    for f in sbx node cli; do
        if [ -s "$T/r.$f" ]; then sort -n "$T/r.$f" | sed -n '2p;$p' | head -n 1; else echo "-"; fi
    done
}

printf '  %-28s %12s %12s %12s\n' "output" "sbxctl" "dockerode" "docker CLI"
for kind in text nul random; do
    case $kind in
    text) cmd=$TEXT; what="text lines"; bytes=$((RMB * FSZ)) ;;
    nul) cmd=$NUL; what="binary: NUL bytes (dd)"; bytes=$((COUNT * 65536)) ;;
    random) cmd=$RND; what="binary: random bytes"; bytes=$((RMB * FSZ)) ;;
    esac
    set -- $(rates "$cmd" "$bytes")
    s=$1 d=$2 c=$3
    printf '  %-28s %8s MB/s %7s MB/s %7s MB/s\n' "$what" "$s" "$d" "$c"
done
"$B/sbxctl" rm sbench >/dev/null 2>&1
exit 0
