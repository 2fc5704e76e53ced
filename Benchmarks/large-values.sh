#!/usr/bin/env bash
# Values of any size, against nginx serving the same bytes from a file, in the same run:
#
#   1. A BIG-byte value (4 GiB) of random bytes stored and read back byte-exact through CachetClient
#      (cachet-bench --value-file) and through cachet-cli (put @FILE, get --out FILE): seconds, MB/s, the
#      node's peak resident memory (VmHWM) and the client's.
#   2. 1 MiB ranges at random offsets of a SIZE-byte value (1 GiB): from nginx (sendfile) and from the node's
#      HTTP port (--http-values), with one load generator (Benchmarks/range-load.py, THREADS connections)
#      and with wrk (a Lua script picking the ranges); and through the binary protocol (range-load.py
#      --cachet). Alternated ROUNDS times; p50 and p99 and their ratios to nginx's.
#   3. The whole SIZE-byte value streamed: curl from nginx, curl from the node's HTTP port, cachet-cli get
#      --out /dev/null.
#
# Usage: Benchmarks/large-values.sh            (after swift build -c release)
#        SIZE=268435456 BIG=1073741824 SECONDS_EACH=5 ROUNDS=1 Benchmarks/large-values.sh   (a quick run)
#        BIG=0 Benchmarks/large-values.sh   (ranges and streams only)
# Installs nginx and wrk with apt-get when they are missing. Everything runs on 127.0.0.1; the files and the
# node's data directory live in a temporary directory, deleted at the end. Prints Markdown tables.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/.build/release}
SIZE=${SIZE:-1073741824}
BIG=${BIG:-4294967296}
SECONDS_EACH=${SECONDS_EACH:-10}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-4}
NODE_PORT=${NODE_PORT:-17431}
HTTP_PORT=${HTTP_PORT:-18431}
NGINX_PORT=${NGINX_PORT:-18432}

for tool in cachet-node cachet-cli cachet-bench; do
    [[ -x "$bin/$tool" ]] || { echo "no $bin/$tool: run swift build -c release first" >&2; exit 2; }
done
missing=()
command -v nginx > /dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
command -v wrk > /dev/null || missing+=(wrk)
if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    apt-get install -y -qq "${missing[@]}" > /dev/null
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d /tmp/cachet-large.XXXXXX)
node_pid=""
nginx_pid=""
cleanup() {
    [[ -n "$node_pid" ]] && kill "$node_pid" 2> /dev/null || true
    [[ -n "$nginx_pid" ]] && kill "$nginx_pid" 2> /dev/null || true
    wait 2> /dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/www" "$work/nginx"
# nginx's workers run as another user: they must reach the file.
chmod 755 "$work" "$work/www"

peak() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

start_node() {
    rm -rf "$work/data"
    "$bin/cachet-node" --port "$NODE_PORT" --http-port "$HTTP_PORT" --http-values --data-dir "$work/data" \
        --disk-limit $((BIG + SIZE + (1 << 30))) > "$work/node.log" 2>&1 &
    node_pid=$!
    for _ in $(seq 100); do
        grep -q "listening" "$work/node.log" && return
        sleep 0.1
    done
    echo "the node did not start: $(cat "$work/node.log")" >&2
    exit 1
}

stop_node() {
    kill "$node_pid"
    wait "$node_pid" 2> /dev/null || true
    node_pid=""
}

echo "# Values of any size ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores)"
echo
echo "making $((SIZE >> 20)) MiB and $((BIG >> 20)) MiB of random bytes..." >&2
head -c "$SIZE" /dev/urandom > "$work/www/value.bin"

# 1. The BIG value whole, through the client library and through the CLI.
if ((BIG > 0)); then
head -c "$BIG" /dev/urandom > "$work/big.bin"
echo "## A $((BIG >> 20)) MiB value stored and read back"
echo
echo "| through | store s | store MB/s | read s | read MB/s | byte-exact | node peak RSS MiB | client peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|"
start_node
report=$("$bin/cachet-bench" --port "$NODE_PORT" --value-file "$work/big.bin" --value-key big)
python3 - "$report" "$(peak "$node_pid")" << 'PY'
import json, sys
r = json.loads(sys.argv[1])
print("| CachetClient | %.1f | %.0f | %.1f | %.0f | %s | %s | %.1f |" % (
    r["store_seconds"], r["store_mb_per_second"], r["read_seconds"], r["read_mb_per_second"],
    "yes" if r["identical"] else "NO", sys.argv[2], r["client_peak_rss_bytes"] / 1048576))
PY
stop_node
start_node
cli_time() { /usr/bin/time -f "%e %M" "$@" 2>&1 > /dev/null | tail -1; }
read -r put_s put_kb <<< "$(cli_time "$bin/cachet-cli" --port "$NODE_PORT" --timeout 30 put big "@$work/big.bin")"
read -r get_s get_kb <<< "$(cli_time "$bin/cachet-cli" --port "$NODE_PORT" --timeout 30 get big --out "$work/big.read")"
same=$(cmp -s "$work/big.bin" "$work/big.read" && echo yes || echo NO)
rm -f "$work/big.read"
python3 -c "
big = $BIG / 1048576
print('| cachet-cli | %.1f | %.0f | %.1f | %.0f | $same | $(peak "$node_pid") | %.1f |' % (
    $put_s, big / max($put_s, 0.01), $get_s, big / max($get_s, 0.01), max($put_kb, $get_kb) / 1024))"
stop_node
rm -f "$work/big.bin"
echo
fi

# The SIZE value, in nginx's directory and in the node.
cat > "$work/nginx/nginx.conf" << EOF
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    keepalive_requests 1000000;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $work/www;
    }
}
EOF
"$nginx_bin" -c "$work/nginx/nginx.conf" -g "daemon off;" &
nginx_pid=$!
start_node
"$bin/cachet-cli" --port "$NODE_PORT" --timeout 30 put value "@$work/www/value.bin" > /dev/null
sleep 1

