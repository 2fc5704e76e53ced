#!/usr/bin/env bash
# A Cachet cluster on this machine, in the background: N nodes on 127.0.0.1 with consecutive ports, each
# with its own data directory, log and pid file under one folder, and the cluster file they share.
#
#   deploy/local-cluster.sh up [N] [--port BASE] [-- NODE FLAGS]   # build (release), start N nodes (default 3)
#   deploy/local-cluster.sh status                                 # each node's state, items and membership hash
#   deploy/local-cluster.sh reload                                 # SIGHUP every node: re-read cluster.json
#   deploy/local-cluster.sh stop ID [--kill]                       # SIGTERM one node (--kill: SIGKILL)
#   deploy/local-cluster.sh start ID                               # start one stopped node again, same flags
#   deploy/local-cluster.sh restart ID                             # stop ID, then start it
#   deploy/local-cluster.sh rolling-restart [--pause S] [ID...]    # restart each node (or those named) in
#                                                                  # turn, waiting until the others see it up
#                                                                  # and it holds no more, then S seconds (2)
#   deploy/local-cluster.sh down [--purge]                         # SIGTERM every node; --purge also deletes the folder
#
# Nodes are n1..nN on BASE..BASE+N-1 (BASE defaults to 7420). Flags after -- go to every node, such as
# -- --memory-limit 1GiB --disk-limit 4GiB. The folder is deploy/run/cluster (git-ignored), or
# $CACHET_CLUSTER_DIR; with $CACHET_BIN_DIR set, the binaries there are used and nothing is built.
# Exit status: 0 done (status: every node answers), 1 failed (status: a node is down), 2 usage.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="${CACHET_CLUSTER_DIR:-$repo/deploy/run/cluster}"
cluster_file="$dir/cluster.json"

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
# This script as the user should type it again: with CACHET_CLUSTER_DIR when it was set.
self="deploy/local-cluster.sh"
[ -n "${CACHET_CLUSTER_DIR:-}" ] && self="CACHET_CLUSTER_DIR=$CACHET_CLUSTER_DIR $self"
fail() { echo "local-cluster: $*" >&2; exit 1; }

binaries() {
    if [ -n "${CACHET_BIN_DIR:-}" ]; then
        bin="$CACHET_BIN_DIR"
    else
        bin="$(cd "$repo" && swift build -c release --show-bin-path)"
    fi
    node_bin="$bin/cachet-node"
    cli_bin="$bin/cachet-cli"
}

build() {
    if [ -n "${CACHET_BIN_DIR:-}" ]; then
        [ -x "$node_bin" ] && [ -x "$cli_bin" ] || fail "no cachet-node and cachet-cli in CACHET_BIN_DIR=$CACHET_BIN_DIR"
        return
    fi
    echo "building cachet-node and cachet-cli (release)..."
    mkdir -p "$dir"
    if ! (cd "$repo" && swift build -c release --product cachet-node && swift build -c release --product cachet-cli) \
        >"$dir/build.log" 2>&1; then
        tail -n 30 "$dir/build.log" >&2
        fail "the build failed (whole log: $dir/build.log)"
    fi
}

# The nodes of the cluster file as "id port" lines (the file is written by this script, one member a line).
# The members of the cluster file, "ID PORT" a line: the file must keep one member a line, as `up` writes it.
members() {
    [ -f "$cluster_file" ] || return 0
    sed -n 's/.*"id": *"\([^"]*\)".*"port": *\([0-9]*\).*/\1 \2/p' "$cluster_file"
}

# The pid of a running node, or nothing (a stale pid file, or a pid now used by another program, is ignored).
# Whether process PID still runs: it exists and has not exited (a node whose starter is gone is reaped by
# whoever adopted it, which may take a while; until then it is a zombie, done but still signalable).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    local state
    state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)"
    [ -n "$state" ] && [ "$state" != Z ]
}

running_pid() {
    local pid_file="$dir/$1/node.pid" pid
    [ -f "$pid_file" ] || return 0
    pid="$(cat "$pid_file")"
    if [ -n "$pid" ] && alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q cachet-node; then
        echo "$pid"
    fi
}

close_inherited_descriptors() {
    local fd
    for fd in /proc/$BASHPID/fd/*; do
        fd="${fd##*/}"
        if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

