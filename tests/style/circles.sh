#!/bin/sh
# circles.sh [OBJ_DIR] - floors that call only down (STYLE.md): no source file
# calls into a file that calls it, directly or round a longer loop.
#
# Read off the compiled objects, not the includes: file A calls file B when
# A's object leaves a symbol undefined that B's object defines (functions and
# data alike, so a provider table named from below counts too). Inline
# functions of a header are not calls. Edges are drawn within one program's
# files only (the agent, each worker, the daemon, libsbx, sbxctl), since two
# programs may each define a namesake. Prints one "ok - " or "FAILED - " line
# per program and, for each loop, the files in it and the names that tie it.
#
# Exits 0 when no program has a loop. BUILD_DIR defaults to build; its obj/
# and pic/ objects are read. The agent is linked from its sources in one
# step (Makefile), so its files are compiled here, each on its own.
B=${1:-build}
[ -d "$B/obj" ] || { echo "SKIPPED - circles: no objects under $B/obj (make all first)"; exit 0; }
T=$(mktemp -d /tmp/sbx-circles.XXXXXX)
trap 'rm -rf "$T"' EXIT
[ -n "$SBX_CIRCLES_NO_AGENT" ] || for c in agent/*.c proto/sbx_chan.c; do
    o="$T/obj/agent/$(basename "$c" .c).o"
    mkdir -p "$(dirname "$o")"
    ${CC:-cc} -std=gnu11 -O0 -D_GNU_SOURCE -Iproto -c -o "$o" "$c" 2>/dev/null
done

# The program a source file belongs to (the files that call each other).
program_of() {
    case "$1" in
    agent/*) echo agent ;;
    daemon/workers/common/*) echo workers-common ;;
    daemon/workers/duktape/*) echo duktape-worker ;;
    daemon/workers/jsc/*) echo jsc-worker ;;
    daemon/* | proto/*) echo daemon ;;
    client/src/*) echo libsbx ;;
    client/sbxctl/*) echo sbxctl ;;
    *) echo - ;;
    esac
}

# "PROGRAM FILE D|U SYMBOL" rows for every object.
rows() {
    { find "$B/obj" "$B/pic" -name '*.o' ! -path "$B/obj/agent/*" 2>/dev/null; find "$T/obj" -name '*.o' 2>/dev/null; } |
        sort | while read -r o; do
        src=${o#"$B"/obj/}
        src=${src#"$B"/pic/}
        src=${src#"$T"/obj/}
        src=${src%.o}.c
        prog=$(program_of "$src")
        [ "$prog" = - ] && continue
        nm -g --defined-only "$o" 2>/dev/null | awk -v p="$prog" -v f="$src" 'NF >= 3 { print p, f, "D", $3 }'
        nm -u "$o" 2>/dev/null | awk -v p="$prog" -v f="$src" 'NF >= 2 { print p, f, "U", $2 }'
    done
}

rows | awk '
$3 == "D" { def[$1 SUBSEP $4] = $2; next }
{ und[++n] = $1 SUBSEP $2 SUBSEP $4 }
END {
    for (i = 1; i <= n; i++) {
        split(und[i], u, SUBSEP)
        k = u[1] SUBSEP u[3]
        if (!(k in def) || def[k] == u[2]) continue
        a = u[2]; b = def[k]
        if (!((a, b) in edge)) { edge[a, b] = u[3]; }
        else if (index(" " edge[a, b] " ", " " u[3] " ") == 0 && split(edge[a, b], t, " ") < 4)
            edge[a, b] = edge[a, b] " " u[3]
        prog[a] = u[1]; prog[b] = u[1]
        reach[a, b] = 1
    }
    for (f in prog) { files[++m] = f; progs[prog[f]] = 1 }
    # Transitive closure: a loop is a pair that reaches each other.
    for (x = 1; x <= m; x++) for (y = 1; y <= m; y++) {
        if (!((files[y], files[x]) in reach)) continue
        for (z = 1; z <= m; z++)
            if ((files[x], files[z]) in reach) reach[files[y], files[z]] = 1
    }
    for (x = 1; x <= m; x++) {
        a = files[x]
        if (a in seen) continue
        loop = a; cnt = 1
        for (y = 1; y <= m; y++) {
            b = files[y]
            if (b != a && ((a, b) in reach) && ((b, a) in reach)) { loop = loop " " b; seen[b] = 1; cnt++ }
        }
        if (cnt < 2) continue
        bad[prog[a]]++; nbad++
        print "  loop: " loop
        split(loop, mem, " ")
        for (i in mem) for (j in mem)
            if ((mem[i], mem[j]) in edge) print "    " mem[i] " -> " mem[j] ": " edge[mem[i], mem[j]]
    }
    np = 0
    for (p in progs) order[++np] = p
    for (i = 1; i <= np; i++) for (j = i + 1; j <= np; j++)
        if (order[j] < order[i]) { tmp = order[i]; order[i] = order[j]; order[j] = tmp }
    for (i = 1; i <= np; i++) {
        p = order[i]
        if (bad[p]) print "FAILED - circles: " p " has " bad[p] " loop(s) of files calling each other"
        else print "ok - circles: " p "'"'"'s files call only down"
    }
    exit nbad > 0
}'
