#!/usr/bin/env python3
"""Brute-force recount of sf-coact's statistics from one trace, read as
man/sf-formats.5 lays out TRACE (.sft) and COACT (.sfc), with the standard
library alone: per slot the tokens, each entry's count and sum, every pair,
and of experts the step from the layer before (tokens in which expert i was
picked at layer l - 1 and j at l) where the trace records that layer.
Usage: recount.py TRACE.sft COACT.sfc; prints "ok" and exits 0 when the
.sfc holds exactly the recount, else names the first difference, exit 1.
recount.py --runs TRACE.sft PLACEMENT.json prints, as JSON, each slot's
runs per token under the placement (sf-place --eval's runs_per_token): the
runs of consecutive flash positions the token's active entries fill."""
import json
import struct
import sys


def header(f, magic, align):
    pre = f.read(16)
    if pre[:8] != magic:
        sys.exit("%s: bad magic" % f.name)
    version, hlen = struct.unpack("<II", pre[8:16])
    h = json.loads(f.read(hlen))
    f.read((-(16 + hlen)) % align)
    return version, h


def read_trace(path):
    """Each slot's (layer, group, n) and its active sets, a list of sets
    per token, and its sums."""
    with open(path, "rb") as f:
        _, h = header(f, b"SFTRACE\0", 1)
        slots = h["slots"]
        rows = [[] for _ in slots]
        while True:
            kind, ntok, plen, _crc, _res = struct.unpack("<IIQII", f.read(24))
            p = f.read(plen)
            at = 0
            if kind == 2:
                at = 8
                sums = []
                for sl in slots:
                    n = sl["entries"]
                    sums.append(struct.unpack_from("<%dd" % n, p, at))
                    at += 8 * n
                return slots, rows, sums
            for s, sl in enumerate(slots):
                n = sl["entries"]
                words = (n + 63) // 64
                for _ in range(ntok):
                    if sl["encoding"] == "bitmap":
                        bits = struct.unpack_from("<%dQ" % words, p, at)
                        at += 8 * words
                        rows[s].append({w * 64 + b for w in range(words)
                                        for b in range(64) if bits[w] >> b & 1})
                    else:
                        (cnt,) = struct.unpack_from("<I", p, at)
                        rows[s].append(set(struct.unpack_from("<%dI" % cnt, p, at + 4)))
                        at += 4 + 4 * cnt


def read_coact(path):
    """{(layer, group): (tokens, counts, sums, pairs, steps or None)}."""
    out = {}
    with open(path, "rb") as f:
        version, h = header(f, b"SFCOACT\0", 8)
        for sl in h["slots"]:
            n = sl["entries"]
            body = f.read(sl["bytes"])
            (tokens,) = struct.unpack_from("<Q", body, 0)
            counts = struct.unpack_from("<%dQ" % n, body, 8)
            sums = struct.unpack_from("<%dd" % n, body, 8 + 8 * n)
            npairs = n * (n - 1) // 2
            pairs = struct.unpack_from("<%dI" % npairs, body, 8 + 16 * n)
            steps = None
            if sl.get("step"):
                at = (8 + 16 * n + 4 * npairs + 7) // 8 * 8
                steps = struct.unpack_from("<%dI" % (n * n), body, at)
            out[(sl["layer"], sl["group"])] = (tokens, counts, sums, pairs, steps)
        if f.read(1):
            sys.exit("%s: data after the last section" % path)
    return out


def main(trace, coact):
    slots, rows, sums = read_trace(trace)
    got = read_coact(coact)
    index = {(sl["layer"], sl["group"]): s for s, sl in enumerate(slots)}
    for s, sl in enumerate(slots):
        key = (sl["layer"], sl["group"])
        n = sl["entries"]
        counts = [sum(i in r for r in rows[s]) for i in range(n)]
        pairs = [0] * (n * (n - 1) // 2)
        for r in rows[s]:
            for i in r:
                for j in r:
                    if i < j:
                        pairs[i * (2 * n - i - 1) // 2 + j - i - 1] += 1
        steps = None
        before = index.get((sl["layer"] - 1, "experts"))
        if sl["group"] == "experts" and before is not None:
            steps = [0] * (n * n)
            for a, b in zip(rows[before], rows[s]):
                for i in a:
                    for j in b:
                        steps[i * n + j] += 1
        want = (len(rows[s]), tuple(counts), tuple(sums[s]), tuple(pairs),
                tuple(steps) if steps is not None else None)
        names = ("tokens", "counts", "sums", "pairs", "steps")
        for name, w, g in zip(names, want, got.get(key, (None,) * 5)):
            if w != g:
                sys.exit("layer %d %s: %s differ: recount %s, .sfc %s"
                         % (key[0], key[1], name, w, g))
    print("ok")


def runs(trace, placement):
    slots, rows, _ = read_trace(trace)
    with open(placement) as f:
        groups = {(g["layer"], g["group"]): g["perm"] for g in json.load(f)["groups"]}
    out = []
    for s, sl in enumerate(slots):
        where = {e: p for p, e in enumerate(groups[(sl["layer"], sl["group"])])}
        total = 0
        for r in rows[s]:
            pos = {where[e] for e in r}
            total += sum(p - 1 not in pos for p in pos)
        out.append({"layer": sl["layer"], "group": sl["group"],
                    "runs_per_token": total / len(rows[s]) if rows[s] else 0.0})
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "--runs":
        runs(*sys.argv[2:4])
    else:
        main(*sys.argv[1:3])
