#!/bin/sh
# run.sh BUILD_DIR SECONDS [CORPUS_DIR] - builds the libFuzzer harnesses
# (make fuzz-build) and runs each for SECONDS, one after the other, starting
# from the seeds in tests/fuzz/corpus/<harness>. New inputs go to
# CORPUS_DIR/<harness> (kept between runs) or, without it, to a temporary
# directory. A harness passes when it ran its time without a crash, leak,
# sanitizer report or timeout; the crashing input is saved as
# BUILD_DIR/artifacts/<harness>-crash-… and its report printed.
# FUZZ_ONLY (space-separated harness names) runs only those.
# Ends with "N passed, N failed" like every test of the suite.
B=${1:-build-fuzz}
SECS=${2:-3}
KEEP=$3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
PASSED=0
FAILED=0

if ! command -v "${FUZZ_CC:-clang-14}" >/dev/null 2>&1; then
    echo "clang (${FUZZ_CC:-clang-14}) is not installed: run tests/deps.sh test"
    echo "0 passed, 1 failed"
    exit 1
fi
if ! ${MAKE:-make} -s fuzz-build >"${TMPDIR:-/tmp}/sbxd-fuzz-build.$$" 2>&1; then
    tail -n 30 "${TMPDIR:-/tmp}/sbxd-fuzz-build.$$"
    rm -f "${TMPDIR:-/tmp}/sbxd-fuzz-build.$$"
    echo "fuzz harnesses do not build"
    echo "0 passed, 1 failed"
    exit 1
fi
rm -f "${TMPDIR:-/tmp}/sbxd-fuzz-build.$$"

TMP=$(mktemp -d /tmp/sbxd-fuzz.XXXXXX)
mkdir -p "$B/artifacts"
# Every report aborts; leaks are reported too (libFuzzer's -detect_leaks).
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
n=0
for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    # FUZZ_ONLY="fuzz_a fuzz_b": only those harnesses (after a change to their code)
    case " ${FUZZ_ONLY:-$name} " in *" $name "*) ;; *) continue ;; esac
    bin="$B/fuzz/$name"
    n=$((n + 1))
    if [ -n "$KEEP" ]; then
        work="$KEEP/$name"
    else
        work="$TMP/$name"
    fi
    mkdir -p "$work"
    seeds="tests/fuzz/corpus/$name"
    [ -d "$seeds" ] || seeds=""
    log="$TMP/$name.log"
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$SECS" -timeout=30 -rss_limit_mb=3072 -print_final_stats=1 \
        -artifact_prefix="$B/artifacts/$name-" "$work" $seeds >"$log" 2>&1
    st=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ "$st" -eq 0 ]; then
        PASSED=$((PASSED + 1))
        printf '%2d - %-58s PASSED\n' "$n" "$name: ${SECS} s, ${runs:-?} inputs, no finding"
    else
        FAILED=$((FAILED + 1))
        printf '%2d - %-58s FAILED\n' "$n" "$name (exit $st)"
        grep -E 'ERROR|runtime error|SUMMARY|Test unit written|^ *#[0-9] 0x' "$log" | head -n 16
    fi
done
rm -rf "$TMP"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
