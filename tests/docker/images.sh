#!/bin/sh
# images.sh - offline test images for the Docker provider (no registry needed).
#
#   images.sh DOCKER_HOST [debian]   e.g. images.sh unix:///tmp/sbxd-docker/docker.sock
#
#   sbx-test/busybox:latest   /bin/busybox from Debian's busybox-static with its applet
#                             links, /tmp, /workspace, a root entry in /etc/passwd
#   sbx-test/noshell:latest   no shell and no libc: one static binary, /hello, that
#                             prints its argv, cwd and environment (proves that argv
#                             commands run through the agent without /bin/sh)
#   sbx-test/debian:bookworm  only with the argument `debian`: what users run (`node -e`,
#                             `python3 -c`, apt/dpkg layout). debootstrap --variant=minbase
#                             bookworm plus nodejs and python3-minimal from Debian's mirror
#                             ($SBX_DEBIAN_MIRROR), docs/locales/apt caches removed. The
#                             root filesystem tarball is cached outside the build tree in
#                             ${SBX_CACHE_DIR:-$XDG_CACHE_HOME/sbxd or ~/.cache/sbxd}, so
#                             only the first run downloads (~45 s); later runs import it.
#
# Idempotent: an image that exists is left alone (SBX_IMAGES_REBUILD=1 rebuilds).
# Uses the docker CLI when there is one, else POST /images/create?fromSrc=- with curl.
set -eu

host=${1:-${DOCKER_HOST:-}}
want_debian=0
[ "${2:-}" = debian ] && want_debian=1
[ -n "$host" ] || { echo "usage: images.sh DOCKER_HOST" >&2; exit 2; }
API=${SBX_DOCKER_API:-v1.41}

log() { echo "images.sh: $*" >&2; }
die() { log "$*"; exit 1; }

have_image() { # NAME:TAG
    if command -v docker >/dev/null 2>&1; then
        docker -H "$host" image inspect "$1" >/dev/null 2>&1
    else
        code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "${host#unix://}" \
            "http://localhost/$API/images/$1/json")
        [ "$code" = 200 ]
    fi
}

# import ROOTFS NAME TAG [CMD-JSON]
import_dir() {
    if command -v docker >/dev/null 2>&1; then
        if [ -n "${4:-}" ]; then
            tar -C "$1" --numeric-owner -c . | docker -H "$host" import --change "CMD $4" - "$2:$3" >&2
        else
            tar -C "$1" --numeric-owner -c . | docker -H "$host" import - "$2:$3" >&2
        fi
    else
        case "$host" in unix://*) ;; *) die "without the docker CLI only unix:// hosts work" ;; esac
        tar -C "$1" --numeric-owner -c . | curl -sf --unix-socket "${host#unix://}" \
            -X POST -H 'Content-Type: application/x-tar' --data-binary @- \
            "http://localhost/$API/images/create?fromSrc=-&repo=$2&tag=$3" >&2 ||
            die "import of $2:$3 failed"
    fi
}

work=$(mktemp -d "${TMPDIR:-/tmp}/sbx-images.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

# ---- sbx-test/busybox ----------------------------------------------------------
if [ "${SBX_IMAGES_REBUILD:-0}" = 1 ] || ! have_image sbx-test/busybox:latest; then
    bb=""
    for c in /bin/busybox /usr/bin/busybox; do
        if [ -x "$c" ] && ! ldd "$c" >/dev/null 2>&1; then # static: ldd says "not a dynamic executable"
            bb=$c
            break
        fi
    done
    if [ -z "$bb" ]; then
        [ "$(id -u)" = 0 ] || die "busybox-static is missing and installing it needs root"
        log "installing busybox-static"
        DEBIAN_FRONTEND=noninteractive apt-get install -y busybox-static >&2 ||
            die "apt-get install busybox-static failed"
        bb=/bin/busybox
    fi
    r="$work/busybox"
    mkdir -p "$r/bin" "$r/sbin" "$r/usr/bin" "$r/usr/sbin" "$r/etc" "$r/root" "$r/workspace" \
        "$r/tmp" "$r/proc" "$r/sys" "$r/dev"
    chmod 1777 "$r/tmp"
    cp "$bb" "$r/bin/busybox"
    # --list-full gives the usual place of every applet (bin/ls, usr/bin/awk, ...).
    "$bb" --list-full | while read -r applet; do
        case "$applet" in bin/busybox | "") continue ;; esac
        mkdir -p "$r/$(dirname "$applet")"
        ln -sf /bin/busybox "$r/$applet"
    done
    [ -e "$r/bin/sh" ] || ln -s /bin/busybox "$r/bin/sh"
    echo 'root:x:0:0:root:/root:/bin/sh' >"$r/etc/passwd"
    echo 'root:x:0:' >"$r/etc/group"
    import_dir "$r" sbx-test/busybox latest '["/bin/sh"]'
    log "built sbx-test/busybox:latest ($(du -sh "$r" | cut -f1))"
