"""tests/reference/gguf_np.py — a GGUF reader for the NumPy reference forward passes.

Written from the format's description, independent of weft's C++ reader: metadata as Python values,
tensors (F32 and F16 only: the references run on float models) as float64 arrays whose NumPy shape
is the ggml shape reversed, so a matrix of ggml ne = [n_in, n_out] is W[n_out, n_in] and y = W @ x.
"""
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_F32, _F16 = 0, 1


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, kind):
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, n = self.take("<I"), self.take("<Q")
            return [self.value(item_kind) for _ in range(n)]
        raise ValueError(f"unknown metadata type {kind} at byte {self.pos}")


def read_gguf(path):
    """Returns (meta, tensors): a dict of metadata and a dict of float64 arrays by tensor name."""
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r.pos = 4
    version = r.take("<I")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version}")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("<I")
        ne = [r.take("<Q") for _ in range(n_dims)]
        kind, offset = r.take("<I"), r.take("<Q")
        infos.append((name, ne, kind, offset))
    alignment = meta.get("general.alignment", 32)
    base = (r.pos + alignment - 1) // alignment * alignment
    tensors = {}
    for name, ne, kind, offset in infos:
        count = int(np.prod(ne)) if ne else 1
        if kind == _F32:
            dtype = np.float32
        elif kind == _F16:
            dtype = np.float16
        else:
            continue  # quantized tensors are not read: the references run on float models
        a = np.frombuffer(data, dtype=dtype, count=count, offset=base + offset)
        tensors[name] = a.astype(np.float64).reshape(list(reversed(ne)))
    return meta, tensors


def arch_key(meta, suffix, default=None):
    """meta['<arch>.<suffix>'], the architecture's own key."""
    return meta.get(meta["general.architecture"] + "." + suffix, default)
