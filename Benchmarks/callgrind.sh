#!/usr/bin/env bash
# Instructions per request on the node's hot path, counted by valgrind's callgrind: repeatable for the same
# binary and inputs whatever else the machine is doing, so it shows small before/after differences that
# wall-clock runs on a shared machine cannot. Counts user-space instructions only (the kernel's share of
# each request, its copies and wake-ups, is what `perf` and `strace -c` show).
#
#   Benchmarks/callgrind.sh                 # every workload, 20,000 measured requests each
#   REQUESTS=5000 Benchmarks/callgrind.sh   # shorter
#   TOP=15 Benchmarks/callgrind.sh          # and the 15 costliest functions per workload
#   NODE_BIN=/tmp/old/cachet-node Benchmarks/callgrind.sh   # another build of the node
#   MEMCACHE=1 Benchmarks/callgrind.sh      # the same requests on the node's memcached port, in memcached's
#                                           # text protocol (the native port idles), and a get of 10 keys
#   FORWARD=1 Benchmarks/callgrind.sh       # and GETs sent to a member of a cluster of two that forwards
#                                           # the other's keys: instructions per request there, and per
#                                           # forwarded request (its STATS `forwards` count; the local
#                                           # requests among them at the single node's cost)
#
# Each workload starts a fresh cachet-node under callgrind with instrumentation off, prefills its keys,
# switches instrumentation on (callgrind_control -i on), runs a fixed number of requests with cachet-bench,
# dumps, and divides the instructions by the requests. Profiles go to Benchmarks/results/, which git ignores.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=${REQUESTS:-20000}
TOP=${TOP:-0}
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 2; }
RESULTS=Benchmarks/results/callgrind-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"

echo "building release binaries..." >&2
swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)
# Valgrind 3.19 cannot read the DWARF 5 the Swift compiler writes: profile a copy without debug info (the
# symbol table stays, so functions keep their names).
NODE="$RESULTS/cachet-node"
# NODE_BIN=path/to/cachet-node measures another build of the node (the same cachet-bench drives it).
objcopy --strip-debug "${NODE_BIN:-$BIN/cachet-node}" "$NODE"

PORT=${PORT:-7499}
node_pid=""
cleanup() {
    [ -n "$node_pid" ] && kill -TERM "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
    return 0
}
trap cleanup EXIT INT TERM

WORKLOADS=(
    "GET 100 B, pipeline 1|--value-size 100 --keys 10000 --connections 8 --pipeline 1 --get-ratio 1"
    "GET 100 B, pipeline 16|--value-size 100 --keys 10000 --connections 8 --pipeline 16 --get-ratio 1"
    "PUT 100 B, pipeline 16|--value-size 100 --keys 10000 --connections 8 --pipeline 16 --get-ratio 0"
    "GET 16 KiB, pipeline 1|--value-size 16384 --keys 1000 --connections 8 --pipeline 1 --get-ratio 1"
)
# memcached's protocol has gets of several keys: one of ten keys, counted as one request.
if [ -n "${MEMCACHE:-}" ]; then
    WORKLOADS+=("GET of 10 keys 100 B, pipeline 1|--value-size 100 --keys 10000 --connections 8 --pipeline 1 --get-ratio 1 --keys-per-get 10")
fi

declare -A local_cost=()
printf '| workload | instructions per request |\n|---|---|\n'
for workload in "${WORKLOADS[@]}"; do
    name=${workload%%|*}
    read -r -a flags <<<"${workload#*|}"
    slug=$(echo "$name" | tr -c 'A-Za-z0-9\n' '-')
    out="$RESULTS/$slug.out"
    ports=(--port "$PORT")
    protocol=(--protocol cachet)
    if [ -n "${MEMCACHE:-}" ]; then
        ports=(--port "$((PORT + 1))" --memcached-port "$PORT")
        protocol=(--protocol memcache)
    fi
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
        "$NODE" "${ports[@]}" --disk-limit 0 --memory-limit 1GiB --log-level warning \
        >"$RESULTS/$slug.log" 2>&1 &
    node_pid=$!
    for _ in $(seq 1 300); do
        grep -q "listening" "$RESULTS/$slug.log" && break
        sleep 0.1
    done
    "$BIN/cachet-bench" "${protocol[@]}" --port "$PORT" "${flags[@]}" --prefill --requests 1 --quiet >/dev/null
    callgrind_control -i on "$node_pid" >/dev/null 2>&1
    "$BIN/cachet-bench" "${protocol[@]}" --port "$PORT" "${flags[@]}" --requests "$REQUESTS" --quiet --json \
        >"$RESULTS/$slug.json"
    callgrind_control -i off "$node_pid" >/dev/null 2>&1
    kill -TERM "$node_pid"
    wait "$node_pid" || true
    node_pid=""
    requests=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['requests'])" "$RESULTS/$slug.json")
    total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
    [ -n "$total" ] || { echo "no profile for $name: see $RESULTS/$slug.log" >&2; exit 1; }
    local_cost[$name]=$(python3 -c "print($total / $requests)")
    printf '| %s | %s |\n' "$name" "$(python3 -c "print(f'{$total / $requests:,.0f}')")"
    if [ "$TOP" -gt 0 ]; then
        callgrind_annotate --inclusive=no "$out" 2>/dev/null | grep -E '^ *[0-9,]+ ' | sed 's/^/    /' \
            | awk -v top="$TOP" 'NR <= top' >&2
    fi
