#!/usr/bin/env bash
# Side-by-side: the same workloads against memcached (1 and 2 threads), Redis and cachet-node, in one run,
# all on 127.0.0.1, measured by the same client (cachet-bench, one thread). Prints a Markdown table with
# ratios, ready for BENCHMARKS.md.
#
#   Benchmarks/compare.sh              # 10 s per workload and server
#   DURATION=3 Benchmarks/compare.sh   # shorter runs
#   QUICK=1 Benchmarks/compare.sh      # a smoke run: 2 s each, 200,000 items in the memory run
#   ROUNDS=3 Benchmarks/compare.sh     # every workload 3 times per server, interleaved; medians reported
#   ITEMS=500000 Benchmarks/compare.sh # items of the memory run (default 1,000,000)
#   SERVERS="redis cachet" Benchmarks/compare.sh   # a subset of memcached-t1 memcached-t2 redis cachet
#   ONLY="c d" Benchmarks/compare.sh   # a subset of the workloads a b c d e and memory
#                                        (e: gets of 10 keys each, for the servers speaking memcached's protocol)
#
# Pinning: on two or more cores, servers run on CPU 0 and the load generator on CPU 1 (taskset), except
# memcached -t 2, which gets every CPU (its second thread would otherwise share CPU 0 and measure nothing).
# Persistence is off everywhere: Redis without RDB or AOF, Cachet without its disk tier. Each run prefills
# its keys first (not measured), so every GET of the measured run must hit with the right length; the
# client verifies every reply. Results (JSON per run, the server's CPU ticks per run) go to
# Benchmarks/results/, which git ignores. Every server started here is stopped on exit, even on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-1}
ITEMS=${ITEMS:-1000000}
if [ -n "${QUICK:-}" ]; then DURATION=2; ITEMS=200000; fi
RESULTS=Benchmarks/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"

# memcached and Redis: install them when missing and possible; otherwise leave them out of the table.
need=()
command -v memcached >/dev/null || need+=(memcached)
command -v redis-server >/dev/null || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "installing ${need[*]}..." >&2
        apt-get install -y -q "${need[@]}" >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${need[@]}" >/dev/null 2>&1; } \
            || echo "could not install ${need[*]}: they are left out" >&2
    else
        echo "${need[*]} missing and not root: they are left out (apt-get install memcached redis-server)" >&2
    fi
fi

echo "building release binaries..." >&2
swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)
CACHET_FLAGS=(--memory-limit 2GiB --log-level warning)
"$BIN/cachet-node" --help 2>&1 | grep -q -- --disk-limit && CACHET_FLAGS+=(--disk-limit 0)

ALL_SERVERS=(memcached-t1 memcached-t2 redis cachet cachet-memcache)
available() {
    case "$1" in
        memcached*) command -v memcached >/dev/null ;;
        redis) command -v redis-server >/dev/null ;;
        cachet) [ -x "$BIN/cachet-node" ] ;;
        cachet-memcache) "$BIN/cachet-node" --help 2>&1 | grep -- --memcached-port >/dev/null ;;
    esac
}
wanted=${SERVERS:-${ALL_SERVERS[*]}}
SERVERS=()
for server in $wanted; do
    if available "$server"; then SERVERS+=("$server"); else echo "skipping $server: not installed" >&2; fi
