#!/usr/bin/env python3
"""Soak test: one cachet-node on 127.0.0.1, well-behaved clients checked against a model, hostile clients.

Run by hand for minutes; nothing in CI runs it. Python 3.11, standard library only.

    Benchmarks/soak.py                          # builds the release node, 180 s, default bounds
    Benchmarks/soak.py --duration 60 --hostile 20
    Benchmarks/soak.py --node .build/release/cachet-node --memory-limit 32MiB --max-rss-mib 200

Every --interval seconds it prints the node's RSS (/proc/PID/status), its open descriptors
(/proc/PID/fd), its current connections (STATS connections_current) and the p99 latency of the
well-behaved clients' requests over the interval. It exits 1 with a message per problem when:

- a well-behaved GET returns a value other than the last acknowledged one (a miss is always fine),
  or a well-behaved request gets an error status or no reply within --request-timeout;
- RSS exceeds --max-rss-mib, or grows by more than --max-rss-growth-mib between the end of the ramp-up
  and the end of the run;
- open descriptors exceed the connections the script holds plus --fd-slack, or do not come back to
  the well-behaved clients' plus --fd-slack within --drain-seconds after the hostile clients close;
- the p99 of an interval exceeds --max-p99-ms for two intervals in a row (or the last one);
- the node exits before it is told to.

With --large-reader 1 (the default) one more well-behaved client sends, in one write, a GET of a
5,000-byte value, five GETs of the --large-value value and a PING, reads every reply as it comes, and
fails the run if a round does not complete (a connection the node stopped serving).

Hostile kinds (--kinds, all by default), each holding --hostile connections and replacing a tenth of
them every few seconds:
  stall    a frame cut off after a few bytes of its header, then silence
  partial  a PUT declaring a value of --large-value bytes, 90% of it sent, then silence
  pipeline 100 pipelined GETs of a --large-value value, replies never read (small receive buffer)
  drip     a PUT declaring 16 MiB, one more byte every second
  churn    connect and close in a loop (half with RST), --churn-rate per second
  garbage  random bytes, bad lengths and bad headers; whatever comes back is read, then close
"""

from __future__ import annotations

import argparse
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PUT, GET, DEL, CLEAR, STATS, PING = 1, 2, 3, 4, 5, 6
OK, NOT_FOUND = 0, 1
STATUS_NAMES = {0: "OK", 1: "NOT_FOUND", 2: "BAD_REQUEST", 3: "TOO_LARGE", 4: "UNKNOWN_OPCODE",
                5: "UNSUPPORTED_VERSION", 6: "SERVER_ERROR", 7: "UNAVAILABLE"}


def frame(opcode: int, body: bytes = b"", request_id: int = 0) -> bytes:
    return struct.pack(">IBBHI", 8 + len(body), 1, opcode, 0, request_id) + body


def put_body(key: bytes, value: bytes, ttl: int = 0) -> bytes:
    return struct.pack(">IH", ttl, len(key)) + key + value


def key_body(key: bytes) -> bytes:
    return struct.pack(">H", len(key)) + key


def parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1, "": 1}
    for unit in ("KiB", "MiB", "GiB", "B"):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * units[unit])
    return int(text)


