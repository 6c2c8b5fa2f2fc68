#!/usr/bin/python3
"""Write a deeper random-weight copy of an F32 GGUF model.

Keeps the template's metadata (architecture, shapes, vocabulary) except the block count, and draws
every tensor anew from a normal distribution with the mean and standard deviation of the template's
tensor of the same name (block i takes block i mod n of the template), from --seed. Quantize the
result with `weft quantize OUT OUT-Q8_0.gguf Q8_0`. Used to make the fixtures of
tests/data/reference-rows (see the README there).

    scripts/grow-model.py ../shared/fixtures/models/tiny-gemma-F32.gguf --layers 6 -o gemma6.gguf
"""
import argparse
import os
import re
import struct
import sys

import numpy as np

# the GGUF reader of the NumPy reference passes (metadata values, scalar formats)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from gguf_np import _SCALARS as SCALARS, _Reader as Reader  # noqa: E402


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("template")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    data = open(args.template, "rb").read()
    r = Reader(data)
    assert data[:4] == b"GGUF"
    r.pos = 4
    version = r.take("<I")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    kv = []  # (key, raw bytes of type + value)
    arch = None
    for _ in range(n_kv):
        key = r.string()
        start = r.pos
        kind = r.take("<I")
        if key == "general.architecture":
            arch = r.string()
        else:
            r.value(kind)
        kv.append((key, kind, data[start:r.pos]))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        kind, off = r.take("<I"), r.take("<Q")
        assert kind == 0, f"{name}: the template must be F32"
        infos.append((name, ne, off))
    alignment = 32
    base = (r.pos + alignment - 1) // alignment * alignment
    template = {name: np.frombuffer(data, np.float32, int(np.prod(ne)), base + off) for name, ne, off in infos}
    shapes = {name: ne for name, ne, _ in infos}
    n_layer_t = 1 + max(int(m.group(1)) for m in (re.match(r"blk\.(\d+)\.", n) for n, _, _ in infos) if m)

    out_kv = []
    for key, kind, raw in kv:
        if key == f"{arch}.block_count":
            raw = struct.pack("<I", kind) + struct.pack(SCALARS[kind], args.layers)
        out_kv.append(gguf_string(key) + raw)
    names = []
    for name, _, _ in infos:
        m = re.match(r"blk\.(\d+)\.(.*)", name)
        if not m:
            names.append((name, name))
        elif int(m.group(1)) == 0:
            for il in range(args.layers):
                names.append((f"blk.{il}.{m.group(2)}", f"blk.{il % n_layer_t}.{m.group(2)}"))
    rng = np.random.default_rng(args.seed)
    tensors, infos_out, offset = [], [], 0
    for name, src in names:
        t = template[src].astype(np.float64)
        a = (rng.standard_normal(t.size) * t.std() + t.mean()).astype(np.float32)
        ne = shapes[src]
        infos_out.append(gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne) +
                         struct.pack("<IQ", 0, offset))
        tensors.append(a.tobytes())
        offset += (a.nbytes + alignment - 1) // alignment * alignment
    head = b"GGUF" + struct.pack("<IQQ", version, len(names), len(out_kv)) + b"".join(out_kv) + b"".join(infos_out)
    with open(args.out, "wb") as f:
        f.write(head + b"\0" * ((-len(head)) % alignment))
        for t in tensors:
            f.write(t + b"\0" * ((-len(t)) % alignment))
    return 0


if __name__ == "__main__":
    sys.exit(main())
