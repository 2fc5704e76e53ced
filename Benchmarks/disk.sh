#!/usr/bin/env bash
# Disk-tier measurements: GET latency served from disk (100 B and 1 MiB values), start-up time with N
# entries on disk (from the index file and by scanning after a crash), and zlib's ratio and speed per level.
#
#   Benchmarks/disk.sh                  # 100,000 entries for the start-up measurement
#   ENTRIES=1000000 Benchmarks/disk.sh  # a million (writing them takes a minute or two)
#
# Everything runs on 127.0.0.1 in a temporary directory that is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ENTRIES=${ENTRIES:-100000}
DURATION=${DURATION:-5}
WORK=$(mktemp -d /tmp/cachet-disk-bench.XXXXXX)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT INT TERM

swift build -c release --product cachet-node >/dev/null
swift build -c release --product cachet-bench >/dev/null
BIN=$(swift build -c release --show-bin-path)

# start_node DATA_DIR [flags...] -> PORT, PID; prints seconds until it listened
start_node() {
    local data=$1; shift
    local out="$WORK/node.out"
    : >"$out"
    local start; start=$(date +%s.%N)
    "$BIN/cachet-node" --port 0 --data-dir "$data" --log-level warning "$@" >"$out" 2>>"$WORK/node.log" &
    PID=$!
    pids+=("$PID")
    until grep -q listening "$out"; do sleep 0.01; done
    PORT=$(sed 's/.*://' "$out")
    STARTUP=$(python3 -c "print('%.2f' % ($(date +%s.%N) - $start))")
}

echo "== GET latency from the disk tier (memory tier 1 MiB, so reads go to disk)"
for spec in "100 20000" "1048576 50"; do
    set -- $spec
    start_node "$WORK/latency-$1" --memory-limit 1MiB --disk-limit 4GiB
    "$BIN/cachet-bench" --port "$PORT" --value-size "$1" --keys "$2" --get-ratio 1 --prefill --connections 4 \
        --duration "$DURATION" --quiet | sed -n '3,5p' | sed "s/^/  $1 B values: /"
    kill "$PID"; wait "$PID" 2>/dev/null || true
done

echo "== start-up with $ENTRIES entries of 100 B on disk"
start_node "$WORK/startup"
"$BIN/cachet-bench" --port "$PORT" --keys "$ENTRIES" --value-size 100 --prefill --requests 0 --connections 8 --pipeline 64 --quiet --json >/dev/null
# Wait until every write has left the disk queue, then stop cleanly (writes the index file).
until python3 - "$PORT" <<'PY'
import json, socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(struct.pack(">IBBHI", 8, 1, 5, 0, 1))
n = struct.unpack(">I", s.recv(4))[0]
body = b""
while len(body) < n: body += s.recv(n - len(body))
sys.exit(0 if json.loads(body[8:])["disk_queue_depth"] == 0 else 1)
PY
do sleep 0.5; done
kill -TERM "$PID"; wait "$PID" 2>/dev/null || true
start_node "$WORK/startup"
echo "  from the index file (clean shutdown): $STARTUP s"
kill -9 "$PID"; wait "$PID" 2>/dev/null || true
rm -f "$WORK/startup/index"
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
start_node "$WORK/startup"
echo "  by scanning the files (after a crash): $STARTUP s"
kill "$PID"; wait "$PID" 2>/dev/null || true

echo "== zlib per level on 1 MiB of JSON-like records and of random bytes (the library the disk tier links)"
python3 - <<'PY'
import json, os, time, zlib
text = ",".join(json.dumps({"id": i, "name": "user-%d" % i, "email": "user%d@example.com" % i, "active": i % 3 == 0,
                            "tags": ["alpha", "beta", "gamma"][: i % 3 + 1], "score": i * 7 % 1000}) for i in range(20000)).encode()[: 1 << 20]
noise = os.urandom(1 << 20)
print("  level  JSON ratio  JSON MB/s  inflate MB/s  random MB/s")
for level in range(10):
    t = time.perf_counter(); packed = zlib.compress(text, level); c = time.perf_counter() - t
    t = time.perf_counter(); zlib.decompress(packed); d = time.perf_counter() - t
    t = time.perf_counter(); zlib.compress(noise, level); r = time.perf_counter() - t
    print("  %5d  %10.2f  %9.0f  %12.0f  %11.0f" % (level, len(text) / len(packed), len(text) / c / 1e6, len(text) / d / 1e6, len(noise) / r / 1e6))
PY