done
# A member of a cluster of two, under callgrind, sent GETs of keys both members own: it forwards the other's.
if [ -n "${FORWARD:-}" ] && [ -z "${MEMCACHE:-}" ]; then
    other_pid=""
    stop_cluster() {
        for pid in $node_pid $other_pid; do kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
        node_pid=""
        other_pid=""
    }
    trap 'stop_cluster' EXIT INT TERM
    cluster="$RESULTS/cluster.json"
    printf '{"members": [{"id": "a", "host": "127.0.0.1", "port": %d}, {"id": "b", "host": "127.0.0.1", "port": %d}]}\n' \
        "$PORT" "$((PORT + 2))" >"$cluster"
    # One member's STATS field (the native protocol's STATS frame, read with python).
    stat() {
        python3 - "$1" "$2" <<'PY'
import json, socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(struct.pack(">I", 8) + bytes([1, 5, 0, 0]) + struct.pack(">I", 1))
def take(n):
    data = b""
    while len(data) < n:
        data += s.recv(n - len(data))
    return data
length = struct.unpack(">I", take(4))[0]
body = take(length)[8:]
print(json.loads(body).get(sys.argv[2], 0))
PY
    }
    for workload in "GET 100 B, pipeline 1|--value-size 100 --keys 10000 --connections 8 --pipeline 1 --get-ratio 1" \
        "GET 100 B, pipeline 16|--value-size 100 --keys 10000 --connections 8 --pipeline 16 --get-ratio 1"; do
        name=${workload%%|*}
        read -r -a flags <<<"${workload#*|}"
        slug="forwarded-$(echo "$name" | tr -c 'A-Za-z0-9\n' '-')"
        out="$RESULTS/$slug.out"
        "$BIN/cachet-node" --port "$((PORT + 2))" --cluster "$cluster" --node-id b --disk-limit 0 \
            --memory-limit 1GiB --log-level warning >"$RESULTS/$slug.other.log" 2>&1 &
        other_pid=$!
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
            "$NODE" --port "$PORT" --cluster "$cluster" --node-id a --disk-limit 0 --memory-limit 1GiB \
            --log-level warning >"$RESULTS/$slug.log" 2>&1 &
        node_pid=$!
        for _ in $(seq 1 300); do
            grep -q "listening" "$RESULTS/$slug.log" && grep -q "listening" "$RESULTS/$slug.other.log" && break
            sleep 0.1
        done
        # Both serve once neither holds its keys (a start holds them until the peer clears it).
        for _ in $(seq 1 300); do
            [ "$(stat "$PORT" holding)" = "False" ] && [ "$(stat "$((PORT + 2))" holding)" = "False" ] && break
            sleep 0.1
        done
        "$BIN/cachet-bench" --protocol cachet --port "$PORT" "${flags[@]}" --prefill --requests 1 --quiet >/dev/null
        before=$(stat "$PORT" forwards)
        callgrind_control -i on "$node_pid" >/dev/null 2>&1
        "$BIN/cachet-bench" --protocol cachet --port "$PORT" "${flags[@]}" --requests "$REQUESTS" --quiet --json \
            >"$RESULTS/$slug.json"
        callgrind_control -i off "$node_pid" >/dev/null 2>&1
        forwarded=$(($(stat "$PORT" forwards) - before))
        stop_cluster
        requests=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['requests'])" "$RESULTS/$slug.json")
        total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
        [ -n "$total" ] || { echo "no profile for $name forwarded: see $RESULTS/$slug.log" >&2; exit 1; }
        local=${local_cost[$name]:-0}
        printf '| %s, through a member (%s of %s forwarded) | %s; per forwarded request %s |\n' "$name" \
            "$forwarded" "$requests" "$(python3 -c "print(f'{$total / $requests:,.0f}')")" \
            "$(python3 -c "f = $forwarded; print(f'{($total - ($requests - f) * $local) / f:,.0f}' if f else '-')")"
    done
fi
rm -f "$NODE"
echo "profiles: $RESULTS (open with callgrind_annotate or kcachegrind)" >&2
