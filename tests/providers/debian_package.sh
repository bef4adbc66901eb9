#!/bin/sh
# debian_package.sh [BUILD_DIR] [TMP] - `make deb`'s packages installed with
# dpkg -i on a fresh Debian 12 in a container of the test engine (issue 19),
# then sbxd started there: by hand, and under systemd (socket activation)
# where the engine lets a container run systemd; else counted skips.
#
# The Debian 12 root filesystem is debootstrap'd once from the Debian mirror
# apt uses ($SBX_DEBIAN_MIRROR, default deb.debian.org), minbase plus the
# packages' runtime libraries and systemd, cached in $SBX_CACHE_DIR (as
# tests/docker/images.sh caches its own) and imported as
# sbx-test/debian-sbxd:bookworm. Containers run with --network none.
# (Lives under tests/providers/ so tests/run.sh runs it with its fixtures.)
B=${1:-build}
T=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
[ -n "$T" ] || T=$(mktemp -d /tmp/sbxd-deb.XXXXXX)
mkdir -p "$T"
PASSED=0 FAILED=0 SKIPPED=0
ok() { echo "ok - $1"; PASSED=$((PASSED + 1)); }
bad() { echo "FAILED - $1"; [ -n "${2:-}" ] && echo "$2" | sed 's/^/    /' | head -n 30; FAILED=$((FAILED + 1)); }
skip() { echo "skipped - $1: $2"; SKIPPED=$((SKIPPED + 1)); }
finish() { echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"; [ "$FAILED" -eq 0 ]; exit $?; }
CIDS=""
DK_PRIVATE=""
cleanup() {
    for c in $CIDS; do docker rm -f "$c" >/dev/null 2>&1; done
    [ -n "$DK_PRIVATE" ] && sh tests/docker/dockerd.sh stop "$DK_PRIVATE" >/dev/null 2>&1
}
trap cleanup EXIT
NAMES="installs cleanly with dpkg -i; sbxd and sbxctl run; man pages, completions, units and config in place; the group sbxd exists; sbxd starts by hand and runs a command; sbxd starts under systemd"
skip_all() { # reason
    for n in 1 2 3 4 5 6; do skip "$(echo "$NAMES" | cut -d';' -f$n | sed 's/^ //')" "$1"; done
    finish
}

command -v dpkg-deb >/dev/null 2>&1 || skip_all "no dpkg-deb"
# A package of sanitizer-built binaries (make asan) would need the sanitizer
# runtimes inside the container and is not what ships; make test checks it.
[ -n "${SBX_SANITIZED:-}" ] && skip_all "the binaries are sanitizer builds (make asan)"
command -v docker >/dev/null 2>&1 || skip_all "no docker CLI"
# No engine at the usual places (a fresh machine, CI): a private one, as the
# Docker provider's tests start it.
if ! docker info >/dev/null 2>&1; then
    DK_PRIVATE="$T/dk"
    env -u DOCKER_HOST sh tests/docker/dockerd.sh start "$DK_PRIVATE" >"$T/dockerd.env" \
        2>"$T/dockerd.log" || skip_all "no Docker engine: $(tail -n 1 "$T/dockerd.log")"
    . "$T/dockerd.env"
    export DOCKER_HOST
fi
docker info >/dev/null 2>&1 || skip_all "no Docker engine answers"

VERSION=$(sed -n 's/^VERSION = //p' Makefile)
if ! sh packaging/deb.sh "$B" "$VERSION" >"$T/deb.log" 2>&1; then
    bad "make deb builds the packages" "$(tail -n 20 "$T/deb.log")"
    finish
fi
ok "make deb builds sbxd, libsbx1 and libsbx-dev"
lintian_ok=1
for p in sbxd libsbx1 libsbx-dev; do
    dpkg-deb -I "$B/deb/${p}_$VERSION-1_"*.deb >/dev/null 2>&1 || lintian_ok=0
done
[ $lintian_ok = 1 ] && ok "dpkg-deb reads all three" || bad "dpkg-deb reads all three"

# ---- the Debian 12 image ---------------------------------------------------------
IMG=sbx-test/debian-sbxd:bookworm
if ! docker image inspect "$IMG" >/dev/null 2>&1; then
    cache=${SBX_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/sbxd}
    tarball="$cache/debian-bookworm-sbxd-runtime-2.tar"
    if [ ! -s "$tarball" ]; then
        [ "$(id -u)" = 0 ] || skip_all "building the Debian 12 root filesystem needs root (debootstrap)"
        command -v debootstrap >/dev/null 2>&1 || skip_all "no debootstrap"
        mkdir -p "$cache"
        r="$T/rootfs"
        deps=libjansson4,libcurl4,libyaml-0-2,libduktape207,libprotobuf-c1,libev4
        deps=$deps,libjavascriptcoregtk-4.1-0,adduser,systemd,systemd-sysv,dbus,libjansson-dev,pkg-config
        if ! debootstrap --variant=minbase --include="$deps" bookworm "$r" \
            "${SBX_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$T/debootstrap.log" 2>&1; then
            skip_all "debootstrap of Debian 12 failed: $(tail -n 1 "$T/debootstrap.log")"
        fi
        rm -rf "$r"/var/cache/apt/* "$r"/var/lib/apt/lists/* "$r"/var/log/* "$r"/tmp/*
        tar -C "$r" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$r"
    fi
    docker import --change 'CMD ["/bin/bash"]' "$tarball" "$IMG" >/dev/null ||
        skip_all "docker import of the Debian 12 root filesystem failed"
fi

# ---- dpkg -i -----------------------------------------------------------------------
run_in() { # script: in a fresh container with the packages at /debs
    docker run --rm --network none -v "$B/deb:/debs:ro" "$IMG" sh -c "$1"
}
if out=$(run_in 'dpkg -i /debs/*.deb 2>&1'); then
    ok "installs cleanly with dpkg -i"
else
    bad "installs cleanly with dpkg -i" "$out"
fi
out=$(run_in 'dpkg -i /debs/*.deb >/dev/null 2>&1; sbxctl --version && sbxd --version &&
    sbxd --check-config /etc/sbxd/sbxd.yaml && pkg-config --exists libsbx && echo ok' 2>&1)
case "$out" in *"sbxctl $VERSION"*ok) ok "sbxd and sbxctl run; the sample config checks; pkg-config finds libsbx" ;;
*) bad "sbxd and sbxctl run; the sample config checks; pkg-config finds libsbx" "$out" ;; esac
out=$(run_in 'dpkg -i /debs/*.deb >/dev/null 2>&1
    for f in /usr/share/man/man1/sbxctl.1.gz /usr/share/man/man5/sbxd.yaml.5.gz \
        /usr/share/man/man8/sbxd.8.gz /usr/share/bash-completion/completions/sbxctl \
        /usr/share/zsh/vendor-completions/_sbxctl /usr/share/fish/vendor_completions.d/sbxctl.fish \
        /lib/systemd/system/sbxd.service /lib/systemd/system/sbxd.socket \
        /usr/lib/sysusers.d/sbxd.conf /usr/lib/tmpfiles.d/sbxd.conf /etc/sbxd/sbxd.yaml \
        /etc/sbxd/sbxd.yaml.sample /usr/include/sbx/sbx.h /usr/lib/libsbx.so.1 \
        /usr/libexec/sbxd/sbxd-worker /usr/libexec/sbxd/sbxd-jsworker /usr/libexec/sbxd/sbx-init \
        /usr/share/doc/sbxd/README.md; do [ -e "$f" ] || echo "missing $f"; done
    grep -q "^Documentation=man:sbxd(8) man:sbxd.yaml(5) file:///usr/share/doc/sbxd/README.md" \
        /lib/systemd/system/sbxd.service || echo "Documentation= wrong"
    grep -q "^ExecStart=/usr/bin/sbxd " /lib/systemd/system/sbxd.service || echo "ExecStart wrong"
    getent group sbxd >/dev/null || echo "no group sbxd"
    echo checked' 2>&1)
if [ "$out" = checked ]; then
    ok "man pages, completions, units, sysusers, tmpfiles and config in place; group sbxd exists"
else
    bad "man pages, completions, units, sysusers, tmpfiles and config in place; group sbxd exists" "$out"
fi

# ---- started by hand -----------------------------------------------------------------
out=$(run_in 'dpkg -i /debs/*.deb >/dev/null 2>&1
    sbxd -c /etc/sbxd/sbxd.yaml >/tmp/sbxd.log 2>&1 &
    i=0; while [ ! -S /run/sbxd/sbxd.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    sbxctl run --provider duktape -- "console.log(6 * 7)"; echo "status $?"
    sbxctl info | grep -E "^  (js|duktape) "; cat /tmp/sbxd.log | tail -n 5' 2>&1)
case "$out" in "42"*"status 0"*) ok "sbxd starts by hand and runs a command" ;;
*) bad "sbxd starts by hand and runs a command" "$out" ;; esac

# ---- under systemd -------------------------------------------------------------------
# systemd as the container's init: an unprivileged container with the host's
# cgroup tree read-only and tmpfs on /run is enough for it to reach "running".
cid=$(docker run -d --network none -v /sys/fs/cgroup:/sys/fs/cgroup:ro -v "$B/deb:/debs:ro" \
    --tmpfs /run --tmpfs /run/lock "$IMG" /lib/systemd/systemd 2>"$T/sd.err")
CIDS="$cid"
sleep 1
if [ -z "$cid" ] || [ "$(docker inspect -f '{{.State.Running}}' "$cid" 2>/dev/null)" != true ]; then
    skip "sbxd starts under systemd (socket activation)" \
        "the engine cannot run systemd in a container: $(head -c 200 "$T/sd.err")$(docker logs "$cid" 2>&1 | tail -n 3)"
    finish
fi
i=0
state=""
while [ $i -lt 60 ]; do
    state=$(docker exec "$cid" systemctl is-system-running 2>/dev/null)
    case "$state" in running | degraded) break ;; esac
    sleep 0.5
    i=$((i + 1))
done
case "$state" in
running | degraded)
    out=$(docker exec "$cid" sh -c 'dpkg -i /debs/*.deb >/dev/null 2>&1
        systemctl is-active sbxd.socket; stat -c "%G %a" /run/sbxd/sbxd.sock
        sbxctl run --provider duktape -- "console.log(6 * 7)"
        systemctl is-active sbxd.service' 2>&1)
    case "$out" in "active"*"sbxd 660"*"42"*"active"*)
        ok "sbxd starts under systemd: socket active (group sbxd, 0660), service activated on use" ;;
    *) bad "sbxd starts under systemd (socket activation)" "$out
$(docker exec "$cid" journalctl -u sbxd --no-pager 2>&1 | tail -n 15)" ;; esac
    ;;
*)
    skip "sbxd starts under systemd (socket activation)" "systemd in the container did not come up (state: ${state:-none})"
    ;;
esac
finish
