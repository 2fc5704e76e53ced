#!/usr/bin/env bash
# Builds the node's connection fuzz target (Fuzz/CachetConnectionFuzz, its own package, with libFuzzer and
# AddressSanitizer) and runs it: one node in the process, every input a program of pipelined requests
# written in arbitrary pieces on a fresh connection, every reply checked. Nothing here is part of the root
# package's build or tests.
#
#   Fuzz/run-connection.sh                       # 100,000 inputs
#   RUNS=1000000 Fuzz/run-connection.sh          # more inputs
#   MAX_TIME=600 Fuzz/run-connection.sh          # stop after 10 minutes whatever the count
#   BUILD_ONLY=1 Fuzz/run-connection.sh          # build, write the seeds, run them once and stop
#   Fuzz/run-connection.sh Fuzz/.build-connection/crash-…   # replay one input (RUNS=N: N times)
#   CACHET_SOURCE=/tmp/old Fuzz/run-connection.sh             # fuzz another checkout of the project
#
# CACHET_SOURCE names another checkout (a `git worktree` at an older commit, say) whose node the same
# target is built against, in Fuzz/.build-connection-NAME/ (NAME: the checkout's folder name). Everything
# it writes goes under Fuzz/.build-connection*/ (git-ignored): the build, the seeds, the growing corpus and
# any crash-* input, whose program the failure message prints.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
out="$here/.build-connection"
if [ -n "${CACHET_SOURCE:-}" ]; then
    CACHET_SOURCE="$(cd "$CACHET_SOURCE" && pwd)"
    export CACHET_SOURCE
    out="$here/.build-connection-$(basename "$CACHET_SOURCE")"
fi
mkdir -p "$out/seeds" "$out/corpus"

# A replay runs its input RUNS times, once by default; a fuzzing run stops after RUNS inputs.
REPLAY_RUNS="${RUNS:-1}"
RUNS="${RUNS:-100000}"
MAX_TIME="${MAX_TIME:-0}"

echo "building the connection fuzz target in $out (against ${CACHET_SOURCE:-this checkout})" >&2
nice -n 10 swift build -c release --package-path "$here/CachetConnectionFuzz" --scratch-path "$out" \
    -Xswiftc -sanitize=fuzzer,address 2>&1 | { grep -v "Cannot export local symbol" >&2 || true; }
binary="$out/release/CachetConnectionFuzz"

# A failed check is a fatalError: let libFuzzer and ASan report it, not Swift's backtracer. The node's
# threads live across inputs, so libFuzzer's per-input leak check would only see their buffers in flight.
export SWIFT_BACKTRACE=enable=no
common=(-detect_leaks=0 -print_final_stats=1 -artifact_prefix="$out/")

if [ "$#" -gt 0 ]; then
    # The node runs on its own threads: a stall may need a few runs of its input to show again.
    exec "$binary" "${common[@]}" -runs="$REPLAY_RUNS" "$@"
fi

# Hand-made seeds, in ConnectionProgram's encoding (see its description): byte 0 is the operation count
# minus one; a PUT is 0x00 | key then a value size index, GET 0x40 | key, DEL 0x80 | key, PING 0xa0,
# WAIT 0xc0; the bytes after the operations are pieces (low 4 bits: size index, high 4 bits: pause).
# Keys: a=0 b=1 c=2 d=3 w=4 x=5 y=6 z=7. Sizes: 3 = 480 B, 13 = 4800 B, 23 = 64 KiB, 30 = 1 MiB.
seed() { printf "$2" >"$out/seeds/$1"; }
# The shortest known recipe for the stall fixed by commit a54a845: four 1 MiB values stored, then in one
# write PUT z (480 B), GET a, GET b, GET c, GET d, PUT x (4.8 KB), GET y.
seed stall-recipe '\x0b\x00\x1e\x01\x1e\x02\x1e\x03\x1e\xc0\x07\x03\x40\x41\x42\x43\x05\x0d\x46'
# PUT a (24 B), GET a, DEL a, GET a, PING, one byte at a time, then 12 and 13 bytes with a pause.
seed small-one-byte-pieces '\x04\x00\x02\x40\x80\x40\xa0\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\xa4'
# In-place PUTs of 64 KiB, 140,000 B and 256 KiB, read back, in pieces of 13, 4095, 65535 (1 ms pause), rest.
seed in-place-puts '\x05\x01\x17\x02\x19\x41\x42\x01\x1b\x41\x04\x07\xca\x0f'
# One value on each side of 1 KiB, 4 KiB, 8 KiB, 32 KiB and 64 KiB under the eight keys, then every GET.
seed thresholds '\x0f\x00\x05\x01\x07\x02\x0a\x03\x0c\x04\x0f\x05\x11\x06\x13\x07\x16\x40\x41\x42\x43\x44\x45\x46\x47\x09\x0a\x0b'
echo "$(ls "$out/seeds" | wc -l) seeds" >&2

cd "$out"
if [ -n "${BUILD_ONLY:-}" ]; then
    "$binary" "${common[@]}" -runs=0 corpus seeds
    exit 0
fi
if [ "$MAX_TIME" != 0 ]; then common+=(-max_total_time="$MAX_TIME"); fi
start=$(date +%s)
nice -n 10 "$binary" "${common[@]}" -runs="$RUNS" corpus seeds
echo "done in $(( $(date +%s) - start )) s; corpus: $(ls corpus | wc -l) inputs; findings: $(ls "$out" | grep -cE '^(crash|timeout|oom|leak)-' || true)" >&2
