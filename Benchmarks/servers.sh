# Shared by the scripts that start servers to measure them (compare.sh, compare-tls.sh); sourced, not run.
# Pinning (servers on CPU 0, the load generator on CPU 1, when taskset and two cores are there), starting
# and stopping servers on 127.0.0.1. The sourcing script keeps the pids it starts in `pids` and stops them
# with stop_pid in its own cleanup.

SERVER_CPU=(taskset -c 0)
BENCH_CPU=(taskset -c 1)
if ! command -v taskset >/dev/null || [ "$(nproc)" -lt 2 ]; then SERVER_CPU=(); BENCH_CPU=(); fi

pids=()

# Stops a server: SIGTERM, then SIGKILL after 5 s (memcached may have inherited an ignored SIGTERM from the
# calling shell).
stop_pid() {
    kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits up to 10 s for something to listen on 127.0.0.1:$1; exits 2 if nothing does.
wait_port() {
    for _ in $(seq 1 200); do
        if python3 -c "import socket; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "server on port $1 did not start" >&2
    exit 2
}
