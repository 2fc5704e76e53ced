#!/usr/bin/env bash
# memcached's own protocol tests (its t/ suite, the files listed in README.md, kept here as memcached
# ships them but for the adaptations README.md lists), run against a Cachet node's memcached port: each
# file gets a fresh node (so that its counters and contents start empty, as with a fresh memcached),
# reached through the suite's own T_MEMD_USE_DAEMON hook.
#
# Usage: Tests/PeerSuites/memcached/run.sh [CACHET_NODE] [FILE...]
# Needs perl's prove (Debian: perl) and a memcached binary for the suite's capability probes (memcached -h;
# Debian: memcached); prints one line per file and exits 1 if any failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node_bin=${1:-$here/../../../.build/debug/cachet-node}
shift || true
files=("$@")
if ((${#files[@]} == 0)); then
    mapfile -t files < <(sed -n 's/^| `t\/\([^`]*\)` | yes |.*/\1/p' "$here/README.md")
fi
[[ -x "$node_bin" ]] || { echo "no cachet-node at $node_bin" >&2; exit 2; }
command -v prove > /dev/null || { echo "prove is missing: apt-get install perl" >&2; exit 2; }
memcached_bin=$(command -v memcached || echo /usr/bin/memcached)
[[ -x "$memcached_bin" ]] || { echo "memcached is missing (the suite asks it for -h): apt-get install memcached" >&2; exit 2; }

work=$(mktemp -d /tmp/cachet-memcached-t.XXXXXX)
node_pid=""
cleanup() {
    [[ -n "$node_pid" ]] && kill "$node_pid" 2> /dev/null && wait "$node_pid" 2> /dev/null
    rm -rf "$work"
}
trap cleanup EXIT
# The suite runs from memcached's build directory: t/ beside the binary it probes.
cp -r "$here/t" "$work/t"
ln -s "$memcached_bin" "$work/memcached-debug"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

failed=0
for file in "${files[@]}"; do
    port=$(free_port)
    native=$(free_port)
    "$node_bin" --port "$native" --memcached-port "$port" --disk-limit 0 > "$work/node.log" 2>&1 &
    node_pid=$!
    for _ in $(seq 100); do
        grep -q "memcached's protocol on" "$work/node.log" && break
        sleep 0.05
    done
    started=$(date +%s.%N)
    output=$(cd "$work" && T_MEMD_USE_DAEMON="127.0.0.1:$port" timeout 120 prove "t/$file" 2>&1)
    status=$?
    seconds=$(python3 -c "import time; print('%.1f' % (time.time() - $started))")
    if ((status == 0)); then
        echo "ok   t/$file (${seconds} s)"
    else
        failed=1
        echo "FAIL t/$file (${seconds} s)"
        echo "$output" | grep -E "^not ok|Failed test|got:|expected:" | head -20 | sed 's/^/     /'
    fi
    kill "$node_pid" 2> /dev/null
    wait "$node_pid" 2> /dev/null
    node_pid=""
done
exit $failed
