# NumPy reads what dax::save wrote (at 4 ranks): dtypes, shapes and every value, computed with the
# formulas of checkpoint_ranks.cpp; and each sidecar's checksum is the definition's, computed here
# independently. Usage: python3 check_numpy.py DIR
import io
import json
import sys

import numpy as np

d = sys.argv[1]
i = lambda n: np.arange(n, dtype=np.int64)
expected = {
    "w": (((i(37 * 6) * 37) % 101 - 50).astype(np.float32) / np.float32(8)).reshape(37, 6),
    "v": i(10).astype(np.float64) / 3.0 - 1.0,
    "n": ((i(60) * 7919) % 65536 - 32768).astype(np.int32).reshape(5, 4, 3),
    "s": np.array(1234567890123456789, dtype=np.int64),
    "m": i(7) % 3 == 1,
    "e": np.zeros((0, 5), dtype=np.float32),
    "u": (i(36).astype(np.float32) - np.float32(3.5)).reshape(6, 6),
}
MASK = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def checksum(a):
    """docs/reliability.md's definition, written again in Python: sum of mix64(bits + index * step)."""
    flat = a.reshape(-1)
    if a.itemsize == 16:  # complex128: the low word plus mix64 of the high one
        halves = flat.view(np.uint64).reshape(-1, 2)
        words = [(int(lo) + mix64(int(hi))) & MASK for lo, hi in halves]
    else:
        words = flat.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])
    return sum(mix64((int(b) + i * 0x9E3779B97F4A7C15) & MASK) for i, b in enumerate(words)) & MASK


failed = 0
for name, want in expected.items():
    path = f"{d}/{name}.npy"
    got = np.load(path)
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
    with open(path + ".dax") as f:
        sidecar = json.load(f)
    ok = (version == (1, 0) and got.dtype == want.dtype and got.shape == want.shape
          and got.tobytes() == want.tobytes() and got.flags["C_CONTIGUOUS"]
          and sidecar["shape"] == list(want.shape) and sidecar["descr"] == want.dtype.str
          and sidecar["checksum"] == f"{checksum(want):016x}")
    saved = io.BytesIO()
    np.save(saved, got)
    same = saved.getvalue() == open(path, "rb").read()  # informational: headers vary across NumPy versions
    print(f"numpy {np.__version__}: {name}.npy {got.dtype} {got.shape} {'ok' if ok else 'DIFFERS'}"
          f"{', the bytes np.save writes' if same else ''}")
    failed += not ok
sys.exit(1 if failed else 0)
