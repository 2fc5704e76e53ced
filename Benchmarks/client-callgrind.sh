#!/usr/bin/env bash
# User-space instructions per request on the client side of CachetClient: runs `cachet-bench --driver
# client` under callgrind twice against one release cachet-node, with N and 2N requests, and divides the
# difference by N (start-up, the prefill and the key table cancel out). Repeatable whatever the machine's
# load; a second build can be measured in the same run against the same node.
#
#   Benchmarks/client-callgrind.sh                      # this checkout's release build
#   OTHER=/path/to/other/checkout Benchmarks/client-callgrind.sh   # and another checkout's, same node
#   REQUESTS=20000 TASKS=8 GET_RATIO=1 Benchmarks/client-callgrind.sh
set -euo pipefail
cd "$(dirname "$0")/.."

TASKS=${TASKS:-1}
REQUESTS=${REQUESTS:-20000}
GET_RATIO=${GET_RATIO:-0.9}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)
CHECKOUTS=("$PWD")
if [ -n "${OTHER:-}" ]; then
    (cd "$OTHER" && swift build -c release --product cachet-bench >/dev/null)
    CHECKOUTS+=("$OTHER")
fi
WORK=$(mktemp -d)
trap 'kill "$NODE" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT

"$BIN/cachet-node" --port 0 --disk-limit 0 --memory-limit 1GiB --log-level warning >"$WORK/node.out" 2>&1 &
NODE=$!
for _ in $(seq 100); do grep -q "listening on" "$WORK/node.out" && break; sleep 0.1; done
PORT=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$WORK/node.out" | head -1)

instructions() {  # BENCH REQUESTS
    # Valgrind 3.19 cannot read the DWARF 5 the Swift compiler writes: a copy without debug info.
    objcopy --strip-debug "$1" "$WORK/cachet-bench"
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" "$WORK/cachet-bench" --driver client --port "$PORT" \
        --keys 10000 --prefill --get-ratio "$GET_RATIO" --connections "$TASKS" --requests "$2" --quiet \
        >/dev/null 2>&1
    sed -n 's/^summary: *//p;s/^totals: *//p' "$WORK/cg.out" | head -1
}
for checkout in "${CHECKOUTS[@]}"; do
    bench="$(cd "$checkout" && swift build -c release --show-bin-path)/cachet-bench"
    one=$(instructions "$bench" "$REQUESTS")
    two=$(instructions "$bench" $((REQUESTS * 2)))
    awk -v a="$one" -v b="$two" -v n="$REQUESTS" -v c="$checkout" -v t="$TASKS" -v g="$GET_RATIO" \
        'BEGIN { printf "%s: tasks %s, GET ratio %s: %.0f instructions per request\n", c, t, g, (b - a) / n }'
done
