#!/bin/sh
# dockerd.sh - a Docker engine for the Docker provider's tests.
#
#   dockerd.sh start DIR [--tls]   reuse a running engine, or start a private one in DIR
#   dockerd.sh stop DIR            stop the private engine of DIR and delete DIR's state
#   dockerd.sh status DIR          exit 0 when the private engine of DIR answers
#
# `start` prints shell assignments on stdout (everything else goes to stderr):
#   DOCKER_HOST=unix:///.../docker.sock
# and with --tls (private engine only) also
#   DOCKER_TLS_HOST=tcp://127.0.0.1:PORT DOCKER_TLS_CA=... DOCKER_TLS_CERT=... DOCKER_TLS_KEY=...
# so `eval "$(tests/docker/dockerd.sh start "$dir")"` works.
#
# An engine that already answers at $DOCKER_HOST (unix://) or /var/run/docker.sock is
# reused as is (and `stop` leaves it alone). Otherwise, as root: Debian's docker.io is
# installed if dockerd is missing, and a private dockerd runs with everything under DIR:
#   dockerd --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none
#           --data-root DIR/data --exec-root DIR/exec --pidfile DIR/dockerd.pid
#           --containerd-namespace sbxtest --containerd-plugins-namespace sbxtest-plugins
#           -H unix://DIR/docker.sock
# vfs needs no overlay support, --bridge=none needs no iptables/NAT: containers get
# only a loopback interface (use NetworkMode "none"/"host"). The private engine starts
# its own containerd under DIR/exec unless /run/containerd/containerd.sock exists.
#
# gVisor: when Debian's runsc is installed, the private engine registers it as the
# runtime "runsc" (DIR/daemon.json, passed as --config-file) with
#   --platform=ptrace   no KVM needed
#   --network=none      sbxd's containers have no network anyway
#   --host-uds=create   a socket the sandbox binds in a host mount is a host socket:
#                       sbxd's direct channel (proto/CHANNEL.md, "Under gVisor")
# A reused engine keeps its own runtimes.
set -eu

PING_TIMEOUT=${DOCKERD_START_TIMEOUT:-60}

