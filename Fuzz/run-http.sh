#!/usr/bin/env bash
# Builds the libFuzzer target of the HTTP port's codec (CachetHTTP: request heads, value requests, byte
# ranges, credentials) with AddressSanitizer and runs it, its corpus seeded with a few requests of every
# kind. Nothing here is part of the root package's build or tests; everything it writes goes under
# Fuzz/.build-http/ (git-ignored).
#
#   Fuzz/run-http.sh                  # 10,000,000 inputs
#   MAX_TIME=600 Fuzz/run-http.sh     # stop after 10 minutes whatever the count
#   Fuzz/run-http.sh Fuzz/.build-http/crash-…   # replay one input
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="$here/.build-http"
mkdir -p "$out/module" "$out/seeds" "$out/corpus"
RUNS="${RUNS:-10000000}"
MAX_TIME="${MAX_TIME:-0}"

# shellcheck source=Fuzz/common.sh
. "$here/common.sh"
echo "building CachetWire, CachetHTTP and the fuzz target" >&2
build_module "$out" CachetWire "$root"/Sources/CachetWire/*.swift
build_module "$out" CachetHTTP "$root"/Sources/CachetHTTP/*.swift
build_target "$out" CachetHTTPFuzz cachet-http-fuzz "$here"/CachetHTTPFuzz/*.swift "$out/CachetHTTP.o" "$out/CachetWire.o"
export SWIFT_BACKTRACE=enable=no
if [ "$#" -gt 0 ]; then exec "$out/cachet-http-fuzz" "$@"; fi

printf 'GET /values/video.webm HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1023\r\n\r\n' > "$out/seeds/range"
printf 'HEAD /values/a%%20b?access_token=u%%3As HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /metrics HTTP/1.1\n\n' > "$out/seeds/pipelined"
printf 'GET http://h:1/values/k HTTP/1.1\r\nIf-Range: "00ff"\r\nIf-None-Match: W/"1", *\r\nRange: bytes=-5\r\n\r\n' > "$out/seeds/conditional"
printf 'GET /values/k HTTP/1.1\r\nAuthorization: Basic dTpz\r\nConnection: close, x\r\n\r\n' > "$out/seeds/basic"
printf 'GET /values/k HTTP/1.1\r\nAuthorization: Bearer u:s\r\nContent-Length: 0\r\n\r\n' > "$out/seeds/bearer"
printf 'POST /values/k HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello' > "$out/seeds/body"
printf '\r\n\r\nGET / HTTP/1.1\r\nBad Field: x\r\n\r\nGET /  HTTP/1.1\r\n\r\n' > "$out/seeds/bad"
printf 'GET /health/ready HTTP/1.1\r\nRange: bytes=5-\r\n\n' > "$out/seeds/lf"

run_fuzzer "$out" cachet-http-fuzz 4500 "$RUNS" "$MAX_TIME"
