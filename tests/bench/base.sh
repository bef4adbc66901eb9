#!/bin/sh
# base.sh REV BUILD_DIR - the daemon benchmarks of an older commit beside this
# build's, in one run (issue 22: figures before and after a refactor on the same
# machine load). `make bench BASE=REV` runs it.
#
#   base.sh REV [BUILD_DIR]        build REV (cached), run the benchmarks, print ratios
#   base.sh --dir REV [BUILD_DIR]  build REV if needed and print its build dir, for
#                                  scripts that take SBX_BENCH_OLD=DIR themselves
#
# REV is built once from a detached git worktree in a temporary folder into
# BUILD_DIR/base/<commit> (`make all B=...`) and kept there for the next run.
# bench.c's rows then run SBX_BENCH_ROUNDS (3) times against a fresh sbxd of
# each build, old and new taking turns and the order flipped every round (old,
# new; new, old; ...) so that a drift of the machine's load falls on both. The
# bench client is this build's for both, so only the daemon (and its workers)
# differ. Then each script of BASE_SCRIPTS (js_bench.sh) runs with
# SBX_BENCH_OLD set, which interleaves the two builds itself.
#
# Last comes the table: for every row seen on both sides, the median of each
# side's figures and new/old. A row is a line "LABEL  NUMBER UNIT ..." (a p99
# after it is a row of its own) inside a section whose header line starts with
# "-- " and contains ": old" or ": new"; any bench script printing that shape
# gets ratios. Lower is better for times and sizes, higher for rates (/s).
# BENCH_QUICK=quick is passed on as the scripts take it. The run's output is
# kept in BUILD_DIR/base/<commit>.run.txt (awk -f tests/bench/base_ratio.awk
# on it prints the table again).
if [ "$1" = --dir ]; then
    DIR_ONLY=1
    shift
fi
REV=$1
B=${2:-build}
if [ -z "$REV" ]; then
    echo "usage: base.sh [--dir] REV [BUILD_DIR]" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
SHA=$(git rev-parse --verify --quiet "$REV^{commit}") || {
    echo "base.sh: $REV is not a commit here" >&2
    exit 2
}
mkdir -p "$B/base"
OLD=$(cd "$B/base" && pwd)/$(echo "$SHA" | cut -c1-12)

# ---- the old build -------------------------------------------------------------
build_old() {
    [ -x "$OLD/sbxd" ] && [ -x "$OLD/sbxd-jsworker" ] && return 0
    src=$(mktemp -d /tmp/sbxd-base.XXXXXX)
    echo "base.sh: building $REV ($SHA) into $OLD" >&2
    git worktree add --detach --quiet "$src/tree" "$SHA" || return 1
    # The TypeScript stripper is an npm bundle: when REV pins the same one, this
    # build's copy stands in (newer than the fresh checkout, so make keeps it).
    if [ -f "$B/gen/strip.js" ] && git diff --quiet "$SHA" HEAD -- daemon/workers/jsc/strip; then
        mkdir -p "$OLD/gen"
        cp "$B/gen/strip.js" "$OLD/gen/strip.js"
    fi
    make -C "$src/tree" -j"${BENCH_JOBS:-2}" all B="$OLD" >"$OLD.log" 2>&1
    st=$?
    git worktree remove --force "$src/tree"
    rm -rf "$src"
    if [ $st -ne 0 ]; then
        echo "base.sh: $REV did not build (see $OLD.log)" >&2
        return 1
    fi
}
build_old || exit 1
if [ -n "$DIR_ONLY" ]; then
    echo "$OLD"
    exit 0
fi

# ---- the runs --------------------------------------------------------------------
T=$(mktemp -d /tmp/sbxd-basebench.XXXXXX)
. tests/sbxd_kit.sh
one() { # BUILD_DIR LABEL: bench.c's rows against a fresh sbxd of that build
    sbxd_kit_start "$1/sbxd" "$T/s.sock" "$T/sbxd.log" -c tests/bench/bench.yaml || return 1
    echo "-- $2 ($1)"
    "$B/bench/bench" "$T/s.sock" $BENCH_QUICK
    sbxd_kit_stop "$SBXD_KIT_PID"
}
echo "sbxd benchmark, $REV (old, $OLD) beside $B (new); $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
{
    r=1
    while [ $r -le "${SBX_BENCH_ROUNDS:-3}" ]; do
        if [ $((r % 2)) -eq 1 ]; then
            one "$OLD" "bench, round $r: old"
            one "$B" "bench, round $r: new"
        else
            one "$B" "bench, round $r: new"
            one "$OLD" "bench, round $r: old"
        fi
        r=$((r + 1))
    done
    for s in ${BASE_SCRIPTS-js_bench.sh}; do
        echo "-- $s"
        SBX_BENCH_OLD=$OLD sh "tests/bench/$s" "$B"
    done
} 2>&1 | tee "$OLD.run.txt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- the table ---------------------------------------------------------------------
echo
echo "median of each side; new/old (< 1 is better for times and sizes, > 1 for rates)"
awk -f tests/bench/base_ratio.awk "$OLD.run.txt"
rm -rf "$T"
