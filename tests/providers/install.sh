#!/bin/sh
# install.sh BUILD_DIR TMPDIR - `make install` into a staging folder, then the
# installed pieces work together: sbxd finds its worker under libexec, the
# sample config validates, sbxctl talks to it, a program builds against
# libsbx through pkg-config, and the systemd units pass systemd-analyze.
B=$1
T=$2
mkdir -p "$T"
P=0
F=0
S=0
ok() { P=$((P + 1)); echo "ok - $1"; }
no() { F=$((F + 1)); echo "FAILED - $1"; }
check() { if eval "$2" >"$T/out" 2>&1; then ok "$1"; else no "$1"; cat "$T/out"; fi; }

D="$T/root"
check "make install into DESTDIR" "make -s install B=$B DESTDIR=$D PREFIX=/usr/local"
check "sbxd, sbxctl, libsbx.so.1, libsbx.a, headers, pkg-config file installed" \
    "test -x $D/usr/local/bin/sbxd -a -x $D/usr/local/bin/sbxctl -a -f $D/usr/local/lib/libsbx.so.1 \
     -a -f $D/usr/local/lib/libsbx.a -a -f $D/usr/local/include/sbx/sbx.h -a -f $D/usr/local/lib/pkgconfig/libsbx.pc"
check "libsbx.so has its soname" "objdump -p $D/usr/local/lib/libsbx.so.1 | grep -q 'SONAME *libsbx.so.1'"
check "the installed sample config validates" "$D/usr/local/bin/sbxd --check-config $D/etc/sbxd/sbxd.yaml"

SOCK="$T/s.sock"
printf 'log_level: warn\n' >"$T/min.yaml"
SBXD_SOCKET="$SOCK" "$D/usr/local/bin/sbxd" -c "$T/min.yaml" 2>"$T/sbxd.log" &
PID=$!
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
check "the installed sbxd runs code mode (js, the default) through its installed worker" \
    "SBXD_SOCKET=$SOCK $D/usr/local/bin/sbxctl run -- 'console.log(\"hi\"); const n: number = 6*7; return n' | tr '\n' ' ' | grep -q '^hi 42 $'"
check "and Duktape through its installed worker" \
    "SBXD_SOCKET=$SOCK $D/usr/local/bin/sbxctl run --provider duktape -- 'console.log(\"hi\"); 6*7' | tr '\n' ' ' | grep -q '^hi 42 $'"
kill $PID
wait $PID 2>/dev/null

cat >"$T/hello.c" <<'C'
#include <sbx/sbx.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    sbx_ctx *c = sbx_connect_unix(argv[1], 1000);
    int bad = !c || c->err == 0; /* nothing listens there: an error is expected */
    printf("%s %s\n", sbx_version(), c ? c->errstr : "oom");
    sbx_free(c);
    return bad;
}
C
PKG="PKG_CONFIG_PATH=$D/usr/local/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D"
# A sanitizer build's libsbx needs its runtime in the program too.
SANFLAGS=""
[ -n "$SBX_SANITIZED" ] && SANFLAGS="-fsanitize=address,undefined"
check "a program builds against the installed libsbx via pkg-config" \
    "env $PKG cc $SANFLAGS -o $T/hello $T/hello.c \$(env $PKG pkg-config --cflags --libs libsbx)"
check "and runs against the shared library" "LD_LIBRARY_PATH=$D/usr/local/lib $T/hello $T/nothing.sock"
if command -v systemd-analyze >/dev/null 2>&1; then
    # verify checks syntax and that ExecStart exists; run it on the units with
    # ExecStart pointing into the staging folder.
    mkdir -p "$T/units"
    sed "s|ExecStart=/usr/local/bin/sbxd|ExecStart=$D/usr/local/bin/sbxd|" \
        "$D/lib/systemd/system/sbxd.service" >"$T/units/sbxd.service"
    cp "$D/lib/systemd/system/sbxd.socket" "$T/units/"
    # Documentation=man:... is checked too: against the installed man pages.
    check "systemd units pass systemd-analyze verify (their man pages installed)" \
        "cd $T/units && MANPATH=$D/usr/local/share/man systemd-analyze verify ./sbxd.socket ./sbxd.service"
    check "make install puts man pages, completions, sysusers.d and tmpfiles.d" \
        "test -f $D/usr/local/share/man/man1/sbxctl.1.gz -a -f $D/usr/local/share/man/man8/sbxd.8.gz \
         -a -f $D/usr/local/share/man/man5/sbxd.yaml.5.gz -a -s $D/usr/local/share/bash-completion/completions/sbxctl \
         -a -s $D/usr/local/share/zsh/vendor-completions/_sbxctl -a -s $D/usr/local/share/fish/vendor_completions.d/sbxctl.fish \
         -a -f $D/usr/local/lib/sysusers.d/sbxd.conf -a -f $D/usr/local/lib/tmpfiles.d/sbxd.conf \
         -a -f $D/usr/local/share/doc/sbxd/README.md"
    check "Documentation= points at what is installed" \
        "grep -q '^Documentation=man:sbxd(8) man:sbxd.yaml(5) file:///usr/local/share/doc/sbxd/README.md' $T/units/sbxd.service"
    # The hardening (issue 11): exposure 2.8 when written; fail if it creeps
    # past 3.0 (the scale is 0-10; --threshold counts tenths).
    check "sbxd.service's systemd-analyze security exposure is at most 3.0" \
        "cd $T/units && systemd-analyze security --offline=true --threshold=30 ./sbxd.service"
    check "sbxd.service caps memory and tasks and filters system calls" \
        "grep -q '^MemoryMax=' $T/units/sbxd.service && grep -q '^TasksMax=' $T/units/sbxd.service && grep -q '^SystemCallFilter=@system-service' $T/units/sbxd.service && grep -q '^ProtectProc=invisible' $T/units/sbxd.service"
else
    echo "skip - systemd-analyze not installed: SKIPPED"
    S=$((S + 1))
fi
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]
