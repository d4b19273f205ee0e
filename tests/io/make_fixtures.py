#!/usr/bin/python3
"""Fixture files for tests/mpi/interop_test.cpp, written the way other programs write them.

make_fixtures.py DIR          reads DIR/spec.txt ("name kind dim..." per line; kind f4 f8 i4 i8 f2
                              b1 bf16) and DIR/<name>.raw (the array's little-endian bytes), writes
                              DIR/npy/<name>.npy (numpy.save), DIR/be/<name>.npy (big-endian),
                              DIR/fortran.npy, DIR/model.npz (numpy.savez), DIR/compressed.npz
                              (numpy.savez_compressed) and DIR/model.safetensors (by the spec:
                              8-byte little-endian header length N, JSON header padded with
                              spaces, data_offsets from byte 8 + N).
make_fixtures.py --check FILE DIR
                              reads the safetensors FILE by the spec and checks every tensor against
                              DIR/<name>.raw and DIR/spec.txt; prints "ok" or what differs.
"""
import json
import os
import struct
import sys

import numpy as np

NUMPY = {"f4": "<f4", "f8": "<f8", "i4": "<i4", "i8": "<i8", "f2": "<f2", "b1": "|b1"}
SAFETENSORS = {"f4": "F32", "f8": "F64", "i4": "I32", "i8": "I64", "f2": "F16", "b1": "BOOL", "bf16": "BF16"}


def read_spec(d):
    arrays = []
    with open(os.path.join(d, "spec.txt")) as f:
        for line in f:
            name, kind, *dims = line.split()
            with open(os.path.join(d, name + ".raw"), "rb") as r:
                raw = r.read()
            arrays.append((name, kind, tuple(int(x) for x in dims), raw))
    return arrays


def write(d):
    arrays = read_spec(d)
    os.makedirs(os.path.join(d, "npy"), exist_ok=True)
    os.makedirs(os.path.join(d, "be"), exist_ok=True)
    by_name = {}
    for name, kind, shape, raw in arrays:
        if kind not in NUMPY:
            continue
        a = np.frombuffer(raw, dtype=NUMPY[kind]).reshape(shape)
        by_name[name] = a
        np.save(os.path.join(d, "npy", name + ".npy"), a)
        if a.dtype.itemsize > 1:
            big = a.astype(a.dtype.newbyteorder(">"))
            np.save(os.path.join(d, "be", name + ".npy"), big)
            assert open(os.path.join(d, "be", name + ".npy"), "rb").read().find(b"'>") > 0
    two_d = next(a for a in by_name.values() if a.ndim == 2)
    np.save(os.path.join(d, "fortran.npy"), np.asfortranarray(two_d))
    np.savez(os.path.join(d, "model.npz"), **by_name)
    np.savez_compressed(os.path.join(d, "compressed.npz"), **by_name)

    header = {"__metadata__": {"format": "pt", "written_by": "make_fixtures.py"}}
    data = b""
    for name, kind, shape, raw in arrays:
        header[name] = {"dtype": SAFETENSORS[kind], "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def check(path, d):
    want = {name: (kind, shape, raw) for name, kind, shape, raw in read_spec(d)}
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    problems = []
    if sorted(header) != sorted(want):
        problems.append("names %s, expected %s" % (sorted(header), sorted(want)))
    for name, info in header.items():
        if name not in want:
            continue
        kind, shape, raw = want[name]
        begin, end = info["data_offsets"]
        if info["dtype"] != SAFETENSORS[kind] or tuple(info["shape"]) != shape:
            problems.append("%s: %s %s, expected %s %s" % (name, info["dtype"], info["shape"], SAFETENSORS[kind], shape))
        if blob[8 + n + begin:8 + n + end] != raw:
            problems.append("%s: the data differs" % name)
    print("ok" if not problems else "; ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    write(sys.argv[1])
