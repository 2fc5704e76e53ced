#!/usr/bin/env bash
# The pipelined mix for minutes: NodePipelinedMixTests' seeded batches (PUT, GET, DEL of values on both
# sides of every size the node treats differently, each batch written in one go while its replies are
# read) against a real node process, in each of the test's node configurations (memory only at 16 MiB and
# at 1 GiB, and 16 MiB in memory with 64 MiB on disk). Fails, naming the seed and the batch, as soon as a
# batch's replies stop or a GET returns a value other than the one its connection last wrote.
#
#   Benchmarks/pipeline-mix.sh                       # 120 s per configuration, 4 connections, seed 39
#   SECONDS_PER_SETUP=600 Benchmarks/pipeline-mix.sh # longer
#   SEED=1000 CONNECTIONS=8 Benchmarks/pipeline-mix.sh
#   CACHET_BIN_DIR=/path/to/bin Benchmarks/pipeline-mix.sh   # another build's cachet-node
#
# Progress (connection 0's totals) every 10 s. Talks to 127.0.0.1 only; the node processes end with the test.
set -euo pipefail
cd "$(dirname "$0")/.."
export CACHET_MIX_SECONDS="${SECONDS_PER_SETUP:-120}"
export CACHET_MIX_SEED="${SEED:-39}"
export CACHET_MIX_CONNECTIONS="${CONNECTIONS:-4}"
echo "pipelined mix: ${CACHET_MIX_SECONDS} s per configuration, seeds ${CACHET_MIX_SEED}..$((CACHET_MIX_SEED + CACHET_MIX_CONNECTIONS - 1))" >&2
swift build --build-tests >/dev/null
exec swift test --skip-build --filter 'NodePipelinedMixTests/aSeededPipelinedMix'
