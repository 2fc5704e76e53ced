#!/usr/bin/env python3
"""Chaos run for a Cachet cluster on 127.0.0.1: client load over N nodes while nodes are killed and
restarted, or frozen and resumed, at random. Bounded in time; stops every process it started.

  python3 Benchmarks/chaos.py --node .build/release/cachet-node                # 3 nodes, 60 s
  python3 Benchmarks/chaos.py --node .build/release/cachet-node --nodes 5 --duration 300 --seed 7

It writes a cluster file, starts the nodes (each with a disk tier of its own, kept across restarts), and
runs --workers client threads that send PUT, GET and DEL of their own keys to a node chosen at random
(a client that knows nothing of the ring: the nodes forward). Each worker knows the last write of each of
its keys that was acknowledged, and every value carries its write's sequence number, so a GET that returns
an older value than an acknowledged write (or a value after an acknowledged DEL) is a wrong value. Misses
and UNAVAILABLE are allowed (it is a cache); a request with no answer within --request-timeout is hung.

Every --interval seconds one node (never more than one at a time) is killed (SIGKILL, restarted after
--down seconds with its data) or frozen (SIGSTOP, resumed after --down seconds). For each disturbance it
measures how long it took until a key owned by that node was answered (OK or NOT_FOUND) through another
node: the time to route around it.

Exit status 0 when there was no wrong value and no hung request, 1 otherwise, 2 on a setup error.
"""

import argparse
import importlib.util
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from soak import GET, PUT, DEL, frame, key_body, put_body  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "ring_vectors", os.path.join(HERE, "..", "Protocol", "tools", "make-ring-vectors.py"))
ring_vectors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ring_vectors)

OK, NOT_FOUND, UNAVAILABLE = 0, 1, 7
STARTED = time.monotonic()
RING = None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Node:
    def __init__(self, binary, member_id, port, cluster_file, directory, extra):
        self.binary, self.id, self.port = binary, member_id, port
        self.cluster_file, self.directory, self.extra = cluster_file, directory, extra
        self.process = None
        self.state = "up"  # up, killed, frozen

    def start(self):
        log = open(os.path.join(self.directory, f"{self.id}.log"), "ab")
        self.process = subprocess.Popen(
            [self.binary, "--cluster", self.cluster_file, "--node-id", self.id, "--host", "127.0.0.1",
             "--port", str(self.port), "--data-dir", os.path.join(self.directory, f"data-{self.id}"),
             "--disk-limit", "64MiB", *self.extra],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, close_fds=True)
        line = self.process.stdout.readline().decode()
        if "listening" not in line:
            raise RuntimeError(f"{self.id} did not start: {line!r}; see {log.name}")
        self.state = "up"

    def stop(self):
        if self.process and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGCONT)
                self.process.kill()
                self.process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


class Request:
    """One request on a fresh connection, with a deadline."""

    @staticmethod
    def send(port, data, timeout):
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(data)
            header = b""
            while len(header) < 12:
                chunk = sock.recv(12 - len(header))
                if not chunk:
                    raise ConnectionError("closed")
                header += chunk
            length = struct.unpack(">I", header[:4])[0] - 8
            body = b""
            while len(body) < length:
                chunk = sock.recv(length - len(body))
                if not chunk:
                    raise ConnectionError("closed")
                body += chunk
            return struct.unpack(">H", header[6:8])[0], body


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"requests": 0, "ok": 0, "misses": 0, "unavailable": 0, "other": 0, "refused": 0,
                       "hung": 0, "wrong": 0}
        self.examples = []

    def add(self, name, example=None):
        with self.lock:
            self.counts[name] += 1
            if example and len(self.examples) < 10:
                self.examples.append(example)


def worker(index, args, nodes, stop, tally):
    rng = random.Random(args.seed * 1000 + index)
    keys = [f"w{index}-k{i}".encode() for i in range(args.keys)]
    acked = {}      # key -> sequence of the last acknowledged write (a DEL's sequence too)
    deleted = {}    # key -> whether that write was a DEL
    sequence = 0
    while not stop.is_set():
        key = rng.choice(keys)
        node = rng.choice(nodes)
        roll = rng.random()
        sequence += 1
        if roll < 0.4:
            request = frame(PUT, put_body(key, b"%d" % sequence), 1)
        elif roll < 0.5:
            request = frame(DEL, key_body(key), 1)
        else:
            request = frame(GET, key_body(key), 1)
        tally.add("requests")
        try:
            status, body = Request.send(node.port, request, args.request_timeout)
        except socket.timeout:
            tally.add("hung", f"{node.id} ({node.state}) gave no answer within {args.request_timeout} s")
            continue
        except OSError:
            tally.add("refused")  # the node chosen is down: a client tries another
            continue
        if status == UNAVAILABLE:
            tally.add("unavailable")
            continue
        if roll < 0.5:  # a write
            if status in (OK, NOT_FOUND):
                acked[key] = sequence
                deleted[key] = roll >= 0.4
                tally.add("ok")
            else:
                tally.add("other")
            continue
        if status == NOT_FOUND:
            tally.add("misses")
        elif status == OK:
            got = int(body)
            last = acked.get(key, 0)
            if got < last or (deleted.get(key) and got <= last):
                states = ",".join(f"{n.id}={n.state}" for n in nodes)
                tally.add("wrong", f"GET {key.decode()} through {node.id}: write {got}, after write {last}"
                                   f"{' (a DEL)' if deleted.get(key) else ''} was acknowledged "
                                   f"(at {time.monotonic() - STARTED:.2f} s; {states}; owner "
                                   f"{RING.owner(key) if RING else '?'})")
            else:
                tally.add("ok")
        else:
            tally.add("other")


