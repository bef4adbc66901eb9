# sbxd_kit.sh - sourced (`. tests/sbxd_kit.sh`, from the top of the tree) by the
# shell tests and bench scripts that start an sbxd of their own: one way to
# start it and wait for its socket, one way to stop it. Not a test itself.

# sbxd_kit_start BIN SOCK LOG [ARG...]: BIN (behind $VG when set, e.g. valgrind)
# in the background with SBXD_SOCKET=SOCK and ARGs, its stdout and stderr
# appended to LOG; SBXD_KIT_PID is its pid. Waits up to SBXD_KIT_WAIT seconds
# (20: a loaded machine starts slowly) for the socket; 1, with the log's last
# lines printed, when it did not come.
sbxd_kit_start() {
    _kit_bin=$1 _kit_sock=$2 _kit_log=$3
    shift 3
    rm -f "$_kit_sock"
    # shellcheck disable=SC2086
    SBXD_SOCKET="$_kit_sock" $VG "$_kit_bin" "$@" >>"$_kit_log" 2>&1 &
    SBXD_KIT_PID=$!
    _kit_i=0
    _kit_n=$((${SBXD_KIT_WAIT:-20} * 20))
    while [ ! -S "$_kit_sock" ] && [ $_kit_i -lt $_kit_n ]; do
        sleep 0.05
        _kit_i=$((_kit_i + 1))
    done
    [ -S "$_kit_sock" ] && return 0
    tail -n 20 "$_kit_log"
    return 1
}

# sbxd_kit_stop PID: SIGTERM, then waits; returns sbxd's exit status.
sbxd_kit_stop() {
    kill -TERM "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}
