#!/usr/bin/env bash
# Two builds of cachet-node, alternated: did a change make the node slower? Each round starts the "before"
# node, the "after" node and memcached -t 1 (a yardstick for how much the machine itself moved) in turn,
# fills 100,000 keys and runs workloads a and b of compare.sh (100 B values, 90% GET, 50 connections,
# pipeline 1 and 16) for DURATION seconds each, with the same cachet-bench. The order of the two builds
# alternates every round (before-after, after-before, ...), so a drift of the machine cancels out. Prints
# each round's ops/s, the after/before ratio per round and the medians.
#
#   Benchmarks/compare-builds.sh OLD_NODE NEW_NODE          # 8 rounds of 5 s per workload
#   ROUNDS=12 DURATION=3 Benchmarks/compare-builds.sh OLD_NODE NEW_NODE
#
# OLD_NODE and NEW_NODE are cachet-node executables (for example a release build in a second checkout:
# `git worktree add ../before REV && (cd ../before && swift build -c release --product cachet-node)`).
# Results go to Benchmarks/results/, which git ignores. Every server started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
    echo "usage: $0 OLD_NODE NEW_NODE   (two cachet-node executables)" >&2
    exit 2
fi
declare -A NODE=([before]=$1 [after]=$2)
ROUNDS=${ROUNDS:-8}
DURATION=${DURATION:-5}
RESULTS=Benchmarks/results/builds-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"

echo "building cachet-bench (release)..." >&2
swift build -c release --product cachet-bench >/dev/null
BENCH=.build/release/cachet-bench
SERVERS=(before after)
command -v memcached >/dev/null && SERVERS+=(memcached) || echo "memcached missing: no yardstick" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; true; }
trap cleanup EXIT INT TERM

start() {
    PORT=$(free_port)
    case "$1" in
        memcached) memcached -u "$(id -un)" -t 1 -m 2048 -U 0 -l 127.0.0.1 -p "$PORT" -c 4096 >/dev/null 2>&1 & ;;
        *) "${NODE[$1]}" --host 127.0.0.1 --port "$PORT" --memory-limit 2GiB --disk-limit 0 --log-level warning \
            >/dev/null 2>&1 & ;;
    esac
    PID=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return; sleep 0.05; done
    echo "$1 did not start listening on $PORT" >&2
    exit 1
}

for round in $(seq "$ROUNDS"); do
    order=(before after)
    (( round % 2 )) || order=(after before)
    for server in "${order[@]}" "${SERVERS[@]:2}"; do
        start "$server"
        protocol=cachet
        [ "$server" = memcached ] && protocol=memcache
        common=(--port "$PORT" --protocol "$protocol" --value-size 100 --keys 100000 --connections 50 --quiet --json)
        "$BENCH" "${common[@]}" --fill 100000 >/dev/null
        for workload in a:1 b:16; do
            "$BENCH" "${common[@]}" --pipeline "${workload#*:}" --duration "$DURATION" --get-ratio 0.9 \
                >>"$RESULTS/${workload%%:*}-$server.jsonl"
        done
        kill "$PID"
        wait "$PID" 2>/dev/null || true
        PID=""
    done
    echo "round $round of $ROUNDS done (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
done

python3 - "$RESULTS" <<'PY'
import json, os, statistics, sys
results = sys.argv[1]
def runs(name):
    path = f"{results}/{name}.jsonl"
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []
print("| workload | before, ops/s per round | after | after / before per round | median after / before |")
print("|---|---|---|---|---|")
for workload in "ab":
    before = [r["ops_per_sec"] for r in runs(f"{workload}-before")]
    after = [r["ops_per_sec"] for r in runs(f"{workload}-after")]
    ratios = [a / b for a, b in zip(after, before)]
    higher = sum(r > 1 for r in ratios)
    print(f"| {workload} | {', '.join(f'{x:,.0f}' for x in before)} | {', '.join(f'{x:,.0f}' for x in after)} "
          f"| higher in {higher} of {len(ratios)} | {statistics.median(ratios):.2f} |")
for workload in "ab":
    yardstick = [r["ops_per_sec"] for r in runs(f"{workload}-memcached")]
    if yardstick:
        print(f"{workload}: memcached -t 1 median {statistics.median(yardstick):,.0f} ops/s "
              f"(spread {min(yardstick):,.0f}-{max(yardstick):,.0f})")
print(f"results: {results}")
PY