class Failures:
    """Problems found, in order; printed at the end and when they happen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[str] = []

    def add(self, message: str) -> None:
        with self.lock:
            if len(self.messages) < 200:
                self.messages.append(message)
        print(f"FAIL: {message}", flush=True)

    def __bool__(self) -> bool:
        with self.lock:
            return bool(self.messages)


class Connection:
    """A blocking client connection that sends one request and reads one reply at a time; each request
    bounded by the socket's timeout, or by a `deadline` (time.monotonic()) when one is given."""

    def __init__(self, port: int, timeout: float, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.next_id = 1

    def _read_exactly(self, count: int, deadline: float | None = None) -> bytes:
        chunks, remaining = [], count
        while remaining > 0:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("the deadline passed")
                self.sock.settimeout(left)
            chunk = self.sock.recv(min(remaining, 1 << 20))
            if not chunk:
                raise ConnectionError("the node closed the connection")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def request(self, opcode: int, body: bytes = b"", deadline: float | None = None) -> tuple[int, bytes]:
        request_id = self.next_id
        self.next_id = (self.next_id + 1) & 0xFFFFFFFF
        if deadline is not None:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        self.sock.sendall(frame(opcode, body, request_id))
        (length,) = struct.unpack(">I", self._read_exactly(4, deadline))
        payload = self._read_exactly(length, deadline)
        _, reply_opcode, status, reply_id = struct.unpack(">BBHI", payload[:8])
        if reply_opcode != opcode or reply_id != request_id:
            raise ConnectionError(f"reply opcode {reply_opcode} id {reply_id} to request {opcode} id {request_id}")
        return status, payload[8:]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Latencies:
    """Latencies of the well-behaved requests since the last report."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.samples: list[float] = []
        self.total = 0

    def add(self, seconds: float) -> None:
        with self.lock:
            self.samples.append(seconds)
            self.total += 1

    def take(self) -> list[float]:
        with self.lock:
            samples, self.samples = self.samples, []
        return samples


def percentile(samples: list[float], fraction: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# MARK: - Well-behaved clients


def well_behaved(index: int, args, port: int, stop: threading.Event, latencies: Latencies,
                 failures: Failures, counters: dict) -> None:
    """PUT/GET/DEL on its own keys; every GET must miss or return a value the model allows."""
    rng = random.Random(args.seed * 1000 + index)
    keys = [f"soak:w{index}:{k}".encode() for k in range(args.keys)]
    # The values a GET of each key may return besides a miss: the last acknowledged PUT, plus any
    # PUT or DEL whose reply never came (it may or may not have been applied). None stands for "absent".
    allowed: dict[bytes, set] = {key: {None} for key in keys}
    values: dict[bytes, bytes] = {}
    connection = None
    version = 0
    while not stop.is_set():
        if connection is None:
            try:
                connection = Connection(port, args.request_timeout)
            except OSError as error:
                failures.add(f"well-behaved client {index} cannot connect: {error}")
                stop.wait(1)
                continue
        key = rng.choice(keys)
        choice = rng.random()
        started = time.monotonic()
        try:
            if choice < 0.5:
                status, body = connection.request(GET, key_body(key))
                latencies.add(time.monotonic() - started)
                counters["gets"] += 1
                if status == OK:
                    counters["hits"] += 1
                    if body not in {values.get(token) for token in allowed[key] if token is not None}:
                        failures.add(f"GET {key.decode()} returned {len(body)} bytes "
                                     f"({body[:40]!r}) that are not its last acknowledged value")
                elif status != NOT_FOUND:
                    failures.add(f"GET {key.decode()}: status {STATUS_NAMES.get(status, status)} {body[:120]!r}")
            elif choice < 0.85:
                version += 1
                size = rng.choice((rng.randint(1, 512), rng.randint(1, args.value_size)))
                token = f"{key.decode()}:{version}:".encode()
                value = (token * (size // len(token) + 1))[:max(size, len(token))]
                values[token] = value
                allowed[key].add(token)  # may be applied even if the reply is lost
                status, body = connection.request(PUT, put_body(key, value))
                latencies.add(time.monotonic() - started)
                counters["puts"] += 1
                if status == OK:
                    for old in allowed[key] - {token}:
                        values.pop(old, None)
                    allowed[key] = {token}
                else:
                    failures.add(f"PUT {key.decode()} ({len(value)} bytes): status "
                                 f"{STATUS_NAMES.get(status, status)} {body[:120]!r}")
            else:
                allowed[key].add(None)
                status, body = connection.request(DEL, key_body(key))
                latencies.add(time.monotonic() - started)
                counters["dels"] += 1
                if status in (OK, NOT_FOUND):
                    for old in allowed[key]:
                        values.pop(old, None)
                    allowed[key] = {None}
                else:
                    failures.add(f"DEL {key.decode()}: status {STATUS_NAMES.get(status, status)} {body[:120]!r}")
        except (OSError, ConnectionError) as error:
            latencies.add(time.monotonic() - started)
            if not stop.is_set():
                failures.add(f"well-behaved client {index}: {type(error).__name__}: {error} "
                             f"after {time.monotonic() - started:.1f} s")
            connection.close()
            connection = None
    if connection is not None:
        connection.close()


def large_reader(args, port: int, stop: threading.Event, latencies: Latencies, failures: Failures,
                 counters: dict) -> None:
    """Well-behaved but demanding: in one write, a GET of a 5,000-byte value and five GETs of the large
    value, then a PING; reads every reply as it comes. Every round must complete within --request-timeout."""
    small, large = b"S" * 5000, b"L" * args.large_value
    batch = frame(GET, key_body(b"soak:small"), 1) + frame(GET, key_body(b"soak:large"), 2) * 5 + frame(PING, b"", 3)
    connection = None
    while not stop.is_set():
        started = time.monotonic()
        try:
            if connection is None:
                connection = Connection(port, args.request_timeout)
            connection.sock.sendall(batch)
            for expected_id, value in [(1, small)] + [(2, large)] * 5 + [(3, b"")]:
                (length,) = struct.unpack(">I", connection._read_exactly(4))
                payload = connection._read_exactly(length)
                _, _, status, reply_id = struct.unpack(">BBHI", payload[:8])
                if reply_id != expected_id or (status == OK and payload[8:] != value) or \
                        status not in (OK, NOT_FOUND):
                    failures.add(f"pipelined large GETs: reply id {reply_id} status "
                                 f"{STATUS_NAMES.get(status, status)} with {length - 8} bytes, expected id {expected_id}")
            # Not in the latencies: a round moves megabytes; it must only complete.
            counters["rounds"] += 1
        except (OSError, ConnectionError) as error:
            if not stop.is_set():
                failures.add(f"pipelined large GETs: {type(error).__name__}: {error} within "
                             f"{args.request_timeout:.0f} s (a connection no longer served?)")
            if connection is not None:
                connection.close()
            connection = None
        stop.wait(0.2)
    if connection is not None:
        connection.close()


# MARK: - Hostile clients


class HostilePool:
    """Holds up to `count` hostile connections of one kind; replaces a tenth of them every few seconds."""

    def __init__(self, kind: str, args, port: int, stop: threading.Event) -> None:
        self.kind, self.args, self.port, self.stop = kind, args, port, stop
        self.rng = random.Random(hash(kind) ^ args.seed)
        self.sockets: list[tuple[socket.socket, dict]] = []
        self.lock = threading.Lock()
        self.opened = 0
        self.refused = 0

    def held(self) -> int:
        with self.lock:
            return len(self.sockets)

    def _connect(self, receive_buffer: int | None = None) -> socket.socket | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", self.port))
        except OSError:
            sock.close()
            self.refused += 1
            return None
        sock.setblocking(False)
        self.opened += 1
        return sock

    @staticmethod
    def _send(sock: socket.socket, data: bytes) -> None:
        try:
            sock.send(data)
        except OSError:
            pass

    def _open_one(self) -> None:
        kind, args = self.kind, self.args
        state: dict = {}
        if kind == "pipeline":
            sock = self._connect(receive_buffer=4096)
            if sock:
                self._send(sock, frame(GET, key_body(b"soak:large"), 1) * 100)
        else:
            sock = self._connect()
            if sock is None:
                return
            if kind == "stall":
                whole = frame(PUT, put_body(b"soak:stall", b"x" * 100))
                self._send(sock, whole[: self.rng.randint(1, 11)])
            elif kind == "partial":
                whole_length = 8 + 6 + 12 + args.large_value
                head = struct.pack(">IBBHI", whole_length, 1, PUT, 0, 1) + put_body(b"soak:partial", b"")
                state["pending"] = int(args.large_value * 0.9)
                self._send(sock, head)
            elif kind == "drip":
                declared = 16 << 20
                head = struct.pack(">IBBHI", declared, 1, PUT, 0, 1) + put_body(b"soak:drip", b"")
                self._send(sock, head)
        if sock:
            with self.lock:
                self.sockets.append((sock, state))

    def _close(self, sock: socket.socket, reset: bool) -> None:
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            sock.close()
        except OSError:
            pass

    def run(self) -> None:
        if self.kind == "churn":
            self._churn()
            return
        if self.kind == "garbage":
            self._garbage()
            return
        last_replace = time.monotonic()
        while not self.stop.is_set():
            while self.held() < self.args.hostile and not self.stop.is_set():
                self._open_one()
                time.sleep(0.002)
            with self.lock:
                sockets = list(self.sockets)
            for sock, state in sockets:
                if self.kind == "partial" and state.get("pending", 0) > 0:
                    chunk = min(state["pending"], 256 << 10)
                    try:
                        sent = sock.send(b"p" * chunk)
                        state["pending"] -= sent
                    except OSError:
                        pass
                elif self.kind == "drip":
                    self._send(sock, b"d")
            if time.monotonic() - last_replace > 3:
                last_replace = time.monotonic()
                with self.lock:
                    self.rng.shuffle(self.sockets)
                    victims = self.sockets[: max(1, len(self.sockets) // 10)]
                    self.sockets = self.sockets[len(victims):]
                for sock, _ in victims:
                    self._close(sock, reset=self.rng.random() < 0.5)
            self.stop.wait(1)
        self.close_all()

    def _churn(self) -> None:
        interval = 1.0 / max(1, self.args.churn_rate)
        while not self.stop.is_set():
            sock = self._connect()
            if sock:
                self._close(sock, reset=self.rng.random() < 0.5)
            time.sleep(interval)

    def _garbage(self) -> None:
        while not self.stop.is_set():
            sock = self._connect()
            if sock is None:
                time.sleep(0.1)
                continue
            pick = self.rng.random()
            if pick < 0.3:
                data = bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(1, 600)))
            elif pick < 0.5:  # a length below the header
                data = struct.pack(">I", self.rng.randint(0, 7)) + b"\0" * 20
            elif pick < 0.7:  # a length above --max-frame
                data = struct.pack(">I", self.rng.randint(1 << 27, (1 << 32) - 1))
            else:  # whole frames with bad versions, opcodes, key lengths, bodies
                body = bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(0, 40)))
                data = struct.pack(">IBBHI", 8 + len(body), self.rng.choice((0, 1, 2)),
                                   self.rng.randint(0, 9), 0, 7) + body
                data *= self.rng.randint(1, 5)
            self._send(sock, data)
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:
                try:
                    if not sock.recv(65536):
                        break
                except BlockingIOError:
                    time.sleep(0.01)
                except OSError:
                    break
            self._close(sock, reset=self.rng.random() < 0.3)
            time.sleep(1.0 / 50)

    def close_all(self) -> None:
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for sock, _ in sockets:
            self._close(sock, reset=False)


# MARK: - The node


def node_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def node_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def start_node(args, data_dir: str) -> tuple[subprocess.Popen, int]:
    command = [args.node, "--host", "127.0.0.1", "--port", "0", "--memory-limit", args.memory_limit,
               "--disk-limit", "0", "--data-dir", data_dir, "--log-level", "warning"] + args.node_arg
    log = open(os.path.join(data_dir, "node.log"), "wb")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    line = b""
    os.set_blocking(process.stdout.fileno(), False)
    while time.monotonic() < deadline and b"\n" not in line:
        if process.poll() is not None:
            break
        try:
            chunk = os.read(process.stdout.fileno(), 256)
            if chunk:
                line += chunk
                continue
        except BlockingIOError:
            pass
        time.sleep(0.05)
    text = line.decode(errors="replace")
    if "listening on " not in text:
        process.kill()
        raise SystemExit(f"cachet-node did not start (printed {text!r}); command: {' '.join(command)}")
    port = int(text.split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1])
    return process, port


def stop_node(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def stats(port: int, timeout: float) -> dict | None:
    try:
        connection = Connection(port, timeout)
        try:
            status, body = connection.request(STATS)
        finally:
            connection.close()
        return json.loads(body) if status == OK else None
    except (OSError, ConnectionError, ValueError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", help="cachet-node binary (default: build .build/release/cachet-node)")
    parser.add_argument("--duration", type=float, default=180, help="seconds of load (default 180)")
    parser.add_argument("--interval", type=float, default=5, help="seconds between reports (default 5)")
    parser.add_argument("--memory-limit", default="32MiB", help="the node's --memory-limit (default 32MiB)")
    parser.add_argument("--node-arg", action="append", default=[], help="another flag for the node (repeatable)")
    parser.add_argument("--clients", type=int, default=4, help="well-behaved clients (default 4)")
    parser.add_argument("--keys", type=int, default=200, help="keys per well-behaved client (default 200)")
    parser.add_argument("--value-size", type=int, default=16384, help="largest well-behaved value (default 16384)")
    parser.add_argument("--large-reader", type=int, choices=(0, 1), default=1,
                        help="1 (default): one more client pipelines a small and five large GETs and a PING")
    parser.add_argument("--hostile", type=int, default=50, help="connections per hostile kind (default 50, max 1000)")
    parser.add_argument("--kinds", default="stall,partial,pipeline,drip,churn,garbage",
                        help="hostile kinds to run (comma-separated; empty for none)")
    parser.add_argument("--large-value", type=int, default=1 << 20, help="bytes of the large value (default 1 MiB)")
    parser.add_argument("--churn-rate", type=int, default=100, help="connect/close per second (default 100)")
    parser.add_argument("--request-timeout", type=float, default=5, help="seconds a request may take (default 5)")
    parser.add_argument("--max-rss-mib", type=float, default=0,
                        help="RSS bound in MiB (default: 2 x the memory limit + 64)")
    parser.add_argument("--max-rss-growth-mib", type=float, default=48,
                        help="RSS growth allowed after the ramp-up, MiB (default 48)")
    parser.add_argument("--fd-slack", type=int, default=32, help="descriptors allowed above the connections held")
    parser.add_argument("--max-p99-ms", type=float, default=250, help="p99 bound of an interval, ms (default 250)")
    parser.add_argument("--drain-seconds", type=float, default=15,
                        help="seconds the node has to close the hostile connections at the end (default 15)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = parser.parse_args()
    if args.hostile > 1000 or args.clients > 64:
        parser.error("at most 1000 hostile connections per kind and 64 well-behaved clients")
    kinds = [kind for kind in args.kinds.split(",") if kind]
    unknown = set(kinds) - {"stall", "partial", "pipeline", "drip", "churn", "garbage"}
    if unknown:
        parser.error(f"unknown hostile kinds: {', '.join(sorted(unknown))}")
    memory_limit = parse_size(args.memory_limit)
    max_rss = args.max_rss_mib * (1 << 20) or 2 * memory_limit + (64 << 20)

    if not args.node:
        print("building cachet-node (release)...", flush=True)
        subprocess.run(["swift", "build", "-c", "release", "--product", "cachet-node"], cwd=ROOT, check=True)
        args.node = os.path.join(ROOT, ".build", "release", "cachet-node")

    failures = Failures()
    with tempfile.TemporaryDirectory(prefix="cachet-soak-") as data_dir:
        process, port = start_node(args, data_dir)
        pid = process.pid
        stop = threading.Event()
        threads: list[threading.Thread] = []
        pools: list[HostilePool] = []
        try:
            baseline_fds = node_fds(pid)
            print(f"node pid {pid} on 127.0.0.1:{port}, --memory-limit {args.memory_limit}; "
                  f"bounds: RSS {max_rss / (1 << 20):.0f} MiB (growth {args.max_rss_growth_mib:.0f} MiB), "
                  f"p99 {args.max_p99_ms:.0f} ms, descriptors held + {args.fd_slack}", flush=True)
            # The large value the pipelining clients ask for.
            setup = Connection(port, 30)
            status, _ = setup.request(PUT, put_body(b"soak:large", b"L" * args.large_value))
            small_status, _ = setup.request(PUT, put_body(b"soak:small", b"S" * 5000))
            setup.close()
            if small_status != OK:
                failures.add(f"PUT of the 5000-byte value: status {STATUS_NAMES.get(small_status, small_status)}")
            if status != OK:
                failures.add(f"PUT of the {args.large_value}-byte value: status {STATUS_NAMES.get(status, status)}")

            latencies = Latencies()
            counters = {"gets": 0, "hits": 0, "puts": 0, "dels": 0, "rounds": 0}
            for index in range(args.clients):
                thread = threading.Thread(target=well_behaved, daemon=True,
                                          args=(index, args, port, stop, latencies, failures, counters))
                thread.start()
                threads.append(thread)
            if args.large_reader:
                thread = threading.Thread(target=large_reader, daemon=True,
                                          args=(args, port, stop, latencies, failures, counters))
                thread.start()
                threads.append(thread)
            for kind in kinds:
                pool = HostilePool(kind, args, port, stop)
                pools.append(pool)
                thread = threading.Thread(target=pool.run, daemon=True)
                thread.start()
                threads.append(thread)

            started = time.monotonic()
            ramp_up = min(30.0, args.duration / 3)
            rss_after_ramp_up = None
            slow_intervals = 0
            peak_rss = peak_fds = 0
            reported = {"rss": False, "fds": False}  # a bound is reported when first crossed, then its peak
            print(f"{'time':>6} {'rss MiB':>8} {'fds':>6} {'held':>6} {'conns':>6} {'requests':>9} "
                  f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}", flush=True)
            while time.monotonic() - started < args.duration and process.poll() is None:
                stop.wait(args.interval)
                elapsed = time.monotonic() - started
                try:
                    rss, fds = node_rss(pid), node_fds(pid)
                except OSError:
                    break
                held = args.clients + 1 + int(args.large_reader) + sum(pool.held() for pool in pools)
                if "churn" in kinds:
                    held += 2
                if "garbage" in kinds:
                    held += 1
                current = stats(port, args.request_timeout)
                conns = current.get("connections_current", "?") if current else "none"
                samples = latencies.take()
                p99 = percentile(samples, 0.99) * 1000
                print(f"{elapsed:5.0f}s {rss / (1 << 20):8.1f} {fds:6d} {held:6d} {conns!s:>6} {len(samples):9d} "
                      f"{percentile(samples, 0.5) * 1000:8.2f} {p99:8.2f} "
                      f"{(max(samples) if samples else 0) * 1000:8.1f}", flush=True)
                peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
                if rss > max_rss and not reported["rss"]:
                    reported["rss"] = True
                    failures.add(f"RSS {rss / (1 << 20):.0f} MiB at {elapsed:.0f} s exceeds the "
                                 f"{max_rss / (1 << 20):.0f} MiB bound")
                if fds > held + baseline_fds + args.fd_slack and not reported["fds"]:
                    reported["fds"] = True
                    failures.add(f"{fds} open descriptors at {elapsed:.0f} s for {held} connections held "
                                 f"(bound {held + baseline_fds + args.fd_slack})")
                if current is None:
                    failures.add(f"STATS not answered within {args.request_timeout} s at {elapsed:.0f} s")
                if elapsed >= ramp_up and rss_after_ramp_up is None:
                    rss_after_ramp_up = rss
                slow_intervals = slow_intervals + 1 if p99 > args.max_p99_ms else 0
                if slow_intervals == 2:
                    failures.add(f"p99 {p99:.0f} ms above {args.max_p99_ms:.0f} ms for two intervals "
                                 f"(at {elapsed:.0f} s)")
                if not samples and args.clients:
                    failures.add(f"no well-behaved request completed in the interval ending at {elapsed:.0f} s")
            if reported["rss"]:
                failures.add(f"peak RSS {peak_rss / (1 << 20):.0f} MiB (bound {max_rss / (1 << 20):.0f} MiB)")
            if reported["fds"]:
                failures.add(f"peak descriptors {peak_fds}")
            if process.poll() is not None:
                failures.add(f"the node exited with status {process.returncode} during the run")
            else:
                rss_end = node_rss(pid)
                if slow_intervals == 1:
                    failures.add(f"p99 above {args.max_p99_ms:.0f} ms in the last interval")
                if rss_after_ramp_up is not None and rss_end - rss_after_ramp_up > args.max_rss_growth_mib * (1 << 20):
                    failures.add(f"RSS grew from {rss_after_ramp_up / (1 << 20):.0f} MiB after the ramp-up to "
                                 f"{rss_end / (1 << 20):.0f} MiB (bound: +{args.max_rss_growth_mib:.0f} MiB)")
                # The hostile clients leave: the node must let go of their connections.
                for pool in pools:
                    pool.stop = threading.Event()
                    pool.stop.set()
                stop_hostile_at = time.monotonic()
                for pool in pools:
                    pool.close_all()
                expected = baseline_fds + args.clients + int(args.large_reader) + args.fd_slack
                # The well-behaved clients, the pipelined reader (which reconnects after a timeout) and
                # the STATS connection itself.
                expected_conns = args.clients + int(args.large_reader) + 1 + 1
                while True:
                    fds = node_fds(pid)
                    current = stats(port, args.request_timeout)
                    conns = current.get("connections_current", "?") if current else "none"
                    settled = fds <= expected and isinstance(conns, int) and conns <= expected_conns
                    if settled or time.monotonic() - stop_hostile_at > args.drain_seconds:
                        break
                    time.sleep(0.5)
                if isinstance(conns, int) and conns > expected_conns:
                    failures.add(f"{conns} connections {args.drain_seconds:.0f} s after the hostile clients "
                                 f"closed (at most {expected_conns} expected): connections are not released")
                print(f"after the hostile clients closed: {fds} descriptors, {conns} connections, "
                      f"RSS {node_rss(pid) / (1 << 20):.1f} MiB", flush=True)
                if fds > expected:
                    failures.add(f"{fds} descriptors {args.drain_seconds:.0f} s after the hostile clients "
                                 f"closed (bound {expected}): connections are not released")
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=5)
            for pool in pools:
                pool.close_all()
            stop_node(process)
        print(f"well-behaved: {counters['gets']} GETs ({counters['hits']} hits), {counters['puts']} PUTs, "
              f"{counters['dels']} DELs, {counters['rounds']} pipelined large rounds; peak RSS {peak_rss / (1 << 20):.1f} MiB, peak descriptors {peak_fds}; "
              f"hostile connections opened: "
              + ", ".join(f"{pool.kind} {pool.opened}" for pool in pools), flush=True)
    if failures:
        print(f"\nSOAK FAILED: {len(failures.messages)} problem(s)", flush=True)
        counts: dict[str, int] = {}
        for message in failures.messages:
            counts[message] = counts.get(message, 0) + 1
        for message, count in counts.items():
            print(f"  - {message}" + (f" ({count} times)" if count > 1 else ""))
        return 1
    print("\nSOAK PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
