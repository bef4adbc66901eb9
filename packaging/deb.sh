#!/bin/sh
# deb.sh BUILD_DIR VERSION - Debian packages of sbxd from a built tree, into
# BUILD_DIR/deb/:
#   sbxd        the daemon, its workers and Docker agent, sbxctl, the systemd
#               units, sysusers.d/tmpfiles.d entries, the sample config in
#               /etc/sbxd, man pages, shell completions, docs
#   libsbx1     the C client library
#   libsbx-dev  its headers, static library, .so link and pkg-config file
# Plain dpkg-deb (no debhelper): the tree is `make install DESTDIR=...
# PREFIX=/usr`, split by path; Depends come from dpkg-shlibdeps.
set -eu
B=${1:?usage: deb.sh BUILD_DIR VERSION}
VERSION=${2:?usage: deb.sh BUILD_DIR VERSION}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
OUT="$B/deb"
ST="$OUT/stage"
ARCH=$(dpkg --print-architecture)
REV=1
rm -rf "$OUT"
mkdir -p "$ST/root"

make --no-print-directory -s B="$B" install DESTDIR="$ST/root" PREFIX=/usr SYSCONFDIR=/etc \
    UNITDIR=/lib/systemd/system >"$OUT/install.log" 2>&1 ||
    { tail -n 20 "$OUT/install.log"; echo "deb.sh: make install failed" >&2; exit 1; }
# The sample stays a sample; the package ships the live file as a conffile.
[ -f "$ST/root/etc/sbxd/sbxd.yaml" ] || cp config/sbxd.yaml "$ST/root/etc/sbxd/sbxd.yaml"

for p in sbxd libsbx1 libsbx-dev; do mkdir -p "$ST/$p/DEBIAN"; done
move() { # package path...
    pkg=$1
    shift
    for f in "$@"; do
        [ -e "$ST/root/$f" ] || [ -L "$ST/root/$f" ] || continue
        mkdir -p "$ST/$pkg/$(dirname "$f")"
        mv "$ST/root/$f" "$ST/$pkg/$f"
    done
}
move libsbx1 usr/lib/libsbx.so.1
move libsbx-dev usr/include usr/lib/libsbx.so usr/lib/libsbx.a usr/lib/pkgconfig
for d in usr etc lib; do [ -d "$ST/root/$d" ] && mv "$ST/root/$d" "$ST/sbxd/$d"; done
for p in libsbx1 libsbx-dev; do
    mkdir -p "$ST/$p/usr/share/doc/$p"
    cp LICENSE "$ST/$p/usr/share/doc/$p/copyright" 2>/dev/null ||
        echo "sbxd $VERSION; see /usr/share/doc/sbxd" >"$ST/$p/usr/share/doc/$p/copyright"
done
cp LICENSE "$ST/sbxd/usr/share/doc/sbxd/copyright" 2>/dev/null || true