done
[ ${#SERVERS[@]} -gt 0 ] || { echo "no server to measure" >&2; exit 2; }

MEMCACHED_USER=()
[ "$(id -u)" -eq 0 ] && MEMCACHED_USER=(-u nobody)

# shellcheck source=Benchmarks/servers.sh
. Benchmarks/servers.sh
cleanup() { for pid in "${pids[@]}"; do stop_pid "$pid"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM


# start_server NAME -> sets PORT and PID
start_server() {
    PORT=$(free_port)
    case "$1" in
        memcached-t1)
            "${SERVER_CPU[@]}" memcached "${MEMCACHED_USER[@]}" -t 1 -m 2048 -U 0 -l 127.0.0.1 -p "$PORT" -c 4096 & ;;
        memcached-t2)
            memcached "${MEMCACHED_USER[@]}" -t 2 -m 2048 -U 0 -l 127.0.0.1 -p "$PORT" -c 4096 & ;;
        redis)
            "${SERVER_CPU[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
                --daemonize no --protected-mode no --maxclients 4096 --logfile /dev/null & ;;
        cachet)
            "${SERVER_CPU[@]}" "$BIN/cachet-node" --host 127.0.0.1 --port "$PORT" "${CACHET_FLAGS[@]}" >/dev/null & ;;
        cachet-memcache)
            # Driven on its memcached port, with memcached's text protocol (the native port stays idle).
            "${SERVER_CPU[@]}" "$BIN/cachet-node" --host 127.0.0.1 --port "$(free_port)" --memcached-port "$PORT" \
                "${CACHET_FLAGS[@]}" >/dev/null & ;;
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

protocol_of() {
    case "$1" in memcached* | cachet-memcache) echo memcache ;; redis) echo resp ;; cachet) echo cachet ;; esac
}
label_of() {
    case "$1" in memcached-t1) echo "memcached -t 1" ;; memcached-t2) echo "memcached -t 2" ;; redis) echo Redis ;;
        cachet) echo Cachet ;; cachet-memcache) echo "Cachet, memcached's protocol" ;; esac
}

# name|flags
WORKLOADS=(
    "a: 100 B, 100k keys, 90% GET, 50 conns, pipeline 1|--value-size 100 --keys 100000 --connections 50 --pipeline 1"
    "b: 100 B, 100k keys, 90% GET, 50 conns, pipeline 16|--value-size 100 --keys 100000 --connections 50 --pipeline 16"
    "c: 16 KiB, 10k keys, 90% GET, 8 conns|--value-size 16384 --keys 10000 --connections 8 --pipeline 1"
    "d: 1 MB, 100 keys, 90% GET, 4 conns|--value-size 1000000 --keys 100 --connections 4 --pipeline 1"
    "e: 100 B, 100k keys, 90% gets of 10 keys, 50 conns|--value-size 100 --keys 100000 --connections 50 --pipeline 1 --keys-per-get 10"
)

# utime + stime of a process, in clock ticks (all its threads).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

ONLY=${ONLY:-a b c d e memory}
selected() { [[ " $ONLY " == *" $1 "* ]]; }

# Rounds interleave the servers, so that a noisy minute on a shared machine hits all of them.
for round in $(seq 1 "$ROUNDS"); do
    for server in "${SERVERS[@]}"; do
        for i in "${!WORKLOADS[@]}"; do
            IFS='|' read -r name flags <<<"${WORKLOADS[$i]}"
            selected "${name:0:1}" || continue
            # Gets of several keys: memcached's protocol only.
            [[ "$name" == e:* && "$(protocol_of "$server")" != memcache ]] && continue
            start_server "$server"
            out="$RESULTS/$server-$i-$round"
            echo "== round $round, $server: $name" >&2
            # Prefill apart from the measured run, so that the server's CPU time is read around the
            # measured run only; the measured run's GETs must all hit (its hit ratio says so).
            # shellcheck disable=SC2086
            "${BENCH_CPU[@]}" "$BIN/cachet-bench" --protocol "$(protocol_of "$server")" --port "$PORT" --prefill \
                --requests 0 --quiet --json --get-ratio 0.9 $flags >"$out.prefill.json" \
                || echo "   prefill failed (exit $?): see $out.prefill.json" >&2
            cpu_before=$(cpu_ticks "$PID")
            # shellcheck disable=SC2086
            "${BENCH_CPU[@]}" "$BIN/cachet-bench" --protocol "$(protocol_of "$server")" --port "$PORT" --quiet \
                --json --duration "$DURATION" --get-ratio 0.9 $flags >"$out.json" \
                || echo "   measured run failed (exit $?): see $out.json" >&2
            cpu_after=$(cpu_ticks "$PID")
            echo "$((cpu_after - cpu_before))" >"$out.cpu"
            stop_server
        done
    done
