#!/usr/bin/env bash
# Forwarding throughput: three release nodes of one cluster on 127.0.0.1, all on CPU 0 (so the comparison is
# of CPU per request), cachet-bench on CPU 1. Each round runs the same load twice, alternating: every key
# sent to its owner (`cachet-bench --cluster`, a client that knows the ring) and every request sent to n1
# (a client that does not: n1 forwards the two thirds of the keys it does not own). Prints one Markdown row
# per round with the ratio of the two; results go to Benchmarks/results/, which git ignores.
#
#   Benchmarks/forwarding.sh                      # 2 rounds of 5 s each
#   ROUNDS=3 DURATION=10 Benchmarks/forwarding.sh
#   PIPELINE=16 Benchmarks/forwarding.sh          # pipelined clients
#   NODE_BIN=/tmp/old/cachet-node Benchmarks/forwarding.sh   # another build of the node
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-5}
PIPELINE=${PIPELINE:-1}
BASE_PORT=${BASE_PORT:-7460}
RESULTS=Benchmarks/results/forwarding-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"

echo "building release binaries..." >&2
swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)
# NODE_BIN=path/to/cachet-node measures another build of the node (the same cachet-bench drives it).
NODE=${NODE_BIN:-$BIN/cachet-node}
CPUS=$(nproc)
pin_nodes=() pin_bench=()
if [ "$CPUS" -ge 2 ]; then pin_nodes=(taskset -c 0) pin_bench=(taskset -c 1); fi

cat >"$RESULTS/cluster.json" <<JSON
{"members": [
  {"id": "n1", "host": "127.0.0.1", "port": $BASE_PORT},
  {"id": "n2", "host": "127.0.0.1", "port": $((BASE_PORT + 1))},
  {"id": "n3", "host": "127.0.0.1", "port": $((BASE_PORT + 2))}
]}
JSON

pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM
for n in 1 2 3; do
    "${pin_nodes[@]}" "$NODE" --cluster "$RESULTS/cluster.json" --node-id "n$n" --disk-limit 0 \
        --memory-limit 1GiB --log-level warning >"$RESULTS/n$n.log" 2>&1 &
    pids+=($!)
done
for n in 1 2 3; do
    for _ in $(seq 1 100); do
        grep -q "listening" "$RESULTS/n$n.log" && break
        sleep 0.1
    done
done
load=(--value-size 100 --keys 100000 --connections 48 --pipeline "$PIPELINE" --get-ratio 0.9)
"$BIN/cachet-bench" --cluster "$RESULTS/cluster.json" "${load[@]}" --prefill --requests 1 --quiet >/dev/null

ops() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(int(d["ops_per_sec"]))' "$1"; }
echo "| round | knows the ring: ops/s | through n1: ops/s | through / knows |"
echo "|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
    "${pin_bench[@]}" "$BIN/cachet-bench" --cluster "$RESULTS/cluster.json" "${load[@]}" --duration "$DURATION" \
        --json >"$RESULTS/direct-$round.json"
    "${pin_bench[@]}" "$BIN/cachet-bench" --port "$BASE_PORT" "${load[@]}" --duration "$DURATION" \
        --json >"$RESULTS/through-$round.json"
    direct=$(ops "$RESULTS/direct-$round.json")
    through=$(ops "$RESULTS/through-$round.json")
    printf '| %s | %s | %s | %s |\n' "$round" "$direct" "$through" \
        "$(python3 -c "print(f'{$through / $direct:.2f}')")"
done
echo "results: $RESULTS" >&2
