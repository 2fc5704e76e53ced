#!/usr/bin/env bash
# Cachet, memcached and Redis over TLS, measured by the same client (cachet-bench --tls, one thread) in the
# same run, and Cachet over plain TCP beside them: workloads a and b of compare.sh (100 B values, 90% GET,
# 50 connections, pipeline 1 and 16). Servers on CPU 0, cachet-bench on CPU 1 (taskset, with two or more
# cores); memcached -t 1 -Z, redis-server --tls-port, cachet-node --tls-port, persistence off. The rounds
# interleave the servers, so that a noisy minute hits all of them. Certificates are made for the run
# (openssl, P-256) in a temporary directory. Prints each server's median ops/s and the ratios.
#
#   Benchmarks/compare-tls.sh                       # 3 rounds of 5 s per workload and server
#   ROUNDS=5 DURATION=3 Benchmarks/compare-tls.sh
#
# Talks only to 127.0.0.1; every server it starts is stopped on exit. Results go to Benchmarks/results/,
# which git ignores.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
for tool in memcached redis-server openssl python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install memcached redis-server openssl)" >&2; exit 2; }
done
memcached -h 2>&1 | grep -q -- '--enable-ssl' || { echo "this memcached is built without TLS (-Z)" >&2; exit 2; }

RESULTS=Benchmarks/results/tls-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"
echo "building release binaries..." >&2
swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)

CERTS=$(mktemp -d /tmp/cachet-tls-bench.XXXXXX)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$CERTS/ca.key" \
    -out "$CERTS/ca.pem" -days 2 -subj "/CN=Cachet bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$CERTS/server.key" \
    -out "$CERTS/server.csr" -subj "/CN=127.0.0.1" 2>/dev/null
echo "subjectAltName=IP:127.0.0.1" >"$CERTS/ext"
openssl x509 -req -in "$CERTS/server.csr" -CA "$CERTS/ca.pem" -CAkey "$CERTS/ca.key" -CAcreateserial \
    -out "$CERTS/server.pem" -days 2 -extfile "$CERTS/ext" 2>/dev/null

# shellcheck source=Benchmarks/servers.sh
. Benchmarks/servers.sh
MEMCACHED_USER=()
[ "$(id -u)" = 0 ] && MEMCACHED_USER=(-u root)

cleanup() {
    for pid in "${pids[@]+"${pids[@]}"}"; do stop_pid "$pid"; done
    rm -rf "$CERTS"
}
trap cleanup EXIT INT TERM


# start_server NAME -> PORT (the one to load), PID
start_server() {
    PORT=$(free_port)
    case "$1" in
        cachet-plain)
            "${SERVER_CPU[@]}" "$BIN/cachet-node" --host 127.0.0.1 --port "$PORT" --disk-limit 0 \
                --memory-limit 1GiB >/dev/null 2>&1 & ;;
        cachet-tls)
            local plain
            plain=$(free_port)
            "${SERVER_CPU[@]}" "$BIN/cachet-node" --host 127.0.0.1 --port "$plain" --tls-port "$PORT" \
                --tls-cert "$CERTS/server.pem" --tls-key "$CERTS/server.key" --disk-limit 0 \
                --memory-limit 1GiB >/dev/null 2>&1 & ;;
        memcached-tls)
            "${SERVER_CPU[@]}" memcached "${MEMCACHED_USER[@]}" -t 1 -m 2048 -U 0 -l 127.0.0.1 -p "$PORT" -c 4096 \
                -Z -o "ssl_chain_cert=$CERTS/server.pem,ssl_key=$CERTS/server.key" & ;;
        redis-tls)
            "${SERVER_CPU[@]}" redis-server --port 0 --tls-port "$PORT" --bind 127.0.0.1 \
                --tls-cert-file "$CERTS/server.pem" --tls-key-file "$CERTS/server.key" \
                --tls-ca-cert-file "$CERTS/ca.pem" --tls-auth-clients no --save '' --appendonly no \
                --daemonize no --protected-mode no --maxclients 4096 --logfile /dev/null & ;;
    esac
    PID=$!
    pids+=("$PID")
    wait_port "$PORT"
}

stop_server() {
    stop_pid "$PID"
    local kept=()
    for pid in "${pids[@]}"; do [ "$pid" = "$PID" ] || kept+=("$pid"); done
    pids=("${kept[@]+"${kept[@]}"}")
}

protocol_of() { case "$1" in memcached*) echo memcache ;; redis*) echo resp ;; cachet*) echo cachet ;; esac; }
tls_of() { case "$1" in *-tls) echo "--tls --tls-ca $CERTS/ca.pem --tls-server-name 127.0.0.1" ;; *) echo "" ;; esac; }

SERVERS=(cachet-plain cachet-tls memcached-tls redis-tls)
WORKLOADS=(
    "a|--value-size 100 --keys 100000 --connections 50 --pipeline 1"
    "b|--value-size 100 --keys 100000 --connections 50 --pipeline 16"
)

for round in $(seq 1 "$ROUNDS"); do
    for server in "${SERVERS[@]}"; do
        for workload in "${WORKLOADS[@]}"; do
            IFS='|' read -r name flags <<<"$workload"
            start_server "$server"
            out="$RESULTS/$server-$name-$round"
            echo "== round $round of $ROUNDS, $server: $name" >&2
            # shellcheck disable=SC2086
            "${BENCH_CPU[@]}" "$BIN/cachet-bench" --protocol "$(protocol_of "$server")" --port "$PORT" \
                $(tls_of "$server") --prefill --requests 0 --quiet --json --get-ratio 0.9 $flags >"$out.prefill.json" \
                || echo "   prefill failed: see $out.prefill.json" >&2
            # shellcheck disable=SC2086
            "${BENCH_CPU[@]}" "$BIN/cachet-bench" --protocol "$(protocol_of "$server")" --port "$PORT" \
                $(tls_of "$server") --quiet --json --duration "$DURATION" --get-ratio 0.9 $flags >"$out.json" \
                || echo "   measured run failed: see $out.json" >&2
            stop_server
        done
    done
done

python3 - "$RESULTS" "$ROUNDS" <<'EOF'
import json, statistics, sys, os
results, rounds = sys.argv[1], int(sys.argv[2])
servers = ["cachet-plain", "cachet-tls", "memcached-tls", "redis-tls"]
def ops(server, workload):
    values = []
    for r in range(1, rounds + 1):
        path = f"{results}/{server}-{workload}-{r}.json"
        try:
            report = json.load(open(path))
            if report.get("errors", 0) == 0 and report.get("verification_errors", 0) == 0:
                values.append(report["ops_per_sec"])
        except (OSError, ValueError, KeyError):
            pass
    return statistics.median(values) if values else None
print("| workload | Cachet plain | Cachet TLS | memcached -t 1 TLS | Redis TLS | Cachet TLS / plain | Cachet TLS / memcached TLS | Cachet TLS / Redis TLS |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for workload in ["a", "b"]:
    p, t, m, r = (ops(s, workload) for s in servers)
    fmt = lambda v: f"{v:,.0f}" if v else "failed"
    ratio = lambda x, y: f"{x / y:.2f}" if x and y else "-"
    print(f"| {workload} | {fmt(p)} | {fmt(t)} | {fmt(m)} | {fmt(r)} | {ratio(t, p)} | {ratio(t, m)} | {ratio(t, r)} |")
print(f"\nmedian of {rounds} round(s); results: {results}")
EOF
