"""tests/reference/ref_clip.py — the CLIP vision encoder and LLaVA projectors of an mmproj GGUF in NumPy.

An independent float64 forward pass of what weft's src/vision computes, written from the model's
description (OpenAI CLIP ViT, LLaVA-1.5's feature layer and projector), for the NMSE tests:

    ref_clip.py MMPROJ IMAGE OUT               the image's embedding rows [n_patches, n_output] as float64
    ref_clip.py --preprocess MMPROJ IMAGE OUT  the padded and resized 8-bit image [size, size, 3] as float64

IMAGE: int32 width, int32 height, then width * height * 3 RGB bytes, row-major.
"""
import struct
import sys

import numpy as np

from gguf_np import read_gguf


def read_image(path):
    data = open(path, "rb").read()
    w, h = struct.unpack_from("<ii", data, 0)
    return np.frombuffer(data, dtype=np.uint8, count=w * h * 3, offset=8).reshape(h, w, 3)


def cubic(x):
    """Keys' cubic convolution kernel, a = -0.5."""
    a, x = -0.5, np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, 0.0))


def resize_matrix(n_in, n_out):
    """[n_out, n_in]: row o holds the weights of the 4 source pixels (edges clamped) around o's centre."""
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        src = (o + 0.5) * n_in / n_out - 0.5
        base = np.floor(src)
        for k in range(4):
            pos = base - 1 + k
            m[o, int(min(max(pos, 0), n_in - 1))] += cubic(src - pos)
    return m


def preprocess(meta, img):
    """Pad to a square with the mean colour (centred), bicubic resize to image_size, rounded to 8 bits."""
    size = meta["clip.vision.image_size"]
    h, w, _ = img.shape
    side = max(w, h)
    fill = np.clip(np.rint(np.array(meta["clip.vision.image_mean"]) * 255), 0, 255)
    square = np.tile(fill, (side, side, 1))
    y0, x0 = (side - h) // 2, (side - w) // 2
    square[y0:y0 + h, x0:x0 + w] = img
    if side == size:
        return square
    ry, rx = resize_matrix(side, size), resize_matrix(side, size)
    out = np.einsum("yi,ijc->yjc", ry, np.einsum("xj,ijc->ixc", rx, square))
    return np.clip(np.rint(out), 0, 255)


def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def encode(meta, t, pixels):
    size, p = meta["clip.vision.image_size"], meta["clip.vision.patch_size"]
    n_embd, n_head = meta["clip.vision.embedding_length"], meta["clip.vision.attention.head_count"]
    n_layer = meta["clip.vision.block_count"]
    eps = meta.get("clip.vision.attention.layer_norm_epsilon", 1e-5)
    mean, std = np.array(meta["clip.vision.image_mean"]), np.array(meta["clip.vision.image_std"])
    if meta.get("clip.use_gelu", False):
        act = gelu
    else:
        act = lambda x: x / (1 + np.exp(-1.702 * x))  # QuickGELU
    x = (pixels / 255.0 - mean) / std  # [size, size, 3]
    n_side = size // p
    # patches as the convolution sees them: (channel, row, column) of each patch, patches row by row
    patches = x.reshape(n_side, p, n_side, p, 3).transpose(0, 2, 4, 1, 3).reshape(n_side * n_side, 3 * p * p)
    kernel = t["v.patch_embd.weight"].reshape(n_embd, 3 * p * p)  # [n_embd, 3, p, p]
    h = patches @ kernel.T
    if "v.patch_embd.bias" in t:
        h = h + t["v.patch_embd.bias"]
    if "v.class_embd" in t:
        h = np.vstack([t["v.class_embd"][None, :], h])
    h = h + t["v.position_embd.weight"][: h.shape[0]]
    if "v.pre_ln.weight" in t:
        h = layer_norm(h, t["v.pre_ln.weight"], t["v.pre_ln.bias"], eps)
    n_run = meta["clip.vision.feature_layer"][0] if "clip.vision.feature_layer" in meta else n_layer - 1
    d = n_embd // n_head
    for il in range(n_run):
        b = f"v.blk.{il}."
        lin = lambda v, name: v @ t[b + name + ".weight"].T + t[b + name + ".bias"]
        cur = layer_norm(h, t[b + "ln1.weight"], t[b + "ln1.bias"], eps)
        q, k, v = (lin(cur, n).reshape(-1, n_head, d).transpose(1, 0, 2) for n in ("attn_q", "attn_k", "attn_v"))
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        att = (scores @ v).transpose(1, 0, 2).reshape(-1, n_embd)
        h = h + lin(att, "attn_out")
        cur = layer_norm(h, t[b + "ln2.weight"], t[b + "ln2.bias"], eps)
        h = h + lin(act(lin(cur, "ffn_up")), "ffn_down")
    if "v.post_ln.weight" in t:
        h = layer_norm(h, t["v.post_ln.weight"], t["v.post_ln.bias"], eps)
    if "v.class_embd" in t:
        h = h[1:]  # the patches: the class token is no image token
    kind = meta.get("clip.projector_type", "mlp")
    prefix = "mm.model.mlp." if kind == "ldpv2" else "mm."
    mm = lambda v, i: v @ t[f"{prefix}{i}.weight"].T + t[f"{prefix}{i}.bias"]
    if kind == "mlp":
        return mm(gelu(mm(h, 0)), 2)
    if kind == "mlp_norm":
        h = gelu(layer_norm(mm(h, 0), t["mm.1.weight"], t["mm.1.bias"], eps))
        return layer_norm(mm(h, 3), t["mm.4.weight"], t["mm.4.bias"], eps)
    if kind == "ldpv2":  # MobileVLM V2: MLP, 2 x 2 average pool, + depthwise 3 x 3 convolution (PEG)
        h = mm(gelu(mm(h, 0)), 2)
        c, half = h.shape[1], n_side // 2
        pooled = h.reshape(half, 2, half, 2, c).mean(axis=(1, 3))  # [y, x, channel]
        kernel = t["mm.model.peg.0.weight"].reshape(c, 3, 3)  # [channel, ky, kx]
        padded = np.pad(pooled, ((1, 1), (1, 1), (0, 0)))
        conv = sum(padded[ky:ky + half, kx:kx + half] * kernel[:, ky, kx] for ky in range(3) for kx in range(3))
        return (pooled + conv + t["mm.model.peg.0.bias"]).reshape(half * half, c)
    raise SystemExit(f"ref_clip.py: projector {kind} is not implemented here")


def main():
    args = sys.argv[1:]
    only_preprocess = args[0] == "--preprocess"
    if only_preprocess:
        args = args[1:]
    mmproj, image, out = args
    meta, tensors = read_gguf(mmproj)
    pixels = preprocess(meta, read_image(image).astype(np.float64))
    result = pixels if only_preprocess else encode(meta, tensors, pixels)
    np.ascontiguousarray(result, dtype=np.float64).tofile(out)


if __name__ == "__main__":
    main()
