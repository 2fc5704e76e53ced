#!/usr/bin/env python3
"""Writes Protocol/vectors/ring.json from Protocol/RING.md, independently of the Swift ring.

Needs the xxhash package (pip install xxhash) for XXH64. The ring below is a second implementation of
RING.md, kept deliberately plain: Tests/CachetRingTests check the Swift ring against its answers.

Run from the repository root: python3 Protocol/tools/make-ring-vectors.py
The vectors are committed; rerun only when the specification changes.
"""
import bisect
import json
import os

import xxhash

OUT = os.path.join(os.path.dirname(__file__), "..", "vectors", "ring.json")
DEFAULT_VIRTUAL_NODES = 160


def xxh64(data):
    return xxhash.xxh64_intdigest(data, seed=0)


class Ring:
    """RING.md, step by step: points named "member#j", sorted by (hash, member's UTF-8 bytes)."""

    def __init__(self, members, virtual_nodes=DEFAULT_VIRTUAL_NODES):
        assert members and all(members) and len(set(members)) == len(members)
        assert 1 <= virtual_nodes <= 4096
        self.members = sorted(members, key=lambda m: m.encode("utf-8"))
        points = []
        for member in self.members:
            for j in range(virtual_nodes):
                name = member.encode("utf-8") + b"#" + str(j).encode("ascii")
                points.append((xxh64(name), member.encode("utf-8"), j, member))
        points.sort()
        self.points = [(h, member) for h, _, _, member in points]
        self.hashes = [h for h, _ in self.points]

    def first_point(self, key_hash):
        index = bisect.bisect_left(self.hashes, key_hash)  # first point with hash >= key_hash
        return 0 if index == len(self.points) else index

    def owner(self, key):
        return self.points[self.first_point(xxh64(key))][1]

    def preference(self, key, count):
        result = []
        index = self.first_point(xxh64(key))
        while len(result) < min(count, len(self.members)):
            member = self.points[index][1]
            if member not in result:
                result.append(member)
            index = (index + 1) % len(self.points)
        return result


def pattern(length):
    return bytes((k * 31 + 7) & 0xFF for k in range(length))


def hex64(value):
    return "%016x" % value


def key_entry(ring, key, count):
    entry = {"key_hex": key.hex()}
    try:
        text = key.decode("utf-8")
        if text.isprintable():
            entry["key"] = text
    except UnicodeDecodeError:
        pass
    entry["hash"] = hex64(xxh64(key))
    entry["owner"] = ring.owner(key)
    entry["preference"] = ring.preference(key, count)
    assert entry["preference"][0] == entry["owner"]
    return entry


def main():
    # The published value of the empty input, to catch a broken xxhash installation.
    assert xxh64(b"") == 0xEF46DB3751D8E999
    hash_inputs = [b"", b"a", b"abc", b"The quick brown fox jumps over the lazy dog"]
    hash_inputs += [pattern(n) for n in (1, 3, 4, 7, 8, 15, 31, 32, 33, 63, 64, 100)]
    hashes = [{"input_hex": data.hex(), "hash": hex64(xxh64(data))} for data in hash_inputs]

    # A five-node cluster at the default virtual node count, listed out of order on purpose.
    members = ["10.0.0.3:7420", "10.0.0.1:7420", "10.0.0.5:7420", "10.0.0.2:7420", "10.0.0.4:7420"]
    big = Ring(members)
    keys = [b"k", b"k1", b"key:0000000042", b"user:1001", b"session:9f86d081", "ключ".encode(), "キー🔑".encode()]
    keys += [b"\x00", b"\x00\xff\x0a", bytes(range(256))[:40]]
    keys += [b"key:%010d" % i for i in range(0, 40 * 977, 977)]
    assert len(keys) == 50 and len(set(keys)) == 50
    big_keys = [key_entry(big, key, 2) for key in keys]
    assert len({entry["owner"] for entry in big_keys}) == len(members), "every member should own a vector key"

    # Three nodes with two points each: small enough to list every point, with keys past the last point
    # (they wrap to the first) and keys that are point names (a hash equal to a point's belongs to it).
    small = Ring(["127.0.0.1:7421", "127.0.0.1:7420", "127.0.0.1:7422"], virtual_nodes=2)
    small_keys = [b"127.0.0.1:7420#0", b"127.0.0.1:7422#1"]
    wrapping = [k for k in (b"wrap:%d" % i for i in range(10000)) if xxh64(k) > small.hashes[-1]][:3]
    before_first = [k for k in (b"first:%d" % i for i in range(10000)) if xxh64(k) < small.hashes[0]][:2]
    small_keys += wrapping + before_first + [b"key:%d" % i for i in range(5)]
    assert len(wrapping) == 3 and len(before_first) == 2
    small_entries = [key_entry(small, key, 3) for key in small_keys]

    document = {
        "description": "Consistent-hash ring vectors for Protocol/RING.md, written by "
        "Protocol/tools/make-ring-vectors.py. Hashes are XXH64 with seed 0 as 16 lowercase hex digits; "
        "keys are given as hex (key_hex) and, when printable UTF-8, also as text (key); owners and preference "
        "lists are member names.",
        "xxh64": hashes,
        "rings": [
            {
                "name": "five nodes, default virtual nodes",
                "members": members,
                "virtual_nodes_per_member": DEFAULT_VIRTUAL_NODES,
                "first_points": [{"hash": hex64(h), "member": m} for h, m in big.points[:5]],
                "preference_count": 2,
                "keys": big_keys,
            },
            {
                "name": "three nodes, two virtual nodes each",
                "members": ["127.0.0.1:7421", "127.0.0.1:7420", "127.0.0.1:7422"],
                "virtual_nodes_per_member": 2,
                "first_points": [{"hash": hex64(h), "member": m} for h, m in small.points],
                "preference_count": 3,
                "keys": small_entries,
            },
        ],
    }
    with open(OUT, "w", encoding="utf-8") as out:
        out.write(render(document) + "\n")


def render(value, indent=0):
    """JSON with one line per vector entry, so that a diff shows which key changed."""
    pad = "  " * indent

    def nested(item):
        return isinstance(item, dict) or (isinstance(item, list) and any(isinstance(v, dict) for v in item))

    if isinstance(value, dict) and any(nested(v) for v in value.values()):
        items = [f"{pad}  {json.dumps(k)}: {render(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        items = [pad + "  " + render(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


if __name__ == "__main__":
    main()
