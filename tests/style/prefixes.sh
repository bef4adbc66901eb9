#!/bin/sh
# prefixes.sh - part of `make check-style` (tests/style/check.sh): in the
# Docker provider, every function or variable a file exports carries that
# file's prefix (STYLE.md 1a: "a function's prefix names its file"; the table
# is in daemon/providers/docker/docker_int.h's header comment).
#
#   docker.c          dk_
#   docker_<noun>.c   dk<noun>_, or the short prefix the table below gives it
#   <name>.c          <name>_ or <name> itself (policy_expose.c, egress_rule.c)
#
# Read from the sources, no build needed: a definition is a declaration that
# starts in column 0 without `static`, and is followed by a `{` in column 0
# (a function) or holds an `=` or ends in `;` (a variable). Statics are free.
# Prints "ok - ..." or "FAILED - ..." lines; exits 1 when one failed.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
DIR=daemon/providers/docker

# The prefix a file's exported names must carry.
prefix_of() {
    b=$(basename "$1" .c)
    case "$b" in
    docker) echo dk_ ;;
    docker_agent) echo dka_ ;;
    docker_archive) echo dkar_ ;;
    docker_direct) echo dkd_ ;;
    docker_exec) echo dkx_ ;;
    docker_fs) echo dkf_ ;;
    docker_hijack) echo dkh_ ;;
    docker_mount) echo dkm_ ;;
    docker_net) echo dkn_ ;;
    docker_pool) echo dkp_ ;;
    docker_sec) echo dks_ ;;
    docker_*) echo "dk${b#docker_}_" ;;
    *) echo "${b}_" ;;
    esac
}

# Prints "file:line name" for each exported definition of the files.
exported() {
    awk '
    function out(name) {
        if (name !~ /^__/)
            print FILENAME ":" FNR " " name
    }
    FNR == 1 { pend = "" }
    pend != "" {
        if ($0 ~ /^\{/) { print FILENAME ":" pline " " pend; pend = ""; next }
        if ($0 ~ /;[ \t]*$/) { pend = ""; next }
        if ($0 ~ /^[ \t]/) next
        pend = ""
    }
    /^(static|typedef|extern|#|\/\*| \*|\}|\{)/ { next }
    /^[A-Za-z_]/ {
        line = $0
        sub(/\/\*.*/, "", line)
        sub(/^__attribute__[ \t]*\(\([^()]*(\([^()]*\))?[^()]*\)\)[ \t]*/, "", line)
        if (line ~ /^(static|extern)[ \t]/) next
        p = index(line, "("); e = index(line, "=")
        if (p && (!e || p < e)) {
            head = substr(line, 1, p - 1)
            if (match(head, /[A-Za-z_][A-Za-z0-9_]*[ \t]*$/)) {
                name = substr(head, RSTART, RLENGTH); sub(/[ \t]+$/, "", name)
                if (line ~ /;[ \t]*$/) next
                pend = name; pline = FNR
            }
        } else if (e) {
            head = substr(line, 1, e - 1)
            sub(/(\[[^]]*\])?[ \t]*$/, "", head)
            if (match(head, /[A-Za-z_][A-Za-z0-9_]*$/))
                out(substr(head, RSTART, RLENGTH))
        } else if (line ~ /;[ \t]*$/ && line !~ /^(struct|union|enum)[ \t]+[A-Za-z0-9_]+[ \t]*;/) {
            head = line
            sub(/(\[[^]]*\])?[ \t]*;[ \t]*$/, "", head)
            if (match(head, /[A-Za-z_][A-Za-z0-9_]*$/))
                out(substr(head, RSTART, RLENGTH))
        }
    }' "$@"
}

# Prints "file:line name (wants prefix)" for each exported name off its prefix.
misnamed() {
    for f in "$@"; do
        want=$(prefix_of "$f")
        bare=${want%_}
        exported "$f" | while read -r where name; do
            case "$name" in
            "$want"* | "$bare") ;;
            sbx_provider_*) ;; # the provider's table, looked up by that name
            *) echo "$where $name (wants $want)" ;;
            esac
        done
    done
}

F=0
bad=$(misnamed "$DIR"/*.c)
if [ -z "$bad" ]; then
    echo "ok - prefixes: the exported names of $DIR's $(ls "$DIR"/*.c | wc -l) files carry their file's prefix"
else
    printf "%s\n" "$bad"
    echo "FAILED - prefixes: $(printf "%s\n" "$bad" | wc -l) exported name(s) without their file's prefix (docker_int.h's table)"
    F=1
fi

# The checker itself, on a sample that breaks the rule and one that keeps it.
t=$(mktemp -d /tmp/sbx-prefix.XXXXXX)
mkdir -p "$t/d"
cat >"$t/d/docker_pool.c" <<'EOF'
__attribute__((format(printf, 1, 2))) static int helper(const char *x, ...)
{
    return x;
}
int dkp_take(int a,
             int b);
const struct dk_ptrans dkp_table = {0};
struct dk_req *dk_call(struct dk_engine *e,
                       int n)
{
    return 0;
}
int dkp_ok(void)
{
    return helper("");
}
int dkp_count;
char dkx_name[8];
EOF
cat >"$t/d/policy_reserved.c" <<'EOF'
int policy_reserved(void *o)
{
    return 0;
}
EOF
got=$(misnamed "$t/d/docker_pool.c" "$t/d/policy_reserved.c" | sed "s|$t/d/||; s| (.*||" | tr '\n' ' ')
rm -rf "$t"
if [ "$got" = "docker_pool.c:8 dk_call docker_pool.c:18 dkx_name " ]; then
    echo "ok - prefixes: the check finds exported names off their prefix, not statics or prototypes"
else
    echo "FAILED - prefixes: the check found [$got] in its own sample, expected [docker_pool.c:8 dk_call docker_pool.c:18 dkx_name ]"
    F=1
fi
exit $F
