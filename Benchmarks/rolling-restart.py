#!/usr/bin/env python3
"""Membership events under load: a local 3-node cluster (deploy/local-cluster.sh), a read-through load, and one
event: each member sent SIGTERM and started again in turn (--event rolling-restart, the default:
local-cluster.sh rolling-restart), a fourth member added (--event add: the cluster file gains n4, n4 starts,
then the others reload), or a member removed (--event remove: n3 leaves the file, the others reload, n3 is
stopped 20 s later). Reports, second by second and in all, the requests that failed, the GETs that returned a
value older than the last one acknowledged, and the hit ratio; exits 1 when a request failed, a read was
stale, or the hit ratio is more than --max-hit-drop points below the one before the event: 30 s after a
rolling restart, or on average over the 30 s after an added or removed member (where the load follows the
new membership at once, as CachetClient does within its refresh interval).

Run by hand; nothing in CI runs it. Python 3.11, standard library only. Talks only to 127.0.0.1.

    python3 Benchmarks/rolling-restart.py                      # every request to the key's owner (as CachetClient)
    python3 Benchmarks/rolling-restart.py --through n1         # every request to n1, which forwards; n2 and n3 restart
    python3 Benchmarks/rolling-restart.py --bin-dir .build/debug --warm 10 --after 35
    python3 Benchmarks/rolling-restart.py --event add           # scale out: 3 members to 4
    python3 Benchmarks/rolling-restart.py --event add --order back-to-back   # n4 started, the others reloaded at once
    python3 Benchmarks/rolling-restart.py --event remove        # scale in: 3 members to 2
    python3 Benchmarks/rolling-restart.py --event add --node-flags "--warm-up-seconds 0"   # without warm-up

The load: --threads threads, each with --keys-per-thread keys of its own (so each key has one writer and
"older than the last acknowledged" is exact). A thread GETs a key; a hit must be the version it last wrote
(or a miss: always allowed); a miss is filled with a PUT of a new version (a read-through cache), and one
request in ten is a PUT of a new version anyway. A request to a node whose port is refused, or whose
connection closes before the reply, is sent once more to the key's next member, as CachetClient does; what
fails after that (an error status, a timeout, a second connection failure) counts as failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # importing soak.py leaves no __pycache__ in the repository
from soak import GET, NOT_FOUND, OK, PUT, STATUS_NAMES, Connection, key_body, put_body  # noqa: E402


def load_key_map():
    """register-check.py's KeyMap (the ring of Protocol/RING.md in Python)."""
    spec = importlib.util.spec_from_file_location("register_check", os.path.join(HERE, "register-check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KeyMap


class Second:
    """What happened in one second of the run."""

    __slots__ = ("requests", "gets", "hits", "failed", "stale")

    def __init__(self) -> None:
        self.requests = self.gets = self.hits = self.failed = self.stale = 0


class Tally:
    def __init__(self, start: float) -> None:
        self.start = start
        self.lock = threading.Lock()
        self.seconds: dict[int, Second] = {}
        self.examples: list[str] = []

    def add(self, at: float, gets: int = 0, hits: int = 0, failed: int = 0, stale: int = 0, note: str = "") -> None:
        with self.lock:
            second = self.seconds.setdefault(int(at - self.start), Second())
            second.requests += 1
            second.gets += gets
            second.hits += hits
            second.failed += failed
            second.stale += stale
            if note and len(self.examples) < 10:
                self.examples.append(f"{at - self.start:7.2f}s {note}")


class Client:
    """One thread's connections, one per member, opened on demand."""

    def __init__(self, ports: dict[str, int], timeout: float) -> None:
        self.ports = ports
        self.timeout = timeout
        self.connections: dict[str, Connection] = {}

    def request(self, member: str, opcode: int, body: bytes) -> tuple[int, bytes]:
        connection = self.connections.get(member)
        if connection is None:
            connection = Connection(self.ports[member], self.timeout)
            self.connections[member] = connection
        try:
            return connection.request(opcode, body, deadline=time.monotonic() + self.timeout)
        except BaseException:
            connection.close()
            self.connections.pop(member, None)
            raise

    def send(self, targets: list[str], opcode: int, body: bytes) -> tuple[int, bytes]:
        """Sends to the first target; once more to the next when the connection is refused or closes
        before the reply (nothing was applied by a member that stops gracefully)."""
        try:
            return self.request(targets[0], opcode, body)
        except (ConnectionRefusedError, ConnectionError) as error:
            if len(targets) < 2:
                raise error
            return self.request(targets[1], opcode, body)


class Routing:
    """Where the load sends each key: the members' ring, replaced whole when the membership changes."""

    def __init__(self, key_map) -> None:
        self.key_map = key_map


def load(index: int, args, ports: dict[str, int], routing: Routing, tally: Tally, stop: threading.Event) -> None:
    rng = random.Random(index + 1)
    client = Client(ports, args.timeout)
    keys = [f"roll:{index}:{k}" for k in range(args.keys_per_thread)]
    acknowledged: dict[str, int | None] = {}
    version = 0
    while not stop.is_set():
        key = rng.choice(keys)
        targets = [args.through] if args.through else routing.key_map.preference[key][:2]
        now = time.monotonic()
        try:
            if rng.random() < 0.1:
                version += 1
                status, body = client.send(targets, PUT, put_body(key.encode(), str(version).encode()))
                if status != OK:
                    raise RuntimeError(f"PUT {key}: {STATUS_NAMES.get(status, status)} {body[:160]!r}")
                acknowledged[key] = version
                tally.add(now)
                continue
            status, body = client.send(targets, GET, key_body(key.encode()))
            if status == OK:
                seen = int(body)
                last = acknowledged.get(key)
                if key in acknowledged and seen != last:
                    tally.add(now, gets=1, hits=1, stale=1, note=f"stale: {key} read {seen}, last acknowledged {last}")
                else:
                    tally.add(now, gets=1, hits=1)
                continue
            if status != NOT_FOUND:
                raise RuntimeError(f"GET {key}: {STATUS_NAMES.get(status, status)} {body[:120]!r}")
            tally.add(now, gets=1)
            version += 1
            status, body = client.send(targets, PUT, put_body(key.encode(), str(version).encode()))
            if status != OK:
                raise RuntimeError(f"PUT {key} (fill): {STATUS_NAMES.get(status, status)} {body[:160]!r}")
            acknowledged[key] = version
        except (OSError, ConnectionError, RuntimeError, socket.timeout) as error:
            tally.add(now, failed=1, note=f"failed: {error}")
            # The write may or may not have been applied: any later read of the key is accepted.
            acknowledged.pop(key, None)


def change_membership(event, cluster, env, ports, members, routing, key_map_type, all_keys, note,
                      order="start-then-wait") -> None:
    """Adds n4 or removes n3: the cluster file rewritten, then, for an added member, in `order`: n4 started
    and the others reloaded once n4 has seen them on the old file (start-then-wait), n4 started and the
    others reloaded at once (back-to-back), or the others reloaded and n4 started after (reload-first);
    every node reloaded in the end; the load follows the new members."""
    path = os.path.join(env["CACHET_CLUSTER_DIR"], "cluster.json")
    with open(path) as handle:
        document = json.load(handle)
    after = members + ["n4"] if event == "add" else [m for m in members if m != "n3"]
    if event == "add":
        document["members"].append({"id": "n4", "host": "127.0.0.1", "port": ports["n4"]})
    else:
        document["members"] = [m for m in document["members"] if m["id"] != "n3"]
    # One member a line, as local-cluster.sh writes it (and reads it back).
    lines = [f'    {{"id": "{m["id"]}", "host": "{m["host"]}", "port": {m["port"]}}}' for m in document["members"]]
    temporary = path + ".new"
    with open(temporary, "w") as handle:
        handle.write('{\n  "members": [\n' + ",\n".join(lines) + "\n  ]\n}\n")
    os.replace(temporary, path)
    if event == "add" and order == "reload-first":
        cluster("reload", check=False)
        note("the others reloaded before n4 starts")
    if event == "add":
        note(cluster("start", "n4").stdout.strip())
        cli = os.path.join(env["CACHET_BIN_DIR"], "cachet-cli")
        deadline = time.monotonic() + 5
        while order == "start-then-wait" and time.monotonic() < deadline:
            stats = subprocess.run([cli, "--port", str(ports["n4"]), "stats"], text=True, capture_output=True).stdout
            if any(line.split()[:1] == ["cluster_peers_disagreeing"] and line.split()[1] != "0"
                   for line in stats.splitlines()):
                break
            time.sleep(0.1)
    cluster("reload", check=False)
    note(f"cluster file now {', '.join(after)}; every node reloaded")
    routing.key_map = key_map_type(after, all_keys)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, ".build", "release"),
                        help="where cachet-node and cachet-cli are (default: .build/release, built if missing)")
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--keys-per-thread", type=int, default=200)
    parser.add_argument("--through", help="send every request to this member (the others are restarted)")
    parser.add_argument("--warm", type=float, default=15, help="seconds of load before the first restart")
    parser.add_argument("--after", type=float, default=35, help="seconds of load after the last restart")
    parser.add_argument("--event", choices=["rolling-restart", "add", "remove"], default="rolling-restart")
    parser.add_argument("--pause", type=float, default=2, help="seconds between a member's return and the next")
    parser.add_argument("--timeout", type=float, default=2, help="seconds a request may take")
    parser.add_argument("--max-hit-drop", type=float, default=5, help="points the hit ratio may lose")
    parser.add_argument("--port", type=int, default=27620, help="the cluster's first port")
    parser.add_argument("--node-flags", default="", help="more flags for every node, one string")
    parser.add_argument("--order", choices=["start-then-wait", "back-to-back", "reload-first"],
                        default="start-then-wait",
                        help="--event add: start n4 and reload the others once it has seen them on the old file, "
                             "or at once, or reload the others first and start n4 after")
    args = parser.parse_args()

    bin_dir = os.path.abspath(args.bin_dir)
    if not os.path.exists(os.path.join(bin_dir, "cachet-node")):
        print("building cachet-node and cachet-cli (release)", file=sys.stderr)
        subprocess.run(["swift", "build", "-c", "release", "--product", "cachet-node"], cwd=ROOT, check=True)
        subprocess.run(["swift", "build", "-c", "release", "--product", "cachet-cli"], cwd=ROOT, check=True)
    folder = tempfile.mkdtemp(prefix="cachet-rolling-")
    env = dict(os.environ, CACHET_CLUSTER_DIR=os.path.join(folder, "cluster"), CACHET_BIN_DIR=bin_dir)
    script = os.path.join(ROOT, "deploy", "local-cluster.sh")

    def cluster(*command: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([script, *command], env=env, check=check, text=True, capture_output=True)

    members = ["n1", "n2", "n3"]
    ports = {member: args.port + index for index, member in enumerate(members + ["n4"])}
    if args.through and args.through not in members:
        parser.error(f"--through takes one of {', '.join(members)}")
    if args.through and args.event != "rolling-restart":
        parser.error("--through goes with --event rolling-restart")
    cluster("up", "3", "--port", str(args.port), "--", *args.node_flags.split())
    all_keys = [f"roll:{i}:{k}" for i in range(args.threads) for k in range(args.keys_per_thread)]
    key_map_type = load_key_map()
    routing = Routing(key_map_type(members, all_keys))
    start = time.monotonic()
    tally = Tally(start)
    stop = threading.Event()
    threads = [threading.Thread(target=load, args=(i, args, ports, routing, tally, stop), daemon=True)
               for i in range(args.threads)]
    events: dict[int, list[str]] = {}
    try:
        for thread in threads:
            thread.start()
        time.sleep(args.warm)

        def note(line: str) -> None:
            at = int(time.monotonic() - start)
            events.setdefault(at, []).append(line)
            print(f"[{at:4d}s] {line}", file=sys.stderr)

        first_restart = time.monotonic() - start
        if args.event == "rolling-restart":
            restarted = [m for m in members if m != args.through]
            process = subprocess.Popen([script, "rolling-restart", "--pause", str(args.pause), *restarted],
                                       env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for line in process.stdout:
                note(line.strip())
            if process.wait() != 0:
                print("the rolling restart failed", file=sys.stderr)
                return 2
        else:
            change_membership(args.event, cluster, env, ports, members, routing, key_map_type, all_keys, note,
                              args.order)
        last_restart = time.monotonic() - start
        if args.event == "remove":
            time.sleep(20)
            gone = os.path.join(env["CACHET_CLUSTER_DIR"], "n3", "node.pid")
            with open(gone) as handle:
                os.kill(int(handle.read().strip()), signal.SIGTERM)
            note("n3 stopped (SIGTERM)")
            time.sleep(max(0, args.after - 20))
        else:
            time.sleep(args.after)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=args.timeout + 1)
        cluster("down", "--purge", check=False)

    what = {"rolling-restart": f"Rolling restart of {', '.join(m for m in members if m != args.through)}",
            "add": "n4 added to n1, n2, n3", "remove": "n3 removed from n1, n2, n3"}[args.event]
    print(f"{what} under {args.threads} threads "
          f"({'every request to ' + args.through if args.through else 'each request to its key owner'}), "
          f"{args.threads * args.keys_per_thread} keys, node flags: {args.node_flags or 'none'}")
    print()
    print("| s | requests | hit % | failed | stale | events |")
    print("|---:|---:|---:|---:|---:|---|")
    total = Second()
    for second in sorted(tally.seconds):
        row = tally.seconds[second]
        for name in Second.__slots__:
            setattr(total, name, getattr(total, name) + getattr(row, name))
        hit = 100 * row.hits / row.gets if row.gets else 0
        print(f"| {second} | {row.requests} | {hit:.1f} | {row.failed} | {row.stale} | "
              f"{'; '.join(events.get(second, []))} |")

    def hit_ratio(begin: float, end: float) -> float:
        rows = [row for second, row in tally.seconds.items() if begin <= second < end]
        gets = sum(row.gets for row in rows)
        return 100 * sum(row.hits for row in rows) / gets if gets else 0

    before = hit_ratio(first_restart - 5, first_restart)
    if args.event == "rolling-restart":
        after = hit_ratio(last_restart + 25, last_restart + 35)
        window = "from 25 to 35 s after the last restart"
    else:
        after = hit_ratio(last_restart, last_restart + 30)
        window = (f"over the 30 s after the change ({hit_ratio(last_restart, last_restart + 5):.1f}% over the "
                  f"first 5 s)")
    print()
    print(f"requests {total.requests}, failed {total.failed}, stale {total.stale}; hit ratio {before:.1f}% in the "
          f"5 s before the event, {after:.1f}% {window}")
    for example in tally.examples:
        print("  " + example)
    problems = []
    if total.failed:
        problems.append(f"{total.failed} requests failed")
    if total.stale:
        problems.append(f"{total.stale} stale reads")
    if before - after > args.max_hit_drop:
        problems.append(f"the hit ratio is {before - after:.1f} points lower {window}")
    for problem in problems:
        print("FAIL: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
