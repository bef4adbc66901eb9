#!/bin/sh
# sbxctl.sh SOCKET [BUILD_DIR] - sbxctl against a running sbxd (Duktape):
# every verb, exit statuses, streaming, --json, --stdin, Ctrl-C on exec and run,
# --detach, attach, write, close-stdin, hooks.
# Prints "N passed, N failed" last, like the C tests.
SOCK=${1:?usage: sbxctl.sh SOCKET [BUILD_DIR]}
B=${2:-build}
CTL="$B/sbxctl"
T=$(mktemp -d /tmp/sbxctl-test.XXXXXX)
ID="ctl-$$-a"
PASSED=0
FAILED=0
N=0

ok() { # description: the last command's condition held
    N=$((N + 1))
    printf '%3d - %-60s PASSED\n' "$N" "$1"
    PASSED=$((PASSED + 1))
}
bad() { # description [detail]
    N=$((N + 1))
    printf '%3d - %-60s FAILED\n' "$N" "$1"
    [ -n "$2" ] && printf '      %s\n' "$2"
    FAILED=$((FAILED + 1))
}
check() { # description, then a test(1) expression or command
    d=$1
    shift
    if "$@"; then ok "$d"; else bad "$d" "$*"; fi
}
ctl() { "$CTL" -s "$SOCK" "$@"; }
# out CMD... : stdout in $T/out, stderr in $T/err, status in $st
out() {
    "$CTL" -s "$SOCK" "$@" >"$T/out" 2>"$T/err"
    st=$?
}

# -- help and usage -------------------------------------------------------------
"$CTL" --help >"$T/out" 2>&1
st=$?
check "--help exits 0 and lists the verbs" [ $st -eq 0 ]
check "--help lists exec, run and set-env" grep -q 'set-env' "$T/out"
out exec --help
check "exec --help exits 0 with the usage" [ $st -eq 0 ]
check "exec --help shows --stdin" grep -q -- '--stdin' "$T/out"
out bogus
check "unknown verb exits 2" [ $st -eq 2 ]
out exec
check "exec without arguments exits 2" [ $st -eq 2 ]
out create --timeout soon
check "a non-numeric --timeout exits 2" [ $st -eq 2 ]
out get
check "get without an ID exits 2" [ $st -eq 2 ]

# -- daemon ---------------------------------------------------------------------
out ping
check "ping" [ $st -eq 0 ]
check "ping prints pong" grep -q '^pong' "$T/out"
SBXD_SOCKET="$SOCK" "$CTL" ping >/dev/null 2>&1
check "SBXD_SOCKET is honoured" [ $? -eq 0 ]
"$CTL" -s "$T/nope.sock" ping >/dev/null 2>"$T/err"
st=$?
check "an unreachable socket exits 125 (docker's daemon-error status)" [ $st -eq 125 ]
check "... with a message" grep -q 'sbxctl: cannot connect' "$T/err"
out info
check "info shows the duktape provider" grep -q 'duktape' "$T/out"
out --json info
check "--json info is JSON" grep -q '^{"version":' "$T/out"

# -- the README acceptance check ------------------------------------------------
out run -- 'console.log("hi"); const n: number = 6 * 7; return n'
printf 'hi\n42\n' >"$T/want"
check "run: exit 0" [ $st -eq 0 ]
check "run: prints hi then 42 (code mode, the default js provider)" cmp -s "$T/out" "$T/want"
out run -- 'const x = await external_lookup({id: 1}); return x'
check "run: a code-mode program with await runs (no tool given: ReferenceError, exit 1)" \
    [ $st -eq 1 ]
check "... the error names external_lookup, not a syntax error" grep -q 'ReferenceError.*external_lookup' "$T/err"
out run --provider duktape -- 'console.log("hi"); 6*7'
check "run --provider duktape: prints hi then 42" cmp -s "$T/out" "$T/want"

# -- --tool NAME=COMMAND: sbxctl answers the program's tool calls ---------------
out run --tool lookup=cat -- 'const x = await external_lookup({id: 1}); return x'
check "run --tool lookup=cat: exit 0" [ $st -eq 0 ]
check "... the command got the args as JSON and its JSON stdout is the result" \
    [ "$(cat "$T/out")" = '{"id":1}' ]
