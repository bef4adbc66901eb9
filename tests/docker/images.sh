#!/bin/sh
# images.sh - offline test images for the Docker provider (no registry needed).
#
#   images.sh DOCKER_HOST        e.g. images.sh unix:///tmp/sbxd-docker/docker.sock
#
#   sbx-test/busybox:latest   /bin/busybox from Debian's busybox-static with its applet
#                             links, /tmp, /workspace, a root entry in /etc/passwd
#   sbx-test/noshell:latest   no shell and no libc: one static binary, /hello, that
#                             prints its argv, cwd and environment (proves that argv
#                             commands run through the agent without /bin/sh)
#
# Idempotent: an image that exists is left alone (SBX_IMAGES_REBUILD=1 rebuilds).
# Uses the docker CLI when there is one, else POST /images/create?fromSrc=- with curl.
set -eu

host=${1:-${DOCKER_HOST:-}}
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