else
    log "sbx-test/busybox:latest exists"
fi

# ---- sbx-test/noshell ----------------------------------------------------------
if [ "${SBX_IMAGES_REBUILD:-0}" = 1 ] || ! have_image sbx-test/noshell:latest; then
    command -v cc >/dev/null 2>&1 || die "a C compiler is needed for sbx-test/noshell"
    r="$work/noshell"
    mkdir -p "$r"
    cat >"$work/hello.c" <<'EOF'
/* hello: prints argv, cwd and the environment; the whole of sbx-test/noshell. */
#include <stdio.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
    char cwd[4096];
    for (int i = 0; i < argc; i++)
        printf("argv[%d]=%s\n", i, argv[i]);
    printf("cwd=%s\n", getcwd(cwd, sizeof(cwd)) ? cwd : "?");
    for (char **e = environ; *e; e++)
        printf("env %s\n", *e);
    return argc > 1 && argv[1][0] == 'x' ? 3 : 0;
}
EOF
    cc -static -Os -s -o "$r/hello" "$work/hello.c" || die "cannot build the static /hello"
    import_dir "$r" sbx-test/noshell latest '["/hello"]'
    log "built sbx-test/noshell:latest ($(du -sh "$r" | cut -f1))"
else
    log "sbx-test/noshell:latest exists"
fi

# ---- sbx-test/debian (on request) ------------------------------------------------
# import_tar TARBALL NAME TAG CMD-JSON: like import_dir, from a cached tarball.
import_tar() {
    if command -v docker >/dev/null 2>&1; then
        docker -H "$host" import --change "CMD $4" "$1" "$2:$3" >&2
    else
        curl -sf --unix-socket "${host#unix://}" -X POST -H 'Content-Type: application/x-tar' \
            --data-binary @"$1" "http://localhost/$API/images/create?fromSrc=-&repo=$2&tag=$3" >&2 ||
            die "import of $2:$3 failed"
    fi
}

if [ "$want_debian" = 1 ] && { [ "${SBX_IMAGES_REBUILD:-0}" = 1 ] || ! have_image sbx-test/debian:bookworm; }; then
    cache=${SBX_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/sbxd}
    tarball="$cache/debian-bookworm-node-python.tar"
    if [ ! -s "$tarball" ]; then
        [ "$(id -u)" = 0 ] || die "building the Debian image needs root (debootstrap)"
        command -v debootstrap >/dev/null 2>&1 || {
            log "installing debootstrap"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2 ||
                die "apt-get install debootstrap failed"
        }
        mkdir -p "$cache"
        r="$work/debian"
        t0=$(date +%s)
        debootstrap --variant=minbase --include=nodejs,python3-minimal bookworm "$r" \
            "${SBX_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
            { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
        # Small: the test engine's vfs driver copies the whole rootfs per container.
        rm -rf "$r"/var/cache/apt/* "$r"/var/lib/apt/lists/* "$r"/usr/share/doc/* \
            "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/* \
            "$r"/var/log/* "$r"/tmp/*
        mkdir -p "$r/workspace"
        tar -C "$r" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball" ||
            die "cannot write $tarball"
        log "built $tarball ($(du -sh "$tarball" | cut -f1)) in $(($(date +%s) - t0)) s"
    fi
    import_tar "$tarball" sbx-test/debian bookworm '["/bin/bash"]'
    log "imported sbx-test/debian:bookworm"
elif [ "$want_debian" = 1 ]; then
    log "sbx-test/debian:bookworm exists"
fi