out run --tool 'add=read a; echo $((${#a} + 1))' --tool 'twice=read a; echo "[$a,$a]"' -- \
    'const r = await Promise.all([external_add("abc"), external_twice(7), external_add(1)]); return r'
check "run --tool: several calls in flight, each answered by its own command" \
    [ "$(cat "$T/out")" = '[6,[7,7],2]' ]
out run --tool 'txt=printf "plain text\n"' -- 'return await external_txt({})'
check "run --tool: stdout that is not JSON comes back as a string" \
    [ "$(cat "$T/out")" = '"plain text"' ]
out run --tool 'bad=echo nope >&2; exit 3' -- \
    'try { await external_bad({}); return "no" } catch (e) { return e.message }'
check "run --tool: a failing command is an error with its stderr inside the program" \
    [ "$(cat "$T/out")" = '"nope"' ]
out run --tool lookup -- 'try { await external_lookup({}) } catch (e) { return e.message }'
check "run --tool NAME without a command: the program is told how to give one" \
    grep -q 'lookup=COMMAND' "$T/out"
out run --tool '=x' -- 'return 1'
check "run --tool =x: a usage error (2)" [ $st -eq 2 ]
ctl create --provider js --id "$ID-tool" --tool echo_it >/dev/null 2>&1
out exec "$ID-tool" --tool echo_it=cat -- 'return await external_echo_it([1, "x"])'
check "exec --tool NAME=COMMAND answers a tool registered at create" \
    [ "$(cat "$T/out")" = '[1,"x"]' ]
ctl rm "$ID-tool" >/dev/null 2>&1

# -- sandbox lifecycle ----------------------------------------------------------
out create --provider duktape --id "$ID" --env A=1 --tool add --timeout 120000
check "create exits 0" [ $st -eq 0 ]
check "create prints the id" [ "$(cat "$T/out")" = "$ID" ]
out ls
check "ls has a header" grep -q '^ID  *PROVIDER  *IMAGE  *STATUS  *CREATED' "$T/out"
check "ls lists the sandbox" grep -q "^$ID  *duktape  *-  *running" "$T/out"
out get "$ID"
check "get shows the status" grep -q '^status: running' "$T/out"
out --json get "$ID"
check "--json get prints the raw result" grep -q "\"id\":\"$ID\"" "$T/out"
out get nope-nope
check "get of an unknown sandbox exits 125" [ $st -eq 125 ]
check "... with 'sbxctl: message (code -32000)'" grep -q '^sbxctl: .*(code -32000)$' "$T/err"

# -- exec -------------------------------------------------------------------------
out exec "$ID" -- 'console.log(process.env.A); console.error("to stderr")'
check "exec: stdout streamed" [ "$(cat "$T/out")" = "1" ]
check "exec: stderr streamed" grep -q 'to stderr' "$T/err"
out exec "$ID" --env A=2 -- 'process.env.A'
check "exec --env: result printed as JSON" [ "$(cat "$T/out")" = '"2"' ]
out exec "$ID" -- 'console.log("a"); console.log("b"); ({x: [1, 2]})'
printf 'a\nb\n{"x":[1,2]}\n' >"$T/want"
check "exec: output, then the completion value on its own line" cmp -s "$T/out" "$T/want"
out exec "$ID" -- 'throw new Error("boom")'
check "exec: an uncaught error exits 1" [ $st -eq 1 ]
check "exec: the stack is on stderr once" [ "$(grep -c 'Error: boom' "$T/err")" -eq 1 ]
out exec "$ID" --timeout 300 -- 'while (true) {}'
check "exec: timeout exits 124" [ $st -eq 124 ]
printf 'console.log("from file"); 1 + 1\n' >"$T/script.js"
out exec "$ID" --file "$T/script.js"
printf 'from file\n2\n' >"$T/want"
check "exec --file" cmp -s "$T/out" "$T/want"
printf 'abc\ndef' | "$CTL" -s "$SOCK" exec "$ID" --stdin -- \
    'var s, all = ""; while ((s = read_stdin()) !== null) all += s; all.toUpperCase()' >"$T/out" 2>"$T/err"
