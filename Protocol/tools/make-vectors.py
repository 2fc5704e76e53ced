#!/usr/bin/env python3
"""Writes Protocol/vectors/*.vector from the specification, independently of the Swift codec.

Run from the repository root: python3 Protocol/tools/make-vectors.py
The vectors are committed; this script documents how each byte was derived.
"""
import os
import struct
import sys
import zlib

OUT = os.path.join(os.path.dirname(__file__), "..", "vectors")
# Names given on the command line: only those vectors are written (the others are left as they are).
ONLY = set(sys.argv[1:])
PUT, GET, DEL, CLEAR, STATS, PING = 1, 2, 3, 4, 5, 6
OK, NOT_FOUND, BAD_REQUEST, TOO_LARGE, UNKNOWN_OPCODE, UNSUPPORTED_VERSION = 0, 1, 2, 3, 4, 5
SERVER_ERROR, UNAVAILABLE = 6, 7
FORWARDED, CLUSTER = 0x0001, 0x0002
STATUS_NAMES = ["ok", "not_found", "bad_request", "too_large", "unknown_opcode", "unsupported_version",
                "server_error", "unavailable"]
# The integer STATS fields a cluster-wide STATS sums, in the order the reply writes them.
TOTAL_FIELDS = ["items", "memory_bytes", "memory_limit", "gets", "hits", "misses", "puts", "deletes", "evictions",
                "expired", "connections_current", "disk_items", "disk_bytes"]


def frame(version, opcode, word, ident, body=b""):
    payload = struct.pack(">BBHI", version, opcode, word, ident) + body
    return struct.pack(">I", len(payload)) + payload


def req(opcode, ident, body=b"", version=1, flags=0):
    return frame(version, opcode, flags, ident, body)


def resp(opcode, status, ident, body=b""):
    return frame(1, opcode, status, ident, body)


def key_body(key):
    return struct.pack(">H", len(key)) + key


def put_body(key, value, ttl=0):
    return struct.pack(">IH", ttl, len(key)) + key + value


PART = 0x2000


def value_tag(value):
    """A value's tag: its CRC-32 in the high 32 bits, its Adler-32 in the low ones."""
    return zlib.crc32(value) << 32 | zlib.adler32(value)


def part_field(upload, total, offset, data):
    """The value field of a PUT with the part flag."""
    return struct.pack(">QQQ", upload, total, offset) + data


def hexline(data):
    """Length prefix, header fields and body separated for reading."""
    if len(data) < 12:
        return data.hex()
    parts = [data[0:4].hex(), data[4:5].hex(), data[5:6].hex(), data[6:8].hex(), data[8:12].hex()]
    rest = data[12:]
    if rest:
        parts.append(rest.hex())
    return " ".join(parts)


