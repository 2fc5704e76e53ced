#!/usr/bin/env bash
# Builds the wire codec's libFuzzer target with AddressSanitizer and runs it, its corpus seeded from
# Protocol/vectors. Nothing here is part of the root package's build or tests.
#
#   Fuzz/run.sh                      # 10,000,000 inputs on one process
#   RUNS=1000000 Fuzz/run.sh         # fewer inputs
#   JOBS=2 Fuzz/run.sh               # RUNS inputs on each of 2 processes (logs in Fuzz/.build/fuzz-N.log)
#   MAX_TIME=600 Fuzz/run.sh         # stop after 10 minutes whatever the count
#   BUILD_ONLY=1 Fuzz/run.sh         # build, seed the corpus, run the seeds once and stop
#   Fuzz/run.sh Fuzz/.build/crash-…  # replay one input (a crash found earlier)
#
# Everything it writes goes under Fuzz/.build/ (git-ignored): the binary, the seeds, the growing corpus
# and any crash-*/timeout-* input.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="$here/.build"
mkdir -p "$out/module" "$out/seeds" "$out/corpus"

RUNS="${RUNS:-10000000}"
JOBS="${JOBS:-1}"
MAX_TIME="${MAX_TIME:-0}"
MAX_LEN="${MAX_LEN:-4500}"

# shellcheck source=Fuzz/common.sh
. "$here/common.sh"
echo "building CachetWire and the fuzz target (swiftc ${flags[*]})" >&2
build_module "$out" CachetWire "$root"/Sources/CachetWire/*.swift
build_target "$out" CachetWireFuzz cachet-wire-fuzz "$here"/CachetWireFuzz/*.swift "$out/CachetWire.o"

if [ "$#" -gt 0 ]; then
    SWIFT_BACKTRACE=enable=no exec "$out/cachet-wire-fuzz" "$@"
fi

# One seed per vector: the bytes the client sends (requests), and the replies it expects.
python3 - "$root/Protocol/vectors" "$out/seeds" <<'PY'
import pathlib, sys
source, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for path in sorted(source.glob("*.vector")):
    sent, replies = bytearray(), bytearray()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(">"):
            sent += bytes.fromhex(line[1:].replace(" ", ""))
        elif line.startswith("<") and not line.startswith("<~"):
            replies += bytes.fromhex(line[1:].replace(" ", ""))
    if sent:
        (target / f"{path.stem}.requests").write_bytes(sent)
    if replies:
        (target / f"{path.stem}.replies").write_bytes(replies)
PY
echo "$(ls "$out/seeds" | wc -l) seeds from Protocol/vectors" >&2

cd "$out"
# A failed check is a fatalError: let libFuzzer and ASan report it, not Swift's backtracer.
export SWIFT_BACKTRACE=enable=no
common=(-max_len="$MAX_LEN" -print_final_stats=1 -artifact_prefix="$out/")
if [ -n "${BUILD_ONLY:-}" ]; then
    ./cachet-wire-fuzz "${common[@]}" -runs=0 corpus seeds
    exit 0
fi
if [ "$MAX_TIME" != 0 ]; then common+=(-max_total_time="$MAX_TIME"); fi
start=$(date +%s)
if [ "$JOBS" -gt 1 ]; then
    # Each job runs RUNS inputs; they share the corpus directory.
    nice -n 10 ./cachet-wire-fuzz "${common[@]}" -runs="$RUNS" -jobs="$JOBS" -workers="$JOBS" corpus seeds
else
    nice -n 10 ./cachet-wire-fuzz "${common[@]}" -runs="$RUNS" corpus seeds
fi
echo "done in $(( $(date +%s) - start )) s; corpus: $(ls corpus | wc -l) inputs; findings: $(ls "$out" | grep -cE '^(crash|timeout|oom|leak)-' || true)" >&2