check "exec --stdin streams stdin" [ "$(cat "$T/out")" = '"ABC\nDEF"' ]
head -c 200000 /dev/zero | tr '\0' 'z' >"$T/big"
"$CTL" -s "$SOCK" exec "$ID" --stdin -- \
    'var s, n = 0; while ((s = read_stdin()) !== null) n += s.length; n' <"$T/big" >"$T/out" 2>"$T/err"
check "exec --stdin: 200 kB from a file" [ "$(cat "$T/out")" = "200000" ]
out --json exec "$ID" -- '1 + 1'
check "exec --json prints the result" grep -q '"result":2' "$T/out"
out exec "$ID" -- 'var s = new Array(1024).join("y"); for (var i = 0; i < 1500; i++) console.log(s); 0'
check "exec: 1.5 MB of output streamed in full" [ "$(wc -c <"$T/out")" -eq $((1500 * 1024 + 2)) ]
# NUL-heavy output comes as base64 (output_encoding auto) and must arrive byte-exact.
out exec "$ID" -- 'var z = new Array(65537).join("\u0000"); for (var i = 0; i < 16; i++) console.log(z); 0'
head -c 65536 /dev/zero >"$T/z"
printf '\n' >>"$T/z"
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do cat "$T/z"; done >"$T/want"
printf '0\n' >>"$T/want"
check "exec: 1 MB of NUL bytes arrives byte-exact" cmp -s "$T/out" "$T/want"
out exec "$ID" -- 'console.log("q\" b\\ \t\r\u0001\u00e9\u20ac\ud83d\ude00"); 0'
printf 'q" b\\ \t\r\001\303\251\342\202\254\360\237\230\200\n0\n' >"$T/want"
check "exec: escapes and multi-byte characters arrive byte-exact" cmp -s "$T/out" "$T/want"

# -- processes --------------------------------------------------------------------
out spawn "$ID" -- 'for (var i = 0; i < 3; i++) console.log("n" + i); 5'
P=$(cat "$T/out")
check "spawn prints a pid" [ -n "$P" ] && [ "$P" -gt 0 ] 2>/dev/null
out wait "$ID" "$P"
check "wait prints 0 and exits 0" [ $st -eq 0 ] && [ "$(cat "$T/out")" = "0" ]
out logs "$ID" "$P"
printf 'n0\nn1\nn2\n' >"$T/want"
check "logs replays the output" cmp -s "$T/out" "$T/want"
out logs -f "$ID" "$P"
check "logs -f of a finished process ends" cmp -s "$T/out" "$T/want"
out ps "$ID"
check "ps lists the process" grep -q "^$P  *exited" "$T/out"

out spawn "$ID" -- 'console.log("live"); var t = Date.now(); while (Date.now() - t < 600) {} console.log("done")'
P=$(cat "$T/out")
out logs -f "$ID" "$P"
printf 'live\ndone\n' >"$T/want"
check "logs -f follows until exit" cmp -s "$T/out" "$T/want"

out spawn "$ID" -- 'while (true) {}'
P=$(cat "$T/out")
out kill "$ID" "$P"
check "kill exits 0" [ $st -eq 0 ]
out wait "$ID" "$P"
check "wait after kill: 137" [ $st -eq 137 ] && [ "$(cat "$T/out")" = "137" ]
out kill "$ID" 99999
check "kill of an unknown pid: code -32004" grep -q '(code -32004)' "$T/err"

