#!/usr/bin/env python3
"""Random ranges of one value, as a video player asks for them, over HTTP or the binary protocol.

The same load generator for every server, so that their latencies compare: THREADS connections (one per
thread, kept open), each asking for LENGTH bytes at a random offset of a SIZE-byte value, one request at a
time, for SECONDS; prints one JSON line with the requests, the bytes, and the latency percentiles.

  range-load.py --http http://127.0.0.1:8080/values/big --size 1073741824
  range-load.py --cachet 127.0.0.1:7420 --key big --size 1073741824

Every answer is checked: its status (206, or OK), its length, and (binary) the value's total length.
"""
import argparse
import json
import random
import socket
import struct
import threading
import time
import urllib.parse


def read_exact(sock, count, buffer):
    view = memoryview(buffer)[:count]
    done = 0
    while done < count:
        n = sock.recv_into(view[done:], count - done)
        if n == 0:
            raise ConnectionError("closed")
        done += n
    return view


class HTTPRanges:
    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        self.address = (parts.hostname, parts.port or 80)
        self.path = parts.path
        self.host = parts.netloc

    def connect(self):
        sock = socket.create_connection(self.address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def request(self, sock, offset, length, buffer):
        sock.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nRange: bytes=%d-%d\r\n\r\n"
                      % (self.path, self.host, offset, offset + length - 1)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed")
            head += chunk
        header, rest = head.split(b"\r\n\r\n", 1)
        lines = header.decode("latin-1").split("\r\n")
        if " 206 " not in lines[0] + " ":
            raise RuntimeError("answer " + lines[0])
        size = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
        if size != length:
            raise RuntimeError("%d bytes, not %d" % (size, length))
        buffer[:len(rest)] = rest
        read_exact_into(sock, buffer, len(rest), size)


def read_exact_into(sock, buffer, start, end):
    view = memoryview(buffer)
    while start < end:
        n = sock.recv_into(view[start:end], end - start)
        if n == 0:
            raise ConnectionError("closed")
        start += n


class CachetRanges:
    def __init__(self, address, key, size):
        host, port = address.rsplit(":", 1)
        self.address = (host, int(port))
        self.key = key.encode()
        self.size = size

    def connect(self):
        sock = socket.create_connection(self.address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def request(self, sock, offset, length, buffer):
        body = struct.pack(">H", len(self.key)) + self.key + struct.pack(">QQ", offset, length)
        sock.sendall(struct.pack(">IBBHI", 8 + len(body), 1, 2, 0x1000, 1) + body)
        header = bytes(read_exact(sock, 12, buffer))
        payload, _, _, status, _ = struct.unpack(">IBBHI", header)
        if status != 0:
            raise RuntimeError("status %d" % status)
        read_exact_into(sock, buffer, 0, payload - 8)
        total = struct.unpack(">Q", bytes(buffer[:8]))[0]
        if total != self.size or payload - 8 - 16 != length:
            raise RuntimeError("a reply of %d bytes for a value of %d" % (payload - 24, total))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http")
    parser.add_argument("--cachet")
    parser.add_argument("--key")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--length", type=int, default=1 << 20)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--label", default="")
    options = parser.parse_args()
    target = HTTPRanges(options.http) if options.http else CachetRanges(options.cachet, options.key, options.size)
    latencies = []
    errors = []
    lock = threading.Lock()
    deadline = time.monotonic() + options.seconds

    def worker(index):
        rng = random.Random(options.seed * 1000 + index)
        buffer = bytearray(options.length + 64)
        sock = target.connect()
        mine = []
        try:
            while time.monotonic() < deadline:
                offset = rng.randrange(0, options.size - options.length)
                started = time.perf_counter()
                try:
                    target.request(sock, offset, options.length, buffer)
                except ConnectionError:
                    # A server that ends a kept-alive connection (after so many requests): open another and
                    # ask again; the time spent counts.
                    sock.close()
                    sock = target.connect()
                    target.request(sock, offset, options.length, buffer)
                mine.append(time.perf_counter() - started)
        except Exception as error:  # noqa: BLE001 - reported, the run fails
            errors.append(str(error))
        finally:
            sock.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(options.threads)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    latencies.sort()

    def percentile(p):
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 3) if latencies else None

    print(json.dumps({
        "label": options.label, "requests": len(latencies), "errors": len(errors), "first_error": errors[:1],
        "mb_per_second": round(len(latencies) * options.length / 1048576 / elapsed, 1),
        "p50_ms": percentile(0.50), "p90_ms": percentile(0.90), "p99_ms": percentile(0.99),
        "max_ms": percentile(1.0),
    }))


if __name__ == "__main__":
    main()