class Vector:
    def __init__(self, name, description):
        self.name = name
        self.lines = ["# " + line for line in description.strip().splitlines()]
        self.lines.append("# Runs on one connection to an empty node with default limits.")

    def send(self, *frames, note=None):
        for f in frames:
            self.lines.append("> " + hexline(f) + (f"    # {note}" if note else ""))

    def send_raw(self, data, note=None):
        self.lines.append("> " + data.hex() + (f"    # {note}" if note else ""))

    def expect(self, data, note=None):
        self.lines.append("< " + hexline(data) + (f"    # {note}" if note else ""))

    def expect_header(self, opcode, status, ident, note=None):
        header = struct.pack(">BBHI", 1, opcode, status, ident)
        self.lines.append("<~ " + " ".join([header[0:1].hex(), header[1:2].hex(), header[2:4].hex(), header[4:8].hex()])
                          + (f"    # {note}" if note else ""))

    def action(self, word):
        self.lines.append("! " + word)

    def write(self):
        if ONLY and self.name not in ONLY:
            return
        with open(os.path.join(OUT, self.name + ".vector"), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def status_name(status):
    return STATUS_NAMES[status] if status < len(STATUS_NAMES) else "status_%d" % status


def json_string(text):
    """A JSON string as PROTOCOL.md writes it: only quote, backslash and bytes below 0x20 escaped."""
    out = bytearray(b'"')
    for byte in text.encode():
        if byte in (0x22, 0x5c):
            out += bytes([0x5c, byte])
        elif byte < 0x20:
            out += b"\\u00%02x" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')


def cluster_clear_body(members):
    """members: (id, status, items, bytes, message). Totals over OK members."""
    items = sum(m[2] for m in members if m[1] == OK)
    nbytes = sum(m[3] for m in members if m[1] == OK)
    out = struct.pack(">QQH", items, nbytes, len(members))
    for ident, status, m_items, m_bytes, message in members:
        out += struct.pack(">H", len(ident.encode())) + ident.encode()
        out += struct.pack(">HQQ", status, m_items, m_bytes)
        out += struct.pack(">H", len(message.encode())) + message.encode()
    return out


def cluster_stats_body(answered_by, cluster_hash, members):
    """members: (id, status, body text). An OK member's body is a STATS object, embedded as sent."""
    import json
    totals = {field: 0 for field in TOTAL_FIELDS}
    entries = []
    ok = 0
    for ident, status, body in members:
        entry = b'{"id":' + json_string(ident)
        if status == OK:
            ok += 1
            fields = json.loads(body)
            for field in TOTAL_FIELDS:
                value = fields.get(field)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    totals[field] += value
            entry += b',"status":"ok","stats":' + body.strip().encode()
        else:
            entry += b',"status":' + json_string(status_name(status)) + b',"error":' + json_string(body)
        entries.append(entry + b"}")
    out = b'{"cluster":true,"answered_by":' + json_string(answered_by)
    out += b',"cluster_hash":' + json_string(cluster_hash)
    out += b',"members_total":%d,"members_ok":%d,"totals":{' % (len(members), ok)
    out += b",".join(b'"%s":%d' % (f.encode(), totals[f]) for f in TOTAL_FIELDS)
    out += b'},"members":[' + b",".join(entries) + b"]}"
    return out


def write_cluster_replies():
    """vectors/cluster-replies.json: exact bodies of cluster-wide CLEAR and STATS replies."""
    import json
    stats_n1 = '{"version":"0.1.0","uptime_seconds":12,"items":3,"memory_bytes":300,"memory_limit":1000,"gets":7,' \
               '"hits":5,"misses":2,"puts":3,"deletes":0,"evictions":0,"expired":0,"connections_current":2,' \
               '"node_id":"n1","cluster_members":[{"id":"n1","host":"127.0.0.1","port":7420,"state":"self"}]}'
    stats_n2 = ' {"items":2,"memory_bytes":180,"memory_limit":1000,"gets":1,"hits":1,"misses":0,"puts":2,' \
               '"deletes":1,"evictions":4,"expired":1,"connections_current":1,"disk_items":9,"disk_bytes":4096,' \
               '"compression_ratio":2.5,"disk_recovering":false,"note":"a \\"quoted\\" } brace"}\n'
    clear_cases = [
        ("clear-all-answered", "three members answered OK", [
            ("n1", OK, 2, 11, ""), ("n2", OK, 0, 0, ""), ("n3", OK, 5, 1000, "")]),
        ("clear-one-down", "n3 is marked down and was not asked; n2 missed the deadline", [
            ("n1", OK, 2, 11, ""),
            ("n2", UNAVAILABLE, 0, 0, "n2 (127.0.0.1:7421) did not answer within 1000 ms"),
            ("n3", UNAVAILABLE, 0, 0, "n3 (127.0.0.1:7422) is marked down; not asked")]),
        ("clear-one-member", "a cluster of one: still longer than a plain 16-byte CLEAR body", [
            ("127.0.0.1:7420", OK, 1, 6, "")]),
        ("clear-non-ascii", "a non-ASCII id and a member that answered SERVER_ERROR", [
            ("n\u00e9ud-1", SERVER_ERROR, 0, 0, "disk tier failed: Input/output error"),
            ("n\u00e9ud-2", OK, 0xffffffffffffffff, 1, "")]),
    ]
    stats_cases = [
        ("stats-all-answered", "two members answered; the second body has whitespace, a nested brace in a string "
                               "and fields that are not summed", "n1", "b16d03ee9c093d78",
         [("n1", OK, stats_n1), ("n2", OK, stats_n2)]),
        ("stats-dead-member", "n3 refused the connection; its error is reported, not waited on", "n2",
         "b16d03ee9c093d78",
         [("n1", OK, stats_n1), ("n2", OK, stats_n2),
          ("n3", UNAVAILABLE, "n3 (127.0.0.1:7422): connection refused")]),
        ("stats-escapes", "ids and errors with quotes, backslashes, a tab and non-ASCII text", "a\"b",
         "0000000000000001",
         [("a\"b", UNAVAILABLE, "line\tbreak \\ and \u00e9"), ("c\\d", 9, "a status this revision does not name")]),
    ]
    cases = []
    for name, description, members in clear_cases:
        items = sum(m[2] for m in members if m[1] == OK)
        cases.append({
            "name": name, "description": description, "opcode": "CLEAR",
            "members": [{"id": m[0], "status": m[1], "items": m[2], "bytes": m[3], "message": m[4]} for m in members],
            "total": {"items": items, "bytes": sum(m[3] for m in members if m[1] == OK)},
            "body_hex": cluster_clear_body(members).hex(),
        })
    for name, description, answered_by, cluster_hash, members in stats_cases:
        cases.append({
            "name": name, "description": description, "opcode": "STATS",
            "answered_by": answered_by, "cluster_hash": cluster_hash,
            "members": [{"id": m[0], "status": m[1], "body": m[2]} for m in members],
            "body": cluster_stats_body(answered_by, cluster_hash, members).decode(),
        })
    document = {
        "description": "Exact bodies of OK replies to cluster-wide CLEAR and STATS (flags 0x0002), see PROTOCOL.md. "
                       "CLEAR cases give each member's id, status, items, bytes and message, the total over the OK "
                       "members and the body as hex; STATS cases give the answering node, its membership hash, each "
                       "member's id, status and body (its STATS JSON on OK, else the error message) and the reply "
                       "body as text. Written by tools/make-vectors.py.",
        "total_fields": TOTAL_FIELDS,
        "cases": cases,
    }
    with open(os.path.join(OUT, "cluster-replies.json"), "w") as f:
        json.dump(document, f, indent=1, ensure_ascii=False)
        f.write("\n")


def msg(text):
    return text.encode()


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        if old.endswith(".vector") and not ONLY:
            os.remove(os.path.join(OUT, old))

    v = Vector("ping", "PING with an empty body: OK with an empty body, id echoed.")
    v.send(req(PING, 1))
    v.expect(resp(PING, OK, 1))
    v.write()

    v = Vector("put-get", "PUT k1 = hello (no TTL), then GET k1 returns the value as the body.")
    v.send(req(PUT, 1, put_body(b"k1", b"hello")), note="PUT ttl=0 key_len=2 'k1' 'hello'")
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"k1")), note="GET key_len=2 'k1'")
    v.expect(resp(GET, OK, 2, b"hello"))
    v.write()

    v = Vector("get-missing", "GET of a key never stored: NOT_FOUND with an empty body.")
    v.send(req(GET, 7, key_body(b"nope")))
    v.expect(resp(GET, NOT_FOUND, 7))
    v.write()

    v = Vector("del", "DEL of a stored key: OK; the key is gone afterwards.")
    v.send(req(PUT, 1, put_body(b"k", b"v")))
    v.expect(resp(PUT, OK, 1))
    v.send(req(DEL, 2, key_body(b"k")))
    v.expect(resp(DEL, OK, 2))
    v.send(req(GET, 3, key_body(b"k")))
    v.expect(resp(GET, NOT_FOUND, 3))
    v.write()

    v = Vector("del-missing", "DEL of a key that is not stored: NOT_FOUND.")
    v.send(req(DEL, 4, key_body(b"ghost")))
    v.expect(resp(DEL, NOT_FOUND, 4))
    v.write()

    v = Vector("clear", "CLEAR reports the entries and key+value bytes it removed: 2 items, 11 bytes.")
    v.send(req(PUT, 1, put_body(b"a", b"12345")))
    v.expect(resp(PUT, OK, 1))
    v.send(req(PUT, 2, put_body(b"bb", b"678")))
    v.expect(resp(PUT, OK, 2))
    v.send(req(CLEAR, 3))
    v.expect(resp(CLEAR, OK, 3, struct.pack(">QQ", 2, 11)), note="items=2 bytes=11")
    v.send(req(GET, 4, key_body(b"a")))
    v.expect(resp(GET, NOT_FOUND, 4))
    v.write()

    v = Vector("clear-prefixes", "CLEAR with key prefixes removes only the keys that start with one of them: 'a:' and 'c' here.")
    v.send(req(PUT, 1, put_body(b"a:1", b"x")))
    v.expect(resp(PUT, OK, 1))
    v.send(req(PUT, 2, put_body(b"b:1", b"yy")))
    v.expect(resp(PUT, OK, 2))
    v.send(req(PUT, 3, put_body(b"c", b"zzz")))
    v.expect(resp(PUT, OK, 3))
    v.send(req(CLEAR, 4, struct.pack(">H", 2) + b"a:" + struct.pack(">H", 1) + b"c"))
    v.expect(resp(CLEAR, OK, 4, struct.pack(">QQ", 2, 8)), note="items=2 bytes=8")
    v.send(req(GET, 5, key_body(b"b:1")))
    v.expect(resp(GET, OK, 5, b"yy"))
    v.send(req(GET, 6, key_body(b"a:1")))
    v.expect(resp(GET, NOT_FOUND, 6))
    v.write()

    v = Vector("lease", "Leases, the parts that do not depend on the random token: a GET with the lease flag (0x0040) that hits\n"
               "is answered as any GET; a PUT with the flag and a token no GET granted is NOT_STORED and stores nothing.")
    v.send(req(PUT, 1, put_body(b"k", b"v1")))
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"k"), flags=0x0040))
    v.expect(resp(GET, OK, 2, b"v1"), note="GET flags=lease, a hit")
    v.send(req(PUT, 3, struct.pack(">Q", 7) + put_body(b"k", b"v0"), flags=0x0040))
    v.expect(resp(PUT, 10, 3, msg("not stored: the lease on this key was lost (a DEL, PUT or CLEAR of it since the lease "
                                  "was granted, or the lease expired); the value may be older than what the cache holds now")),
             note="PUT flags=lease token=7: NOT_STORED")
    v.send(req(GET, 4, key_body(b"k")))
    v.expect(resp(GET, OK, 4, b"v1"))
    v.write()

    v = Vector("get-ttl", "A GET with the ttl flag (0x0080) is answered the TTL left (u32 seconds, 0 for none) before the value;\n"
               "a miss is NOT_FOUND with an empty body, as any GET's. (A finite TTL's seconds left depend on the clock.)")
    v.send(req(PUT, 1, put_body(b"k", b"v1")))
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"k"), flags=0x0080))
    v.expect(resp(GET, OK, 2, struct.pack(">I", 0) + b"v1"), note="GET flags=ttl: no expiry, then the value")
    v.send(req(GET, 3, key_body(b"nope"), flags=0x0080))
    v.expect(resp(GET, NOT_FOUND, 3), note="a miss")
    v.send(req(GET, 4, key_body(b"k")))
    v.expect(resp(GET, OK, 4, b"v1"), note="a plain GET: the bare value")
    v.write()

    v = Vector("get-range", "A GET with the range flag (0x1000) carries offset (u64) and length (u64, all ones: to the end) after\n"
               "the key, and is answered the value's length (u64) and tag (u64: the CRC-32 of the value, then its\n"
               "Adler-32) and the bytes of the range; a range running past the end is cut there, one starting at the\n"
               "end is empty, one starting past it is RANGE_NOT_SATISFIABLE (11) with the value's length and tag; a\n"
               "miss is NOT_FOUND.")
    value = b"0123456789"
    head = struct.pack(">QQ", len(value), value_tag(value))
    v.send(req(PUT, 1, put_body(b"v", value)))
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"v") + struct.pack(">QQ", 2, 3), flags=0x1000), note="bytes 2 to 4")
    v.expect(resp(GET, OK, 2, head + b"234"))
    v.send(req(GET, 3, key_body(b"v") + struct.pack(">QQ", 7, 0xFFFFFFFFFFFFFFFF), flags=0x1000), note="7 to the end")
    v.expect(resp(GET, OK, 3, head + b"789"))
    v.send(req(GET, 4, key_body(b"v") + struct.pack(">QQ", 8, 100), flags=0x1000), note="past the end: cut")
    v.expect(resp(GET, OK, 4, head + b"89"))
    v.send(req(GET, 5, key_body(b"v") + struct.pack(">QQ", 10, 5), flags=0x1000), note="at the end: empty")
    v.expect(resp(GET, OK, 5, head))
    v.send(req(GET, 6, key_body(b"v") + struct.pack(">QQ", 11, 1), flags=0x1000), note="starting past the end")
    v.expect(resp(GET, 11, 6, head), note="RANGE_NOT_SATISFIABLE, the value's length and tag")
    v.send(req(GET, 7, key_body(b"nope") + struct.pack(">QQ", 0, 1), flags=0x1000), note="a miss")
    v.expect(resp(GET, NOT_FOUND, 7))
    v.write()

    v = Vector("get-frames", "A GET with the frames flag (0x4000) takes a value longer than one frame in several reply frames\n"
               "(CONTINUES, 12, then OK); a value that fits one frame is answered exactly as without the flag, with the\n"
               "ttl flag too, and a miss is NOT_FOUND. (A value longer than a frame needs a node with a disk tier\n"
               "and is tested on one; PROTOCOL.md's worked example shows such a run.)")
    v.send(req(PUT, 1, put_body(b"f", b"short")))
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"f"), flags=0x4000), note="GET flags=frames")
    v.expect(resp(GET, OK, 2, b"short"), note="one frame: the value")
    v.send(req(GET, 3, key_body(b"f"), flags=0x4080), note="GET flags=frames|ttl")
    v.expect(resp(GET, OK, 3, struct.pack(">I", 0) + b"short"))
    v.send(req(GET, 4, key_body(b"nope"), flags=0x4000), note="a miss")
    v.expect(resp(GET, NOT_FOUND, 4))
    v.write()

    v = Vector("put-parts", "A value sent in parts: PUTs with the part flag (0x2000) whose value field is upload id (u64),\n"
               "the value's length (u64), the part's offset (u64) and the part's bytes. Each part is answered OK; the\n"
               "key reads as before (here: a miss) until the last part, then as the whole value. A field shorter than\n"
               "its 24 bytes, or a part running past the length, is BAD_REQUEST. Runs on a node with a disk tier.")
    v.send(req(PUT, 1, put_body(b"p", part_field(9, 10, 0, b"01234")), flags=PART), note="upload 9: bytes 0 to 4 of 10")
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"p")), note="not visible yet")
    v.expect(resp(GET, NOT_FOUND, 2))
    v.send(req(PUT, 3, put_body(b"p", part_field(9, 10, 5, b"56789")), flags=PART), note="the last part")
    v.expect(resp(PUT, OK, 3))
    v.send(req(GET, 4, key_body(b"p")))
    v.expect(resp(GET, OK, 4, b"0123456789"))
    v.send(req(PUT, 5, put_body(b"p", b"\x00\x01\x02"), flags=PART), note="3 bytes: no id, length and offset")
    v.expect(resp(PUT, BAD_REQUEST, 5,
                  msg("PUT of a part: 3 bytes after the key, fewer than the 24 of upload id, length and offset")))
    v.send(req(PUT, 6, put_body(b"p", part_field(9, 2, 0, b"abc")), flags=PART), note="3 bytes of a 2-byte value")
    v.expect(resp(PUT, BAD_REQUEST, 6, msg("PUT of a part: 3 bytes at offset 0 run past the value's length 2")))
    v.write()

    v = Vector("stats", "STATS answers OK with a JSON object; its length and body vary, so only the header is fixed.")
    v.send(req(STATS, 3))
    v.expect_header(STATS, OK, 3, note="body: a UTF-8 JSON object with the fields PROTOCOL.md lists")
    v.write()

    v = Vector("put-with-ttl", "PUT with a TTL of 3600 seconds; the entry is served before it expires.")
    v.send(req(PUT, 1, put_body(b"session", b"abc", ttl=3600)), note="ttl=0x00000e10")
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"session")))
    v.expect(resp(GET, OK, 2, b"abc"))
    v.write()

    v = Vector("empty-value", "A value of zero bytes is a value: GET answers OK with an empty body.")
    v.send(req(PUT, 1, put_body(b"e", b"")))
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"e")))
    v.expect(resp(GET, OK, 2))
    v.write()

    v = Vector("binary-key", "Keys and values are arbitrary bytes, including 0x00 and 0xff.")
    v.send(req(PUT, 1, put_body(b"\x00\xff\x0a", b"\x00\x01\x02")))
    v.expect(resp(PUT, OK, 1))
    v.send(req(GET, 2, key_body(b"\x00\xff\x0a")))
    v.expect(resp(GET, OK, 2, b"\x00\x01\x02"))
    v.send(req(GET, 3, key_body(b"\x00\xff")))
    v.expect(resp(GET, NOT_FOUND, 3), note="a prefix of the key is another key")
    v.write()

    v = Vector("pipelined", "Several requests in one write; replies come back in request order. Ids are the client's business.")
    v.send_raw(req(PUT, 10, put_body(b"p", b"1")) + req(GET, 11, key_body(b"p")) + req(PUT, 12, put_body(b"p", b"22"))
               + req(GET, 13, key_body(b"p")) + req(PING, 13) + req(DEL, 14, key_body(b"p")), note="six frames")
    v.expect(resp(PUT, OK, 10))
    v.expect(resp(GET, OK, 11, b"1"))
    v.expect(resp(PUT, OK, 12))
    v.expect(resp(GET, OK, 13, b"22"))
    v.expect(resp(PING, OK, 13))
    v.expect(resp(DEL, OK, 14))
    v.write()

    v = Vector("reserved-flags", "Flags a client does not need are 0. 0x8001 is forwarded (0x0001, harmless on PING) and the\n"
               "undefined bit 0x8000, which a node ignores.")
    v.send(req(PING, 5, flags=0x8001))
    v.expect(resp(PING, OK, 5))
    v.write()

    v = Vector("request-flags", "The defined flags change nothing for a cluster of one, and undefined bits are ignored:\n"
               "forwarded (0x0001) PUT and GET are served by the node itself; cluster (0x0002) means nothing\n"
               "on GET or DEL; 0xfffc (invalidation 0x0004 and lastHop 0x0008, which mean nothing there, and every undefined bit) on\n"
               "DEL, and 0xffff on PING (leaving 0x0010 and holdCheck 0x0400 included: a cluster of one takes no notice),\n"
               "are served as 0.")
    v.send(req(PUT, 11, put_body(b"fw", b"v1"), flags=FORWARDED), note="PUT flags=forwarded")
    v.expect(resp(PUT, OK, 11))
    v.send(req(GET, 12, key_body(b"fw"), flags=FORWARDED), note="GET flags=forwarded")
    v.expect(resp(GET, OK, 12, b"v1"))
    v.send(req(GET, 13, key_body(b"fw"), flags=CLUSTER), note="GET flags=cluster: ignored")
    v.expect(resp(GET, OK, 13, b"v1"))
    v.send(req(DEL, 14, key_body(b"fw"), flags=0xfffc), note="DEL flags=0xfffc: invalidation, lastHop and undefined bits ignored")
    v.expect(resp(DEL, OK, 14))
    v.send(req(DEL, 15, key_body(b"fw"), flags=CLUSTER | FORWARDED))
    v.expect(resp(DEL, NOT_FOUND, 15))
    v.send(req(PING, 16, flags=0xffff))
    v.expect(resp(PING, OK, 16))
    v.write()

    if not ONLY:
        write_cluster_replies()

    v = Vector("unknown-opcode", "An opcode version 1 does not define: UNKNOWN_OPCODE, opcode and id echoed; the connection stays usable.")
    v.send(req(0x0b, 21))
    v.expect(resp(0x0b, UNKNOWN_OPCODE, 21, msg("unknown opcode 0x0b")))
    v.send(req(0x00, 22))
    v.expect(resp(0x00, UNKNOWN_OPCODE, 22, msg("unknown opcode 0x00")))
    v.send(req(0x0b, 24, b"\x00\x03abc"), note="a body is skipped by its length, whatever it holds")
    v.expect(resp(0x0b, UNKNOWN_OPCODE, 24, msg("unknown opcode 0x0b")))
    v.send(req(PING, 23))
    v.expect(resp(PING, OK, 23))
    v.write()

    v = Vector("unsupported-version", "A version byte other than 1: UNSUPPORTED_VERSION (checked before the opcode); the connection stays usable.")
    v.send(req(PING, 31, version=2))
    v.expect(resp(PING, UNSUPPORTED_VERSION, 31, msg("protocol version 2 is not supported; this node speaks version 1")))
    v.send(req(0x77, 32, version=0))
    v.expect(resp(0x77, UNSUPPORTED_VERSION, 32, msg("protocol version 0 is not supported; this node speaks version 1")))
    v.send(req(GET, 34, key_body(b"k"), version=2), note="a version 2 GET with a body: the reply is in version 1's layout")
    v.expect(resp(GET, UNSUPPORTED_VERSION, 34, msg("protocol version 2 is not supported; this node speaks version 1")))
    v.send(req(PING, 33))
    v.expect(resp(PING, OK, 33))
    v.write()

    v = Vector("empty-key", "A key of zero bytes: BAD_REQUEST; the connection stays usable.")
    v.send(req(GET, 41, key_body(b"")))
    v.expect(resp(GET, BAD_REQUEST, 41, msg("empty key: keys are 1 to 4096 bytes")))
    v.send(req(PUT, 42, put_body(b"", b"value")))
    v.expect(resp(PUT, BAD_REQUEST, 42, msg("empty key: keys are 1 to 4096 bytes")))
    v.send(req(PING, 43))
    v.expect(resp(PING, OK, 43))
    v.write()

    v = Vector("key-too-long", "A 4097-byte key: TOO_LARGE; the connection stays usable. A 4096-byte key is fine.")
    v.send(req(GET, 51, key_body(b"a" * 4097)))
    v.expect(resp(GET, TOO_LARGE, 51, msg("key of 4097 bytes exceeds the 4096-byte limit")))
    v.send(req(GET, 52, key_body(b"a" * 4096)))
    v.expect(resp(GET, NOT_FOUND, 52))
    v.send(req(PUT, 53, put_body(b"b" * 4097, b"v")))
    v.expect(resp(PUT, TOO_LARGE, 53, msg("key of 4097 bytes exceeds the 4096-byte limit")))
    v.send(req(PUT, 54, put_body(b"b" * 4096, b"v")))
    v.expect(resp(PUT, OK, 54))
    v.send(req(GET, 55, key_body(b"b" * 4096)))
    v.expect(resp(GET, OK, 55, b"v"))
    v.write()

    v = Vector("body-shorter-than-key", "A key length larger than the bytes that follow: BAD_REQUEST; the connection stays usable.")
    v.send(req(GET, 61, struct.pack(">H", 9) + b"a"))
    v.expect(resp(GET, BAD_REQUEST, 61, msg("key body declares a 9-byte key but only 1 bytes follow")))
    v.send(req(PUT, 62, struct.pack(">IH", 0, 5) + b"ab"))
    v.expect(resp(PUT, BAD_REQUEST, 62, msg("PUT body declares a 5-byte key but only 2 bytes follow")))
    v.send(req(PING, 63))
    v.expect(resp(PING, OK, 63))
    v.write()

    v = Vector("trailing-bytes-after-key", "GET and DEL bodies end with the key: extra bytes are BAD_REQUEST.")
    v.send(req(DEL, 71, key_body(b"a") + b"b"))
    v.expect(resp(DEL, BAD_REQUEST, 71, msg("key body declares a 1-byte key but carries 2 bytes after its length")))
    v.write()

    v = Vector("put-body-too-short", "A PUT body shorter than its 6-byte ttl and key length: BAD_REQUEST.")
    v.send(req(PUT, 75, b"\x00\x00\x00"))
    v.expect(resp(PUT, BAD_REQUEST, 75, msg("PUT body of 3 bytes is shorter than its 6-byte ttl and key length")))
    v.write()

    v = Vector("nonempty-ping-body", "STATS and PING take an empty body, CLEAR an empty one or key prefixes: anything else is BAD_REQUEST.")
    v.send(req(PING, 81, b"\x01"))
    v.expect(resp(PING, BAD_REQUEST, 81, msg("this opcode takes an empty body, got 1 bytes")))
    v.send(req(CLEAR, 82, b"\x00\x00"))
    v.expect(resp(CLEAR, BAD_REQUEST, 82, msg("CLEAR prefix of 0 bytes: a prefix is 1 to 4096 bytes")))
    v.send(req(CLEAR, 85, b"\x00\x05ab"))
    v.expect(resp(CLEAR, BAD_REQUEST, 85, msg("CLEAR body declares a 5-byte prefix but carries 2 bytes")))
    v.send(req(CLEAR, 86, b"\x00"))
    v.expect(resp(CLEAR, BAD_REQUEST, 86, msg("CLEAR body ends inside a 2-byte prefix length")))
    v.send(req(STATS, 84, b"{}"))
    v.expect(resp(STATS, BAD_REQUEST, 84, msg("this opcode takes an empty body, got 2 bytes")))
    v.send(req(PING, 83))
    v.expect(resp(PING, OK, 83))
    v.write()

    v = Vector("payload-too-short", "A payload length below the 8-byte header: BAD_REQUEST with opcode 0 and id 0, then the node closes.")
    v.send_raw(struct.pack(">I", 3) + b"\x01\x06\x00", note="length=3")
    v.expect(resp(0, BAD_REQUEST, 0, msg("payload of 3 bytes is shorter than the 8-byte header")))
    v.action("close")
    v.write()

    v = Vector("payload-too-large", "A payload length above --max-frame (64 MiB by default): TOO_LARGE with opcode 0 and id 0 as soon as\n"
               "the 4-byte length has arrived, then the node closes. The payload is never buffered.")
    v.send_raw(struct.pack(">I", 80_000_000), note="length=80000000, nothing after it")
    v.expect(resp(0, TOO_LARGE, 0, msg("frame of 80000000 bytes exceeds --max-frame 67108864")))
    v.action("close")
    v.write()

    v = Vector("fatal-after-pipelined", "Requests before a bad length prefix are answered, in order, before the fatal reply; then the\n"
               "node closes. All of it arrives in one write.")
    v.send_raw(req(PING, 101) + req(PUT, 102, put_body(b"f", b"1")) + struct.pack(">I", 80_000_000),
               note="PING, PUT, then length=80000000")
    v.expect(resp(PING, OK, 101))
    v.expect(resp(PUT, OK, 102))
    v.expect(resp(0, TOO_LARGE, 0, msg("frame of 80000000 bytes exceeds --max-frame 67108864")))
    v.action("close")
    v.write()

    v = Vector("truncated-frame", "The peer stops sending in the middle of a frame: the whole frames before it are answered, the\n"
               "partial one is dropped, nothing is sent for it, and the node closes quietly.")
    v.send(req(PUT, 91, put_body(b"t", b"1")))
    v.expect(resp(PUT, OK, 91))
    partial = req(PUT, 92, put_body(b"t", b"2" * 50))
    v.send_raw(partial[:20], note="20 of %d bytes" % len(partial))
    v.action("shutdown")
    v.action("close")
    v.write()


if __name__ == "__main__":
    main()
