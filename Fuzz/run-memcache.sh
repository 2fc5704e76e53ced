#!/usr/bin/env bash
# Builds the libFuzzer target of memcached's text protocol decoder (CachetMemcache) with AddressSanitizer and
# runs it, its corpus seeded with a few commands of every kind. Nothing here is part of the root package's
# build or tests; everything it writes goes under Fuzz/.build-memcache/ (git-ignored).
#
#   Fuzz/run-memcache.sh                  # 10,000,000 inputs
#   MAX_TIME=600 Fuzz/run-memcache.sh     # stop after 10 minutes whatever the count
#   Fuzz/run-memcache.sh Fuzz/.build-memcache/crash-…   # replay one input
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="$here/.build-memcache"
mkdir -p "$out/module" "$out/seeds" "$out/corpus"
RUNS="${RUNS:-10000000}"
MAX_TIME="${MAX_TIME:-0}"

# shellcheck source=Fuzz/common.sh
. "$here/common.sh"
echo "building CachetMemcache and the fuzz target" >&2
build_module "$out" CachetMemcache "$root"/Sources/CachetMemcache/*.swift
build_target "$out" CachetMemcacheFuzz cachet-memcache-fuzz "$here"/CachetMemcacheFuzz/*.swift "$out/CachetMemcache.o"
export SWIFT_BACKTRACE=enable=no
if [ "$#" -gt 0 ]; then exec "$out/cachet-memcache-fuzz" "$@"; fi

printf 'set k 0 0 5\r\nhello\r\nget k\r\n' > "$out/seeds/set-get"
printf 'gets a b c\r\ngat 10 a\r\ngats -1 b\r\n' > "$out/seeds/retrieve"
printf 'cas k 1 0 2 99 noreply\r\nab\r\nappend k 0 0 1\r\nx\r\nprepend k 0 0 1\r\ny\r\n' > "$out/seeds/cas"
printf 'incr k 1\r\ndecr k 18446744073709551615 noreply\r\ntouch k 10\r\ndelete k 0\r\n' > "$out/seeds/others"
printf 'flush_all 10 noreply\r\nversion\r\nverbosity 1\r\nstats items\r\nquit\r\nbogus\r\n' > "$out/seeds/admin"
printf 'cache_memlimit 64 noreply\r\nverbosity noreply\r\nstats cachedump 1 1\r\nversion x\r\n' > "$out/seeds/more"
printf 'mg k v f c t s k Oabc q\r\nms k 2 T10 F5 MA c\r\nab\r\nmd k C123 q\r\nmn\r\n' > "$out/seeds/meta"
printf 'ma k N0 J13 D2 MD v t\r\nme k\r\nmg Zm9v b k\r\nms Zm9v 1 b I\r\nx\r\nmg k v v\r\n' > "$out/seeds/meta-more"
printf 'set k x 0 3\r\nabc\r\nGET / HTTP/1.1\r\n \r\n' > "$out/seeds/swallow"

run_fuzzer "$out" cachet-memcache-fuzz 4500 "$RUNS" "$MAX_TIME"
