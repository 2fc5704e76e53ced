#!/usr/bin/env python3
"""Resident memory of a node under pipelined load with large values, with and without the disk tier.

  python3 Benchmarks/disk-memory.py --node .build/release/cachet-node            # 30 s per configuration
  python3 Benchmarks/disk-memory.py --node OLD --node NEW --rounds 2            # two builds, alternated

For each node binary and each configuration (memory only, `--memory-limit 16MiB --disk-limit 0`, and
`--memory-limit 16MiB --disk-limit 64MiB`), it starts the node on 127.0.0.1 in a temporary data directory
and runs, for --duration seconds: 4 clients, each on one connection sending batches of 1, 4 or 16 requests
(35% PUT of a random 24 B, 480 B, 4.8 KB, 64 KiB, 296 KB or 1 MiB value, 55% GET, 10% DEL over 64 keys) in
one write from a second thread while reading the replies; and one client sending 1 MiB PUTs in 64 KiB
pieces 2 ms apart. Every half second it reads the node's VmRSS and its STATS. It prints one line per run:
peak resident memory, requests answered, and the largest disk queue (operations and bytes) and connection
memory seen. Values are random bytes (incompressible). Every node it starts is stopped at the end.
"""

import argparse
import json
import os
import random
import socket
import struct
import subprocess
import tempfile
import threading
import time

PUT, GET, DEL, STATS = 1, 2, 3, 5
SIZES = [24, 480, 4800, 65536, 296000, 1 << 20]


def frame(opcode, body, request_id):
    payload = struct.pack(">BBHI", 1, opcode, 0, request_id) + body
    return struct.pack(">I", len(payload)) + payload


def put(key, value, request_id):
    return frame(PUT, struct.pack(">IH", 0, len(key)) + key + value, request_id)


def keyed(opcode, key, request_id):
    return frame(opcode, struct.pack(">H", len(key)) + key, request_id)


def receive_exactly(sock, count):
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(min(count - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the node closed the connection")
        data += chunk
    return data


def read_reply(sock):
    (length,) = struct.unpack(">I", receive_exactly(sock, 4))
    return receive_exactly(sock, length)


class Load:
    def __init__(self, port, seed):
        self.port, self.seed = port, seed
        self.stop = threading.Event()
        self.answered = 0
        self.lock = threading.Lock()
        self.values = {size: os.urandom(size) for size in SIZES}
        self.errors = []

    def batches(self, index):
        rng = random.Random(self.seed * 100 + index)
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.settimeout(20)
        try:
            while not self.stop.is_set():
                count = rng.choice([1, 4, 16])
                batch = bytearray()
                for request_id in range(count):
                    key = b"k%d" % rng.randrange(64)
                    roll = rng.random()
                    if roll < 0.35:
                        batch += put(key, self.values[rng.choice(SIZES)], request_id)
                    elif roll < 0.9:
                        batch += keyed(GET, key, request_id)
                    else:
                        batch += keyed(DEL, key, request_id)
                writer = threading.Thread(target=sock.sendall, args=(bytes(batch),))
                writer.start()
                for _ in range(count):
                    read_reply(sock)
                writer.join()
                with self.lock:
                    self.answered += count
        except (OSError, EOFError) as error:
            self.errors.append(f"client {index}: {error}")
        finally:
            sock.close()

    def dripper(self):
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.settimeout(20)
        number = 0
        try:
            while not self.stop.is_set():
                request = put(b"drip%d" % (number % 16), self.values[1 << 20], number)
                number += 1
                for offset in range(0, len(request), 65536):
                    sock.sendall(request[offset:offset + 65536])
                    time.sleep(0.002)
                read_reply(sock)
                with self.lock:
                    self.answered += 1
        except (OSError, EOFError) as error:
            self.errors.append(f"dripper: {error}")
        finally:
            sock.close()


def resident_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def measure(binary, flags, duration, seed):
    with tempfile.TemporaryDirectory(prefix="cachet-disk-memory") as directory:
        node = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", "0", "--data-dir", os.path.join(directory, "data"),
             "--log-level", "warning", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            line = node.stdout.readline().decode()
            if "listening on" not in line:
                raise RuntimeError(f"{binary} did not start: {line!r}")
            port = int(line.rsplit(":", 1)[1])
            load = Load(port, seed)
            threads = [threading.Thread(target=load.batches, args=(i,), daemon=True) for i in range(4)]
            threads.append(threading.Thread(target=load.dripper, daemon=True))
            for thread in threads:
                thread.start()
            stats_socket = socket.create_connection(("127.0.0.1", port))
            stats_socket.settimeout(20)
            peak = queue_depth = queue_bytes = connection_memory = 0
            deadline = time.monotonic() + duration
            while time.monotonic() < deadline:
                time.sleep(0.5)
                peak = max(peak, resident_mib(node.pid))
                stats_socket.sendall(frame(STATS, b"", 9))
                stats = json.loads(bytes(read_reply(stats_socket)[8:]))
                queue_depth = max(queue_depth, stats.get("disk_queue_depth", 0))
                queue_bytes = max(queue_bytes, stats.get("disk_queue_bytes", 0))
                connection_memory = max(connection_memory, stats.get("connection_memory_bytes", 0))
            load.stop.set()
            for thread in threads:
                thread.join(timeout=30)
            stats_socket.close()
            return {
                "peak_rss_mib": peak, "answered": load.answered, "disk_queue_depth": queue_depth,
                "disk_queue_mib": queue_bytes >> 20, "connection_memory_mib": connection_memory >> 20,
                "errors": load.errors[:3],
            }
        finally:
            node.kill()
            node.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", action="append", required=True, help="a cachet-node binary (repeatable)")
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    configurations = [
        ("memory only", ["--memory-limit", "16MiB", "--disk-limit", "0"]),
        ("disk tier", ["--memory-limit", "16MiB", "--disk-limit", "64MiB"]),
    ]
    print("| round | node | configuration | peak RSS MiB | requests | disk queue (ops) | disk queue MiB | "
          "connection memory MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for round_number in range(1, args.rounds + 1):
        for binary in args.node:
            for name, flags in configurations:
                result = measure(binary, flags, args.duration, args.seed)
                print(f"| {round_number} | {binary} | {name} | {result['peak_rss_mib']} | {result['answered']} | "
                      f"{result['disk_queue_depth']} | {result['disk_queue_mib']} | "
                      f"{result['connection_memory_mib']} |", flush=True)
                for error in result["errors"]:
                    print(f"  error: {error}", flush=True)


if __name__ == "__main__":
    main()
