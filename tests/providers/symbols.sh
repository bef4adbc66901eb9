#!/bin/sh
# symbols.sh BUILD_DIR TMPDIR - libsbx defines only its own names, so that a
# program linking it never meets a clash on ctx_init, now_ms, ...:
# - libsbx.a: every defined global is public API (`sbx_` + a lower-case letter
#   or digit) or private to libsbx (`sbx__`, see client/src/sbx_private.h);
# - libsbx.so: every exported symbol is public API (sbx__ names stay hidden);
# - sbx.h does not show libsbx's internal ctx->flags bits.
# The checker itself is first shown an object that breaks the rule.
B=$1
T=$2
mkdir -p "$T"
P=0
F=0
S=0
ok() { P=$((P + 1)); echo "ok - $1"; }
no() { F=$((F + 1)); echo "FAILED - $1"; }

# Sanitizer builds add their own globals (__odr_asan_gen_*, ...).
SAN_RE='^(__odr_asan|__asan|__ubsan|__sancov|__tsan|__msan)'

# Prints the defined global symbols of an archive/object that are neither
# public (sbx_[a-z0-9]) nor private (sbx__) libsbx names.
bad_static() {
    nm -g --defined-only "$1" | awk 'NF == 3 { print $3 }' |
        grep -Ev '^sbx_([a-z0-9]|_[a-z0-9])' | grep -Ev "$SAN_RE"
}
# Prints the exported dynamic symbols of a shared object that are not public.
bad_dynamic() {
    nm -D --defined-only "$1" | awk 'NF == 3 { print $3 }' |
        grep -Ev '^sbx_[a-z0-9]' | grep -Ev "$SAN_RE"
}

if ! command -v nm >/dev/null 2>&1; then
    S=$((S + 1))
    echo "SKIPPED - nm (binutils) is not installed"
    echo "$P passed, $F failed, $S skipped"
    exit 0
fi

# The checker catches an unprefixed global (else the checks below mean nothing).
printf 'int ctx_init(void) { return 0; }\nint sbx__ok(void) { return 1; }\n' >"$T/bad.c"
if cc -c -o "$T/bad.o" "$T/bad.c" && [ "$(bad_static "$T/bad.o")" = "ctx_init" ]; then
    ok "the checker flags an unprefixed global (ctx_init) and passes sbx__ok"
else
    no "the checker flags an unprefixed global (ctx_init) and passes sbx__ok"
fi

A="$B/libsbx.a"
SO="$B/libsbx.so"
if [ -f "$A" ] && nm -g --defined-only "$A" | grep -q ' T sbx_call$'; then
    ok "libsbx.a defines sbx_call (nm reads it)"
else
    no "libsbx.a defines sbx_call (nm reads it)"
fi
out=$(bad_static "$A")
if [ -z "$out" ]; then
    ok "libsbx.a defines only sbx_* and sbx__* globals"
else
    no "libsbx.a defines only sbx_* and sbx__* globals; also:"
    echo "$out" | sed 's/^/    /'
fi

if [ -f "$SO" ] && nm -D --defined-only "$SO" | grep -q ' T sbx_call$'; then
    ok "libsbx.so exports sbx_call (nm reads it)"
else
    no "libsbx.so exports sbx_call (nm reads it)"
fi
out=$(bad_dynamic "$SO")
if [ -z "$out" ]; then
    ok "libsbx.so exports only public sbx_* symbols (no sbx__ internals)"
else
    no "libsbx.so exports only public sbx_* symbols (no sbx__ internals); also:"
    echo "$out" | sed 's/^/    /'
fi

H=client/include/sbx/sbx.h
if [ -f "$H" ] && ! grep -Eq 'SBX_(IN_CALLBACK|DISCONNECTING|FREEING|FREE_PENDING)' "$H" \
    client/include/sbx/sbx_async.h; then
    ok "sbx.h and sbx_async.h do not define libsbx's internal flags"
else
    no "sbx.h and sbx_async.h do not define libsbx's internal flags"
fi

echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]