# -- snapshot, clone, env, instructions, stop/start ----------------------------------
ctl exec "$ID" -- 'var kept = 7' >/dev/null 2>&1
out snapshot "$ID"
check "snapshot prints snap-..." grep -q '^snap-' "$T/out"
SNAP=$(cat "$T/out")
out create --provider duktape --id "$ID-l" --lifetime 600000 --command-timeout 700
check "create --lifetime --command-timeout" [ $st -eq 0 ]
out get "$ID-l"
check "--lifetime is the sandbox's timeout_ms" grep -q '^timeout_ms: 600000$' "$T/out"
out exec "$ID-l" -- 'while (true) {}'
check "--command-timeout is its commands' default timeout (124)" [ $st -eq 124 ]
ctl rm "$ID-l" >/dev/null 2>&1
out snapshots
check "snapshots lists it" grep -q "^$SNAP .*duktape" "$T/out"
out snapshot-rm "$SNAP"
check "snapshot-rm" [ $st -eq 0 ]
out snapshots
check "snapshots no longer lists it" sh -c "! grep -q '^$SNAP ' '$T/out'"
out snapshot-rm "$SNAP"
check "snapshot-rm of a deleted snapshot: code -32000" grep -q '(code -32000)' "$T/err"
out clone "$ID" --id "$ID-c" --env B=2
check "clone prints the new id" [ "$(cat "$T/out")" = "$ID-c" ]
out get "$ID-c"
check "the clone is pending" grep -q '^status: pending' "$T/out"
out set-env "$ID" K=V A=
check "set-env prints the env" grep -q '^K=V$' "$T/out"
check "set-env K= removes K" sh -c "! grep -q '^A=' '$T/out'"
out instructions "$ID"
check "instructions mention JavaScript" grep -q 'JavaScript' "$T/out"
out stop "$ID"
check "stop" [ $st -eq 0 ]
out get "$ID"
check "stopped" grep -q '^status: stopped' "$T/out"
out start "$ID"
check "start" [ $st -eq 0 ]
out rm "$ID-c"
check "rm the clone" [ $st -eq 0 ]
out rm "$ID"
check "rm" [ $st -eq 0 ]
out get "$ID"
check "gone after rm" [ $st -eq 125 ]

# -- run: Ctrl-C destroys the sandbox ---------------------------------------------
before=$(ctl ls | wc -l)
"$CTL" -s "$SOCK" run -- 'console.log("started"); while (true) {}' >"$T/out" 2>"$T/err" &
RP=$!
i=0
while ! grep -q started "$T/out" && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done
kill -INT "$RP"
wait "$RP"
st=$?
check "run: Ctrl-C exits 130" [ $st -eq 130 ]
after=$(ctl ls | wc -l)
check "run: Ctrl-C destroyed the sandbox" [ "$before" -eq "$after" ]
out run -- 'throw new Error("x")'
check "run: the command's status on failure" [ $st -eq 1 ]
after=$(ctl ls | wc -l)
check "run: sandbox destroyed after a failure" [ "$before" -eq "$after" ]

# -- Ctrl-C on exec kills the remote process; --detach and attach ----------------
# (provider named: the default provider changes)
X="ctl-$$-x"
ctl create --provider duktape --id "$X" >/dev/null 2>&1
# proc_state PID: the STATUS column of ps for that pid
proc_state() { ctl ps "$X" | awk -v p="$1" '$1 == p { print $2 }'; }
# last_pid: the highest pid ps shows
last_pid() { ctl ps "$X" | awk 'NR > 1 { p = $1 } END { print p }'; }
# A command that prints nothing: its pid was unknown to the old exec path.
"$CTL" -s "$SOCK" exec "$X" -- 'while (true) {}' >"$T/out" 2>"$T/err" &
EP=$!
i=0
while [ -z "$(last_pid)" ] && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done
P=$(last_pid)
check "exec: the silent command runs" [ "$(proc_state "$P")" = "running" ]
kill -INT "$EP"
wait "$EP"
st=$?
check "exec: Ctrl-C ends sbxctl with the kill's status (137)" [ $st -eq 137 ]
check "exec: Ctrl-C says it kills the process" grep -q 'killing process' "$T/err"
check "exec: after Ctrl-C the remote process is gone" [ "$(proc_state "$P")" = "exited" ]
out wait "$X" "$P"
check "exec: ... killed (wait says 137)" [ $st -eq 137 ]

