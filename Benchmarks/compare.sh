#!/usr/bin/env bash
# Side-by-side: the same workloads against memcached (1 and 2 threads), Redis and cachet-node, in one run,
# all on 127.0.0.1, measured by the same client (cachet-bench). Prints a Markdown table with ratios.
#
#   Benchmarks/compare.sh              # 10 s per workload and server
#   DURATION=3 Benchmarks/compare.sh   # shorter
#   QUICK=1 Benchmarks/compare.sh      # 2 s each and a 200,000-item memory run: a smoke test
#   ROUNDS=3 Benchmarks/compare.sh     # every workload 3 times per server, interleaved; medians reported
#
# Servers run on CPU 0 and the load generator on CPU 1 (taskset), except memcached -t 2, which gets both
# CPUs. Persistence is off everywhere (Redis: no RDB/AOF; Cachet: --disk-limit 0). Results (JSON per run)
# go to Benchmarks/results/, which git ignores.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-1}
ITEMS=${ITEMS:-1000000}
if [ -n "${QUICK:-}" ]; then DURATION=2; ITEMS=200000; fi
RESULTS=Benchmarks/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"

need=()
command -v memcached >/dev/null || need+=(memcached)
command -v redis-server >/dev/null || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }
    else
        echo "missing ${need[*]}: install them (apt-get install memcached redis-server) and run again" >&2
        exit 2
    fi
fi

echo "building release binaries..." >&2
swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)

MEMCACHED_USER=""
[ "$(id -u)" -eq 0 ] && MEMCACHED_USER="-u nobody"

SERVER_CPU="taskset -c 0"
BENCH_CPU="taskset -c 1"
command -v taskset >/dev/null || { SERVER_CPU=""; BENCH_CPU=""; }
[ "$(nproc)" -ge 2 ] || { SERVER_CPU=""; BENCH_CPU=""; }

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() {
    for _ in $(seq 1 100); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "server on port $1 did not start" >&2
    exit 2
}

# start_server NAME -> sets PORT and PID
start_server() {
    PORT=$(free_port)
    case "$1" in
        memcached-t1) $SERVER_CPU memcached $MEMCACHED_USER -t 1 -m 4096 -U 0 -l 127.0.0.1 -p "$PORT" -c 4096 & ;;
        memcached-t2) memcached $MEMCACHED_USER -t 2 -m 4096 -U 0 -l 127.0.0.1 -p "$PORT" -c 4096 & ;;
        redis) $SERVER_CPU redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
                   --protected-mode no --maxclients 4096 --logfile /dev/null & ;;
        cachet) $SERVER_CPU "$BIN/cachet-node" --port "$PORT" --memory-limit 4GiB --disk-limit 0 --log-level warning & ;;
    esac
    PID=$!
    pids+=("$PID")
    wait_port "$PORT"
}

protocol_of() { case "$1" in memcached*) echo memcache ;; redis) echo resp ;; cachet) echo cachet ;; esac; }

SERVERS=(memcached-t1 memcached-t2 redis cachet)
# name|flags
WORKLOADS=(
    "a: 100 B, 100k keys, 90% GET, 50 conns, pipeline 1|--value-size 100 --keys 100000 --get-ratio 0.9 --connections 50 --pipeline 1"
    "b: 100 B, 100k keys, 90% GET, 50 conns, pipeline 16|--value-size 100 --keys 100000 --get-ratio 0.9 --connections 50 --pipeline 16"
    "c: 16 KiB, 10k keys, 90% GET, 8 conns|--value-size 16384 --keys 10000 --get-ratio 0.9 --connections 8 --pipeline 1"
    "d: 1 MB, 100 keys, 90% GET, 4 conns|--value-size 1000000 --keys 100 --get-ratio 0.9 --connections 4 --pipeline 1"
)

# utime + stime of a process, in clock ticks (all its threads).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICKS=$(getconf CLK_TCK)

# Rounds interleave the servers, so that a noisy minute on the shared machine hits all of them.
for round in $(seq 1 "$ROUNDS"); do
    for server in "${SERVERS[@]}"; do
        for i in "${!WORKLOADS[@]}"; do
            IFS='|' read -r name flags <<<"${WORKLOADS[$i]}"
            start_server "$server"
            out="$RESULTS/$server-$i-$round.json"
            echo "== round $round, $server: $name" >&2
            # Prefill first, then measure: every GET of the measured run must hit (its hit ratio says so),
            # and the server's CPU time is read around the measured run only.
            # shellcheck disable=SC2086
            $BENCH_CPU "$BIN/cachet-bench" --protocol "$(protocol_of "$server")" --port "$PORT" --prefill --requests 0 \
                --quiet --json $flags >/dev/null || echo "   (prefill failed)" >&2
            cpu_before=$(cpu_ticks "$PID")
            # shellcheck disable=SC2086
            $BENCH_CPU "$BIN/cachet-bench" --protocol "$(protocol_of "$server")" --port "$PORT" --quiet --json \
                --duration "$DURATION" $flags >"$out" || echo "   (exit $?: see $out)" >&2
            cpu_after=$(cpu_ticks "$PID")
            echo "$(( cpu_after - cpu_before ))" >"$RESULTS/$server-$i-$round.cpu"
            kill "$PID"; wait "$PID" 2>/dev/null || true
        done
    done