done

# The memory run: RSS per item after ITEMS PUTs of 100-byte values under 14-byte keys.
for server in "${SERVERS[@]}"; do
    selected memory || break
    start_server "$server"
    sleep 0.5
    before=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
    echo "== $server: memory, $ITEMS PUTs of 100 B" >&2
    "${BENCH_CPU[@]}" "$BIN/cachet-bench" --protocol "$(protocol_of "$server")" --port "$PORT" --fill "$ITEMS" \
        --value-size 100 --key-size 14 --connections 8 --pipeline 64 --quiet --json >"$RESULTS/$server-memory.json" \
        || echo "   fill failed (exit $?): see $RESULTS/$server-memory.json" >&2
    sleep 1
    after=$(awk '/VmRSS/ {print $2}' "/proc/$PID/status")
    echo "$before $after" >"$RESULTS/$server-memory.rss"
    stop_server
done

echo
echo "Date: $(date -u +%Y-%m-%d), machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')),"\
     "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)"
versions=""
command -v memcached >/dev/null && versions="memcached $(memcached -V | awk '{print $2}'), "
command -v redis-server >/dev/null && versions="${versions}Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), "
echo "${versions}$DURATION s per run, median of $ROUNDS round(s); servers on CPU 0 and cachet-bench on CPU 1"
echo

python3 - "$RESULTS" "$(getconf CLK_TCK)" "$ITEMS" "${SERVERS[@]}" <<'PY'
import glob, json, statistics, sys

results, ticks_per_second, items, servers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
labels = {"memcached-t1": "memcached -t 1", "memcached-t2": "memcached -t 2", "redis": "Redis", "cachet": "Cachet",
          "cachet-memcache": "Cachet, memcached's protocol"}
names = [
    "a: 100 B, 100k keys, 90% GET, 50 conns, pipeline 1",
    "b: same, pipeline 16",
    "c: 16 KiB, 10k keys, 90% GET, 8 conns",
    "d: 1 MB, 100 keys, 90% GET, 4 conns",
    "e: 100 B, 100k keys, 90% gets of 10 keys each (memcached's protocol), 50 conns",
]

def runs(server, workload):
    found = []
    for path in sorted(glob.glob(f"{results}/{server}-{workload}-*.json")):
        if path.endswith(".prefill.json"):
            continue
        try:
            report = json.load(open(path))
        except Exception:
            continue
        try:
            ticks = int(open(path[: -len(".json")] + ".cpu").read() or 0)
        except Exception:
            ticks = 0
        found.append((report, ticks))
    return found

def median(values):
    return statistics.median(values) if values else None

table = {}
for server in servers:
    for w in range(len(names)):
        found = runs(server, w)
        clean = all(r["errors"] == 0 and r["verification_errors"] == 0 and r["hit_ratio"] == 1 for r, _ in found)
        table[server, w] = {
            "ops": median([r["ops_per_sec"] for r, _ in found]),
            "p99": median([r["latency_us"]["p99"] for r, _ in found]),
            "get_p99": median([r["get_latency_us"]["p99"] for r, _ in found if r.get("get_latency_us")]),
            "put_p99": median([r["put_latency_us"]["p99"] for r, _ in found if r.get("put_latency_us")]),
            "eff": median([r["requests"] / (t / ticks_per_second) for r, t in found if t > 0]),
            "client": median([100 * r["client_cpu_seconds"] / r["duration_seconds"] for r, _ in found
                              if r["duration_seconds"] > 0]),
            "clean": clean and bool(found),
        }

def cell(value, clean=True, digits=0):
    if value is None:
        return "–"
    text = f"{value:,.{digits}f}"
    return text if clean else text + " (!)"