cmd_up() {
    local count=3 base=7420 extra=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --port) [ $# -ge 2 ] || { usage >&2; exit 2; }; base="$2"; shift 2 ;;
            --) shift; extra=("$@"); break ;;
            [0-9]*) count="$1"; shift ;;
            *) echo "local-cluster: unknown argument $1" >&2; usage >&2; exit 2 ;;
        esac
    done
    [[ "$count" =~ ^[0-9]+$ ]] && [ "$count" -ge 1 ] && [ "$count" -le 64 ] || fail "N must be 1 to 64, not $count"
    [[ "$base" =~ ^[0-9]+$ ]] && [ "$base" -ge 1 ] && [ $((base + count - 1)) -le 65535 ] ||
        fail "--port $base does not leave room for $count ports below 65536"

    local running=0 id port
    while read -r id port; do
        [ -n "$(running_pid "$id")" ] && running=$((running + 1))
    done < <(members)
    if [ "$running" -gt 0 ]; then
        local listed
        listed="$(members | wc -l)"
        if [ "$running" -eq "$listed" ] && [ "$listed" -eq "$count" ]; then
            echo "the local cluster is already up ($count nodes in $dir)"
            cmd_status || true
            return 0
        fi
        fail "a local cluster is already running ($running of $listed nodes in $dir): start a stopped one with '$self start ID', or run '$self down' first"
    fi

    for ((i = 0; i < count; i++)); do
        port_busy $((base + i)) && fail "port $((base + i)) is busy (another program listens there): choose another --port BASE, or stop it"
    done

    binaries
    build
    mkdir -p "$dir"
    {
        echo '{'
        echo '  "members": ['
        for ((i = 1; i <= count; i++)); do
            printf '    {"id": "n%d", "host": "127.0.0.1", "port": %d}%s\n' "$i" $((base + i - 1)) "$([ "$i" -lt "$count" ] && echo ,)"
        done
        echo '  ]'
        echo '}'
    } >"$cluster_file.tmp"
    mv "$cluster_file.tmp" "$cluster_file"

    # The flags every node gets, one a line, for start and restart later.
    printf '%s\n' "${extra[@]+"${extra[@]}"}" >"$dir/node-flags"
    local started=()
    for ((i = 1; i <= count; i++)); do
        launch "n$i"
        started+=("n$i")
    done
    local failed
    failed="$(wait_listening "${started[@]}")"
    if [ -n "$failed" ]; then
        echo "local-cluster: node $failed did not start; the end of $dir/$failed/node.log:" >&2
        tail -n 15 "$dir/$failed/node.log" >&2
        cmd_down >/dev/null 2>&1 || true
        exit 1
    fi

    echo "local cluster up: $count nodes, cluster file $cluster_file"
    while read -r id port; do
        printf '  %-4s 127.0.0.1:%-5s pid %-7s log %s\n' "$id" "$port" "$(cat "$dir/$id/node.pid")" "$dir/$id/node.log"
    done < <(members)
    echo "talk to a node:  $cli_bin --port $base stats"
    echo "status:          $self status"
    echo "one node:        $self stop n2 | start n2 | restart n2"
    echo "stop:            $self down        (down --purge also deletes the data)"
}

# Starts node ID in the background with the cluster's flags (node-flags), appending to its log.
launch() {
    local id="$1" flags=()
    [ -f "$dir/node-flags" ] && mapfile -t flags < <(grep -v '^$' "$dir/node-flags")
    mkdir -p "$dir/$id/data"
    : >"$dir/$id/node.out"
    # setsid: the nodes outlive this script and ignore the terminal's Ctrl-C; they keep none of the
    # caller's descriptors beyond the standard three (a caller waiting for this script's pipes to close
    # would otherwise wait for the nodes).
    (
        close_inherited_descriptors
        exec setsid "$node_bin" --cluster "$cluster_file" --node-id "$id" --data-dir "$dir/$id/data" \
            --http-port 0 "${flags[@]+"${flags[@]}"}" >"$dir/$id/node.out" 2>>"$dir/$id/node.log" </dev/null
    ) &
    echo $! >"$dir/$id/node.pid"
}

# Waits up to 30 s for each node to print its "listening" line; prints the first that did not.
wait_listening() {
    local deadline=$((SECONDS + 30)) id
    for id in "$@"; do
        until grep -q "listening on" "$dir/$id/node.out" 2>/dev/null; do
            if [ -z "$(running_pid "$id")" ] || [ "$SECONDS" -ge "$deadline" ]; then echo "$id"; return; fi
            sleep 0.1
        done
    done
}

# The port of member ID, or nothing.
port_of() { members | awk -v id="$1" '$1 == id { print $2 }'; }

