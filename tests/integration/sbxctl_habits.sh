#!/bin/sh
# sbxctl_habits.sh SOCKET [BUILD_DIR] - sbxctl as Docker's users type it
# (issue 19): getopt_long parsing with bundled flags, global options only
# before the verb, kill -s, rm -f ID..., ps -q, ls -q, logs --tail, --format,
# --version, events, completion, exit statuses, full-sentence help, rounded
# numbers. Duktape sandboxes; the Docker parts are counted skips without one.
# Prints "N passed, N failed, N skipped" last.
SOCK=${1:?usage: sbxctl_habits.sh SOCKET [BUILD_DIR]}
B=${2:-build}
CTL="$B/sbxctl"
T=$(mktemp -d /tmp/sbxctl-habits.XXXXXX)
ID="hab-$$"
PASSED=0 FAILED=0 SKIPPED=0 N=0
ok() { N=$((N + 1)); printf '%3d - %-62s PASSED\n' "$N" "$1"; PASSED=$((PASSED + 1)); }
bad() {
    N=$((N + 1)); printf '%3d - %-62s FAILED\n' "$N" "$1"
    [ -n "$2" ] && printf '      %s\n' "$2"
    FAILED=$((FAILED + 1))
}
skip() { N=$((N + 1)); printf '%3d - %-62s SKIPPED (%s)\n' "$N" "$1" "$2"; SKIPPED=$((SKIPPED + 1)); }
check() { d=$1; shift; if "$@"; then ok "$d"; else bad "$d" "$* | $(head -c 300 "$T/err" 2>/dev/null)"; fi; }
out() { "$CTL" -s "$SOCK" "$@" >"$T/out" 2>"$T/err"; st=$?; }
ctl() { "$CTL" -s "$SOCK" "$@"; }

# -- the parser -------------------------------------------------------------------
out --version
check "--version exits 0" [ $st -eq 0 ]
check "--version names sbxctl, its version and the protocol" grep -q '^sbxctl [0-9.]* (protocol [0-9.]*)$' "$T/out"
out ls --bogus
check "an unknown long option: exit 2, getopt's words" \
    sh -c "[ $st -eq 2 ] && grep -q \"sbxctl ls: unrecognized option '--bogus'\" '$T/err'"
out ls -x
check "an unknown short option: invalid option -- 'x'" grep -q "invalid option -- 'x'" "$T/err"
out create --id
check "a missing value: option '--id' requires an argument" grep -q "option '--id' requires an argument" "$T/err"
out ping -s "$SOCK"
check "-s after the verb is not the global --socket" [ $st -eq 2 ]
out --bogus ping
check "an unknown global option names where verb options go" grep -q "verb options go after the verb" "$T/err"
out ls --json
check "--json after the verb still works" sh -c "jq -e .sandboxes '$T/out' >/dev/null"
out ls --format json
check "--format json is --json" sh -c "jq -e .sandboxes '$T/out' >/dev/null"
out --format table ls
check "--format table before the verb: the table" grep -q '^ID ' "$T/out"
out ls --format yaml
check "--format yaml is refused" [ $st -eq 2 ]