cat > "$work/ranges.lua" << EOF
math.randomseed(os.time())
request = function()
    local offset = math.random(0, $SIZE - 1048577)
    return wrk.format("GET", nil, { ["Range"] = "bytes=" .. offset .. "-" .. (offset + 1048575) })
end
EOF
wrk_line() {
    wrk -t 2 -c "$THREADS" -d "${SECONDS_EACH}s" --latency -s "$work/ranges.lua" "$1" 2> /dev/null | python3 -c "
import re, sys
text = sys.stdin.read()
def ms(label):
    m = re.search(r'\s' + label + r'%\s+([\d.]+)(us|ms|s)', text)
    if not m: return float('nan')
    return float(m.group(1)) * {'us': 0.001, 'ms': 1, 's': 1000}[m.group(2)]
rate = re.search(r'Transfer/sec:\s+([\d.]+)(KB|MB|GB)', text)
mb = float(rate.group(1)) * {'KB': 1 / 1024, 'MB': 1, 'GB': 1024}[rate.group(2)] if rate else float('nan')
print('%.3f %.3f %.0f' % (ms('50'), ms('99'), mb))"
}

echo "## 1 MiB ranges at random offsets of a $((SIZE >> 20)) MiB value ($THREADS connections, ${SECONDS_EACH} s each, $ROUNDS rounds)"
echo
echo "| round | server | generator | MB/s | p50 ms | p99 ms | p99 / nginx's |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
    nginx_json=$(python3 "$root/Benchmarks/range-load.py" --http "http://127.0.0.1:$NGINX_PORT/value.bin" \
        --size "$SIZE" --threads "$THREADS" --seconds "$SECONDS_EACH" --seed "$round")
    http_json=$(python3 "$root/Benchmarks/range-load.py" --http "http://127.0.0.1:$HTTP_PORT/values/value" \
        --size "$SIZE" --threads "$THREADS" --seconds "$SECONDS_EACH" --seed "$round")
    binary_json=$(python3 "$root/Benchmarks/range-load.py" --cachet "127.0.0.1:$NODE_PORT" --key value \
        --size "$SIZE" --threads "$THREADS" --seconds "$SECONDS_EACH" --seed "$round")
    python3 - "$round" "$nginx_json" "$http_json" "$binary_json" << 'PY'
import json, sys
round_, *runs = sys.argv[1:]
nginx, http, binary = (json.loads(r) for r in runs)
for name, r in (("nginx", nginx), ("cachet HTTP", http), ("cachet binary", binary)):
    note = "" if r["errors"] == 0 else " (%d errors: %s)" % (r["errors"], r["first_error"])
    print("| %s | %s | range-load.py | %.0f | %.2f | %.2f | %.2f%s |" % (
        round_, name, r["mb_per_second"], r["p50_ms"], r["p99_ms"], r["p99_ms"] / nginx["p99_ms"], note))
PY
    read -r n50 n99 nmb <<< "$(wrk_line "http://127.0.0.1:$NGINX_PORT/value.bin")"
    read -r c50 c99 cmb <<< "$(wrk_line "http://127.0.0.1:$HTTP_PORT/values/value")"
    python3 -c "
print('| $round | nginx | wrk | %s | %s | %s | 1.00 |' % ('$nmb', '$n50', '$n99'))
print('| $round | cachet HTTP | wrk | %s | %s | %s | %.2f |' % ('$cmb', '$c50', '$c99', $c99 / $n99))"
done
echo

echo "## The whole $((SIZE >> 20)) MiB value streamed"
echo
echo "| round | from | seconds | MB/s | / nginx's |"
echo "|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
    n=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$NGINX_PORT/value.bin")
    h=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$HTTP_PORT/values/value")
    c=$(/usr/bin/time -f "%e" "$bin/cachet-cli" --port "$NODE_PORT" --timeout 30 get value --out /dev/null 2>&1 > /dev/null | tail -1)
    python3 -c "
size = $SIZE / 1048576
for name, s in (('nginx (curl)', $n), ('cachet HTTP (curl)', $h), ('cachet binary (cachet-cli)', $c)):
    print('| $round | %s | %.2f | %.0f | %.2f |' % (name, s, size / s, $n / s))"
done
echo
echo "node peak RSS over the ranges and streams: $(peak "$node_pid") MiB"