"$CTL" -s "$SOCK" exec --detach "$X" -- 'console.log("go"); while (true) {}' >"$T/out" 2>"$T/err" &
EP=$!
i=0
while ! grep -q go "$T/out" && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done
P=$(last_pid)
kill -INT "$EP"
wait "$EP"
st=$?
check "exec --detach: Ctrl-C exits 130" [ $st -eq 130 ]
check "exec --detach: says how to attach" grep -q "sbxctl attach $X $P" "$T/err"
check "exec --detach: the process keeps running" [ "$(proc_state "$P")" = "running" ]
"$CTL" -s "$SOCK" attach "$X" "$P" >"$T/att" 2>"$T/atterr" &
AP=$!
"$CTL" -s "$SOCK" logs -f "$X" "$P" >"$T/lf" 2>&1 &
LP=$!
i=0
while ! grep -q go "$T/att" && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done
check "attach replays the output" grep -q '^go$' "$T/att"
kill -INT "$AP"
wait "$AP"
st=$?
check "attach: Ctrl-C detaches (130), the process keeps running" \
    [ $st -eq 130 ] && [ "$(proc_state "$P")" = "running" ]
"$CTL" -s "$SOCK" attach "$X" "$P" >"$T/att" 2>"$T/atterr" &
AP=$!
sleep 0.3
ctl kill "$X" "$P" >/dev/null 2>&1
wait "$AP"
st=$?
check "attach exits with the process's status (137 after a kill)" [ $st -eq 137 ]
wait "$LP"
st=$?
check "logs -f exits with the process's status (137)" [ $st -eq 137 ]
out spawn "$X" -- 'throw new Error("x")'
P=$(cat "$T/out")
out logs -f "$X" "$P"
check "logs -f of a failed process exits 1" [ $st -eq 1 ]

# -- write, close-stdin ----------------------------------------------------------------
out spawn "$X" -- 'var s, all = ""; while ((s = read_stdin()) !== null) all += s; console.log(all.toUpperCase())'
P=$(cat "$T/out")
out write "$X" "$P" 'abc '
check "write DATA" [ $st -eq 0 ]
printf 'from a file ' >"$T/in"
out write "$X" "$P" --file "$T/in"
check "write --file" [ $st -eq 0 ]
printf 'from stdin' | "$CTL" -s "$SOCK" write "$X" "$P" >/dev/null 2>&1
check "write from standard input" [ $? -eq 0 ]
out close-stdin "$X" "$P"
check "close-stdin" [ $st -eq 0 ]
out logs -f "$X" "$P"
check "the process read everything, in order, then EOF" \
    [ "$(cat "$T/out")" = "ABC FROM A FILE FROM STDIN" ] && [ $st -eq 0 ]
out write "$X" "$P" 'late'
check "write after the exit fails (exit 125)" [ $st -eq 125 ]
out spawn "$X" -- 'var s, n = 0; while ((s = read_stdin()) !== null) n += s.length; console.log(n)'
P=$(cat "$T/out")
printf 'xyz' >"$T/in"
out write "$X" "$P" --file "$T/in" --close
out logs -f "$X" "$P"
check "write --close closes stdin after writing" [ "$(cat "$T/out")" = "3" ]
out --json exec "$X" -- 'console.log("seen"); 1 + 1'
check "exec --json carries the streamed output and the result" \
    grep -q '"stdout":"seen\\n"' "$T/out"
ctl rm "$X" >/dev/null 2>&1

# -- hooks and instructions_append ---------------------------------------------------
H="ctl-$$-h"
out create --provider duktape --id "$H" --on-start 'var hooked = 41' \
    --instructions-append 'EXTRA-NOTE-7' --on-destroy 'console.log("bye")'
check "create with --on-start, --on-destroy and --instructions-append" [ $st -eq 0 ]
out exec "$H" -- 'hooked + 1'
check "--on-start ran in the sandbox" [ "$(cat "$T/out")" = "42" ]
out instructions "$H"
check "--instructions-append extends the instructions" grep -q 'EXTRA-NOTE-7' "$T/out"
out create --provider duktape --id "$H" --on-destroy 'other'
check "--on-destroy is kept (a different one on reconnect is a warning naming it)" \
    grep -q 'on_destroy.*console.log' "$T/err"
ctl rm "$H" >/dev/null 2>&1

rm -rf "$T"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