def route_around(nodes, ring, victim, args, deadline):
    """Seconds until a key the victim owns is answered (OK or NOT_FOUND) through another node.

    Every other node is asked at once, each by a thread of its own that asks again until it gets an
    answer: asked one after another, each question to a node that forwards to a frozen owner takes a
    forward deadline, and the time measured would be the asking's, not the cluster's."""
    key = next(k for k in (b"probe-%d" % i for i in range(100000)) if ring.owner(k) == victim.id)
    others = [n for n in nodes if n is not victim]
    started = time.monotonic()
    answered = []
    done = threading.Event()

    def ask(node):
        while not done.is_set() and time.monotonic() < deadline:
            try:
                timeout = max(0.05, min(args.request_timeout, deadline - time.monotonic()))
                status, _ = Request.send(node.port, frame(GET, key_body(key), 1), timeout)
                if status in (OK, NOT_FOUND):
                    answered.append(time.monotonic() - started)
                    done.set()
                    return
            except OSError:
                pass
            time.sleep(0.01)

    threads = [threading.Thread(target=ask, args=(node,), daemon=True) for node in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return min(answered) if answered else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", required=True, help="the cachet-node binary")
    parser.add_argument("--nodes", type=int, default=3, help="cluster size, 3 to 9 (default 3)")
    parser.add_argument("--duration", type=float, default=60, help="seconds of load (default 60)")
    parser.add_argument("--workers", type=int, default=8, help="client threads (default 8)")
    parser.add_argument("--keys", type=int, default=200, help="keys per worker (default 200)")
    parser.add_argument("--interval", type=float, default=5, help="seconds between disturbances (default 5)")
    parser.add_argument("--down", type=float, default=2, help="seconds a node stays killed or frozen (default 2)")
    parser.add_argument("--request-timeout", type=float, default=3, help="seconds before a request is hung")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--node-flags", default="--probe-interval 0.2 --forward-timeout 0.5",
                        help="flags for every node (default: --probe-interval 0.2 --forward-timeout 0.5)")
    args = parser.parse_args()
    if not 3 <= args.nodes <= 9 or not os.access(args.node, os.X_OK):
        print("need 3 to 9 nodes and an executable --node", file=sys.stderr)
        return 2

    directory = tempfile.mkdtemp(prefix="cachet-chaos-")
    members = [{"id": f"n{i + 1}", "host": "127.0.0.1", "port": free_port()} for i in range(args.nodes)]
    cluster_file = os.path.join(directory, "cluster.json")
    with open(cluster_file, "w") as f:
        json.dump({"members": members}, f)
    ring = ring_vectors.Ring([m["id"] for m in members], 160)
    global RING, STARTED
    RING = ring
    nodes = [Node(args.node, m["id"], m["port"], cluster_file, directory, args.node_flags.split())
             for m in members]
    rng = random.Random(args.seed)
    stop = threading.Event()
    tally = Tally()
    disturbances = []
    try:
        for node in nodes:
            node.start()
        STARTED = time.monotonic()
        print(f"{args.nodes} nodes up, logs and data in {directory}; {args.workers} workers for "
              f"{args.duration:.0f} s, a disturbance every {args.interval:.0f} s", flush=True)
        threads = [threading.Thread(target=worker, args=(i, args, nodes, stop, tally), daemon=True)
                   for i in range(args.workers)]
        for thread in threads:
            thread.start()
        end = time.monotonic() + args.duration
        while time.monotonic() + args.interval < end:
            time.sleep(args.interval)
            victim = rng.choice(nodes)
            action = rng.choice(["kill", "freeze"])
            at = time.monotonic()
            if action == "kill":
                victim.process.kill()
                victim.process.wait()
                victim.state = "killed"
            else:
                os.kill(victim.process.pid, signal.SIGSTOP)
                victim.state = "frozen"
            routed = route_around(nodes, ring, victim, args, at + args.down)
            time.sleep(max(0, at + args.down - time.monotonic()))
            if action == "kill":
                victim.start()
            else:
                os.kill(victim.process.pid, signal.SIGCONT)
                victim.state = "up"
            with tally.lock:
                counts = dict(tally.counts)
            routed_text = f"{routed:.2f} s" if routed is not None else f"not within {args.down:.0f} s"
            disturbances.append((action, victim.id, routed))
            print(f"[{time.monotonic() - end + args.duration:5.1f}s] (at {at - STARTED:.2f} s) {action} {victim.id}: routed around in "
                  f"{routed_text}; so far {counts['requests']} requests, {counts['wrong']} wrong, "
                  f"{counts['hung']} hung", flush=True)
        time.sleep(max(0, end - time.monotonic()))
        stop.set()
        for thread in threads:
            thread.join(timeout=args.request_timeout + 5)
    finally:
        stop.set()
        for node in nodes:
            node.stop()
    counts = tally.counts
    print(f"requests {counts['requests']}: ok {counts['ok']}, misses {counts['misses']}, unavailable "
          f"{counts['unavailable']}, refused by a dead node {counts['refused']}, other {counts['other']}, "
          f"hung {counts['hung']}, wrong values {counts['wrong']}")
    for action in ("kill", "freeze"):
        times = [t for a, _, t in disturbances if a == action and t is not None]
        missing = sum(1 for a, _, t in disturbances if a == action and t is None)
        if times or missing:
            print(f"{action}: {len(times) + missing} times, routed around in {min(times, default=0):.2f}-"
                  f"{max(times, default=0):.2f} s" + (f", {missing} not within --down" if missing else ""))
    for example in tally.examples:
        print(f"  - {example}")
    failed = counts["wrong"] > 0 or counts["hung"] > 0
    print("CHAOS FAILED" if failed else "CHAOS PASSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