done

# median FIELD SERVER WORKLOAD: the median over rounds (0 if no run produced it)
median() {
    python3 - "$RESULTS" "$2" "$3" "$1" <<'PY'
import glob, json, statistics, sys
results, server, workload, field = sys.argv[1:]
values = []
for path in glob.glob(f"{results}/{server}-{workload}-*.json"):
    try:
        report = json.load(open(path))
    except Exception:
        continue
    if field == "ops":
        values.append(report["opsPerSecond"])
    elif field == "p99":
        values.append(report["latencyMicroseconds"]["p99"])
    else:  # requests per second of server CPU
        ticks = int(open(path[: -len(".json")] + ".cpu").read() or 0)
        if ticks > 0:
            values.append(report["requests"] / (ticks / int(field.split(":")[1])))
print(round(statistics.median(values)) if values else 0)
PY
}

declare -A OPS P99 EFF
for server in "${SERVERS[@]}"; do
    for i in "${!WORKLOADS[@]}"; do
        OPS[$server,$i]=$(median ops "$server" "$i")
        P99[$server,$i]=$(median p99 "$server" "$i")
        EFF[$server,$i]=$(median "cpu:$TICKS" "$server" "$i")
    done
done

rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
declare -A PERITEM
for server in "${SERVERS[@]}"; do
    start_server "$server"
    before=$(rss_kib "$PID")
    echo "== $server: memory, $ITEMS PUTs of 100 B" >&2
    $BENCH_CPU "$BIN/cachet-bench" --protocol "$(protocol_of "$server")" --port "$PORT" --prefill --requests 0 --quiet --json \
        --keys "$ITEMS" --value-size 100 --connections 8 --pipeline 64 >"$RESULTS/$server-memory.json" || true
    sleep 1
    after=$(rss_kib "$PID")
    PERITEM[$server]=$(python3 -c "print(round(($after-$before)*1024/$ITEMS))")
    kill "$PID"; wait "$PID" 2>/dev/null || true
done

echo
echo "Date: $(date -u +%Y-%m-%d), machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
echo "memcached $(memcached -V | awk '{print $2}'), Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $DURATION s per run, median of $ROUNDS round(s)"
echo
echo "| workload | memcached -t 1 | memcached -t 2 | Redis | Cachet | Cachet / best other |"
echo "|---|---|---|---|---|---|"
for i in "${!WORKLOADS[@]}"; do
    IFS='|' read -r name _ <<<"${WORKLOADS[$i]}"
    best=0
    for server in memcached-t1 memcached-t2 redis; do [ "${OPS[$server,$i]}" -gt "$best" ] && best=${OPS[$server,$i]}; done
    ratio=$(python3 -c "print('%.2f' % (${OPS[cachet,$i]}/max($best,1)))")
    row="| $name ops/s"
    for server in "${SERVERS[@]}"; do row="$row | ${OPS[$server,$i]}"; done
    echo "$row | $ratio |"
    row="| $name p99 us"
    for server in "${SERVERS[@]}"; do row="$row | ${P99[$server,$i]}"; done
    echo "$row | |"
    best=0
    for server in memcached-t1 memcached-t2 redis; do [ "${EFF[$server,$i]}" -gt "$best" ] && best=${EFF[$server,$i]}; done
    ratio=$(python3 -c "print('%.2f' % (${EFF[cachet,$i]}/max($best,1)))")
    row="| $name ops per server CPU-second"
    for server in "${SERVERS[@]}"; do row="$row | ${EFF[$server,$i]}"; done
    echo "$row | $ratio |"
done
best=999999
for server in memcached-t1 memcached-t2 redis; do [ "${PERITEM[$server]}" -lt "$best" ] && best=${PERITEM[$server]}; done
echo "| memory: bytes of RSS per 100 B item ($ITEMS items) | ${PERITEM[memcached-t1]} | ${PERITEM[memcached-t2]} | ${PERITEM[redis]} | ${PERITEM[cachet]} | $(python3 -c "print('%.2f' % (${PERITEM[cachet]}/max($best,1)))") |"
echo
echo "JSON per run: $RESULTS"