# Depends of what each package links (the static sbx-init links nothing).
shlibs() { # package file...
    pkg=$1
    shift
    d=$(mktemp -d)
    mkdir -p "$d/debian"
    printf 'Source: sbxd\n\nPackage: %s\nArchitecture: any\n' "$pkg" >"$d/debian/control"
    (cd "$d" && dpkg-shlibdeps -O -xlibsbx1 "$@" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
    rm -rf "$d"
}
DEP_SBXD=$(shlibs sbxd "$ST/sbxd/usr/bin/sbxd" "$ST/sbxd/usr/bin/sbxctl" \
    "$ST/sbxd/usr/libexec/sbxd/sbxd-worker" "$ST/sbxd/usr/libexec/sbxd/sbxd-jsworker")
DEP_LIB=$(shlibs libsbx1 "$ST/libsbx1/usr/lib/libsbx.so.1")
[ -n "$DEP_SBXD" ] && [ -n "$DEP_LIB" ] || { echo "deb.sh: dpkg-shlibdeps found nothing" >&2; exit 1; }

size() { du -sk "$1" | cut -f1; }
MAINT="sbxd developers <sbxd@localhost>"
cat >"$ST/sbxd/DEBIAN/control" <<CTL
Package: sbxd
Version: $VERSION-$REV
Architecture: $ARCH
Maintainer: $MAINT
Installed-Size: $(size "$ST/sbxd")
Depends: $DEP_SBXD, adduser | systemd
Recommends: docker.io | docker-ce
Section: admin
Priority: optional
Homepage: https://github.com/sbxd/sbxd
Description: sandbox daemon for programs and AI agents
 sbxd runs sandboxes (JavaScriptCore and Duktape isolates, Docker
 containers, Modal sandboxes) and serves them over a Unix socket with
 JSON-RPC. sbxctl is its command-line client and MCP server.
CTL
cat >"$ST/libsbx1/DEBIAN/control" <<CTL
Package: libsbx1
Version: $VERSION-$REV
Architecture: $ARCH
Maintainer: $MAINT
Installed-Size: $(size "$ST/libsbx1")
Depends: $DEP_LIB
Section: libs
Priority: optional
Description: client library of the sbxd sandbox daemon
 libsbx speaks sbxd's JSON-RPC protocol: synchronous calls and an
 asynchronous interface with a libev adapter.
CTL
cat >"$ST/libsbx-dev/DEBIAN/control" <<CTL
Package: libsbx-dev
Version: $VERSION-$REV
Architecture: $ARCH
Maintainer: $MAINT
Installed-Size: $(size "$ST/libsbx-dev")
Depends: libsbx1 (= $VERSION-$REV), libjansson-dev
Section: libdevel
Priority: optional
Description: client library of the sbxd sandbox daemon (development files)
 Headers (<sbx/sbx.h>, <sbx/sbx_async.h>, <sbx/adapters/libev.h>), the static
 library and the pkg-config file of libsbx.
CTL
echo /etc/sbxd/sbxd.yaml >"$ST/sbxd/DEBIAN/conffiles"
echo "activate-noawait ldconfig" >"$ST/libsbx1/DEBIAN/triggers"

cat >"$ST/sbxd/DEBIAN/postinst" <<'SH'
#!/bin/sh
# sbxd postinst: the socket's group, the runtime directory, the units.
set -e
if [ "$1" = configure ]; then
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers sbxd.conf
    elif ! getent group sbxd >/dev/null; then
        addgroup --system sbxd
    fi
    if command -v systemd-tmpfiles >/dev/null 2>&1; then
        systemd-tmpfiles --create sbxd.conf || true
    fi
    if command -v deb-systemd-helper >/dev/null 2>&1; then
        deb-systemd-helper enable sbxd.socket >/dev/null || true
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
        systemctl start sbxd.socket || true
    fi
fi
exit 0
SH
cat >"$ST/sbxd/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl stop sbxd.service sbxd.socket >/dev/null 2>&1 || true
fi
exit 0
SH
cat >"$ST/sbxd/DEBIAN/postrm" <<'SH'
#!/bin/sh
set -e
if [ "$1" = purge ] && command -v deb-systemd-helper >/dev/null 2>&1; then
    deb-systemd-helper purge sbxd.socket sbxd.service >/dev/null || true
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
SH
chmod 755 "$ST/sbxd/DEBIAN/postinst" "$ST/sbxd/DEBIAN/prerm" "$ST/sbxd/DEBIAN/postrm"

for p in sbxd libsbx1 libsbx-dev; do
    find "$ST/$p" -type d -exec chmod 755 {} +
    dpkg-deb --root-owner-group -Zxz --build "$ST/$p" "$OUT/${p}_$VERSION-${REV}_$ARCH.deb" >/dev/null
    echo "deb.sh: $OUT/${p}_$VERSION-${REV}_$ARCH.deb"
done
rm -rf "$ST"
