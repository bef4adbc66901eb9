#!/bin/sh
# deps.sh build|test - installs what is missing (Debian 12), nothing else.
# `make run` calls it with "build", `make test` with "test".
set -e
BUILD="gcc make pkg-config libev-dev libjansson-dev libcurl4-openssl-dev libyaml-dev duktape-dev libprotobuf-c-dev protobuf-c-compiler libjavascriptcoregtk-4.1-dev"
TEST="procps openssl busybox-static curl debootstrap clang-14 libclang-rt-14-dev clang-format-14 runsc"
want="$BUILD"
[ "$1" = test ] && want="$BUILD $TEST"
missing=""
for p in $want; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# Node.js and npm: the build bundles the js worker's TypeScript stripper
# (npm ci + esbuild), and the tests run the local Modal fake. The machine
# image may already have them.
if ! command -v node >/dev/null 2>&1; then
    missing="$missing nodejs"
fi
if ! command -v npm >/dev/null 2>&1; then
    missing="$missing npm"
fi
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
