#!/usr/bin/env python3
"""Register check: a Jepsen-style check of the cluster's promise (Protocol/CLUSTER.md, "Failover without
stale reads"): no GET returns a value that an acknowledged write replaced, while nodes are killed,
terminated, stopped, cut off by network partitions, and their stand-ins disturbed; and how much of what was
acknowledged every member still returns once everything is back (warmth). Python 3.11, standard
library only (the ring uses the xxhash package when it is installed, a pure-Python XXH64 otherwise).
Bounded in time; stops every process it started (and removes the network namespaces it made), also on
Ctrl-C, SIGTERM and errors.

    nice -n 5 python3 Benchmarks/register-check.py                               # 5 nodes, 60 s, every action
    nice -n 5 python3 Benchmarks/register-check.py --node .build/debug/cachet-node --actions term \\
        --duration 45 --seed 1
    nice -n 5 python3 Benchmarks/register-check.py --actions none --duration 20   # must be clean
    nice -n 5 python3 Benchmarks/register-check.py --actions kill --duration 45 --node-defaults \\
        --summary-json /tmp/kill.json                                            # one action kind, the node's defaults
    sudo python3 Benchmarks/register-check.py --network lab --actions all          # partitions too (root)
    python3 Benchmarks/register-check.py --check /tmp/cachet-register-XXXX/history.jsonl   # re-check a run
    python3 Benchmarks/register-check.py --self-test                              # the checker on made-up histories

What it does:
- Writes a cluster file of --nodes members on 127.0.0.1 and starts one `cachet-node` per member (--node;
  default .build/release/cachet-node if it exists, else .build/debug/cachet-node), each with a data
  directory of its own that is kept across its restarts; --node-flags are added to every node (by default
  --probe-interval 0.2 --forward-timeout 0.5, a 2.5 s hold; --node-defaults: none, the node's own defaults,
  a 1 s probe interval, a 1 s forward timeout, an 11 s hold). With
  --network lab (root and iproute2), each node runs in a Linux network namespace of its own on a private
  10.213.X.0/24 behind a bridge, and the client threads reach them from this namespace; nothing leaves the
  machine.
- Runs --workers client threads. Each sends PUT, DEL and GET of --keys shared keys (`key-000` ...) to a node
  chosen at random per request (the nodes forward), on one persistent connection per thread and node
  (reconnecting after a failure), each request bounded by --request-timeout. A request whose connection is
  refused (nothing was sent: the node is down) goes once to another node chosen at random, as CachetClient
  fails over (--no-failover records the refusal instead). Every PUT writes a value
  unique in the whole run (`t<thread>-<seq>`). A request with no reply in time is hung.
- Records every request: thread, key, op, value, send and ack times (time.monotonic(), seconds from the
  start of the load), outcome (OK, NOT_FOUND, UNAVAILABLE, another status with its message, TIMEOUT,
  REFUSED: no connection so nothing sent, CONN_ERROR: the connection failed after sending, CUT_OFF: no
  reply from a node the nemesis had cut off) and the node.
- A nemesis (seeded by --seed) runs one action at a time from --actions, with a pause of --pause-min to
  --pause-max seconds where a node is down or frozen and about --interval seconds between actions:
    kill             SIGKILL a node, restart it on the same data directory after the pause
    term             SIGTERM a node, wait for its exit (at most --term-wait s, then SIGKILL), restart it
    stop             SIGSTOP a node, SIGCONT it after the pause
    cascade-standin  SIGKILL an owner, and 0.2-1 s later SIGKILL or SIGTERM the member that most likely
                     stands in for it (the second entry of the preference list of most of the owner's keys,
                     from Protocol/RING.md); after the pause restart both, in random order
    cascade-return   SIGKILL that stand-in, restart it, and SIGKILL the owner 0.3-1.7 s after the stand-in
                     is back; restart the owner after the pause
    cascade-freeze   SIGKILL an owner, and 0.2-1 s later SIGSTOP its likely stand-in while it stands in;
                     SIGCONT it after the pause (the others have given the owner's keys to the next member
                     meanwhile), and restart the owner 0.3-3.5 s later: during the stand-in's hold, or after
    isolate          (--network lab) cut a node off from every peer, the clients still reaching it, and heal
                     after the pause: lost packets, not refusals (every namespace knows every address's MAC,
                     and the cut points a pair's entries at a MAC nobody has)
    split            (--network lab) an owner and its likely stand-in on one side, the other three on the
                     other, the clients reaching every node; heal after the pause
    cutoff           (--network lab) nothing reaches a node or leaves it, clients included; its requests'
                     timeouts are recorded as CUT_OFF, not hung
  --actions all takes every kind (partitions need --network lab). Each round of actions takes every kind
  listed once, in a seeded random order; no action starts unless it
  can end before the load does. At most two nodes are disturbed at once, so 3 of 5 always stand. Every
  action and step is logged with its time.
- After the run, offline and without looking at the nemesis, the checker reads the history. A GET that
  returned value v is STALE when v's PUT was acknowledged at time a and another PUT or DEL of that key was
  sent after a and acknowledged (PUT: OK; DEL: OK or NOT_FOUND) before the GET was sent. A GET of a value
  never written to that key is CORRUPT; one of a value whose PUT was sent after the GET completed is
  IMPOSSIBLE. NOT_FOUND is always allowed (a cache), and so is a value whose PUT got no acknowledgement
  (it may have been applied). Per key, acknowledged writes sorted by ack time with a running maximum of
  send times: O(n log n).
- Each stale read is attributed to the nemesis actions in progress while it ran or that ended within
  --attribution-window seconds before it was sent (the latest-started one is its primary action).
- Writes acknowledged: the share of every PUT and DEL the threads sent that was acknowledged, REFUSED ones
  (no member took the connection, the failover's included: nothing was sent) counted among those sent, also
  given without them, and the writes by outcome with the UNAVAILABLE messages they got.
- Warmth: once the load has stopped (no request in flight) and the nemesis has ended its actions, anything
  it left is brought back (a cut healed, a stopped node SIGCONTed, a node down restarted; normally none), and
  at each of --warmth-at seconds after the later of the load's end and the last member's return, every key
  is read through every member (one GET each, a fresh connection per member and moment). A key's expected
  state is the effect of its last acknowledged write by ack time, L, unless another write, acknowledged or
  not but not REFUSED, got its outcome at or after L's send: it overlaps L or follows it and may have been
  applied after it, so the key is ambiguous and left out (counted). A key is warm when every member returns
  L's value; keys whose L is a DEL are counted apart (NOT_FOUND through every member). A value other than
  the expected one is judged as during the load: stale (the run fails), of an unacknowledged PUT (allowed),
  or corrupt (fails).

Output: a Markdown report on stdout (requests by op and outcome, acknowledged writes, stale, corrupt, hung,
warmth at each moment, writes by outcome, the warmth reads by kind, with the owners of the keys not warm,
stale per action kind, the actions, UNAVAILABLE messages and how long writes of a restarted node's keys
were refused, the first 10 stale reads with their timelines, and the node logs' lines around the first 3
episodes: membership changes and lines naming the key, so that a report is enough to diagnose a run
whose files are gone), a progress line every 10 s on stderr, and the history (history.jsonl), the nemesis
log (nemesis.jsonl), the warmth reads (warmth.json), the cluster file and the node logs in a temporary
directory whose path is printed (the nodes' data directories are removed at the end unless --keep-data; all
of it when the check passed, with --remove-when-passed). The last line is the verdict with the summary as
JSON (REGISTER CHECK PASSED: {...}); --summary-json PATH also writes it, with the warmth details and the
run's settings, for tabulating runs.

Exit status: 0 when no read was stale, corrupt or impossible (during the load or after the return), no
request hung, and (with --min-ack-ratio) enough writes were acknowledged and (with --min-warmth) enough keys
were warm at the last --warmth-at moment; 1 otherwise; 2 on a setup error (no binary, a node that did not
start).
"""

from __future__ import annotations

import argparse
import atexit
import bisect
import collections
import datetime
import importlib.util
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # importing soak.py leaves no __pycache__ in the repository
from soak import DEL, GET, NOT_FOUND, OK, PUT, STATUS_NAMES, Connection, key_body, put_body  # noqa: E402

UNAVAILABLE = 7
OPS = {PUT: "PUT", DEL: "DEL", GET: "GET"}
OUTCOMES = ["OK", "NOT_FOUND", "UNAVAILABLE", "ERROR", "TIMEOUT", "CUT_OFF", "REFUSED", "CONN_ERROR"]
# The node flags given by default (as chaos.py): a peer down is seen within about a second, and the hold after
# a return is 10 x 0.2 + 0.5 = 2.5 s instead of the node's default 11 s. --node-defaults gives none.
TUNED_NODE_FLAGS = "--probe-interval 0.2 --forward-timeout 0.5"
ACTION_KINDS = ["kill", "term", "stop", "cascade-standin", "cascade-return", "cascade-freeze", "isolate", "split",
                "cutoff"]
# Actions that cut the network: they need --network lab (root, iproute2).
PARTITION_KINDS = {"isolate", "split", "cutoff"}


class SetupError(Exception):
    """Something that keeps the run from starting or going on: exit status 2."""


# MARK: - The ring (Protocol/RING.md), through Protocol/tools/make-ring-vectors.py


def _xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 in pure Python, for machines without the xxhash package (checked against RING.md's table)."""
    p1, p2, p3, p4, p5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                          0x27D4EB2F165667C5)
    mask = (1 << 64) - 1

    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) & mask

    def round_(acc, lane):
        return (rotl((acc + lane * p2) & mask, 31) * p1) & mask

    length, index = len(data), 0
    if length >= 32:
        v1, v2, v3, v4 = (seed + p1 + p2) & mask, (seed + p2) & mask, seed, (seed - p1) & mask
        while index + 32 <= length:
            a, b, c, d = struct.unpack_from("<4Q", data, index)
            v1, v2, v3, v4 = round_(v1, a), round_(v2, b), round_(v3, c), round_(v4, d)
            index += 32
        acc = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) & mask
        for v in (v1, v2, v3, v4):
            acc = ((acc ^ round_(0, v)) * p1 + p4) & mask
    else:
        acc = (seed + p5) & mask
    acc = (acc + length) & mask
    while index + 8 <= length:
        (lane,) = struct.unpack_from("<Q", data, index)
        acc = (rotl(acc ^ round_(0, lane), 27) * p1 + p4) & mask
        index += 8
    if index + 4 <= length:
        (lane,) = struct.unpack_from("<I", data, index)
        acc = (rotl(acc ^ ((lane * p1) & mask), 23) * p2 + p3) & mask
        index += 4
    while index < length:
        acc = (rotl(acc ^ ((data[index] * p5) & mask), 11) * p1) & mask
        index += 1
    acc ^= acc >> 33
    acc = (acc * p2) & mask
    acc ^= acc >> 29
    acc = (acc * p3) & mask
    acc ^= acc >> 32
    return acc


