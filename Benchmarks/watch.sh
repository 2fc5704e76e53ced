#!/usr/bin/env bash
# What WATCH costs and what it delivers, same run, release builds:
# 1. Writers with 100 watchers whose prefixes match nothing (100 different prefixes, three lengths), against
#    the same node with none, alternated round by round: PUT-only and 90% GET workloads, 100 B values,
#    50 connections, pipeline 16. The ratio is what matching each write against the prefixes costs.
# 2. One writer (one connection, pipeline 16, PUT only) and 100 watchers of the prefix every key has:
#    events delivered per second, over every watcher.
#
#   Benchmarks/watch.sh                     # 4 rounds of 5 s per workload
#   ROUNDS=6 DURATION=3 Benchmarks/watch.sh
#   WATCH_PREFIX="key:x{n}:" Benchmarks/watch.sh   # prefixes that share the keys' first bytes (hashed, never matching)
#
# Results go to Benchmarks/results/, which git ignores. The node started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/servers.sh

ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-5}
RESULTS=Benchmarks/results/watch-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"
echo "building cachet-node and cachet-bench (release)..." >&2
swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
NODE=.build/release/cachet-node
BENCH=.build/release/cachet-bench
cleanup() { for pid in "${pids[@]}"; do stop_pid "$pid"; done; }
trap cleanup EXIT INT TERM

start_node() {
    PORT=$(free_port)
    "${SERVER_CPU[@]}" "$NODE" --host 127.0.0.1 --port "$PORT" --memory-limit 2GiB --disk-limit 0 \
        --log-level warning >/dev/null 2>&1 &
    NODE_PID=$!
    pids+=("$NODE_PID")
    wait_port "$PORT"
}

for round in $(seq "$ROUNDS"); do
    order=(none watched)
    (( round % 2 )) || order=(watched none)
    for setup in "${order[@]}"; do
        start_node
        common=(--port "$PORT" --value-size 100 --keys 100000 --connections 50 --pipeline 16 --quiet --json)
        "${BENCH_CPU[@]}" "$BENCH" "${common[@]}" --fill 100000 >/dev/null
        watchers=()
        [ "$setup" = watched ] && watchers=(--watchers 100 --watchers-prefix "${WATCH_PREFIX:-nothing-{n}:}")
        for workload in put:0 mixed:0.9; do
            "${BENCH_CPU[@]}" "$BENCH" "${common[@]}" "${watchers[@]}" --duration "$DURATION" \
                --get-ratio "${workload#*:}" >>"$RESULTS/${workload%%:*}-$setup.jsonl" 2>/dev/null
        done
        stop_pid "$NODE_PID"
    done
    echo "round $round of $ROUNDS done (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
done

start_node
"${BENCH_CPU[@]}" "$BENCH" --port "$PORT" --value-size 100 --keys 1000 --connections 1 --pipeline 16 --quiet \
    --get-ratio 0 --duration "$DURATION" --watchers 100 --watchers-prefix "key:" 2>"$RESULTS/fanout.txt" \
    >"$RESULTS/fanout-writer.txt"
stop_pid "$NODE_PID"

python3 - "$RESULTS" <<'PY'
import json, os, statistics, sys
results = sys.argv[1]
def runs(name):
    path = f"{results}/{name}.jsonl"
    return [json.loads(line)["ops_per_sec"] for line in open(path)] if os.path.exists(path) else []
print("| workload | no watchers, ops/s per round | 100 watchers matching nothing | median ratio |")
print("|---|---|---|---|")
for workload in ["put", "mixed"]:
    none, watched = runs(f"{workload}-none"), runs(f"{workload}-watched")
    ratios = [w / n for n, w in zip(none, watched)]
    fmt = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)
    print(f"| {workload} | {fmt(none)} | {fmt(watched)} | {statistics.median(ratios):.3f} |")
PY
echo "one writer, 100 watchers of its keys' prefix:"
grep -h "writer\|ops/s\|watchers:" "$RESULTS/fanout-writer.txt" "$RESULTS/fanout.txt" | head -3
echo "results: $RESULTS"