# -- help -------------------------------------------------------------------------
"$CTL" --help >"$T/out" 2>&1
check "help: every summary ends a sentence" \
    sh -c "awk '/^Verbs:/{v=1;next} /^\$/{v=0} v' '$T/out' | awk '
        /^  [a-z]/ { if (s != \"\" && s !~ /[.)]\$/) bad=1; s=\$0; next }
        { s=\$0 } END { if (s !~ /[.)]\$/) bad=1; exit bad }'"
check "help lists events and completion" sh -c "grep -q '^  events ' '$T/out' && grep -q '^  completion ' '$T/out'"
check "help says what the exit statuses mean" grep -q '125 an error of' "$T/out"

# -- bundled flags, run and exec ----------------------------------------------------
out run --provider duktape -it -- 'console.log("bundled")'
check "run -it: bundled short flags are accepted" sh -c "[ $st -eq 0 ] && grep -qx bundled '$T/out'"
echo "from stdin" | "$CTL" -s "$SOCK" run -i --rm -e A=1 --provider duktape -- \
    'console.log("ok")' >"$T/out" 2>"$T/err"
st=$?
check "run -i --rm -e K=V: accepted together" [ $st -eq 0 ]
out run --provider duktape -t 5
check "-t is the terminal, not the timeout: -t 5 runs '5'" sh -c "[ $st -eq 0 ] && grep -qx 5 '$T/out'"
out run --provider duktape --timeout 200 -- 'while (true) {}'
check "--timeout keeps its long name (exit 124)" [ $st -eq 124 ]
ctl create --provider duktape --id "$ID" >/dev/null 2>&1
out exec -w /tmp "$ID" -- 'console.log("cwd ok")'
check "exec -w DIR is accepted" sh -c "[ $st -eq 0 ] && grep -qx 'cwd ok' '$T/out'"

# -- exit statuses ------------------------------------------------------------------
out get nope-nope-$$
check "a sandbox that is not there: exit 125" [ $st -eq 125 ]
check "... with sbxd's message whole" grep -q "sandbox not found: nope-nope-$$ (code -32000)" "$T/err"
"$CTL" -s "$T/nope.sock" ping >/dev/null 2>&1
check "sbxd not reachable: exit 125" [ $? -eq 125 ]

# -- ps -q, ls -q, kill -s, logs --tail -------------------------------------------------
P=$(ctl spawn "$ID" -- 'for (var i = 1; i <= 5; i++) console.log("line " + i)')
ctl wait "$ID" "$P" >/dev/null 2>&1
out ps -q "$ID"
check "ps -q prints only pids" grep -qx "$P" "$T/out"
out ls -q
check "ls -q prints only ids" sh -c "grep -qx '$ID' '$T/out' && ! grep -q PROVIDER '$T/out'"
out logs --tail 2 "$ID" "$P"
check "logs --tail 2: the last two lines" sh -c "[ \"\$(cat '$T/out')\" = \"\$(printf 'line 4\nline 5')\" ]"
out logs -n 0 "$ID" "$P"
check "logs -n 0: nothing" [ ! -s "$T/out" ]
out logs --tail all "$ID" "$P"
check "logs --tail all: everything" [ "$(wc -l <"$T/out")" -eq 5 ]
out logs --tail 99 "$ID" "$P"
check "logs --tail past the start: everything" [ "$(wc -l <"$T/out")" -eq 5 ]
P2=$(ctl spawn "$ID" -- 'while (true) {}')
out kill -s TERM "$ID" "$P2"
check "kill -s TERM ID PID: -s is the signal" [ $st -eq 0 ]
ctl wait "$ID" "$P2" >/dev/null 2>&1
check "... and the process ended" [ $? -ne 0 ]

# -- --json numbers ---------------------------------------------------------------------
out --json info
check "--json: uptime_s rounded to microseconds" \
    sh -c "grep -o '\"uptime_s\":[0-9.e+-]*' '$T/out' | grep -Eq '\"uptime_s\":[0-9]+(\.[0-9]{1,6})?$'"
out info
check "info: the uptime for people" grep -Eq '^uptime: [0-9.]+(s|m [0-9]+s|h [0-9]+m|d [0-9]+h)$' "$T/out"

# -- events -------------------------------------------------------------------------------
"$CTL" -s "$SOCK" events >"$T/events" 2>&1 &
EP=$!
sleep 0.5
ctl create --provider duktape --id "$ID-ev" >/dev/null 2>&1
PE=$(ctl spawn "$ID-ev" -- 'var t = Date.now(); while (Date.now() - t < 300) {}')
sleep 2.5
ctl rm "$ID-ev" >/dev/null 2>&1
sleep 0.5
kill "$EP" 2>/dev/null
wait "$EP" 2>/dev/null
check "events: a sandbox going running" grep -q " sandbox $ID-ev running" "$T/events"
check "events: a process exit, with its code" grep -q " process $ID-ev $PE exited 0 " "$T/events"
check "events: the sandbox destroyed" grep -q " sandbox $ID-ev destroy" "$T/events"

# -- rm -f ID... ----------------------------------------------------------------------------
ctl create --provider duktape --id "$ID-2" >/dev/null 2>&1
out rm -f "$ID" "$ID-2"
check "rm -f ID ID: both destroyed, each id printed" \
    sh -c "[ $st -eq 0 ] && [ \"\$(cat '$T/out')\" = \"\$(printf '%s\n%s' '$ID' '$ID-2')\" ]"
out rm "$ID"
check "rm of one that is gone: exit 125" [ $st -eq 125 ]

# -- completion -----------------------------------------------------------------------------
for sh in bash zsh fish; do
    out completion $sh
    check "completion $sh prints a script naming the verbs and options" \
        sh -c "[ $st -eq 0 ] && grep -q 'events' '$T/out' && grep -Eq -- '--tail|-l tail' '$T/out'"
done
"$CTL" completion bash >"$T/c.bash"
if command -v bash >/dev/null 2>&1; then
    got=$(bash -c ". '$T/c.bash'; COMP_WORDS=(sbxctl lo); COMP_CWORD=1; _sbxctl; echo \"\${COMPREPLY[*]}\"")
    check "bash completion: 'sbxctl lo' completes to logs" [ "$got" = logs ]
    got=$(bash -c ". '$T/c.bash'; COMP_WORDS=(sbxctl logs --ta); COMP_CWORD=2; _sbxctl; echo \"\${COMPREPLY[*]}\"")
    check "bash completion: 'sbxctl logs --ta' completes to --tail" [ "$got" = --tail ]
else
    skip "bash completion runs" "no bash"
fi
out completion tcsh
check "completion of an unknown shell: exit 2" [ $st -eq 2 ]

# -- Docker: ps shows argv quoted as given --------------------------------------------------
dk=$(ctl --json info | jq -r '[.providers[] | select(.name == "docker")][0].available')
# Never a pull: only an image the engine has.
if [ "$dk" = true ] && docker image inspect "${SBX_TEST_IMAGE:-sbx-test/busybox}" >/dev/null 2>&1 &&
    ctl create --image "${SBX_TEST_IMAGE:-sbx-test/busybox}" --id "$ID-dk" >/dev/null 2>&1; then
    ctl exec "$ID-dk" -- sh -c 'echo "a b"' >/dev/null 2>&1
    out ps "$ID-dk"
    check "ps shows an argv quoted as given" grep -q "sh -c 'echo \"a b\"'" "$T/out"
    out ls
    check "ls shows the image" grep -q "$ID-dk  *docker  *${SBX_TEST_IMAGE:-sbx-test/busybox}" "$T/out"
    ctl exec "$ID-dk" -- /nonexistent >/dev/null 2>&1
    check "a command not found: exit 127" [ $? -eq 127 ]
    ctl exec "$ID-dk" -- sh -c /etc/passwd >/dev/null 2>&1
    check "a command that cannot be invoked: exit 126" [ $? -eq 126 ]
    ctl rm "$ID-dk" >/dev/null 2>&1
    # An invalid reference: the engine refuses it itself (no registry asked).
    out create --image 'Bad/Name:x'
    check "an engine error: exit 125 with the engine's message whole" \
        sh -c "[ $st -eq 125 ] && grep -q 'invalid reference format: repository name must be lowercase' '$T/err'"
else
    for d in "ps shows an argv quoted as given" "ls shows the image" \
        "a command not found: exit 127" "a command that cannot be invoked: exit 126" \
        "an engine error: exit 125 with the engine's message whole"; do
        skip "$d" "no docker provider with the test image"
    done
fi

rm -rf "$T"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" -eq 0 ]
