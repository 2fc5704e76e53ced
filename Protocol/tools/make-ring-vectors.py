#!/usr/bin/env python3
"""Writes Protocol/vectors/ring.json from Protocol/RING.md and Protocol/vectors/cluster.json from
Protocol/CLUSTER.md, independently of the Swift code.

Needs the xxhash package (pip install xxhash) for XXH64. The ring below is a second implementation of
RING.md, kept deliberately plain: Tests/CachetRingTests check the Swift ring against its answers, and
Tests/CachetClusterTests check the membership hash and the ring by id against cluster.json.

Run from the repository root: python3 Protocol/tools/make-ring-vectors.py
The vectors are committed; rerun only when the specification changes.
"""
import bisect
import json
import os

import xxhash

OUT = os.path.join(os.path.dirname(__file__), "..", "vectors", "ring.json")
CLUSTER_OUT = os.path.join(os.path.dirname(__file__), "..", "vectors", "cluster.json")
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

    # Members named by id rather than by address (a cluster file's ids): pod names, a non-ASCII id, and
    # ids of which one is a prefix of another, so that byte order with prefixes is exercised.
    named_members = ["cachet-2", "cachet-0", "nœud-🔑", "cachet-1", "cachet-10"]
    named = Ring(named_members)
    named_keys = [b"k", b"user:1001", "ключ".encode(), b"\x00\xff"] + [b"key:%d" % i for i in range(16)]
    named_entries = [key_entry(named, key, 3) for key in named_keys]
    assert len({entry["owner"] for entry in named_entries}) == len(named_members), "every id should own a key"
    prefix = Ring(["b", "ab", "a"], virtual_nodes=3)
    assert prefix.members == ["a", "ab", "b"]
    prefix_entries = [key_entry(prefix, key, 3) for key in [b"a#0", b"ab#2", b"b#1"] + [b"key:%d" % i for i in range(6)]]

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
            {
                "name": "five members named by id, default virtual nodes",
                "members": named_members,
                "virtual_nodes_per_member": DEFAULT_VIRTUAL_NODES,
                "first_points": [{"hash": hex64(h), "member": m} for h, m in named.points[:5]],
                "preference_count": 3,
                "keys": named_entries,
            },
            {
                "name": "ids that are prefixes of each other, three virtual nodes each",
                "members": ["b", "ab", "a"],
                "virtual_nodes_per_member": 3,
                "first_points": [{"hash": hex64(h), "member": m} for h, m in prefix.points],
                "preference_count": 3,
                "keys": prefix_entries,
            },
        ],
    }
    with open(OUT, "w", encoding="utf-8") as out:
        out.write(render(document) + "\n")
    write_cluster_vectors()


def canonical_text(members, virtual_nodes):
    """CLUSTER.md's canonical text: header, count, then one line per member in id byte order."""
    lines = ["cachet-membership 1", "virtual_nodes_per_member %d" % virtual_nodes]
    for member in sorted(members, key=lambda m: m["id"].encode("utf-8")):
        lines.append("member %s %s %d" % (member["id"], member["host"], member["port"]))
    return "\n".join(lines) + "\n"


def write_cluster_vectors():
    """Cluster files, the members they give (ids filled in), their canonical text and hash, and owners by id."""
    files = [
        ("ids given", {"members": [
            {"id": "n1", "host": "127.0.0.1", "port": 7420},
            {"id": "n2", "host": "127.0.0.1", "port": 7421},
            {"id": "n3", "host": "127.0.0.1", "port": 7422},
        ]}),
        ("ids left out: each member is named host:port", {"members": [
            {"host": "127.0.0.1", "port": 7421},
            {"host": "127.0.0.1", "port": 7420},
            {"host": "127.0.0.1", "port": 7422},
        ]}),
        ("pod names at DNS addresses, listed out of order", {"members": [
            {"id": "cachet-2", "host": "cachet-2.cachet", "port": 7420},
            {"id": "cachet-0", "host": "cachet-0.cachet", "port": 7420},
            {"id": "cachet-1", "host": "cachet-1.cachet", "port": 7420},
        ]}),
        ("a node moved to a new address under its id: same owners, another hash", {"members": [
            {"id": "cachet-2", "host": "cachet-2.cachet", "port": 7420},
            {"id": "cachet-0", "host": "10.1.0.17", "port": 7420},
            {"id": "cachet-1", "host": "cachet-1.cachet", "port": 7420},
        ]}),
        ("another virtual node count, a non-ASCII id", {"virtual_nodes_per_member": 40, "members": [
            {"id": "nœud-1", "host": "10.0.0.1", "port": 7420},
            {"id": "nœud-2", "host": "10.0.0.2", "port": 7420},
            {"host": "10.0.0.3", "port": 7420},
        ]}),
    ]
    keys = [b"k", b"user:1001", "ключ".encode()] + [b"key:%d" % i for i in range(7)]
    cases = []
    for name, document in files:
        virtual_nodes = document.get("virtual_nodes_per_member", DEFAULT_VIRTUAL_NODES)
        members = [dict(m, id=m.get("id", "%s:%d" % (m["host"], m["port"]))) for m in document["members"]]
        ring = Ring([m["id"] for m in members], virtual_nodes)
        text = canonical_text(members, virtual_nodes)
        cases.append({
            "name": name,
            "file": document,
            "members": sorted(members, key=lambda m: m["id"].encode("utf-8")),
            "canonical_text": text,
            "hash": hex64(xxh64(text.encode("utf-8"))),
            "keys": [dict(key_entry(ring, key, 2)) for key in keys],
        })
    assert cases[2]["hash"] != cases[3]["hash"]
    assert [k["owner"] for k in cases[2]["keys"]] == [k["owner"] for k in cases[3]["keys"]]
    document = {
        "description": "Cluster membership vectors for Protocol/CLUSTER.md, written by "
        "Protocol/tools/make-ring-vectors.py. Each case is a cluster file (file), the members it gives in "
        "id order with ids filled in (members), the canonical text of the membership hash and the hash "
        "(XXH64 with seed 0, 16 lowercase hex digits), and keys with their owner and preference list by id.",
        "cases": cases,
    }
    with open(CLUSTER_OUT, "w", encoding="utf-8") as out:
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
