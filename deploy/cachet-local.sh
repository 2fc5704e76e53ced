#!/usr/bin/env bash
# Runs Cachet on this machine in the foreground: one node by default, or a cluster of several with
# --nodes N on consecutive ports (ids n1..nN, cluster file deploy/run/cachet-local.json). Every node
# listens on 127.0.0.1 and keeps its data under deploy/run/node-PORT (git-ignored).
# Ctrl-C (or SIGTERM) stops every node gracefully. deploy/local-cluster.sh runs a cluster in the background.
#
#   deploy/cachet-local.sh                    # one node on 127.0.0.1:7420
#   deploy/cachet-local.sh --nodes 3          # a cluster of three on 7420, 7421, 7422
#   deploy/cachet-local.sh --port 9000 -- --memory-limit 1GiB   # flags after -- go to every node
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=1
port=7420
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) nodes="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

echo "building cachet-node (release)..."
swift build -c release --product cachet-node >/dev/null
binary="$(swift build -c release --show-bin-path)/cachet-node"

cluster=()
if [ "$nodes" -gt 1 ]; then
    mkdir -p deploy/run
    {
        echo '{"members": ['
        for ((i = 0; i < nodes; i++)); do
            printf '  {"id": "n%d", "host": "127.0.0.1", "port": %d}%s\n' $((i + 1)) $((port + i)) "$([ $((i + 1)) -lt "$nodes" ] && echo ,)"
        done
        echo ']}'
    } >deploy/run/cachet-local.json
    cluster=(--cluster deploy/run/cachet-local.json)
fi

pids=()
stop() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait
}
trap stop INT TERM

for ((i = 0; i < nodes; i++)); do
    p=$((port + i))
    data="deploy/run/node-$p"
    mkdir -p "$data"
    extra_data=()
    if "$binary" --help 2>/dev/null | grep -q -- '--data-dir'; then extra_data=(--data-dir "$data"); fi
    node_id=()
    if [ "${#cluster[@]}" -gt 0 ]; then node_id=(--node-id "n$((i + 1))"); fi
    "$binary" --host 127.0.0.1 --port "$p" "${cluster[@]}" "${node_id[@]}" "${extra_data[@]}" "${extra[@]}" 2>>"$data/node.log" &
    pids+=($!)
done
echo "logs: deploy/run/node-*/node.log; talk to a node with: swift run cachet-cli --port $port"
wait