others = [s for s in servers if not s.startswith("cachet")]
memcacheds = [s for s in servers if s.startswith("memcached")]
def ratio(w, key, lower_is_better=False, mine="cachet", against=None):
    against = others if against is None else against
    if mine not in servers or not against:
        return ""
    mine = table[mine, w][key]
    values = [table[s, w][key] for s in against if table[s, w][key] is not None]
    if mine is None or not values:
        return ""
    best = min(values) if lower_is_better else max(values)
    return f"{mine / best:.2f}" if best else ""

# With Cachet's memcached port measured, a second ratio: that port against the best memcached, on the same
# protocol and load generator.
port = "cachet-memcache" in servers and bool(memcacheds)
print("| workload | " + " | ".join(labels[s] for s in servers) + " | Cachet / best other |"
      + (" memcached port / best memcached |" if port else ""))
print("|---|" + "---|" * len(servers) + "---|" + ("---|" if port else ""))
def extra(w, key, lower_is_better=False):
    return f" {ratio(w, key, lower_is_better, 'cachet-memcache', memcacheds)} |" if port else ""
for w, name in enumerate(names):
    if all(table[s, w]["ops"] is None for s in servers):
        continue  # not run (ONLY=)
    print(f"| {name} — ops/s | " + " | ".join(cell(table[s, w]["ops"], table[s, w]["clean"]) for s in servers)
          + f" | {ratio(w, 'ops')} |" + extra(w, "ops"))
    print(f"| {name[:1]} — p99 µs | " + " | ".join(cell(table[s, w]["p99"]) for s in servers)
          + f" | {ratio(w, 'p99', lower_is_better=True)} |" + extra(w, "p99", True))
    print(f"| {name[:1]} — p99 µs of GETs / of PUTs | "
          + " | ".join(cell(table[s, w]["get_p99"]) + " / " + cell(table[s, w]["put_p99"]) for s in servers)
          + f" | {ratio(w, 'get_p99', lower_is_better=True)} / {ratio(w, 'put_p99', lower_is_better=True)} |"
          + (" |" if port else ""))
    print(f"| {name[:1]} — ops per server CPU-second | " + " | ".join(cell(table[s, w]["eff"]) for s in servers)
          + f" | {ratio(w, 'eff')} |" + extra(w, "eff"))
    print(f"| {name[:1]} — cachet-bench CPU, % of one core | "
          + " | ".join(cell(table[s, w]["client"]) for s in servers) + " | |" + (" |" if port else ""))

per_item, overhead, fill_ok = {}, {}, {}
for server in servers:
    try:
        before, after = map(int, open(f"{results}/{server}-memory.rss").read().split())
        report = json.load(open(f"{results}/{server}-memory.json"))
        fill_ok[server] = report["prefill"]["errors"] == 0 and report["prefill"]["requests"] == items
        per_item[server] = (after - before) * 1024 / items
        overhead[server] = per_item[server] - 114
    except Exception:
        per_item[server] = overhead[server] = None
        fill_ok[server] = False
def memory_ratio(values):
    if "cachet" not in servers or values.get("cachet") is None:
        return ""
    rest = [values[s] for s in others if values.get(s) is not None]
    return f"{values['cachet'] / min(rest):.2f}" if rest and min(rest) > 0 else ""
if any(per_item[s] is not None for s in servers):
    print(f"| memory: RSS per 100 B item after {items:,} PUTs (bytes) | "
          + " | ".join(cell(per_item[s], fill_ok[s]) for s in servers) + f" | {memory_ratio(per_item)} |"
          + (" |" if port else ""))
    print(f"| memory: overhead per item (RSS per item − 14 B key − 100 B value) | "
          + " | ".join(cell(overhead[s], fill_ok[s]) for s in servers) + f" | {memory_ratio(overhead)} |"
          + (" |" if port else ""))
print()
print("(!) marks a run with error replies, verification errors, misses, or a fill that did not store every item.")
print("p99 ratio: Cachet's p99 over the lowest p99 of the others (below 1 is better).")
PY
echo
echo "JSON per run: $RESULTS"
