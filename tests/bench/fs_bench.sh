#!/bin/sh
# fs_bench.sh BUILD_DIR - files (fs.*) on Docker, each figure beside the same
# thing through the docker CLI in the same run: upload and download
# throughput of one file (sbxctl cp against docker cp), and small-file
# write+read round trips (libsbx fs.write+fs.read, and sbxctl fs write+cat,
# against docker exec cat); the file and a directory tree beside dockerode's
# putArchive/getArchive too, and the TypeScript client's streams and trees
# (files.uploadDir, files.downloadDir). Prints;
# never fails. BENCH_QUICK=quick: 64 MB.
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 0
echo "files benchmark (fs.* on docker)"
CLI=$(command -v docker 2>/dev/null)
if [ ! -x "$B/bench/fs_bench" ] || [ ! -x "$B/sbxctl" ] || [ -z "$CLI" ]; then
    echo "  (skipped: build $B/bench/fs_bench and $B/sbxctl; needs the docker CLI)"
    exit 0
fi
ping_unix() { curl -s --max-time 3 --unix-socket "$1" http://localhost/_ping 2>/dev/null | grep -q OK; }
ENGINE=""
case "${DOCKER_HOST:-}" in unix://*) ping_unix "${DOCKER_HOST#unix://}" && ENGINE=$DOCKER_HOST ;; esac
[ -z "$ENGINE" ] && ping_unix /var/run/docker.sock && ENGINE=unix:///var/run/docker.sock
if [ -z "$ENGINE" ]; then
    echo "  (skipped: no engine answers)"
    exit 0
fi
T=$(mktemp -d /tmp/sbxd-fsbench.XXXXXX)
SPID=""
cleanup() {
    [ -n "$SPID" ] && "$B/sbxctl" -s "$T/sbxd.sock" rm fsb >/dev/null 2>&1
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
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
X="$B/sbxctl -s $T/sbxd.sock"
$X create --provider docker --id fsb >/dev/null 2>&1 || { echo "  (skipped: no sandbox)"; exit 0; }
CID=$($X --json get fsb | sed -n 's/.*"container_id":"\([0-9a-f]*\)".*/\1/p')
[ -n "$CID" ] || { echo "  (skipped: no container id)"; exit 0; }
export DOCKER_HOST=$ENGINE
MB=256
[ "${BENCH_QUICK:-}" = quick ] && MB=64
head -c $((MB * 1048576)) /dev/urandom >"$T/big"
now() { date +%s.%N; }
rate() { awk -v mb="$MB" -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", mb / (b - a) }'; }
best() { # command...: the best of 3 runs, in MB/s
    b=0
    for k in 1 2 3; do
        t0=$(now); "$@" >/dev/null 2>&1 || { echo 0; return; }; t1=$(now)
        r=$(rate "$t0" "$t1"); [ "$r" -gt "$b" ] && b=$r
    done
    echo "$b"
}
# base64 chunks (the path before raw transfers), for the before/after
up_j=$(best env SBX_FS_TRANSPORT=json $X cp "$T/big" fsb:/workspace/big)
down_j=$(best env SBX_FS_TRANSPORT=json $X cp fsb:/workspace/big "$T/back.s")
up_s=$(best $X cp "$T/big" fsb:/workspace/big)
up_d=$(best "$CLI" cp "$T/big" "$CID:/workspace/big.d")
down_s=$(best $X cp fsb:/workspace/big "$T/back.s")
down_d=$(best "$CLI" cp "$CID:/workspace/big.d" "$T/back.d")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
echo "  upload ${MB} MB:   sbxctl cp ${up_s} MB/s, docker cp ${up_d} MB/s (x$(ratio "$up_s" "$up_d"))"
echo "  download ${MB} MB: sbxctl cp ${down_s} MB/s, docker cp ${down_d} MB/s (x$(ratio "$down_s" "$down_d"))"
echo "  (base64 chunks, SBX_FS_TRANSPORT=json: upload ${up_j} MB/s (x$(ratio "$up_j" "$up_d")), download ${down_j} MB/s (x$(ratio "$down_j" "$down_d")))"
cmp -s "$T/big" "$T/back.s" || echo "  (warning: the downloaded copy differs from the upload)"
# dockerode's putArchive/getArchive (tests/bench/dockerode, pinned) beside
# them, and the same three for a directory tree (one tar stream each way).
DN=tests/bench/dockerode
SOCK=${ENGINE#unix://}
HAVE_NODE=0
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
    { [ -d "$DN/node_modules/dockerode" ] ||
        (cd "$DN" && npm ci --no-audit --no-fund >"$T/npm.log" 2>&1); }; then
    HAVE_NODE=1
fi
node_best() { # MB put TAR DIR | MB get PATH: the best of 3, MB/s
    [ "$HAVE_NODE" = 1 ] || { echo "-"; return; }
    m=$1
    shift
    b=0
    for k in 1 2 3; do
        s=$(node "$DN/archive.mjs" "$SOCK" "$CID" "$@" 2>/dev/null | awk '{print $2}')
        [ -n "$s" ] || { echo 0; return; }
        r=$(awk -v mb="$m" -v s="$s" 'BEGIN { printf "%.0f", mb / s }')
        [ "$r" -gt "$b" ] && b=$r
    done
    echo "$b"
}
tar -C "$T" -cf "$T/big.tar" big
$X fs mkdir -p fsb /workspace/n >/dev/null 2>&1
up_n=$(node_best "$MB" put "$T/big.tar" /workspace/n)
down_n=$(node_best "$MB" get /workspace/big)
echo "  dockerode putArchive/getArchive ${MB} MB: ${up_n} / ${down_n} MB/s" \
    "(sbxctl cp x$(ratio "$up_s" "$up_n") / x$(ratio "$down_s" "$down_n"))"
# a tree: 40 directories of 50 files of 32 KiB (64 MB in 2000 files)
mkdir -p "$T/tree"
for d in $(seq 40); do
    mkdir -p "$T/tree/d$d"
    for f in $(seq 50); do head -c 32768 /dev/urandom >"$T/tree/d$d/f$f"; done
done
TMB=$(du -sm "$T/tree" | awk '{print $1}')
tbest() { # up|down command...: best of 3 in MB/s for the tree
    b=0
    way=$1
    shift
    for k in 1 2 3; do
        if [ "$way" = up ]; then X exec fsb -- rm -rf /workspace/tree >/dev/null 2>&1; fi
        rm -rf "$T/tree.back"
        t0=$(now); "$@" >/dev/null 2>&1 || { echo 0; return; }; t1=$(now)
        r=$(awk -v mb="$TMB" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", mb / (b - a) }')
        [ "$r" -gt "$b" ] && b=$r
    done
    echo "$b"
}
X_="$B/sbxctl"
X() { "$X_" -s "$T/sbxd.sock" "$@"; }
tup_s=$(tbest up X cp "$T/tree" fsb:/workspace)
tup_d=$(tbest up "$CLI" cp "$T/tree" "$CID:/workspace")
X cp "$T/tree" fsb:/workspace >/dev/null 2>&1
tdown_s=$(tbest down X cp fsb:/workspace/tree "$T/tree.back")
tdown_d=$(tbest down "$CLI" cp "$CID:/workspace/tree" "$T/tree.back")
tar -C "$T" -cf "$T/tree.tar" tree
tup_n=$(node_best "$TMB" put "$T/tree.tar" /workspace/n)
tdown_n=$(node_best "$TMB" get /workspace/tree)
echo "  tree (2000 files, ${TMB} MB) upload:   sbxctl cp ${tup_s} MB/s, docker cp ${tup_d} MB/s" \
    "(x$(ratio "$tup_s" "$tup_d")), dockerode putArchive ${tup_n} MB/s (x$(ratio "$tup_s" "$tup_n"))"
echo "  tree (2000 files, ${TMB} MB) download: sbxctl cp ${tdown_s} MB/s, docker cp ${tdown_d} MB/s" \
    "(x$(ratio "$tdown_s" "$tdown_d")), dockerode getArchive ${tdown_n} MB/s (x$(ratio "$tdown_s" "$tdown_n"))"
# The TypeScript client's streams (Node Readable up, web stream down), same run
if command -v node >/dev/null 2>&1 && [ -f client/js/dist/index.js ]; then
    # Taking turns with docker cp (this VM's disk moves 2x between minutes), best
    # of 3 each: the client timed with node's start (as the CLI is) and for the
    # transfer alone (as a library is used, and as dockerode's rows are).
    ts_turns() { # up|down: prints "WITH_START ALONE DOCKER_CP" in MB/s
        bt=0 ba=0 bd=0
        for k in 1 2 3; do
            t0=$(now)
            if [ "$1" = up ]; then "$CLI" cp "$T/big" "$CID:/workspace/big.d" >/dev/null 2>&1
            else "$CLI" cp "$CID:/workspace/big.d" "$T/back.d" >/dev/null 2>&1; fi
            t1=$(now)
            r=$(rate "$t0" "$t1"); [ "$r" -gt "$bd" ] && bd=$r
            t0=$(now)
            s=$(SBXD_TS_XFER_TIME=1 node tests/bench/fs_bench_ts.mjs "$T/sbxd.sock" fsb "$T/big" "$1" 2>/dev/null | tail -n 1)
            t1=$(now)
            r=$(rate "$t0" "$t1"); [ "$r" -gt "$bt" ] && bt=$r
            r=$(awk -v mb="$MB" -v s="$s" 'BEGIN { if (s > 0) printf "%.0f", mb / s; else print 0 }')
            [ "$r" -gt "$ba" ] && ba=$r
        done
        echo "$bt $ba $bd"
    }
    set -- $(ts_turns up)
    up_t=$1 up_ta=$2 up_td=$3
    set -- $(ts_turns down)
    down_t=$1 down_ta=$2 down_td=$3
    up_w=$(best node tests/bench/fs_bench_ts.mjs "$T/sbxd.sock" fsb "$T/big" upweb)
    echo "  TypeScript streams ${MB} MB, taking turns with docker cp (${up_td} up / ${down_td} down MB/s):" \
        "upload ${up_t} MB/s with node's start (x$(ratio "$up_t" "$up_td")), ${up_ta} the transfer alone" \
        "(x$(ratio "$up_ta" "$up_td")); download ${down_t} (x$(ratio "$down_t" "$down_td")), ${down_ta} alone" \
        "(x$(ratio "$down_ta" "$down_td")); from a web stream ${up_w} MB/s (x$(ratio "$up_w" "$up_d") docker cp above)"
    cmp -s "$T/big" "$T/big.down" || echo "  (warning: the TypeScript download differs from the upload)"
    # the tree both ways as one tar stream: uploadDir, and downloadDir beside docker cp's download
    # the tree both ways taking turns with docker cp's (best of 3 each, node's start included)
    tmbs() { awk -v mb="$TMB" -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", mb / (b - a) }'; }
    ttup_t=0 ttup_d=0 ttdown_t=0 ttdown_d=0
    for k in 1 2 3; do
        X exec fsb -- rm -rf /workspace/tree.ts /workspace/tree.d >/dev/null 2>&1
        X exec fsb -- mkdir -p /workspace/tree.d >/dev/null 2>&1
        t0=$(now); "$CLI" cp "$T/tree" "$CID:/workspace/tree.d" >/dev/null 2>&1; t1=$(now)
        r=$(tmbs "$t0" "$t1"); [ "$r" -gt "$ttup_d" ] && ttup_d=$r
        t0=$(now)
        node tests/bench/fs_bench_ts.mjs "$T/sbxd.sock" fsb "$T/tree" treeup >/dev/null 2>&1 || { ttup_t=0; break; }
        t1=$(now)
        r=$(tmbs "$t0" "$t1"); [ "$r" -gt "$ttup_t" ] && ttup_t=$r
        rm -rf "$T/tree.back"
        t0=$(now); "$CLI" cp "$CID:/workspace/tree" "$T/tree.back" >/dev/null 2>&1; t1=$(now)
        r=$(tmbs "$t0" "$t1"); [ "$r" -gt "$ttdown_d" ] && ttdown_d=$r
        rm -rf "$T/tree.back"
        t0=$(now)
        node tests/bench/fs_bench_ts.mjs "$T/sbxd.sock" fsb "$T/tree.back" treedown >/dev/null 2>&1 || { ttdown_t=0; break; }
        t1=$(now)
        r=$(tmbs "$t0" "$t1"); [ "$r" -gt "$ttdown_t" ] && ttdown_t=$r
    done
    diff -r "$T/tree" "$T/tree.back" >/dev/null 2>&1 ||
        echo "  (warning: the TypeScript tree download differs from the tree)"
    echo "  TypeScript tree (2000 files, ${TMB} MB), taking turns with docker cp (${ttup_d} up / ${ttdown_d} down MB/s):" \
        "uploadDir ${ttup_t} MB/s (x$(ratio "$ttup_t" "$ttup_d")), downloadDir ${ttdown_t} MB/s (x$(ratio "$ttdown_t" "$ttdown_d"))"
else
    echo "  (TypeScript row skipped: needs node and client/js/dist, tests/providers/tsclient.sh builds it)"
fi
N=50
lib=$("$B/bench/fs_bench" "$T/sbxd.sock" fsb $N)
head -c 1024 /dev/zero | tr '\0' x >"$T/small"
t0=$(now)
for k in $(seq 10); do
    $X fs write fsb /workspace/small2 "$T/small" && $X fs cat fsb /workspace/small2 >/dev/null
done
t1=$(now)
ctl=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) * 100 }')
t0=$(now)
for k in $(seq 10); do
    "$CLI" exec -i "$CID" sh -c 'cat > /workspace/small3' <"$T/small" &&
        "$CLI" exec "$CID" cat /workspace/small3 >/dev/null
done
t1=$(now)
dex=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) * 100 }')
echo "  1 KiB write+read: libsbx ${lib} ms, sbxctl fs ${ctl} ms, docker exec cat ${dex} ms" \
    "(x$(ratio "$dex" "$lib") / x$(ratio "$dex" "$ctl") faster)"
