#!/usr/bin/env bash
# Heap allocations per request on the client side of CachetClient: runs `cachet-bench --driver client`
# twice against one release cachet-node, with N and 2N requests, under an LD_PRELOAD shim that counts
# malloc/calloc/realloc/posix_memalign/aligned_alloc/memalign calls (Benchmarks/malloc-count.c), and divides
# the difference by N. Everything else the process does (start-up, the prefill, the key table) is the same
# in both runs and cancels out.
#
#   Benchmarks/client-allocations.sh                 # 1 task, 200,000 and 400,000 requests, 90% GET
#   TASKS=50 Benchmarks/client-allocations.sh        # 50 tasks sharing the client
#   REQUESTS=100000 GET_RATIO=1 Benchmarks/client-allocations.sh
set -euo pipefail
cd "$(dirname "$0")/.."

TASKS=${TASKS:-1}
REQUESTS=${REQUESTS:-200000}
GET_RATIO=${GET_RATIO:-0.9}
swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)
WORK=$(mktemp -d)
trap 'kill "$NODE" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
gcc -O2 -shared -fPIC -o "$WORK/malloc-count.so" Benchmarks/malloc-count.c -ldl

"$BIN/cachet-node" --port 0 --disk-limit 0 --memory-limit 1GiB --log-level warning >"$WORK/node.out" 2>&1 &
NODE=$!
for _ in $(seq 100); do grep -q "listening on" "$WORK/node.out" && break; sleep 0.1; done
PORT=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$WORK/node.out" | head -1)

count() {
    LD_PRELOAD="$WORK/malloc-count.so" "$BIN/cachet-bench" --driver client --port "$PORT" --keys 10000 \
        --prefill --get-ratio "$GET_RATIO" --connections "$TASKS" --requests "$1" --quiet 2>&1 >/dev/null \
        | sed -n 's/^malloc-count: //p'
}
ONE=$(count "$REQUESTS")
TWO=$(count $((REQUESTS * 2)))
echo "tasks $TASKS, GET ratio $GET_RATIO: $ONE allocations with $REQUESTS requests, $TWO with $((REQUESTS * 2))"
awk -v a="$ONE" -v b="$TWO" -v n="$REQUESTS" 'BEGIN { printf "allocations per request: %.3f\n", (b - a) / n }'