log() { echo "dockerd.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# ping SOCKET: the engine on this unix socket answers GET /_ping with OK.
ping_unix() {
    [ -S "$1" ] || return 1
    out=$(curl -s --max-time 3 --unix-socket "$1" http://localhost/_ping 2>/dev/null) || return 1
    [ "$out" = "OK" ]
}

ping_tls() { # HOST:PORT TLSDIR
    out=$(curl -s --max-time 3 --cacert "$2/ca.pem" --cert "$2/cert.pem" --key "$2/key.pem" \
        "https://$1/_ping" 2>/dev/null) || return 1
    [ "$out" = "OK" ]
}

# A free TCP port on 127.0.0.1: nothing in /proc/net/tcp listens on it.
free_port() {
    p=${DOCKERD_TLS_PORT:-23760}
    while [ "$p" -lt 23860 ]; do
        hex=$(printf '%04X' "$p")
        if ! grep -q ":$hex 00000000:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
            echo "$p"
            return 0
        fi
        p=$((p + 1))
    done
    return 1
}

# CA, server certificate for 127.0.0.1/localhost, client certificate.
make_certs() { # TLSDIR
    d=$1
    [ -f "$d/cert.pem" ] && [ -f "$d/server-cert.pem" ] && return 0
    mkdir -p "$d"
    (
        cd "$d"
        umask 077
        openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sbx test CA" \
            -keyout ca-key.pem -out ca.pem
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
            -keyout server-key.pem -out server.csr
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' \
            >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
            -days 30 -extfile server.ext -out server-cert.pem
        openssl req -newkey rsa:2048 -nodes -subj "/CN=sbx test client" \
            -keyout key.pem -out client.csr
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
            -days 30 -extfile client.ext -out cert.pem
        rm -f server.csr client.csr server.ext client.ext
        chmod 644 ca.pem cert.pem server-cert.pem
    ) >"$d/openssl.log" 2>&1 || die "openssl failed, see $d/openssl.log"
}

print_env() { # DIR
    echo "DOCKER_HOST=unix://$1/docker.sock"
    if [ -f "$1/tls.port" ]; then
        echo "DOCKER_TLS_HOST=tcp://127.0.0.1:$(cat "$1/tls.port")"
        echo "DOCKER_TLS_CA=$1/tls/ca.pem"
        echo "DOCKER_TLS_CERT=$1/tls/cert.pem"
        echo "DOCKER_TLS_KEY=$1/tls/key.pem"
    fi
}

running_pid() { # DIR: pid of the private dockerd, if alive
    [ -f "$1/dockerd.pid" ] || return 1
    pid=$(cat "$1/dockerd.pid")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

cmd_start() {
    dir=$1
    tls=$2
    # 1. An engine that is already there.
    if [ "$tls" = 0 ]; then
        case "${DOCKER_HOST:-}" in
        unix://*)
            if ping_unix "${DOCKER_HOST#unix://}"; then
                log "reusing the engine at $DOCKER_HOST"
                echo "DOCKER_HOST=$DOCKER_HOST"
                return 0
            fi
            ;;
        esac
        if ping_unix /var/run/docker.sock; then
            log "reusing the engine at /var/run/docker.sock"
            echo "DOCKER_HOST=unix:///var/run/docker.sock"
            return 0
        fi
    fi
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    sock="$dir/docker.sock"
    [ "${#sock}" -lt 100 ] || die "socket path too long for a unix socket: $sock"
    if running_pid "$dir" >/dev/null && ping_unix "$sock"; then
        if [ "$tls" = 0 ] || [ -f "$dir/tls.port" ]; then
            log "private engine in $dir already runs"
            print_env "$dir"
            return 0
        fi
        die "the engine in $dir runs without TLS; stop it first"
    fi

    # 2. A private one.
    [ "$(id -u)" = 0 ] || die "no engine answers and starting one needs root"
    if ! command -v dockerd >/dev/null 2>&1; then
        log "installing docker.io"
        DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io >&2 ||
            { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io >&2; } ||
            die "apt-get install docker.io failed"
    fi
    command -v curl >/dev/null 2>&1 || die "curl is needed"
    rm -f "$sock" "$dir/tls.port"
    set -- --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none \
        --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
        --containerd-namespace sbxtest --containerd-plugins-namespace sbxtest-plugins \
        -H "unix://$sock"
    if runsc=$(command -v runsc 2>/dev/null) && [ -x "$runsc" ]; then
        printf '{"runtimes": {"runsc": {"path": "%s", "runtimeArgs": %s}}}\n' "$runsc" \
            '["--platform=ptrace", "--network=none", "--host-uds=create"]' >"$dir/daemon.json"
        set -- --config-file "$dir/daemon.json" "$@"
        log "gVisor: runtime runsc ($runsc)"
    fi
    if [ "$tls" = 1 ]; then
        command -v openssl >/dev/null 2>&1 || die "openssl is needed for --tls"
        make_certs "$dir/tls"
        port=$(free_port) || die "no free port for TLS"
        set -- "$@" --tlsverify --tlscacert "$dir/tls/ca.pem" \
            --tlscert "$dir/tls/server-cert.pem" --tlskey "$dir/tls/server-key.pem" \
            -H "tcp://127.0.0.1:$port"
    fi
    log "starting: dockerd $*"
    # setsid: the engine must not die with the shell (or get its Ctrl-C).
    setsid dockerd "$@" >"$dir/dockerd.log" 2>&1 </dev/null &
    t0=$(date +%s)
    while ! ping_unix "$sock"; do
        if [ $(($(date +%s) - t0)) -ge "$PING_TIMEOUT" ]; then
            tail -n 20 "$dir/dockerd.log" >&2 || true
            die "dockerd did not answer within ${PING_TIMEOUT}s (log: $dir/dockerd.log)"
        fi
        if ! kill -0 $! 2>/dev/null; then
            tail -n 20 "$dir/dockerd.log" >&2 || true
            die "dockerd exited (log: $dir/dockerd.log)"
        fi
        sleep 0.2
    done
    if [ "$tls" = 1 ]; then
        while ! ping_tls "127.0.0.1:$port" "$dir/tls"; do
            [ $(($(date +%s) - t0)) -lt "$PING_TIMEOUT" ] || die "TLS endpoint does not answer"
            sleep 0.2
        done
        echo "$port" >"$dir/tls.port"
    fi
    log "engine up after $(($(date +%s) - t0))s: $(curl -s --unix-socket "$sock" \
        http://localhost/version | sed -n 's/.*"ApiVersion":"\([^"]*\)".*/API \1/p')"
    print_env "$dir"
}

cmd_stop() {
    dir=$1
    [ -d "$dir" ] || return 0
    dir=$(cd "$dir" && pwd)
    if pid=$(running_pid "$dir"); then
        # Containers first, so their shims and mounts go away with the engine.
        if ping_unix "$dir/docker.sock"; then
            ids=$(curl -s --unix-socket "$dir/docker.sock" \
                'http://localhost/containers/json?all=1' | grep -o '"Id":"[0-9a-f]*"' |
                cut -d'"' -f4) || true
            for id in $ids; do
                curl -s -o /dev/null -X DELETE --unix-socket "$dir/docker.sock" \
                    "http://localhost/containers/$id?force=1" || true
            done
        fi
        kill "$pid" 2>/dev/null || true
        i=0
        while kill -0 "$pid" 2>/dev/null; do
            i=$((i + 1))
            if [ "$i" -ge 150 ]; then
                log "dockerd $pid ignores SIGTERM: SIGKILL"
                kill -9 "$pid" 2>/dev/null || true
                break
            fi
            sleep 0.2
        done
    fi
    # The engine's own containerd, if it outlived it.
    if [ -f "$dir/exec/containerd/containerd.pid" ]; then
        cpid=$(cat "$dir/exec/containerd/containerd.pid")
        if [ -n "$cpid" ]; then kill "$cpid" 2>/dev/null || true; fi
        sleep 0.5
    fi
    # vfs layers, shm and netns mounts may still be mounted below DIR.
    grep -F " $dir/" /proc/self/mounts | cut -d' ' -f2 | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$dir/data" "$dir/exec" "$dir/tls" "$dir/docker.sock" "$dir/dockerd.pid" \
        "$dir/tls.port" "$dir/dockerd.log" "$dir/daemon.json"
    rmdir "$dir" 2>/dev/null || true
}

cmd="${1:-}"
dir="${2:-}"
if [ -z "$cmd" ] || [ -z "$dir" ]; then
    die "usage: dockerd.sh start|stop|status DIR [--tls]"
fi
case "$cmd" in
start)
    tls=0
    [ "${3:-}" = "--tls" ] && tls=1
    cmd_start "$dir" "$tls"
    ;;
stop) cmd_stop "$dir" ;;
status) ping_unix "$(cd "$dir" 2>/dev/null && pwd)/docker.sock" ;;
*) die "unknown command $cmd" ;;
esac