def load_ring_module():
    """Protocol/tools/make-ring-vectors.py, as chaos.py uses it; with _xxh64 standing in for xxhash if needed."""
    try:
        import xxhash  # noqa: F401
    except ImportError:
        assert _xxh64(b"") == 0xEF46DB3751D8E999 and _xxh64(b"abc") == 0x44BC2CF5AD770999
        assert _xxh64(b"The quick brown fox jumps over the lazy dog") == 0x0B242D361FDA71BC
        shim = types.ModuleType("xxhash")
        shim.xxh64_intdigest = lambda data, seed=0: _xxh64(bytes(data), seed)
        sys.modules["xxhash"] = shim
    spec = importlib.util.spec_from_file_location(
        "ring_vectors", os.path.join(ROOT, "Protocol", "tools", "make-ring-vectors.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class KeyMap:
    """Owner and preference list of every workload key, and each member's most likely stand-in."""

    def __init__(self, member_ids: list[str], keys: list[str], virtual_nodes: int = 160) -> None:
        ring = load_ring_module().Ring(member_ids, virtual_nodes)
        self.preference = {key: ring.preference(key.encode(), len(member_ids)) for key in keys}
        self.owner = {key: prefs[0] for key, prefs in self.preference.items()}
        self.stand_in = {}
        for member in member_ids:
            counts = collections.Counter(prefs[1] for prefs in self.preference.values() if prefs[0] == member)
            ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            self.stand_in[member] = ranked[0][0] if ranked else next(m for m in member_ids if m != member)


# MARK: - Network lab


class NetworkLab:
    """Every node in a Linux network namespace of its own, as NodePartitionTests builds them
    (Sources/CachetTestSupport/NetworkNamespaceLab.swift): a hub namespace with a bridge, one veth per node on a
    private 10.213.X.0/24, and one veth from this namespace, where the client threads run. Every namespace knows
    every address's MAC as a permanent neighbour, so a partition is lost packets, never a refusal:
    - cut(a, b): a's and b's entries for each other point at a MAC nobody has; frames between them are
      flooded by the bridge and dropped by everyone, both ways, while the clients still reach both;
    - cut_off(n): n's bridge port is detached: nothing reaches n or leaves it, clients included.
    Needs root and iproute2's ip. remove() kills what runs in the namespaces and deletes them."""

    def __init__(self, count: int) -> None:
        if os.geteuid() != 0:
            raise SetupError("--network lab needs root (network namespaces)")
        self.ip_path = shutil.which("ip")
        if self.ip_path is None:
            raise SetupError("--network lab needs iproute2's ip")
        self.prefix = f"crc{os.getpid()}"
        self.hub, self.bridge, self.host_device = f"{self.prefix}-hub", f"{self.prefix}b", f"{self.prefix}h"
        self.octet = self._free_octet(16 + os.getpid() % 224)
        self.subnet = f"10.213.{self.octet}"
        self.client_address = f"{self.subnet}.254"
        self.namespaces = [f"{self.prefix}-{n}" for n in range(1, count + 1)]
        self.addresses = [f"{self.subnet}.{n}" for n in range(1, count + 1)]
        self.ports = [f"{self.prefix}p{n}" for n in range(1, count + 1)]
        self.removed = False
        self.cuts: set[tuple[int, int]] = set()  # the pairs cut() cut and join() has not joined yet
        try:
            self._build()
        except BaseException:
            self.remove()
            raise

    def mac(self, last: int) -> str:
        return f"02:ce:{self.octet:02x}:00:00:{last:02x}"

    def ip(self, *arguments: str) -> str:
        result = subprocess.run([self.ip_path, *arguments], capture_output=True, text=True, timeout=10)
        if result.returncode != 0:
            raise SetupError(f"ip {' '.join(arguments)}: {result.stderr.strip()}")
        return result.stdout

    def _free_octet(self, start: int) -> int:
        for step in range(240):
            octet = 16 + (start - 16 + step) % 240
            routes = self.ip("-4", "route", "show", "match", f"10.213.{octet}.0/24").splitlines()
            if not [r for r in routes if not r.startswith("default")]:
                return octet
        raise SetupError("every 10.213.X.0/24 is routed here already")

    def _build(self) -> None:
        self.ip("netns", "add", self.hub)
        self.ip("-n", self.hub, "link", "set", "lo", "up")
        self.ip("-n", self.hub, "link", "add", self.bridge, "type", "bridge")
        self.ip("-n", self.hub, "link", "set", self.bridge, "up")
        for number, (namespace, address, port) in enumerate(zip(self.namespaces, self.addresses, self.ports), 1):
            self.ip("netns", "add", namespace)
            self.ip("-n", namespace, "link", "set", "lo", "up")
            self.ip("link", "add", port, "netns", self.hub, "type", "veth", "peer", "name", "lab0",
                    "netns", namespace, "address", self.mac(number))
            self.ip("-n", self.hub, "link", "set", port, "master", self.bridge, "up")
            self.ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "lab0")
            self.ip("-n", namespace, "link", "set", "lab0", "up")
        self.ip("link", "add", self.host_device, "address", self.mac(254), "type", "veth",
                "peer", "name", f"{self.prefix}g", "netns", self.hub)
        self.ip("-n", self.hub, "link", "set", f"{self.prefix}g", "master", self.bridge, "up")
        self.ip("addr", "add", f"{self.client_address}/24", "dev", self.host_device)
        self.ip("link", "set", self.host_device, "up")
        everyone = [(None, "254", self.host_device)] + [(ns, str(n), "lab0") for n, ns in
                                                         enumerate(self.namespaces, 1)]
        for namespace, own, device in everyone:
            for _, other, _ in everyone:
                if other != own:
                    self._neighbour(namespace, int(other), self.mac(int(other)), device)

    def _neighbour(self, namespace: str | None, number: int, mac: str, device: str = "lab0") -> None:
        where = ["-n", namespace] if namespace else []
        self.ip(*where, "neigh", "replace", f"{self.subnet}.{number}", "lladdr", mac, "dev", device, "nud", "permanent")

    def launcher(self, index: int) -> list[str]:
        return [self.ip_path, "netns", "exec", self.namespaces[index]]

    def cut(self, a: int, b: int) -> None:
        """Nodes a and b (indices from 0) no longer reach each other; the clients still reach both."""
        nowhere = self.mac(253)
        self._neighbour(self.namespaces[a], b + 1, nowhere)
        self._neighbour(self.namespaces[b], a + 1, nowhere)
        self.cuts.add((min(a, b), max(a, b)))

    def join(self, a: int, b: int) -> None:
        self._neighbour(self.namespaces[a], b + 1, self.mac(b + 1))
        self._neighbour(self.namespaces[b], a + 1, self.mac(a + 1))
        self.cuts.discard((min(a, b), max(a, b)))

    def cut_off(self, index: int) -> None:
        self.ip("-n", self.hub, "link", "set", self.ports[index], "nomaster")

    def reconnect(self, index: int) -> None:
        self.ip("-n", self.hub, "link", "set", self.ports[index], "master", self.bridge)

    def remove(self) -> None:
        if self.removed:
            return
        self.removed = True
        for namespace in self.namespaces + [self.hub]:
            try:
                pids = subprocess.run([self.ip_path, "netns", "pids", namespace], capture_output=True, text=True,
                                      timeout=10).stdout.split()
            except (OSError, subprocess.TimeoutExpired):
                pids = []
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run([self.ip_path, "netns", "delete", namespace], capture_output=True, timeout=10)
        subprocess.run([self.ip_path, "link", "delete", self.host_device], capture_output=True, timeout=10)


# MARK: - Nodes


class NodeProcess:
    """One cluster member: its process (restarted on the same port and data directory) and its log."""

    def __init__(self, cluster: "Cluster", member_id: str, host: str, port: int, launcher: list[str]) -> None:
        self.cluster, self.id, self.host, self.port, self.launcher = cluster, member_id, host, port, launcher
        self.data_dir = os.path.join(cluster.directory, f"data-{member_id}")
        self.log_path = os.path.join(cluster.directory, f"{member_id}.log")
        self.process: subprocess.Popen | None = None
        self.state = "down"  # up, killed, terminated, frozen, down
        self.cut_off = False  # no packet reaches it or leaves it (--network lab, action cutoff)
        self.cut_changes = 0  # how often cut_off changed: a request that saw it change may have been cut off

    def start(self, timeout: float = 30) -> None:
        """Starts the process and waits for its 'listening' line; raises SetupError if it does not come."""
        with self.cluster.lock:
            if self.cluster.closing:
                raise SetupError("the run is stopping")
            log = open(self.log_path, "ab")
            self.process = subprocess.Popen(
                [*self.launcher, self.cluster.binary, "--cluster", self.cluster.cluster_file, "--node-id", self.id,
                 "--host", self.host, "--port", str(self.port), "--data-dir", self.data_dir,
                 "--disk-limit", "64MiB", *self.cluster.extra_flags],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, close_fds=True,
                start_new_session=True)  # our Ctrl-C is ours to handle: the nodes are stopped by the cleanup
            log.close()
        process = self.process
        line, deadline = b"", time.monotonic() + timeout
        while b"\n" not in line and time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
        text = line.decode(errors="replace")
        if "listening" not in text:
            self.kill()
            raise SetupError(f"{self.id} did not start within {timeout:.0f} s (printed {text.strip()!r}); "
                             f"see {self.log_path}")
        threading.Thread(target=self._drain, args=(process,), daemon=True).start()
        self.state = "up"

    def _drain(self, process: subprocess.Popen) -> None:
        """Keeps reading the node's stdout so that it can never block on a full pipe."""
        try:
            with open(self.log_path, "ab") as log:
                while chunk := process.stdout.read1(4096):
                    log.write(chunk)
        except (OSError, ValueError):
            pass

    def send(self, signal_number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal_number)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL (after SIGCONT, so that a frozen node is not left stopped should the kill fail) and reap."""
        if self.process is not None:
            self.send(signal.SIGCONT)
            self.send(signal.SIGKILL)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.state = "killed"

    def terminate(self, bound: float) -> tuple[bool, float, int | None]:
        """SIGTERM and wait for the exit; SIGKILL after `bound` s. Returns (exited by itself, seconds, status)."""
        started = time.monotonic()
        self.send(signal.SIGTERM)
        try:
            status = self.process.wait(timeout=bound)
            clean = True
        except subprocess.TimeoutExpired:
            self.kill()
            status, clean = self.process.returncode, False
        self.state = "terminated"
        return clean, time.monotonic() - started, status


class Cluster:
    """The nodes, and the one lock that keeps a restart from racing the final cleanup."""

    def __init__(self, binary: str, count: int, directory: str, extra_flags: list[str],
                 lab: NetworkLab | None = None) -> None:
        self.binary, self.directory, self.extra_flags, self.lab = binary, directory, extra_flags, lab
        self.lock = threading.Lock()
        self.closing = False
        self.cluster_file = os.path.join(directory, "cluster.json")
        if lab is not None:  # one address per node, one port for all
            members = [{"id": f"n{i + 1}", "host": address, "port": 7420} for i, address in enumerate(lab.addresses)]
        else:
            members = [{"id": f"n{i + 1}", "host": "127.0.0.1", "port": port} for i, port in enumerate(free_ports(count))]
        with open(self.cluster_file, "w") as f:
            json.dump({"members": members}, f, indent=1)
        self.nodes = [NodeProcess(self, m["id"], m["host"], m["port"], lab.launcher(i) if lab else [])
                      for i, m in enumerate(members)]
        self.by_id = {node.id: node for node in self.nodes}

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def shutdown(self) -> None:
        """Kills every node this run started; safe to call more than once, from atexit too."""
        with self.lock:
            self.closing = True
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.kill()
        if self.lab is not None:
            self.lab.remove()


def free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
            ports.append(probe.getsockname()[1])
    finally:
        for probe in sockets:
            probe.close()
    return ports


# MARK: - Clients


class RequestTimeout(Exception):
    pass


class ClientConnection(Connection):
    """soak.py's connection to one node, each request within a deadline (a timeout is RequestTimeout), that
    can tell whether the node closed it while it was idle."""

    def __init__(self, host: str, port: int, deadline: float) -> None:
        super().__init__(port, max(0.01, deadline - time.monotonic()), host)

    def looks_closed(self) -> bool:
        """True when the node closed or reset the connection while it was idle (EOF or an error is waiting)."""
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
            return bool(readable)
        except (OSError, ValueError):
            return True

    def request(self, opcode: int, body: bytes = b"", deadline: float | None = None) -> tuple[int, bytes]:
        try:
            return super().request(opcode, body, deadline)
        except socket.timeout:
            raise RequestTimeout() from None


# One request of the history: times are seconds since the start of the load (time.monotonic()).
Record = collections.namedtuple("Record", "thread key op value send ack outcome message node")


def attempt(node: NodeProcess, opcode: int, body: bytes, deadline: float, connections: dict, args) \
        -> tuple[str, str, str | None]:
    """Sends one request to `node` on the thread's connection to it (opened if needed) and waits for its
    reply until `deadline`. Returns (outcome, message, the value a GET returned)."""
    connection = connections.get(node.id)
    if connection is not None and connection.looks_closed():  # closed while idle: the node restarted
        connections.pop(node.id).close()
        connection = None
    cut_before = (node.cut_off, node.cut_changes)
    outcome, message, reply_value = "", "", None
    try:
        if connection is None:
            try:
                connection = ClientConnection(node.host, node.port, deadline)
            except socket.timeout:
                raise RequestTimeout() from None
            except OSError as error:  # nothing was sent: the write is known not to be applied
                outcome, message = "REFUSED", f"{type(error).__name__}: {error}"
                raise
            connections[node.id] = connection
        status, reply = connection.request(opcode, body, deadline)
        if status == OK:
            outcome = "OK"
            if opcode == GET:
                reply_value = reply.decode(errors="replace")
        elif status == NOT_FOUND:
            outcome = "NOT_FOUND"
        elif status == UNAVAILABLE:
            outcome, message = "UNAVAILABLE", reply.decode(errors="replace")
        else:
            outcome, message = "ERROR", f"{STATUS_NAMES.get(status, status)}: {reply.decode(errors='replace')}"
    except RequestTimeout:
        if cut_before[0] or node.cut_changes != cut_before[1]:  # the network ate it, not the node
            outcome, message = "CUT_OFF", f"no reply within {args.request_timeout:g} s from a node cut off"
        else:
            outcome, message = "TIMEOUT", f"no reply within {args.request_timeout:g} s"
        dropped = connections.pop(node.id, None)
        if dropped is not None:
            dropped.close()  # a late reply would be taken for the next request's
    except (OSError, ConnectionError) as error:
        if not message:
            outcome, message = "CONN_ERROR", f"{type(error).__name__}: {error}"
        dropped = connections.pop(node.id, None)
        if dropped is not None:
            dropped.close()
    return outcome, message, reply_value


def client(index: int, args, cluster: Cluster, keys: list[str], t0: float, stop: threading.Event,
           history: list[Record], counts: collections.Counter) -> None:
    rng = random.Random(args.seed * 1000 + index)
    connections: dict[str, ClientConnection] = {}
    sequence = 0
    while not stop.is_set():
        key = rng.choice(keys)
        node = rng.choice(cluster.nodes)
        roll = rng.random()
        value = None
        if roll < args.put_ratio:
            sequence += 1
            value = f"t{index}-{sequence}"
            opcode, body = PUT, put_body(key.encode(), value.encode())
        elif roll < args.put_ratio + args.del_ratio:
            opcode, body = DEL, key_body(key.encode())
        else:
            opcode, body = GET, key_body(key.encode())
        send = time.monotonic()
        deadline = send + args.request_timeout
        tried: set[str] = set()
        while True:
            outcome, message, reply_value = attempt(node, opcode, body, deadline, connections, args)
            tried.add(node.id)
            # A refused connection sent nothing: a client that knows the members tries another one, once
            # (as CachetClient fails over), with the same request and the same deadline.
            if outcome != "REFUSED" or not args.failover or len(tried) > 1:
                break
            node = rng.choice([n for n in cluster.nodes if n.id not in tried])
        ack = time.monotonic()
        history.append(Record(index, key, OPS[opcode], value if opcode == PUT else reply_value,
                              round(send - t0, 6), round(ack - t0, 6), outcome, message, node.id))
        counts[outcome] += 1
        if outcome == "REFUSED":
            stop.wait(0.005)  # the node is down; do not spin on it
    for connection in connections.values():
        connection.close()


# MARK: - Nemesis


class Nemesis(threading.Thread):
    """One action at a time, drawn from --actions with a seeded random source; logs every step."""

    def __init__(self, args, cluster: Cluster, key_map: KeyMap, t0: float, end: float,
                 stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.args, self.cluster, self.key_map, self.t0, self.end, self.stop = args, cluster, key_map, t0, end, stop
        self.rng = random.Random(args.seed)
        self.actions: list[dict] = []
        self.current: dict | None = None
        self.error: BaseException | None = None

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def step(self, text: str) -> None:
        self.current["steps"].append([self.now(), text])

    def pause(self) -> float:
        return self.rng.uniform(self.args.pause_min, self.args.pause_max)

    def sleep(self, seconds: float) -> None:
        self.stop.wait(max(0.0, seconds))

    def run(self) -> None:
        kinds: list[str] = []
        try:
            while not self.stop.is_set():
                self.sleep(self.rng.uniform(0.5, 1.5) * self.args.interval)
                if not kinds:  # every kind once per round, in a seeded order: a short run still has each
                    kinds = self.rng.sample(self.args.action_list, len(self.args.action_list))
                kind = kinds.pop()
                # room for the pauses and restarts (a cascade has two of each) before the load ends
                needed = (2 * self.args.pause_max + 7) if kind.startswith("cascade") else self.args.pause_max + 4
                if kind == "term":
                    needed += 2
                if self.stop.is_set() or time.monotonic() + needed > self.end:
                    break
                owner = self.rng.choice(self.cluster.nodes)
                self.current = {"id": len(self.actions) + 1, "kind": kind, "start": self.now(), "end": None,
                                "victims": [], "steps": []}
                self.actions.append(self.current)
                getattr(self, "action_" + kind.replace("-", "_"))(owner)
                self.current["end"] = self.now()
                self.current = None
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            self.error = error
            if self.current is not None:
                self.current["steps"].append([self.now(), f"failed: {error}"])
                self.current["end"] = self.now()

    def _restart(self, node: NodeProcess, reason: str = "restarted") -> None:
        node.start()
        self.step(f"{node.id} {reason} (listening)")
        self.current.setdefault("restarts", []).append([node.id, self.now()])

    def _kill_node(self, node: NodeProcess) -> None:
        node.kill()
        self.step(f"{node.id} SIGKILL")

    def _term_node(self, node: NodeProcess) -> None:
        self.step(f"{node.id} SIGTERM")
        clean, seconds, status = node.terminate(self.args.term_wait)
        self.step(f"{node.id} exited with status {status} after {seconds:.2f} s" if clean else
                  f"{node.id} still running {seconds:.1f} s after SIGTERM: SIGKILL")

    def action_kill(self, node: NodeProcess) -> None:
        self.current["victims"] = [node.id]
        self._kill_node(node)
        self.sleep(self.pause())
        self._restart(node)

    def action_term(self, node: NodeProcess) -> None:
        self.current["victims"] = [node.id]
        self._term_node(node)
        self.sleep(self.pause())
        self._restart(node)

    def _freeze(self, node: NodeProcess) -> None:
        node.send(signal.SIGSTOP)
        node.state = "frozen"
        self.step(f"{node.id} SIGSTOP")

    def _thaw(self, node: NodeProcess) -> None:
        node.send(signal.SIGCONT)
        node.state = "up"
        self.step(f"{node.id} SIGCONT")
        self.current.setdefault("restarts", []).append([node.id, self.now()])

    def action_stop(self, node: NodeProcess) -> None:
        self.current["victims"] = [node.id]
        self._freeze(node)
        self.sleep(self.pause())
        self._thaw(node)

    def _heal(self, nodes: list[NodeProcess], what: str) -> None:
        self.step(what)
        for node in nodes:
            self.current.setdefault("restarts", []).append([node.id, self.now()])

    def _cut_pairs(self, side: list[NodeProcess], join: bool = False) -> None:
        """Cuts (or joins) every pair of nodes across the border between `side` and the rest."""
        lab, indices = self.cluster.lab, [self.cluster.nodes.index(n) for n in side]
        for a in indices:
            for b in range(len(self.cluster.nodes)):
                if b not in indices:
                    (lab.join if join else lab.cut)(a, b)

    def action_isolate(self, node: NodeProcess) -> None:
        """The node reaches no peer and no peer reaches it; every client still reaches it."""
        self.current["victims"] = [node.id]
        self._cut_pairs([node])
        self.step(f"{node.id} cut off from every peer (clients still reach it)")
        self.sleep(self.pause())
        self._cut_pairs([node], join=True)
        self._heal([node], f"{node.id} reaches its peers again")

    def action_split(self, owner: NodeProcess) -> None:
        """Two nodes (an owner and its likely stand-in) on one side, the rest on the other; clients reach all."""
        stand_in = self.cluster.by_id[self.key_map.stand_in[owner.id]]
        side = [owner, stand_in]
        self.current["victims"] = [owner.id, stand_in.id]
        self._cut_pairs(side)
        self.step(f"split: {owner.id} {stand_in.id} | the others (clients reach every node)")
        self.sleep(self.pause())
        self._cut_pairs(side, join=True)
        self._heal(side, "split healed")

    def action_cutoff(self, node: NodeProcess) -> None:
        """Nothing reaches the node or leaves it, clients included: their requests to it time out."""
        self.current["victims"] = [node.id]
        node.cut_changes += 1
        node.cut_off = True
        self.cluster.lab.cut_off(self.cluster.nodes.index(node))
        self.step(f"{node.id} cut off from everyone")
        self.sleep(self.pause())
        self.cluster.lab.reconnect(self.cluster.nodes.index(node))
        node.cut_off = False
        node.cut_changes += 1
        self._heal([node], f"{node.id} reconnected")

    def action_cascade_standin(self, owner: NodeProcess) -> None:
        stand_in = self.cluster.by_id[self.key_map.stand_in[owner.id]]
        self.current["victims"] = [owner.id, stand_in.id]
        self._kill_node(owner)
        self.sleep(self.rng.uniform(0.2, 1.0))
        if self.rng.random() < 0.5:
            self._kill_node(stand_in)
        else:
            self._term_node(stand_in)
        self.sleep(self.pause())
        first, second = (owner, stand_in) if self.rng.random() < 0.5 else (stand_in, owner)
        self._restart(first)
        self.sleep(self.rng.uniform(0.0, 1.0))
        self._restart(second)

    def action_cascade_return(self, owner: NodeProcess) -> None:
        stand_in = self.cluster.by_id[self.key_map.stand_in[owner.id]]
        self.current["victims"] = [stand_in.id, owner.id]
        self._kill_node(stand_in)
        self.sleep(self.pause())
        self._restart(stand_in)
        self.sleep(self.rng.uniform(0.3, 1.7))
        self._kill_node(owner)
        self.sleep(self.pause())
        self._restart(owner)

    def action_cascade_freeze(self, owner: NodeProcess) -> None:
        stand_in = self.cluster.by_id[self.key_map.stand_in[owner.id]]
        self.current["victims"] = [owner.id, stand_in.id]
        self._kill_node(owner)
        self.sleep(self.rng.uniform(0.2, 1.0))
        self._freeze(stand_in)
        self.sleep(self.pause())
        self._thaw(stand_in)
        self.sleep(self.rng.uniform(0.3, 3.5))
        self._restart(owner)


# MARK: - Warmth reads: one GET of every key through every member, once everything is back


def bring_back(cluster: Cluster, t0: float) -> list[list]:
    """Ends whatever the nemesis left behind (it should leave nothing: no action starts unless it can end
    before the load does, and the load's end cuts its pauses short): joins every pair it cut, reconnects a
    node cut off, SIGCONTs a frozen node and restarts one that is down. Returns the steps taken, each
    [seconds since t0, what]."""
    steps = []
    lab = cluster.lab
    if lab is not None:
        for a, b in sorted(lab.cuts):
            lab.join(a, b)
            steps.append([round(time.monotonic() - t0, 6), f"{cluster.nodes[a].id} and {cluster.nodes[b].id} "
                                                           f"reach each other again"])
    for index, node in enumerate(cluster.nodes):
        if lab is not None and node.cut_off:
            lab.reconnect(index)
            node.cut_off = False
            node.cut_changes += 1
            steps.append([round(time.monotonic() - t0, 6), f"{node.id} reconnected"])
        if node.process is None or node.process.poll() is not None:
            node.start()
            steps.append([round(time.monotonic() - t0, 6), f"{node.id} restarted (it was down; listening)"])
        elif node.state == "frozen":
            node.send(signal.SIGCONT)
            node.state = "up"
            steps.append([round(time.monotonic() - t0, 6), f"{node.id} SIGCONT (it was stopped)"])
    return steps


def read_everywhere(cluster: Cluster, keys: list[str], t0: float, args) -> list[list]:
    """One GET of every key through every member: a thread and a fresh connection per member, each request
    within --request-timeout; after 3 timeouts in a row a member's remaining keys are recorded as TIMEOUT
    without being sent. Returns [key, member, outcome, value, message, send, ack] per read, times in seconds
    since t0."""
    per_member: dict[str, list[list]] = {node.id: [] for node in cluster.nodes}

    def reader(node: NodeProcess) -> None:
        connections: dict[str, ClientConnection] = {}
        timeouts = 0
        for key in keys:
            send = time.monotonic()
            if timeouts >= 3:
                at = round(send - t0, 6)
                per_member[node.id].append([key, node.id, "TIMEOUT", None, "not sent: 3 reads in a row timed out",
                                            at, at])
                continue
            outcome, message, value = attempt(node, GET, key_body(key.encode()), send + args.request_timeout,
                                              connections, args)
            timeouts = timeouts + 1 if outcome in ("TIMEOUT", "CUT_OFF") else 0
            per_member[node.id].append([key, node.id, outcome, value, message, round(send - t0, 6),
                                        round(time.monotonic() - t0, 6)])
        for connection in connections.values():
            connection.close()

    readers = [threading.Thread(target=reader, args=(node,), daemon=True) for node in cluster.nodes]
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join()
    return [read for node in cluster.nodes for read in per_member[node.id]]


def measure_warmth(cluster: Cluster, keys: list[str], t0: float, args, load_stopped: float,
                   actions: list[dict]) -> dict:
    """Once the load has stopped and the nemesis has ended: brings everything back (bring_back), takes the
    moment the last member returned as `back` (a restart's 'listening', a SIGCONT, a healed cut, or the load's
    end if later), and reads every key through every member at each of --warmth-at seconds after it.
    Returns the record evaluate_warmth reads (written to warmth.json)."""
    restored = bring_back(cluster, t0)
    returns = [at for action in actions for _, at in action.get("restarts", [])] + [at for at, _ in restored]
    last_return = max(returns, default=None)
    back = max(load_stopped, last_return if last_return is not None else load_stopped)
    moments = []
    for planned in args.warmth_moments:
        wait = t0 + back + planned - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        start = time.monotonic() - t0
        reads = read_everywhere(cluster, keys, t0, args)
        end = time.monotonic() - t0
        moments.append({"planned": planned, "start": round(start, 6), "end": round(end, 6), "reads": reads})
        counts = collections.Counter(read[2] for read in reads)
        print(f"[warmth +{start - back:4.1f} s] {len(reads):,} reads in {end - start:.2f} s: "
              + ", ".join(f"{o} {counts[o]:,}" for o in OUTCOMES if counts[o]), file=sys.stderr, flush=True)
    return {"back": round(back, 6), "load_stopped": round(load_stopped, 6), "last_return": last_return,
            "restored": restored, "moments": moments}


# MARK: - Checker (offline)


class ReadIndex:
    """What tells a GET's value allowed or not: every PUT by value and, per key, the acknowledged writes sorted
    by ack time with a running maximum of their send times (the latest-sent write acknowledged so far)."""

    def __init__(self, history: list[Record]) -> None:
        self.puts_by_value: dict[str, Record] = {}
        writes_by_key: dict[str, list[Record]] = collections.defaultdict(list)
        for record in history:
            if record.op == "PUT":
                self.puts_by_value[record.value] = record
            if acknowledged(record):
                writes_by_key[record.key].append(record)
        self.index: dict[str, tuple[list[float], list[float], list[Record]]] = {}
        for key, writes in writes_by_key.items():
            writes.sort(key=lambda r: r.ack)
            acks, running_send, witness = [], [], []
            best: Record | None = None
            for write in writes:
                if best is None or write.send > best.send:
                    best = write
                acks.append(write.ack)
                running_send.append(best.send)
                witness.append(best)
            self.index[key] = (acks, running_send, witness)

    def classify(self, get: Record) -> tuple[str, dict | None]:
        """The verdict on a GET that returned a value: "allowed", "unacknowledged" (its PUT got no
        acknowledgement: allowed, it may have been applied), "stale", "corrupt" or "impossible", with the item
        the report lists for the last three. O(log n)."""
        put = self.puts_by_value.get(get.value)
        if put is None or put.key != get.key:
            return "corrupt", {"get": get._asdict(), "why": "never written" if put is None else f"written to {put.key}"}
        if put.send > get.ack:
            return "impossible", {"get": get._asdict(), "put": put._asdict()}
        if not acknowledged(put):
            return "unacknowledged", None
        acks, running_send, witness = self.index[get.key]
        position = bisect.bisect_left(acks, get.send) - 1  # the writes acknowledged before the GET was sent
        if position >= 0 and running_send[position] > put.ack:
            return "stale", {"get": get, "put": put, "overwrite": witness[position]}
        return "allowed", None


def check(history: list[Record], actions: list[dict], window: float, run_end: float | None = None) -> dict:
    """Finds stale, corrupt and impossible reads in a history; attributes stale ones to nemesis actions.

    - Complexity: O(n log n) for n requests: per key, acknowledged writes sorted by ack time with a running
      maximum of their send times, and one binary search per GET that returned a value."""
    reads = ReadIndex(history)
    found = {"stale": [], "corrupt": [], "impossible": []}
    unacknowledged_reads = 0
    for get in history:
        if get.op != "GET" or get.outcome != "OK":
            continue
        verdict, item = reads.classify(get)
        if verdict == "unacknowledged":
            unacknowledged_reads += 1
        elif verdict in found:
            found[verdict].append(item)
    stale = found["stale"]
    attribute(stale, actions, window, run_end if run_end is not None else max((r.ack for r in history), default=0))
    return {"stale": stale, "corrupt": found["corrupt"], "impossible": found["impossible"],
            "unacknowledged_reads": unacknowledged_reads}


def attribute(stale: list[dict], actions: list[dict], window: float, run_end: float) -> None:
    """Sets each stale read's actions (in progress while it ran or ended within `window` s before it was sent)
    and its primary action (the latest-started of those)."""
    for item in stale:
        get = item["get"]
        involved = []
        for action in actions:
            end = action["end"] if action["end"] is not None else run_end
            if action["start"] <= get.ack and end >= get.send - window:
                involved.append(action)
        item["actions"] = involved
        item["primary"] = max(involved, key=lambda a: a["start"]) if involved else None


def acknowledged(record: Record) -> bool:
    return (record.op == "PUT" and record.outcome == "OK") or \
        (record.op == "DEL" and record.outcome in ("OK", "NOT_FOUND"))


# MARK: - Warmth (offline): what every member answers once everything is back

# How a warmth read is counted: the expected value, a miss, UNAVAILABLE, another value (stale, unacknowledged,
# corrupt) or an error (ERROR, TIMEOUT, CUT_OFF, REFUSED, CONN_ERROR: no reply the key's state can be read from).
WARMTH_READS = ["value", "NOT_FOUND", "UNAVAILABLE", "stale", "unacknowledged", "corrupt", "error"]


def expected_values(history: list[Record], keys: list[str] | None = None) -> dict:
    """What each key must hold once the load has stopped: the effect of its last acknowledged write by ack
    time, L, unless another write may have taken effect after L. That is any other write of the key,
    acknowledged or not, whose outcome reached the client at or after L's send: an acknowledged one then
    overlaps L and may be ordered after it (the stale rule's reasoning), an unacknowledged one may have been
    applied after it, and one sent after L's ack is always unacknowledged. A REFUSED write sent nothing and
    counts for nothing. An unacknowledged write is taken to have been applied, if at all, before its outcome
    (UNAVAILABLE, a timeout, a broken connection) reached the client; should one be applied later, the warmth
    reads show its value as an unacknowledged value (allowed, as during the load), never as stale.

    Returns {"value": {key: L, a PUT}, "absent": {key: L, a DEL}, "ambiguous": {key: (L, the rival write
    whose outcome came last)}, "never": [the keys of `keys` and of the history without an acknowledged write]}.
    - Complexity: O(n) for n requests."""
    writes: dict[str, list[Record]] = collections.defaultdict(list)
    for record in history:
        if record.op in ("PUT", "DEL") and record.outcome != "REFUSED":
            writes[record.key].append(record)
    result = {"value": {}, "absent": {}, "ambiguous": {}, "never": []}
    for key in sorted(set(keys or []) | {r.key for r in history}):
        done = [w for w in writes.get(key, []) if acknowledged(w)]
        if not done:
            result["never"].append(key)
            continue
        last = max(done, key=lambda w: (w.ack, w.send))
        rivals = [w for w in writes[key] if w is not last and w.ack >= last.send]
        if rivals:
            result["ambiguous"][key] = (last, max(rivals, key=lambda w: w.ack))
        else:
            result["value" if last.op == "PUT" else "absent"][key] = last
    return result


def evaluate_warmth(history: list[Record], warmth: dict, keys: list[str] | None = None,
                    key_map: KeyMap | None = None) -> dict:
    """Counts, at each moment of `warmth` (measure_warmth's record), the keys whose expected value every member
    returned, the deleted keys every member answered NOT_FOUND, and every read by kind. A value other than the
    expected one is judged as during the load (ReadIndex): stale (an acknowledged write replaced it: the run
    fails), unacknowledged (allowed) or corrupt (fails); so is a value read of an ambiguous key.

    Returns {"summary": JSON-ready figures per moment, "stale": [stale items], "corrupt": [corrupt items],
    "messages": Counter of UNAVAILABLE and error messages}."""
    expected = expected_values(history, keys)
    reads_index = ReadIndex(history)
    moments, stale_items, corrupt_items, messages = [], [], [], collections.Counter()
    for moment in warmth["moments"]:
        by_key: dict[str, list[list]] = collections.defaultdict(list)
        members = sorted({read[1] for read in moment["reads"]})
        value_reads, absent_reads, ambiguous_reads = collections.Counter(), collections.Counter(), \
            collections.Counter()
        stale = corrupt = unacknowledged = 0
        for key, member, outcome, value, message, send, ack in moment["reads"]:
            by_key[key].append([member, outcome, value])
            if outcome == "OK":
                want = expected["value"].get(key) or expected["ambiguous"].get(key, (None,))[0]
                if want is not None and want.op == "PUT" and value == want.value:
                    kind = "value"
                else:
                    verdict, item = reads_index.classify(Record(-1, key, "GET", value, send, ack, "OK", "", member))
                    # "allowed" only for an ambiguous key (or one never acknowledged): expected_values
                    # leaves no acknowledged write but the last one that the stale rule would not flag
                    kind = {"impossible": "corrupt"}.get(verdict, verdict)
                    if verdict == "stale":
                        item["moment"] = moment["planned"]
                        stale_items.append(item)
                    elif verdict in ("corrupt", "impossible"):
                        corrupt_items.append(item)
            elif outcome in ("NOT_FOUND", "UNAVAILABLE"):
                kind = outcome
            else:
                kind = "error"
            if kind in ("UNAVAILABLE", "error"):
                messages[normalize_message(f"{outcome} {message}".strip())] += 1
            stale += kind == "stale"
            corrupt += kind == "corrupt"
            unacknowledged += kind == "unacknowledged"
            if key in expected["value"]:
                value_reads[kind] += 1
            elif key in expected["absent"]:
                absent_reads[kind] += 1
            elif key in expected["ambiguous"]:
                ambiguous_reads[kind] += 1
        warm, cold_by_owner = 0, collections.Counter()
        for key, want in expected["value"].items():
            answers = by_key.get(key, [])
            if len(answers) == len(members) and members and \
                    all(outcome == "OK" and value == want.value for _, outcome, value in answers):
                warm += 1
            elif key_map is not None:
                cold_by_owner[key_map.owner[key]] += 1
        absent_everywhere = sum(
            1 for key in expected["absent"]
            if members and len(by_key.get(key, [])) == len(members)
            and all(outcome == "NOT_FOUND" for _, outcome, _ in by_key[key]))
        value_keys = len(expected["value"])
        moments.append({
            "planned": moment["planned"], "at": round(moment["start"] - warmth["back"], 3),
            "took": round(moment["end"] - moment["start"], 3), "members": len(members),
            "value_keys": value_keys, "warm": warm, "share": warm / value_keys if value_keys else None,
            "value_reads": {k: value_reads[k] for k in WARMTH_READS},
            "absent_keys": len(expected["absent"]), "absent_everywhere": absent_everywhere,
            "absent_reads": {k: absent_reads[k] for k in WARMTH_READS},
            "ambiguous_reads": {k: ambiguous_reads[k] for k in WARMTH_READS + ["allowed"]},
            "stale": stale, "corrupt": corrupt, "unacknowledged": unacknowledged,
            "cold_by_owner": dict(sorted(cold_by_owner.items()))})
    summary = {
        "back_at": warmth["back"], "load_stopped_at": warmth["load_stopped"],
        "last_return_at": warmth["last_return"], "restored": warmth.get("restored", []),
        "keys": {"value": len(expected["value"]), "absent": len(expected["absent"]),
                 "ambiguous": len(expected["ambiguous"]), "never": len(expected["never"])},
        "moments": moments, "share_last": moments[-1]["share"] if moments else None,
        "stale": sum(m["stale"] for m in moments), "corrupt": sum(m["corrupt"] for m in moments)}
    return {"summary": summary, "stale": stale_items, "corrupt": corrupt_items, "messages": messages}


# MARK: - Report


def normalize_message(message: str) -> str:
    text = re.sub(r"\b(n\d+)\b", "nX", message)
    text = re.sub(r"\d+(\.\d+)?", "#", text)
    return text[:170]


def refusals_after_restarts(history: list[Record], actions: list[dict], key_map: KeyMap, run_end: float) -> list:
    """For each return (restart or SIGCONT): how many writes of the node's keys were acknowledged and how many
    refused UNAVAILABLE afterwards, and until when, up to the next action's start."""
    restarts = []
    starts = sorted(a["start"] for a in actions)
    for action in actions:
        for node_id, at in action.get("restarts", []):
            later = [s for s in starts if s > at]
            until = later[0] if later else run_end
            restarts.append((node_id, at, until, action["id"]))
    by_owner: dict[str, list[Record]] = collections.defaultdict(list)
    for record in history:
        by_owner[key_map.owner[record.key]].append(record)
    for records in by_owner.values():
        records.sort(key=lambda r: r.send)
    rows = []
    for node_id, at, until, action_id in restarts:
        records = by_owner[node_id]
        lo = bisect.bisect_left([r.send for r in records], at)
        refused = None
        count = writes = acked = 0
        for record in records[lo:]:
            if record.send >= until:
                break
            if record.op == "GET":
                continue
            writes += 1
            if record.outcome == "UNAVAILABLE":
                count += 1
                refused = record.ack
            elif acknowledged(record):
                acked += 1
        rows.append({"node": node_id, "restarted": at, "action": action_id, "writes": writes, "refused": count,
                     "refused_until": None if refused is None else refused - at,
                     "acknowledged": acked, "window": until - at})
    return rows


def describe(record: Record) -> str:
    what = f"{record.op} {record.key}" + (f" = {record.value}" if record.op == "PUT" else "")
    return f"{what} via {record.node} (thread {record.thread})"


def timeline(item: dict, actions: list[dict], key_map: KeyMap | None) -> list[str]:
    get, put, overwrite = item["get"], item["put"], item["overwrite"]
    events = [
        (put.send, f"PUT {put.key} = {put.value} sent via {put.node} (thread {put.thread})"),
        (put.ack, f"PUT {put.value} acknowledged OK"),
        (overwrite.send, f"{describe(overwrite)} sent"),
        (overwrite.ack, f"{overwrite.op} {'= ' + overwrite.value + ' ' if overwrite.op == 'PUT' else ''}"
                        f"acknowledged {overwrite.outcome}"),
        (get.send, f"GET {get.key} sent via {get.node} (thread {get.thread})"),
        (get.ack, f"GET returned {get.value}: STALE"),
    ]
    low, high = put.send - 3, get.ack + 0.5
    for action in item["actions"]:
        for at, text in action["steps"]:
            if low <= at <= high:
                events.append((at, f"nemesis #{action['id']} {action['kind']}: {text}"))
    events.sort(key=lambda e: e[0])
    lines = [f"{at:9.3f} s  {text}" for at, text in events]
    if key_map is not None:
        lines.append(f"owner of {get.key}: {key_map.owner[get.key]}, preference list "
                     f"{' '.join(key_map.preference[get.key])}")
    return lines


def node_log_excerpts(directory: str, stale: list[dict], wall0: float, limit: int = 3,
                      lines_each: int = 40) -> list[str]:
    """The node logs' lines around the first stale read of each of the first `limit` episodes (stale reads
    whose windows do not overlap), for a run whose directory is gone
    by the time someone reads its report (a CI log): from every node, the lines of notice level or above
    (members down, up, suspected, stand-ins) and any line naming the key, from 3 s before the PUT that was
    replaced until 1 s after the GET, by the logs' wall clock (second resolution), at most `lines_each`."""
    logs = sorted(name for name in os.listdir(directory) if re.fullmatch(r"n\d+\.log", name))
    out = []
    # One stale read per episode: the next is taken only past the window of the one before.
    episodes, last_high = [], float("-inf")
    for item in sorted(stale, key=lambda s: s["get"].send):
        low, high = int(wall0 + item["put"].send - 3), int(wall0 + item["get"].ack + 1)
        if low > last_high and len(episodes) < limit:
            episodes.append((item, low, high))
            last_high = high
    for number, (item, low, high) in enumerate(episodes, 1):
        get = item["get"]
        key_pattern = re.compile(rf"\b{re.escape(get.key)}\b")
        picked = []
        for name in logs:
            with open(os.path.join(directory, name), errors="replace") as f:
                for line in f:
                    stamp = line.split(" ", 2)
                    if len(stamp) < 3:
                        continue
                    try:
                        at = datetime.datetime.strptime(stamp[0], "%Y-%m-%dT%H:%M:%S%z").timestamp()
                    except ValueError:
                        continue
                    if not low <= at <= high:
                        continue
                    if stamp[1] in ("notice", "warning", "error", "critical") or key_pattern.search(line):
                        picked.append((at, name[:-4], line.rstrip("\n")))
        picked.sort(key=lambda p: p[0])
        out.append(f"{number}. around GET {get.key} via {get.node} at {get.send:.3f} s "
                   f"({len(picked)} lines{', the first ' + str(lines_each) if len(picked) > lines_each else ''}):")
        out.append("   ```")
        out.extend(f"   {node}: {line[:400]}" for _, node, line in picked[:lines_each])
        out.append("   ```")
    return out


def warmth_section(warmth: dict, args) -> list[str]:
    """The report's section on the warmth reads (evaluate_warmth's result)."""
    warm = warmth["summary"]
    keys = warm["keys"]
    out = ["\n## Warmth after the return\n"]
    last = warm["last_return_at"]
    restored = "; ".join(f"{at:.2f} {text}" for at, text in warm["restored"])
    restored = f" (brought back by the checker: {restored})" if restored else " (nothing left to bring back)"
    out.append(f"Everything back at {warm['back_at']:.2f} s: the load stopped at {warm['load_stopped_at']:.2f} s, "
               f"{'no member was away' if last is None else f'the last member returned at {last:.2f} s'}"
               f"{restored}. "
               f"Keys: {keys['value']:,} whose last acknowledged write was a PUT (expected: its value), "
               f"{keys['absent']:,} a DEL (expected: NOT_FOUND), {keys['ambiguous']:,} excluded as ambiguous "
               f"(another write whose outcome came after the last acknowledged one was sent: it may have been "
               f"applied after it), {keys['never']:,} without an acknowledged write. At each moment, one GET of "
               f"every key through every member. Reads of the PUT keys: the expected value, NOT_FOUND, "
               f"UNAVAILABLE, another value (stale: one an acknowledged write replaced; unacknowledged: a PUT that "
               f"got no acknowledgement, allowed; corrupt), errors (no reply within {args.request_timeout:g} s, a "
               f"connection lost or refused, another status).\n")
    out.append("| after s | took s | warm keys | share | value | NOT_FOUND | UNAVAILABLE | stale | unacknowledged "
               "| corrupt | errors | DEL keys NOT_FOUND everywhere | cold keys by owner |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for m in warm["moments"]:
        reads = m["value_reads"]
        share = "-" if m["share"] is None else f"{100 * m['share']:.1f}%"
        cold = " ".join(f"{owner} {count}" for owner, count in m["cold_by_owner"].items()) or "-"
        out.append(f"| {m['planned']:g} (at {m['at']:.2f}) | {m['took']:.2f} | {m['warm']:,} of {m['value_keys']:,} | "
                   f"{share} | " + " | ".join(f"{reads[k]:,}" for k in WARMTH_READS) +
                   f" | {m['absent_everywhere']:,} of {m['absent_keys']:,} | {cold} |")
    if keys["ambiguous"]:
        out.append(f"\nReads of the ambiguous keys ({keys['ambiguous']:,}; value: the last acknowledged write's, a "
                   f"PUT; allowed: another acknowledged value the stale rule allows):\n")
        for m in warm["moments"]:
            out.append(f"- {m['planned']:g} s: " + ", ".join(f"{kind} {count:,}" for kind, count
                                                            in m["ambiguous_reads"].items() if count))
    absent_values = sum(m["absent_reads"][k] for m in warm["moments"] for k in ("stale", "unacknowledged", "corrupt"))
    if absent_values:
        out.append(f"\nReads of the DEL keys that returned a value: {absent_values:,} (counted in the stale, "
                   f"unacknowledged and corrupt totals).")
    if warmth["messages"]:
        out.append("\nUNAVAILABLE and error messages of the warmth reads (digits as #, node ids as nX):\n")
        out.append("| count | message |\n|---:|---|")
        for message, count in warmth["messages"].most_common(6):
            out.append(f"| {count:,} | {message.replace('|', '/')} |")
    if warmth["stale"]:
        out.append(f"\n**STALE READS AFTER THE RETURN: {len(warmth['stale']):,}** (the first 10)\n")
        for item in warmth["stale"][:10]:
            get, put, overwrite = item["get"], item["put"], item["overwrite"]
            out.append(f"- GET {get.key} via {get.node} "
                       f"{item['moment']:g} s after the return (sent at {get.send:.3f} s) returned {put.value}, "
                       f"acknowledged at {put.ack:.3f} s and replaced by {describe(overwrite)}, sent at "
                       f"{overwrite.send:.3f} s and acknowledged {overwrite.outcome} at {overwrite.ack:.3f} s")
    for item in warmth["corrupt"][:5]:
        out.append(f"- corrupt after the return: {json.dumps(item)}")
    return out


def report(history: list[Record], actions: list[dict], result: dict, args, key_map: KeyMap | None,
           run_end: float, warmth: dict | None = None) -> tuple[str, dict]:
    """The Markdown report and the summary (JSON-ready). `warmth` is evaluate_warmth's result, or
    {"skipped": why} when the warmth reads were not taken, or None (a history without them)."""
    out = []
    table = collections.defaultdict(collections.Counter)
    for record in history:
        table[record.op][record.outcome] += 1
    out.append("## Requests by op and outcome\n")
    out.append("| op | " + " | ".join(OUTCOMES) + " | total |")
    out.append("|---|" + "---:|" * (len(OUTCOMES) + 1))
    for op in ("PUT", "DEL", "GET"):
        row = table[op]
        out.append(f"| {op} | " + " | ".join(f"{row[o]:,}" for o in OUTCOMES) + f" | {sum(row.values()):,} |")
    total_row = collections.Counter()
    for row in table.values():
        total_row.update(row)
    out.append("| all | " + " | ".join(f"{total_row[o]:,}" for o in OUTCOMES) + f" | {len(history):,} |")

    writes = [r for r in history if r.op in ("PUT", "DEL")]
    acked = sum(1 for r in writes if acknowledged(r))
    ack_ratio = acked / len(writes) if writes else 0.0
    write_outcomes = table["PUT"] + table["DEL"]
    refused = write_outcomes["REFUSED"]
    reached = len(writes) - refused
    ack_ratio_reached = acked / reached if reached else 0.0
    gets_with_value = table["GET"]["OK"]
    hung = sum(1 for r in history if r.outcome == "TIMEOUT")
    stale, corrupt, impossible = result["stale"], result["corrupt"], result["impossible"]
    summary = {"requests": len(history), "writes": len(writes), "acknowledged_writes": acked,
               "ack_ratio": ack_ratio, "refused_writes": refused, "ack_ratio_reached": ack_ratio_reached,
               "writes_by_outcome": {o: write_outcomes[o] for o in OUTCOMES},
               "gets_with_value": gets_with_value, "stale": len(stale),
               "corrupt": len(corrupt), "impossible": len(impossible), "hung": hung,
               "unacknowledged_reads": result["unacknowledged_reads"], "actions": len(actions)}
    warm = warmth["summary"] if warmth and "summary" in warmth else None
    if warm is not None:
        summary.update({"warmth_last": warm["share_last"],
                        "warmth_shares": {f"{m['planned']:g}": m["share"] for m in warm["moments"]},
                        "warmth_stale": warm["stale"], "warmth_corrupt": warm["corrupt"], "warmth": warm})
    elif warmth:
        summary.update({"warmth_last": None, "warmth_skipped": warmth["skipped"]})
    out.append("\n## Summary\n")
    out.append("| measure | value |\n|---|---:|")
    out.append(f"| requests | {len(history):,} ({len(history) / max(run_end, 1e-9):,.0f}/s) |")
    out.append(f"| writes acknowledged (PUT OK, DEL OK or NOT_FOUND), of every PUT and DEL sent | {acked:,} of "
               f"{len(writes):,} ({100 * ack_ratio:.1f}%) |")
    out.append(f"| of the writes that reached a node (all but the {refused:,} REFUSED) | {acked:,} of {reached:,} "
               f"({100 * ack_ratio_reached:.1f}%) |")
    out.append(f"| GETs that returned a value | {gets_with_value:,} |")
    out.append(f"| of which a value whose PUT was not acknowledged (allowed) | {result['unacknowledged_reads']:,} |")
    out.append(f"| **stale** | **{len(stale):,}** |")
    out.append(f"| corrupt (a value never written to that key) | {len(corrupt):,} |")
    out.append(f"| impossible (a value written only after the GET completed) | {len(impossible):,} |")
    out.append(f"| hung (no reply within {args.request_timeout:g} s) | {hung:,} |")
    out.append(f"| nemesis actions | {len(actions)} |")
    if warm is not None:
        for moment in warm["moments"]:
            share = "-" if moment["share"] is None else f"{100 * moment['share']:.1f}%"
            out.append(f"| warm {moment['planned']:g} s after the return (every member returned the last "
                       f"acknowledged value) | {moment['warm']:,} of {moment['value_keys']:,} keys ({share}) |")
        out.append(f"| **stale after the return** (warmth reads) | **{warm['stale']:,}** |")
        if warm["corrupt"]:
            out.append(f"| corrupt after the return (warmth reads) | {warm['corrupt']:,} |")
    elif warmth:
        out.append(f"| warmth | not measured: {warmth['skipped']} |")

    out.append("\n## Writes by outcome\n")
    out.append("Every PUT and DEL the client threads sent, the share of each outcome. Acknowledged: PUT OK, DEL OK "
               "or NOT_FOUND. REFUSED: no member took the connection, the one failover to another member included "
               "(nothing was sent, so nothing was applied); it counts among the writes sent, and the summary gives "
               "the share without it too.\n")
    out.append("| outcome | PUT | DEL | writes | share |\n|---|---:|---:|---:|---:|")
    for outcome in OUTCOMES:
        if write_outcomes[outcome] or outcome in ("OK", "UNAVAILABLE", "REFUSED"):
            share = write_outcomes[outcome] / len(writes) if writes else 0.0
            out.append(f"| {outcome} | {table['PUT'][outcome]:,} | {table['DEL'][outcome]:,} | "
                       f"{write_outcomes[outcome]:,} | {100 * share:.2f}% |")
    out.append(f"| acknowledged | {table['PUT']['OK']:,} | {table['DEL']['OK'] + table['DEL']['NOT_FOUND']:,} | "
               f"{acked:,} | {100 * ack_ratio:.2f}% |")
    unavailable_writes = collections.Counter(normalize_message(r.message) for r in writes
                                             if r.outcome == "UNAVAILABLE")
    if unavailable_writes:
        out.append("\nThe writes' UNAVAILABLE messages (digits as #, node ids as nX):\n")
        out.append("| count | message |\n|---:|---|")
        for message, count in unavailable_writes.most_common(8):
            out.append(f"| {count:,} | {message.replace('|', '/')} |")

    if warm is not None:
        out.extend(warmth_section(warmth, args))

    out.append("\n## Stale reads per action kind\n")
    out.append("Primary: the latest-started action in progress during the GET or ended within "
               f"{args.attribution_window:g} s before it was sent. Involved: any such action.\n")
    out.append("| action kind | actions | stale (primary) | stale (involved) |\n|---|---:|---:|---:|")
    kinds_seen = [k for k in ACTION_KINDS if any(a["kind"] == k for a in actions)]
    for kind in kinds_seen:
        primary = sum(1 for s in stale if s["primary"] is not None and s["primary"]["kind"] == kind)
        involved = sum(1 for s in stale if any(a["kind"] == kind for a in s["actions"]))
        count = sum(1 for a in actions if a["kind"] == kind)
        out.append(f"| {kind} | {count} | {primary:,} | {involved:,} |")
    unattributed = sum(1 for s in stale if s["primary"] is None)
    out.append(f"| (none in the window) | | {unattributed:,} | |")
    summary["stale_per_kind"] = {k: sum(1 for s in stale if s["primary"] is not None and s["primary"]["kind"] == k)
                                 for k in kinds_seen}
    summary["stale_per_kind"]["none"] = unattributed

    if actions:
        per_action = collections.Counter(s["primary"]["id"] for s in stale if s["primary"] is not None)
        out.append("\n## Nemesis actions\n")
        out.append("| # | kind | victims | start s | end s | stale (primary) | steps |\n|---:|---|---|---:|---:|---:|---|")
        for action in actions:
            end = f"{action['end']:.2f}" if action["end"] is not None else "-"
            steps = "; ".join(f"{at:.2f} {text}" for at, text in action["steps"])
            out.append(f"| {action['id']} | {action['kind']} | {' '.join(action['victims'])} | "
                       f"{action['start']:.2f} | {end} | {per_action[action['id']]:,} | {steps} |")

    messages = collections.Counter(normalize_message(r.message) for r in history
                                   if r.outcome in ("UNAVAILABLE", "ERROR"))
    if messages:
        out.append("\n## UNAVAILABLE and error messages (digits as #, node ids as nX)\n")
        out.append("| count | message |\n|---:|---|")
        for message, count in messages.most_common(10):
            out.append(f"| {count:,} | {message.replace('|', '/')} |")

    if key_map is not None and actions:
        rows = refusals_after_restarts(history, actions, key_map, run_end)
        if rows:
            out.append("\n## Writes of a returning node's keys (after a restart, SIGCONT or a healed partition), until the next action\n")
            out.append("| action | node | back at s | writes | acknowledged | refused UNAVAILABLE | "
                       "last refusal after s |\n|---:|---|---:|---:|---:|---:|---:|")
            for row in rows:
                until = f"{row['refused_until']:.2f}" if row["refused_until"] is not None else "-"
                out.append(f"| {row['action']} | {row['node']} | {row['restarted']:.2f} | {row['writes']:,} | "
                           f"{row['acknowledged']:,} | {row['refused']:,} | {until} |")
            refused_spans = [r["refused_until"] for r in rows if r["refused_until"] is not None]
            if refused_spans:
                summary["refused_after_restart_max_s"] = max(refused_spans)

    if stale:
        out.append(f"\n## The first {min(10, len(stale))} stale reads\n")
        for number, item in enumerate(sorted(stale, key=lambda s: s["get"].send)[:10], 1):
            primary = item["primary"]
            label = f"#{primary['id']} {primary['kind']} of {' '.join(primary['victims'])}" if primary else "none"
            out.append(f"{number}. GET {item['get'].key} via {item['get'].node} returned {item['put'].value}, "
                       f"replaced by {item['overwrite'].op}"
                       f"{' ' + item['overwrite'].value if item['overwrite'].op == 'PUT' else ''} "
                       f"(action: {label})\n")
            out.append("   ```")
            out.extend("   " + line for line in timeline(item, actions, key_map))
            out.append("   ```")
    for kind, items in (("corrupt", corrupt), ("impossible", impossible)):
        if items:
            out.append(f"\n## The first {min(5, len(items))} {kind} reads\n")
            for item in items[:5]:
                out.append(f"- {json.dumps(item)}")
    return "\n".join(out), summary


# MARK: - Self-test of the checker


def self_test() -> int:
    """Made-up histories with a known answer: the checker must find exactly what is there."""

    def rec(thread, key, op, value, send, ack, outcome="OK"):
        return Record(thread, key, op, value, send, ack, outcome, "", "n1")

    cases = [
        ("overwritten then read", [rec(0, "k", "PUT", "a", 0, 1), rec(0, "k", "PUT", "b", 2, 3),
                                   rec(1, "k", "GET", "a", 4, 5)], (1, 0, 0)),
        ("deleted then read", [rec(0, "k", "PUT", "a", 0, 1), rec(0, "k", "DEL", None, 2, 3, "NOT_FOUND"),
                               rec(1, "k", "GET", "a", 4, 5)], (1, 0, 0)),
        ("concurrent overwrite", [rec(0, "k", "PUT", "a", 0, 1), rec(0, "k", "PUT", "b", 2, 5),
                                  rec(1, "k", "GET", "a", 4, 6)], (0, 0, 0)),
        ("overwrite sent before the ack", [rec(0, "k", "PUT", "a", 0, 3), rec(1, "k", "PUT", "b", 2, 4),
                                           rec(1, "k", "GET", "a", 5, 6)], (0, 0, 0)),
        ("unacknowledged overwrite", [rec(0, "k", "PUT", "a", 0, 1), rec(0, "k", "PUT", "b", 2, 3, "UNAVAILABLE"),
                                      rec(1, "k", "GET", "a", 4, 5)], (0, 0, 0)),
        ("refused DEL", [rec(0, "k", "PUT", "a", 0, 1), rec(0, "k", "DEL", None, 2, 3, "TIMEOUT"),
                         rec(1, "k", "GET", "a", 4, 5)], (0, 0, 0)),
        ("miss after overwrite", [rec(0, "k", "PUT", "a", 0, 1), rec(0, "k", "PUT", "b", 2, 3),
                                  rec(1, "k", "GET", None, 4, 5, "NOT_FOUND")], (0, 0, 0)),
        ("other key's write", [rec(0, "k", "PUT", "a", 0, 1), rec(0, "j", "PUT", "b", 2, 3),
                               rec(1, "k", "GET", "a", 4, 5)], (0, 0, 0)),
        ("value of another key", [rec(0, "j", "PUT", "a", 0, 1), rec(1, "k", "GET", "a", 4, 5)], (0, 1, 0)),
        ("value never written", [rec(1, "k", "GET", "zz", 4, 5)], (0, 1, 0)),
        ("value from the future", [rec(1, "k", "GET", "a", 0, 1), rec(0, "k", "PUT", "a", 2, 3)], (0, 0, 1)),
        ("unacknowledged value read", [rec(0, "k", "PUT", "a", 0, 9, "TIMEOUT"), rec(0, "k", "PUT", "b", 2, 3),
                                       rec(1, "k", "GET", "a", 4, 5)], (0, 0, 0)),
        ("the later of two overwrites counts", [rec(0, "k", "PUT", "a", 5, 6), rec(0, "k", "PUT", "b", 0, 7),
                                                rec(2, "k", "PUT", "c", 6.5, 8), rec(1, "k", "GET", "a", 9, 10)],
         (1, 0, 0)),
    ]
    failures = 0
    for name, history, expected in cases:
        result = check(history, [], 5)
        got = (len(result["stale"]), len(result["corrupt"]), len(result["impossible"]))
        if got != expected:
            failures += 1
            print(f"FAIL {name}: stale, corrupt, impossible = {got}, expected {expected}")
    # and a large random history whose GETs only return the latest acknowledged write: nothing stale
    rng = random.Random(5)
    history, latest, now = [], {}, 0.0
    for i in range(20000):
        key = f"k{rng.randrange(50)}"
        now += 0.001
        if rng.random() < 0.5:
            history.append(rec(0, key, "PUT", f"v{i}", now, now + 0.0005))
            latest[key] = f"v{i}"
        elif key in latest:
            history.append(rec(1, key, "GET", latest[key], now, now + 0.0005))
        now += 0.001
    started = time.monotonic()
    result = check(history, [], 5)
    if result["stale"] or result["corrupt"] or result["impossible"]:
        failures += 1
        print("FAIL random history of latest values: found something")
    elapsed = time.monotonic() - started
    passed = len(cases) + 1 - failures
    run_warmth, failed_warmth = self_test_warmth(rec)
    print(f"{passed + run_warmth - failed_warmth} passed, {failures + failed_warmth} failed "
          f"(random history of {len(history):,} requests checked in {elapsed:.2f} s)")
    return 1 if failures or failed_warmth else 0


def self_test_warmth(rec) -> tuple[int, int]:
    """The expected value per key (what counts as the last acknowledged write, what makes a key ambiguous), the
    warmth reads' counts and the exit status on made-up histories. Returns (tests run, failures)."""
    cases = [
        ("one acknowledged PUT", [rec(0, "k", "PUT", "a", 0, 1)], "a"),
        ("the later of two PUTs one after the other", [rec(0, "k", "PUT", "a", 0, 1), rec(1, "k", "PUT", "b", 2, 3)],
         "b"),
        ("two acknowledged PUTs overlapping", [rec(0, "k", "PUT", "a", 0, 5), rec(1, "k", "PUT", "b", 1, 2)],
         "ambiguous"),
        ("an acknowledgement at the last write's send overlaps it",
         [rec(0, "k", "PUT", "a", 0, 2), rec(1, "k", "PUT", "b", 2, 3)], "ambiguous"),
        ("a DEL last, NOT_FOUND", [rec(0, "k", "PUT", "a", 0, 1), rec(1, "k", "DEL", None, 2, 3, "NOT_FOUND")],
         "absent"),
        ("a DEL last, OK", [rec(0, "k", "PUT", "a", 0, 1), rec(1, "k", "DEL", None, 2, 3)], "absent"),
        ("an unacknowledged PUT sent after the last ack",
         [rec(0, "k", "PUT", "a", 0, 1), rec(1, "k", "PUT", "b", 2, 5, "TIMEOUT")], "ambiguous"),
        ("an unacknowledged PUT overlapping the last",
         [rec(0, "k", "PUT", "a", 2, 4), rec(1, "k", "PUT", "b", 1, 3, "UNAVAILABLE")], "ambiguous"),
        ("an unacknowledged DEL after the last", [rec(0, "k", "PUT", "a", 0, 1),
                                                  rec(1, "k", "DEL", None, 2, 3, "CONN_ERROR")], "ambiguous"),
        ("an unacknowledged PUT that ended before the last began",
         [rec(1, "k", "PUT", "b", 0, 1, "UNAVAILABLE"), rec(0, "k", "PUT", "a", 2, 3)], "a"),
        ("REFUSED writes after the last sent nothing",
         [rec(0, "k", "PUT", "a", 0, 1), rec(1, "k", "PUT", "b", 2, 2.1, "REFUSED"),
          rec(1, "k", "DEL", None, 3, 3.1, "REFUSED")], "a"),
        ("no acknowledged write", [rec(0, "k", "PUT", "a", 0, 1, "UNAVAILABLE")], "never"),
        ("GETs and other keys do not count",
         [rec(0, "k", "PUT", "a", 0, 1), rec(1, "k", "GET", "a", 2, 3), rec(1, "j", "PUT", "b", 0.5, 5, "TIMEOUT")],
         "a"),
    ]
    failures = 0
    for name, history, want in cases:
        expected = expected_values(history, ["k", "unwritten"])
        got = expected["value"]["k"].value if "k" in expected["value"] else \
            next(kind for kind in ("absent", "ambiguous", "never") if "k" in expected[kind])
        if got != want or "unwritten" not in expected["never"]:
            failures += 1
            print(f"FAIL expected value, {name}: {got}, expected {want}")

    # k1 expects b, k2 absent, k3 is ambiguous, k4 expects f, k5 expects g (its unacknowledged u ended before)
    history = [rec(0, "k1", "PUT", "a", 0, 1), rec(1, "k1", "PUT", "b", 2, 3),
               rec(0, "k2", "PUT", "c", 0, 1), rec(1, "k2", "DEL", None, 2, 3),
               rec(0, "k3", "PUT", "d", 0, 1), rec(1, "k3", "PUT", "e", 2, 4, "TIMEOUT"),
               rec(0, "k4", "PUT", "f", 0, 1),
               rec(0, "k5", "PUT", "u", 0, 1, "UNAVAILABLE"), rec(1, "k5", "PUT", "g", 2, 3)]

    def reads(at, answers):
        return [[key, member, outcome, value, "", at, at + 0.1]
                for key, pair in answers.items() for member, (outcome, value) in zip(("n1", "n2"), pair)]

    ok, miss = (lambda v: ("OK", v)), ("NOT_FOUND", None)
    first = reads(10, {"k1": (ok("b"), ok("b")), "k2": (miss, miss), "k3": (ok("d"), ok("e")),
                       "k4": (ok("f"), miss), "k5": (ok("u"), ok("g"))})
    second = reads(12, {"k1": (ok("a"), ok("b")), "k2": (ok("c"), miss), "k3": (ok("zz"), ("TIMEOUT", None)),
                        "k4": (ok("f"), ok("f")), "k5": (ok("g"), ("UNAVAILABLE", None))})
    record = {"back": 9.5, "load_stopped": 9.5, "last_return": 8.0, "restored": [],
              "moments": [{"planned": 0, "start": 10, "end": 10.2, "reads": first},
                          {"planned": 2, "start": 12, "end": 12.2, "reads": second}]}
    warm = evaluate_warmth(history, record)["summary"]
    got = [(m["warm"], m["value_keys"], m["absent_everywhere"], m["stale"], m["corrupt"], m["unacknowledged"],
            m["value_reads"]["value"], m["value_reads"]["NOT_FOUND"], m["value_reads"]["UNAVAILABLE"])
           for m in warm["moments"]]
    want = [(1, 3, 1, 0, 0, 2, 4, 1, 0), (1, 3, 0, 2, 1, 0, 4, 0, 1)]
    checks = [
        ("warmth reads per moment", got, want),
        ("keys by expectation", warm["keys"], {"value": 3, "absent": 1, "ambiguous": 1, "never": 0}),
        ("stale and corrupt after the return", (warm["stale"], warm["corrupt"]), (2, 1)),
        ("share at the last moment", warm["share_last"], 1 / 3),
        ("reads of the ambiguous key", [{k: v for k, v in m["ambiguous_reads"].items() if v} for m in warm["moments"]],
         [{"value": 1, "unacknowledged": 1}, {"corrupt": 1, "error": 1}]),
    ]
    # the exit status: stale warmth reads fail a run, and so does too little warmth with --min-warmth
    clean = {"stale": 0, "corrupt": 0, "impossible": 0, "hung": 0, "ack_ratio": 1.0}
    limits = types.SimpleNamespace(min_ack_ratio=None, min_warmth=0.5)
    checks += [
        ("exit status, stale after the return",
         exit_status({**clean, "warmth_stale": 1, "warmth_last": 1.0}, limits), 1),
        ("exit status, warm enough", exit_status({**clean, "warmth_stale": 0, "warmth_last": 0.6}, limits), 0),
        ("exit status, too cold", exit_status({**clean, "warmth_stale": 0, "warmth_last": 0.4}, limits), 1),
        ("exit status, warmth not measured", exit_status({**clean, "warmth_last": None}, limits), 1),
    ]
    for name, got, want in checks:
        if got != want:
            failures += 1
            print(f"FAIL {name}: {got}, expected {want}")
    return len(cases) + len(checks), failures


# MARK: - Main


def default_binary() -> str:
    release = os.path.join(ROOT, ".build", "release", "cachet-node")
    return release if os.access(release, os.X_OK) else os.path.join(ROOT, ".build", "debug", "cachet-node")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", default=None, help="the cachet-node binary (default: .build/release/cachet-node "
                                                     "if it exists, else .build/debug/cachet-node)")
    parser.add_argument("--nodes", type=int, default=5, help="cluster size, 3 to 9 (default 5)")
    parser.add_argument("--duration", type=float, default=60, help="seconds of load (default 60)")
    parser.add_argument("--workers", type=int, default=6, help="client threads (default 6)")
    parser.add_argument("--keys", type=int, default=200, help="keys shared by every thread (default 200)")
    parser.add_argument("--put-ratio", type=float, default=0.4, help="share of PUTs (default 0.4)")
    parser.add_argument("--del-ratio", type=float, default=0.1, help="share of DELs (default 0.1); the rest GETs")
    parser.add_argument("--no-failover", dest="failover", action="store_false",
                        help="record a refused connection as the request's outcome; by default the request is "
                             "sent once more to another node, since nothing was sent (as CachetClient fails over)")
    parser.add_argument("--request-timeout", type=float, default=3, help="seconds before a request is hung (default 3)")
    parser.add_argument("--actions", default="kill,term,stop,cascade-standin,cascade-return,cascade-freeze",
                        help="comma-separated nemesis actions from " + ", ".join(ACTION_KINDS) +
                             ", 'all', or 'none' (default: every action that needs no --network lab)")
    parser.add_argument("--network", choices=["loopback", "lab"], default="loopback",
                        help="loopback: every node on 127.0.0.1 (default); lab: every node in a network namespace "
                             "of its own (root and iproute2), needed by the actions isolate, split and cutoff")
    parser.add_argument("--interval", type=float, default=3, help="mean seconds between two actions (default 3)")
    parser.add_argument("--pause-min", type=float, default=1.0, help="shortest down or frozen time (default 1)")
    parser.add_argument("--pause-max", type=float, default=2.5, help="longest down or frozen time (default 2.5)")
    parser.add_argument("--term-wait", type=float, default=15, help="seconds to wait for a SIGTERMed node's exit "
                                                                   "before SIGKILL (default 15)")
    parser.add_argument("--attribution-window", type=float, default=5,
                        help="seconds after an action's end during which a stale read is attributed to it (default 5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--node-flags", default=None,
                        help="flags for every node (default, as chaos.py: " + TUNED_NODE_FLAGS + ")")
    parser.add_argument("--node-defaults", action="store_true",
                        help="give the nodes no flags but the ones every run needs (cluster, id, address, data "
                             "directory, --disk-limit): the node's default timeouts, probe interval and hold")
    parser.add_argument("--min-ack-ratio", type=float, default=None,
                        help="also fail when fewer than this share of the writes were acknowledged (0 to 1; of "
                             "every PUT and DEL sent, REFUSED ones included)")
    parser.add_argument("--warmth-at", default="0,2,5,10", metavar="SECONDS",
                        help="comma-separated seconds after everything is back and the load has stopped at which "
                             "every key is read through every member (default 0,2,5,10; 'none': no warmth reads)")
    parser.add_argument("--min-warmth", type=float, default=None,
                        help="also fail when, at the last --warmth-at moment, fewer than this share of the keys "
                             "whose last acknowledged write was a PUT returned its value through every member "
                             "(0 to 1; a run without warmth reads fails it)")
    parser.add_argument("--summary-json", metavar="PATH",
                        help="also write the summary (the verdict line's JSON, with the run's settings) to PATH")
    parser.add_argument("--keep-data", action="store_true", help="keep the nodes' data directories")
    parser.add_argument("--remove-when-passed", action="store_true",
                        help="remove the run's directory (history, logs) when the check passes; a failed run's "
                             "is always kept")
    parser.add_argument("--check", metavar="HISTORY", help="only check a history.jsonl written by an earlier run "
                                                          "(nemesis.jsonl beside it is used for attribution)")
    parser.add_argument("--self-test", action="store_true", help="run the checker on made-up histories and exit")
    args = parser.parse_args(argv)
    args.action_list = [] if args.actions.strip() in ("", "none") else list(ACTION_KINDS) \
        if args.actions.strip() == "all" else [a.strip() for a in args.actions.split(",") if a.strip()]
    unknown = [a for a in args.action_list if a not in ACTION_KINDS]
    if unknown:
        parser.error(f"unknown action(s) {', '.join(unknown)}; choose from {', '.join(ACTION_KINDS)} or none")
    if args.network != "lab" and PARTITION_KINDS.intersection(args.action_list):
        parser.error(f"{', '.join(sorted(PARTITION_KINDS.intersection(args.action_list)))} need --network lab")
    if not 3 <= args.nodes <= 9:
        parser.error("--nodes must be 3 to 9 (a cascade disturbs two nodes; a majority must stand)")
    if args.put_ratio + args.del_ratio > 1 or min(args.put_ratio, args.del_ratio) < 0:
        parser.error("--put-ratio + --del-ratio must be within 0 and 1")
    if args.pause_min > args.pause_max:
        parser.error("--pause-min exceeds --pause-max")
    if args.node_defaults and args.node_flags is not None:
        parser.error("--node-defaults gives the nodes no flags: leave out --node-flags")
    if args.node_flags is None:
        args.node_flags = "" if args.node_defaults else TUNED_NODE_FLAGS
    try:
        args.warmth_moments = [] if args.warmth_at.strip() in ("", "none") else \
            sorted(float(part) for part in args.warmth_at.split(",") if part.strip())
    except ValueError:
        parser.error(f"--warmth-at takes comma-separated seconds, not {args.warmth_at!r}")
    if any(moment < 0 for moment in args.warmth_moments):
        parser.error("--warmth-at takes seconds from 0 up")
    return args


def exit_status(summary: dict, args) -> int:
    failed = summary["stale"] or summary["corrupt"] or summary["impossible"] or summary["hung"] or \
        summary.get("warmth_stale") or summary.get("warmth_corrupt")
    if args.min_ack_ratio is not None and summary["ack_ratio"] < args.min_ack_ratio:
        failed = True
    if args.min_warmth is not None and (summary.get("warmth_last") is None or
                                        summary["warmth_last"] < args.min_warmth):
        failed = True
    return 1 if failed else 0


def verdict_json(summary: dict) -> str:
    """The summary on the verdict line: all but the warmth reads' details (--summary-json has those)."""
    return json.dumps({name: value for name, value in summary.items() if name != "warmth"})


def write_summary(summary: dict, args, status: int) -> None:
    """--summary-json: the summary with the verdict and the run's settings, for tabulating runs."""
    if not args.summary_json:
        return
    settings = {"check": args.check} if args.check else {name: getattr(args, name) for name in (
        "node", "nodes", "duration", "workers", "keys", "put_ratio", "del_ratio", "actions", "network", "interval",
        "pause_min", "pause_max", "seed", "node_flags", "request_timeout", "warmth_at")}
    with open(args.summary_json, "w") as f:
        json.dump({"passed": status == 0, "settings": settings, **summary}, f, indent=1)
        f.write("\n")


def check_file(args) -> int:
    history = []
    with open(args.check) as f:
        for line in f:
            history.append(Record(**json.loads(line)))
    nemesis_path = os.path.join(os.path.dirname(args.check), "nemesis.jsonl")
    actions = []
    if os.path.exists(nemesis_path):
        with open(nemesis_path) as f:
            actions = [json.loads(line) for line in f]
    key_map = None
    cluster_path = os.path.join(os.path.dirname(args.check), "cluster.json")
    if os.path.exists(cluster_path):
        with open(cluster_path) as f:
            ids = [m["id"] for m in json.load(f)["members"]]
        key_map = KeyMap(ids, sorted({r.key for r in history}))
    run_end = max((r.ack for r in history), default=0)
    result = check(history, actions, args.attribution_window, run_end)
    warmth = None
    warmth_path = os.path.join(os.path.dirname(args.check), "warmth.json")
    if os.path.exists(warmth_path):
        with open(warmth_path) as f:
            record = json.load(f)
        warmth = {"skipped": record["skipped"]} if "skipped" in record else \
            evaluate_warmth(history, record, sorted({read[0] for m in record["moments"] for read in m["reads"]}),
                            key_map)
    text, summary = report(history, actions, result, args, key_map, run_end, warmth)
    print(text)
    status = exit_status(summary, args)
    write_summary(summary, args, status)
    print(f"\nREGISTER CHECK {'PASSED' if status == 0 else 'FAILED'}: {verdict_json(summary)}")
    return status


class Interrupted(Exception):
    pass


def on_signal(number, _frame):
    raise Interrupted(f"signal {signal.Signals(number).name}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.self_test:
        return self_test()
    if args.check:
        return check_file(args)
    binary = args.node or default_binary()
    if not os.access(binary, os.X_OK):
        print(f"no executable cachet-node at {binary}: build it (swift build --product cachet-node) or give "
              f"--node", file=sys.stderr)
        return 2
    keys = [f"key-{i:03d}" for i in range(args.keys)]
    directory = tempfile.mkdtemp(prefix="cachet-register-")
    try:
        lab = NetworkLab(args.nodes) if args.network == "lab" else None
    except (SetupError, OSError, subprocess.SubprocessError) as error:
        print(f"setup error: cannot build the network lab: {error}", file=sys.stderr)
        return 2
    cluster = Cluster(binary, args.nodes, directory, args.node_flags.split(), lab)
    atexit.register(cluster.shutdown)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, on_signal)
    key_map = KeyMap([n.id for n in cluster.nodes], keys)
    stop = threading.Event()
    histories: list[list[Record]] = [[] for _ in range(args.workers)]
    counts: list[collections.Counter] = [collections.Counter() for _ in range(args.workers)]
    nemesis = None
    threads: list[threading.Thread] = []
    interrupted = None
    flags = args.node_flags or "no flags: the node's defaults"
    print(f"# Cachet register check\n\n{args.nodes} nodes ({binary}, {flags}), {args.workers} threads "
          f"over {args.keys} keys, {args.duration:g} s, actions: {', '.join(args.action_list) or 'none'}, "
          f"seed {args.seed}, warmth reads at "
          f"{', '.join(f'{m:g}' for m in args.warmth_moments) + ' s' if args.warmth_moments else 'none'}.\n"
          f"Cluster file, logs and history in {directory}\n", flush=True)
    warmth_record = None
    try:
        try:
            try:
                cluster.start()
            except SetupError as error:
                print(f"setup error: {error}", file=sys.stderr)
                return 2
            t0 = time.monotonic()
            wall0 = time.time()
            end = t0 + args.duration
            threads = [threading.Thread(target=client,
                                        args=(i, args, cluster, keys, t0, stop, histories[i], counts[i]),
                                        daemon=True) for i in range(args.workers)]
            for thread in threads:
                thread.start()
            if args.action_list:
                nemesis = Nemesis(args, cluster, key_map, t0, end, stop)
                nemesis.start()
            next_progress = t0 + 10
            while time.monotonic() < end:
                time.sleep(min(0.2, max(0.0, end - time.monotonic())))
                if nemesis is not None and nemesis.error is not None:
                    break
                if time.monotonic() >= next_progress:
                    next_progress += 10
                    total = collections.Counter()
                    for count in counts:
                        total.update(count)
                    current = nemesis.current if nemesis is not None else None
                    doing = f"{current['kind']} of {' '.join(current['victims'])}" if current else "nothing"
                    done = len(nemesis.actions) if nemesis is not None else 0
                    print(f"[{time.monotonic() - t0:5.1f} s] {sum(total.values()):,} requests: "
                          + ", ".join(f"{o} {total[o]:,}" for o in OUTCOMES if total[o]) +
                          f"; {done} actions, now {doing}", file=sys.stderr, flush=True)
        except (Interrupted, KeyboardInterrupt) as error:
            interrupted = str(error) or "Ctrl-C"
            print(f"interrupted ({interrupted}): stopping the nodes, then checking what was recorded",
                  file=sys.stderr, flush=True)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=args.request_timeout + 2)
            if threads:
                run_end = time.monotonic() - t0  # the load has stopped: no request in flight
            if nemesis is not None:
                nemesis.join(timeout=2 * args.pause_max + args.term_wait + 40)
        if threads:
            why_not = "interrupted" if interrupted else \
                "the nemesis failed" if nemesis is not None and nemesis.error is not None else \
                "the nemesis did not end" if nemesis is not None and nemesis.is_alive() else \
                "a client thread did not end" if any(thread.is_alive() for thread in threads) else \
                "--warmth-at none" if not args.warmth_moments else None
            if why_not:
                warmth_record = {"skipped": why_not}
            else:
                try:
                    warmth_record = measure_warmth(cluster, keys, t0, args, run_end,
                                                   nemesis.actions if nemesis is not None else [])
                except (Interrupted, KeyboardInterrupt) as error:
                    interrupted = str(error) or "Ctrl-C"
                    warmth_record = {"skipped": f"interrupted ({interrupted})"}
                except SetupError as error:  # a node left down did not start again
                    warmth_record = {"skipped": f"a node could not be brought back: {error}"}
    finally:
        cluster.shutdown()
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)  # a second Ctrl-C now ends the check at once
    if not threads:
        return 2
    history = sorted((r for h in histories for r in h), key=lambda r: (r.send, r.thread))
    actions = nemesis.actions if nemesis is not None else []
    with open(os.path.join(directory, "history.jsonl"), "w") as f:
        for record in history:
            f.write(json.dumps(record._asdict()) + "\n")
    with open(os.path.join(directory, "nemesis.jsonl"), "w") as f:
        for action in actions:
            f.write(json.dumps(action) + "\n")
    with open(os.path.join(directory, "warmth.json"), "w") as f:
        json.dump(warmth_record, f)
    if not args.keep_data:
        for node in cluster.nodes:
            shutil.rmtree(node.data_dir, ignore_errors=True)
    result = check(history, actions, args.attribution_window, run_end)
    warmth = warmth_record if "skipped" in warmth_record else evaluate_warmth(history, warmth_record, keys, key_map)
    text, summary = report(history, actions, result, args, key_map, run_end, warmth)
    print(text)
    if result["stale"]:
        print("\n## Node logs around the first stale reads\n")
        print("\n".join(node_log_excerpts(directory, result["stale"], wall0)))
    if nemesis is not None and nemesis.error is not None:
        print(f"setup error: the nemesis failed: {nemesis.error}", file=sys.stderr)
        return 2
    status = exit_status(summary, args)
    if interrupted:
        status = max(status, 1)
    write_summary(summary, args, status)
    if status == 0 and args.remove_when_passed and not args.keep_data:
        shutil.rmtree(directory, ignore_errors=True)
        print(f"\nThe check passed: its directory {directory} was removed (--remove-when-passed).")
    else:
        print(f"\nHistory: {os.path.join(directory, 'history.jsonl')} (re-check with --check); nemesis log: "
              f"{os.path.join(directory, 'nemesis.jsonl')}; warmth reads: {os.path.join(directory, 'warmth.json')}; "
              f"node logs: {directory}/n*.log")
    print(f"\nREGISTER CHECK {'PASSED' if status == 0 else 'FAILED'}: {verdict_json(summary)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