# Stops one node: SIGTERM and up to 30 s for it to exit (then SIGKILL), or SIGKILL at once.
stop_node() {
    local id="$1" signal="${2:-TERM}" pid
    pid="$(running_pid "$id")"
    if [ -z "$pid" ]; then
        rm -f "$dir/$id/node.pid"
        echo "$id is not running"
        return 0
    fi
    kill -"$signal" "$pid"
    local deadline=$((SECONDS + 30)) started=$EPOCHREALTIME
    while alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.02; done
    if alive "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
        echo "$id (pid $pid) did not stop within 30 s of SIG$signal: killed"
        rm -f "$dir/$id/node.pid"
        return 1
    fi
    rm -f "$dir/$id/node.pid"
    echo "$id (pid $pid) stopped (SIG$signal, $(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s)"
}

cmd_stop() {
    local id="${1:-}" signal=TERM
    [ -n "$id" ] || { usage >&2; exit 2; }
    case "${2:-}" in
        --kill) signal=KILL ;;
        "") ;;
        *) echo "local-cluster: unknown argument $2" >&2; usage >&2; exit 2 ;;
    esac
    [ -n "$(port_of "$id")" ] || fail "no node $id in $cluster_file (the members are: $(members | awk '{ print $1 }' | tr '\n' ' '))"
    stop_node "$id" "$signal"
}

cmd_start() {
    local id="${1:-}" port
    [ -n "$id" ] || { usage >&2; exit 2; }
    port="$(port_of "$id")"
    [ -n "$port" ] || fail "no node $id in $cluster_file (the members are: $(members | awk '{ print $1 }' | tr '\n' ' '))"
    if [ -n "$(running_pid "$id")" ]; then
        echo "$id is already running (pid $(running_pid "$id"))"
        return 0
    fi
    port_busy "$port" && fail "port $port of $id is busy (another program listens there)"
    binaries
    [ -x "$node_bin" ] || fail "no cachet-node at $node_bin: run '$self up' first"
    launch "$id"
    local failed
    failed="$(wait_listening "$id")"
    if [ -n "$failed" ]; then
        echo "local-cluster: node $id did not start; the end of $dir/$id/node.log:" >&2
        tail -n 15 "$dir/$id/node.log" >&2
        exit 1
    fi
    echo "$id started on 127.0.0.1:$port (pid $(cat "$dir/$id/node.pid"))"
}

cmd_restart() {
    local id="${1:-}"
    [ -n "$id" ] || { usage >&2; exit 2; }
    cmd_stop "$id"
    cmd_start "$id"
}

# Member ID's state in the STATS of the node on PORT (up, suspect, down, self), or nothing.
state_seen_by() {
    local port="$1" id="$2"
    "$cli_bin" --port "$port" stats 2>/dev/null | grep -o "\"id\":\"$id\",\"port\":[0-9]*,\"state\":\"[a-z]*\"" |
        sed 's/.*"state":"\([a-z]*\)"/\1/'
}

# Waits up to 30 s until every other member sees ID up and ID no longer holds; says how long it took.
wait_rejoined() {
    local id="$1" started=$EPOCHREALTIME deadline=$((SECONDS + 30)) other port state pending
    while [ "$SECONDS" -lt "$deadline" ]; do
        pending=""
        while read -r other port; do
            [ "$other" = "$id" ] && continue
            state="$(state_seen_by "$port" "$id")"
            [ "$state" = "up" ] || pending+="$other sees $id ${state:-nothing}; "
        done < <(members)
        if "$cli_bin" --port "$(port_of "$id")" stats 2>/dev/null | grep -Eq '^holding +(1|true)'; then
            pending+="$id holds its keys after its return; "
        fi
        if [ -z "$pending" ]; then
            echo "$id rejoined ($(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s after its start)"
            return 0
        fi
        sleep 0.1
    done
    echo "local-cluster: $id did not rejoin within 30 s: ${pending% }" >&2
    return 1
}

