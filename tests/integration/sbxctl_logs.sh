#!/bin/sh
# sbxctl_logs.sh SOCKET [BUILD_DIR] - sbxctl logs --since T, -t and --tail
# together, as docker logs has them (issue 19), on a Duktape process that
# prints lines at moments the script brackets with its own clock.
# Prints "N passed, N failed, N skipped" last.
SOCK=${1:?usage: sbxctl_logs.sh SOCKET [BUILD_DIR]}
B=${2:-build}
CTL="$B/sbxctl"
T=$(mktemp -d /tmp/sbxctl-logs.XXXXXX)
ID="logs-$$"
PASSED=0 FAILED=0 SKIPPED=0 N=0
ok() { N=$((N + 1)); printf '%3d - %-62s PASSED\n' "$N" "$1"; PASSED=$((PASSED + 1)); }
bad() {
    N=$((N + 1)); printf '%3d - %-62s FAILED\n' "$N" "$1"
    [ -n "$2" ] && printf '      %s\n' "$2"
    FAILED=$((FAILED + 1))
}
check() { d=$1; shift; if "$@"; then ok "$d"; else bad "$d" "$* | $(head -c 300 "$T/out" "$T/err" 2>/dev/null)"; fi; }
out() { "$CTL" -s "$SOCK" "$@" >"$T/out" 2>"$T/err"; st=$?; }
ctl() { "$CTL" -s "$SOCK" "$@"; }
now() { date -u +%Y-%m-%dT%H:%M:%S.%NZ; }

ctl create --provider duktape --id "$ID" >/dev/null
# "a" and "b" (stdout, stderr), a pause, then "c" and "d".
P=$(ctl spawn "$ID" -- "function wait(ms) { var t = Date.now(); while (Date.now() - t < ms) {} }
console.log('a'); console.error('b'); wait(1500); console.log('c'); console.log('d'); 0")
sleep 0.7
MID=$(now)
ctl wait "$ID" "$P" >/dev/null

out logs -t "$ID" "$P"
cat "$T/out" "$T/err" >"$T/all"
check "logs -t: every line starts with an RFC 3339 time and a space" \
    sh -c "[ \$(wc -l <'$T/all') -eq 4 ] && ! grep -qvE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{9}Z [abcd]\$' '$T/all'"
check "logs -t: stdout's times are ordered" sh -c "cut -d' ' -f1 '$T/out' | sort -c"
check "logs -t: the times parse as times" sh -c "date -d \"\$(head -n1 '$T/out' | cut -d' ' -f1)\" +%s >/dev/null"
A=$(grep ' a$' "$T/out" | cut -d' ' -f1)
C=$(grep ' c$' "$T/out" | cut -d' ' -f1)
check "logs -t: a before the pause, c after it" sh -c "[ '$A' \\< '$MID' ] && [ '$MID' \\< '$C' ]"

out logs --since "$MID" "$ID" "$P"
check "logs --since T (RFC 3339) between them: only the later lines" \
    sh -c "[ \"\$(cat '$T/out')\" = \"\$(printf 'c\nd')\" ] && [ ! -s '$T/err' ]"
out logs --since "$(date -d "$MID" +%s.%N)" "$ID" "$P"
check "logs --since a Unix time: the same" [ "$(cat "$T/out")" = "$(printf 'c\nd')" ]
out logs --since 1h "$ID" "$P"
check "logs --since 1h: everything" sh -c "[ \$(cat '$T/out' '$T/err' | wc -l) -eq 4 ]"
sleep 1.1
out logs --since 1s "$ID" "$P"
check "logs --since 1s, later: nothing" sh -c "[ $st -eq 0 ] && [ ! -s '$T/out' ] && [ ! -s '$T/err' ]"
out logs --since "$MID" --tail 1 -t "$ID" "$P"
check "--since with --tail 1 -t: the last line, timed" grep -qE '^[0-9-]{10}T[0-9:.]{18}Z d$' "$T/out"
out logs --since 1h -n 3 "$ID" "$P"
check "--since 1h -n 3: the last three lines over both streams" \
    sh -c "[ \"\$(cat '$T/err')\" = b ] && [ \"\$(cat '$T/out')\" = \"\$(printf 'c\nd')\" ]"
out logs -n 2 "$ID" "$P"
check "-n 2: the last two lines as printed (stderr's b is older)" \
    sh -c "[ ! -s '$T/err' ] && [ \"\$(cat '$T/out')\" = \"\$(printf 'c\nd')\" ]"
out logs --since 'last tuesday' "$ID" "$P"
check "a --since that is no time: exit 2 naming it" sh -c "[ $st -eq 2 ] && grep -q 'since' '$T/err'"

ctl rm "$ID" >/dev/null 2>&1
rm -rf "$T"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" -eq 0 ]
