#!/bin/sh
# defaults.sh SOCKET [BUILD_DIR] - what sbxd does with what people type first
# (issue 19): an image without a provider, options a provider does not have,
# a misspelt provider, shell given to the js provider.
# Prints "N passed, N failed, N skipped" last.
SOCK=${1:?usage: defaults.sh SOCKET [BUILD_DIR]}
B=${2:-build}
CTL="$B/sbxctl"
T=$(mktemp -d /tmp/sbxd-defaults.XXXXXX)
PASSED=0 FAILED=0 SKIPPED=0 N=0
ok() { N=$((N + 1)); printf '%3d - %-60s PASSED\n' "$N" "$1"; PASSED=$((PASSED + 1)); }
bad() {
    N=$((N + 1)); printf '%3d - %-60s FAILED\n' "$N" "$1"
    [ -n "$2" ] && printf '      %s\n' "$2"
    FAILED=$((FAILED + 1))
}
skip() { N=$((N + 1)); printf '%3d - %-60s SKIPPED (%s)\n' "$N" "$1" "$2"; SKIPPED=$((SKIPPED + 1)); }
check() { d=$1; shift; if "$@"; then ok "$d"; else bad "$d" "$* ($(head -c 300 "$T/err"))"; fi; }
out() { "$CTL" -s "$SOCK" "$@" >"$T/out" 2>"$T/err"; st=$?; }

# -- unknown providers ------------------------------------------------------------
out create --provider dokcer
check "a misspelt provider is refused (exit 125)" [ $st -eq 125 ]
check "... naming the nearest one" grep -q "did you mean 'docker'" "$T/err"
check "... and the known ones" grep -q "known: js, duktape, docker, modal" "$T/err"
out create --provider nosuchthing
check "a provider far from all: the known ones, no guess" \
    sh -c "grep -q 'known: js' '$T/err' && ! grep -q 'did you mean' '$T/err'"
out snapshots --provider dukatpe
check "snapshots --provider: the same suggestion" grep -q "did you mean 'duktape'" "$T/err"

# -- options a provider does not have -------------------------------------------
out create --provider js --opt memory=512m
check "js refuses a Docker option (exit 125)" [ $st -eq 125 ]
check "... naming the option and the provider" \
    grep -q "options.memory: not an option of the js provider" "$T/err"
out create --provider duktape --opt jit=false
check "duktape has no options: jit is refused" grep -q "options.jit: not an option of the duktape provider" "$T/err"
out create --provider js --image debian:bookworm-slim
check "js refuses an image, naming the provider" grep -q "image: the js provider runs no images" "$T/err"
out create --provider js --opt jit=false --opt persistent=true
check "js still takes its own options" [ $st -eq 0 ]
[ $st -eq 0 ] && "$CTL" -s "$SOCK" rm "$(cat "$T/out")" >/dev/null 2>&1

# -- an image without a provider --------------------------------------------------
"$CTL" -s "$SOCK" --json info >"$T/info" 2>/dev/null
docker_ok=$(jq -r '[.providers[] | select(.name == "docker")][0].available' "$T/info")
default=$(jq -r '[.providers[] | select(.default)][0].name' "$T/info")
if [ "$default" != js ] && [ "$default" != duktape ]; then
    skip "an image without --provider means docker" "the default provider is $default"
elif [ "$docker_ok" = true ] && ! docker image inspect "${SBX_TEST_IMAGE:-sbx-test/busybox}" >/dev/null 2>&1; then
    # Never a pull: the engine would go to a registry.
    skip "an image without --provider means docker" "the test image is not in the engine"
elif [ "$docker_ok" = true ]; then
    img=${SBX_TEST_IMAGE:-sbx-test/busybox}
    out create --image "$img" --opt memory=64m
    if [ $st -eq 0 ]; then
        id=$(cat "$T/out")
        prov=$("$CTL" -s "$SOCK" --json get "$id" | jq -r .provider)
        check "an image without --provider makes a docker sandbox" [ "$prov" = docker ]
        "$CTL" -s "$SOCK" rm "$id" >/dev/null 2>&1
    else
        bad "an image without --provider makes a docker sandbox" "$(cat "$T/err")"
    fi
else
    out create --image debian:bookworm-slim
    check "an image without --provider, docker unavailable: exit 125" [ $st -eq 125 ]
    check "... saying docker is unavailable" grep -q "without a provider means docker, which is unavailable" "$T/err"
fi
if [ "$default" = js ] || [ "$default" = duktape ]; then
    if [ "$docker_ok" = true ]; then
        skip "a Docker option without docker: clear error" "docker is available here"
    else
        out create --opt memory=512m
        check "a Docker option without --provider and without docker" \
            grep -q "options.memory without a provider means docker" "$T/err"
    fi
fi

# -- shell given to JavaScript -----------------------------------------------------
out run --provider js -- 'echo hi; exit 3'
check "shell on js: a SyntaxError" grep -q "SyntaxError" "$T/err"
check "... with a hint naming the provider and a shell" \
    grep -q "sbxd: this ran as JavaScript on the js provider; to run shell commands use a shell provider" "$T/err"
out --json run --provider duktape -- 'ls -la'
check "shell on duktape: the exit record's hint names duktape" \
    sh -c "jq -r .hint '$T/out' | grep -q 'on the duktape provider'"
out run --provider js -- 'let x = ;'
check "a JavaScript typo gets no shell hint" sh -c "! grep -q 'shell provider' '$T/err'"

# -- log lines: <N> prefixes for journald and pipes, plain on a terminal --------------
printf 'providers:\n  docker:\n    enabled: false\n  modal:\n    enabled: false\n' >"$T/log.yaml"
SBXD_SOCKET="$T/pipe.sock" "$B/sbxd" -c "$T/log.yaml" 2>"$T/pipe.log" &
LP=$!
sleep 1
kill -TERM $LP
wait $LP
check "stderr a pipe: log lines carry the <6> priority prefix" grep -q '^<6>sbxd: provider duktape ready' "$T/pipe.log"
if command -v script >/dev/null 2>&1; then
    script -qec "SBXD_SOCKET='$T/tty.sock' '$B/sbxd' -c '$T/log.yaml' & p=\$!; sleep 1; kill -TERM \$p; wait \$p" \
        /dev/null >"$T/tty.log" 2>&1
    check "stderr a terminal: plain lines, no <N> prefix" \
        sh -c "grep -q '^sbxd: provider duktape ready' '$T/tty.log' && ! grep -q '<[0-9]>sbxd' '$T/tty.log'"
else
    skip "stderr a terminal: plain lines, no <N> prefix" "no script(1)"
fi

rm -rf "$T"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" -eq 0 ]