cmd_rolling_restart() {
    local pause=2 id port ids=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --pause) [ $# -ge 2 ] || { usage >&2; exit 2; }; pause="$2"; shift 2 ;;
            -*) echo "local-cluster: unknown argument $1" >&2; usage >&2; exit 2 ;;
            *) ids+=("$1"); shift ;;
        esac
    done
    [[ "$pause" =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail "--pause takes seconds, not $pause"
    [ -f "$cluster_file" ] || fail "no local cluster in $dir (start one with: $self up)"
    binaries
    while read -r id port; do
        [ -n "$(running_pid "$id")" ] || fail "$id is not running: start it ($self start $id) before a rolling restart"
    done < <(members)
    [ "${#ids[@]}" -gt 0 ] || mapfile -t ids < <(members | awk '{ print $1 }')
    for id in "${ids[@]}"; do
        [ -n "$(port_of "$id")" ] || fail "no node $id in $cluster_file (the members are: $(members | awk '{ print $1 }' | tr '\n' ' '))"
    done
    for id in "${ids[@]}"; do
        cmd_restart "$id"
        wait_rejoined "$id" </dev/null || exit 1
        [ "$id" = "${ids[-1]}" ] || sleep "$pause"
    done
    echo "rolling restart done"
}

# The HTTP port a node printed ("cachet-node metrics and health on http://HOST:PORT"), empty if none.
http_port_of() {
    sed -n 's|^cachet-node metrics and health on http://.*:\([0-9]*\)$|\1|p' "$dir/$1/node.out" 2>/dev/null | tail -1
}

# "ready" when the node's /health/ready answers 200, "not-ready" for 503, "-" without an answer.
readiness_of() {
    local port answer
    port="$(http_port_of "$1")"
    [ -n "$port" ] || { echo "-"; return; }
    answer="$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && printf 'GET /health/ready HTTP/1.0\r\n\r\n' >&3 && head -1 <&3" 2>/dev/null)"
    case "$answer" in
        *" 200 "*) echo ready ;;
        *" 503 "*) echo not-ready ;;
        *) echo "-" ;;
    esac
}

cmd_status() {
    [ -f "$cluster_file" ] || { echo "no local cluster in $dir (start one with: $self up)"; return 1; }
    [ -n "${cli_bin:-}" ] || binaries
    local id port pid stats state items hash ready hashes="" down=0
    printf '%-4s %-15s %-8s %-8s %10s  %-16s  %s\n' id address pid state items cluster_hash ready
    while read -r id port; do
        pid="$(running_pid "$id")"
        items="-"
        hash="-"
        ready="-"
        if [ -z "$pid" ]; then
            state="stopped"
            pid="-"
            down=$((down + 1))
        elif stats="$("$cli_bin" --port "$port" stats 2>/dev/null)"; then
            state="up"
            items="$(awk '$1 == "items" { print $2 }' <<<"$stats")"
            hash="$(awk '$1 == "cluster_hash" { print $2 }' <<<"$stats")"
            hashes+="$hash"$'\n'
            ready="$(readiness_of "$id")"
        else
            state="silent"
            down=$((down + 1))
        fi
        printf '%-4s %-15s %-8s %-8s %10s  %-16s  %s\n' "$id" "127.0.0.1:$port" "$pid" "$state" "$items" "$hash" "$ready"
    done < <(members)
    if [ "$(sort -u <<<"$hashes" | grep -c .)" -gt 1 ]; then
        echo "the nodes disagree on the membership: run '$self reload'"
    fi
    [ "$down" -eq 0 ]
}

cmd_reload() {
    local id port pid count=0
    while read -r id port; do
        pid="$(running_pid "$id")"
        [ -n "$pid" ] || continue
        kill -HUP "$pid"
        count=$((count + 1))
    done < <(members)
    echo "sent SIGHUP to $count nodes: each re-reads $cluster_file (its log says whether it took it)"
}

cmd_down() {
    local purge=0
    case "${1:-}" in
        --purge) purge=1 ;;
        "") ;;
        *) echo "local-cluster: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
    local id port pid pids=() ids=()
    while read -r id port; do
        pid="$(running_pid "$id")"
        if [ -n "$pid" ]; then
            kill -TERM "$pid"
            pids+=("$pid")
            ids+=("$id")
        else
            rm -f "$dir/$id/node.pid"
        fi
    done < <(members)
    if [ "${#pids[@]}" -eq 0 ]; then
        echo "no local cluster is running in $dir"
    fi
    local deadline=$((SECONDS + 30)) stuck=0
    for index in "${!pids[@]}"; do
        pid="${pids[$index]}"
        id="${ids[$index]}"
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
            echo "$id (pid $pid) did not stop within 30 s of SIGTERM: killed"
            stuck=1
        else
            echo "$id (pid $pid) stopped"
        fi
        rm -f "$dir/$id/node.pid"
    done
    if [ "$purge" -eq 1 ] && [ -d "$dir" ]; then
        rm -rf "$dir"
        echo "deleted $dir (data, logs, cluster file)"
    fi
    return "$stuck"
}

command="${1:-}"
[ $# -gt 0 ] && shift
case "$command" in
    up) cmd_up "$@" ;;
    status) cmd_status ;;
    reload) cmd_reload ;;
    stop) cmd_stop "$@" ;;
    start) cmd_start "$@" ;;
    restart) cmd_restart "$@" ;;
    rolling-restart) cmd_rolling_restart "$@" ;;
    down) cmd_down "$@" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
