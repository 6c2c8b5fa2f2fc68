"""tests/reference/ref_transformer.py — NumPy forward passes of the attention architectures (float64).

Written from the architectures' descriptions (the papers, the models' published configurations and
the reference engine's GGUF conventions), independently of weft's graph code, so that a test can
compare weft's logits with them: llama, qwen3, qwen3moe (a mixture of experts with renormalized
weights), gemma3 (embeddings × √n_embd, Q/K norms, post norms, GELU, sliding windows in five layers
of six with a RoPE base of their own).
"""
import math

import numpy as np

from gguf_np import arch_key

# GELU through the reference engine's f16 table (True) or in float (False); forward.py sets it.
GELU_TABLE = True


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, n_rot, base, scale, neox):
    """x [n_tokens, n_heads, head_dim]; rotates the first n_rot dims of every head."""
    out = x.copy()
    half = n_rot // 2
    inv_freq = base ** (-np.arange(half) * 2.0 / n_rot)
    angles = (positions[:, None] * scale) * inv_freq[None, :]  # [n_tokens, half]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    if neox:  # pairs (i, i + n_rot / 2)
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:  # pairs (2i, 2i + 1)
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_f16_table(x):
    """GELU as the reference engine's CPU backend defines it (and weft with it): 0 at or below -10, x at
    or above 10, between them the tanh approximation of x rounded to f16, rounded to f16."""
    inner = gelu_tanh(x.astype(np.float16).astype(np.float64)).astype(np.float16).astype(np.float64)
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, inner))


def attention(q, k, v, positions, window, q_scale):
    """q [n, n_head, d], k/v [n, n_head_kv, d]: causal (and windowed when window > 0) attention."""
    n, n_head, _ = q.shape
    group = n_head // k.shape[1]
    out = np.zeros((n, n_head, v.shape[2]))
    allowed = positions[None, :] <= positions[:, None]
    if window > 0:
        allowed &= positions[None, :] > positions[:, None] - window
    for h in range(n_head):
        scores = (q[:, h, :] * q_scale) @ k[:, h // group, :].T
        scores = np.where(allowed, scores, -np.inf)
        out[:, h, :] = softmax(scores) @ v[:, h // group, :]
    return out.reshape(n, -1)


def moe_ffn(x, t, p, n_used, renormalize):
    """Token by token: the n_used experts with the largest router probabilities (ties: the lower index)."""
    probs = softmax(x @ t[p + "ffn_gate_inp.weight"].T)
    gate, up, down = t[p + "ffn_gate_exps.weight"], t[p + "ffn_up_exps.weight"], t[p + "ffn_down_exps.weight"]
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        picked = sorted(range(probs.shape[1]), key=lambda e: (-probs[i, e], e))[:n_used]
        weights = probs[i, picked]
        if renormalize:
            weights = weights / weights.sum()
        for e, w in zip(picked, weights):
            out[i] += w * (down[e] @ (silu(gate[e] @ x[i]) * (up[e] @ x[i])))
    return out


def logits(meta, t, tokens):
    arch = meta["general.architecture"]
    n_embd = arch_key(meta, "embedding_length")
    n_layer = arch_key(meta, "block_count")
    n_head = arch_key(meta, "attention.head_count")
    n_head_kv = arch_key(meta, "attention.head_count_kv", n_head)
    head_k = arch_key(meta, "attention.key_length", n_embd // n_head)
    n_rot = arch_key(meta, "rope.dimension_count", head_k)
    eps = arch_key(meta, "attention.layer_norm_rms_epsilon")
    base = arch_key(meta, "rope.freq_base", 10000.0)
    scale = 1.0
    if arch_key(meta, "rope.scaling.type", "none") == "linear":
        scale = 1.0 / arch_key(meta, "rope.scaling.factor")
    neox = arch != "llama"
    gemma = arch == "gemma3"
    window = arch_key(meta, "attention.sliding_window", 0) if gemma else 0
    n_used = arch_key(meta, "expert_used_count", 0)

    positions = np.arange(len(tokens), dtype=np.float64)
    x = t["token_embd.weight"][tokens]
    if gemma:
        x = x * math.sqrt(n_embd)
    for il in range(n_layer):
        p = f"blk.{il}."
        sliding = gemma and il % 6 < 5
        h = rms_norm(x, t[p + "attn_norm.weight"], eps)
        q = (h @ t[p + "attn_q.weight"].T).reshape(len(tokens), n_head, head_k)
        k = (h @ t[p + "attn_k.weight"].T).reshape(len(tokens), n_head_kv, head_k)
        v = (h @ t[p + "attn_v.weight"].T).reshape(len(tokens), n_head_kv, -1)
        if p + "attn_q_norm.weight" in t:
            q = rms_norm(q, t[p + "attn_q_norm.weight"], eps)
            k = rms_norm(k, t[p + "attn_k_norm.weight"], eps)
        layer_base, layer_scale = (10000.0, 1.0) if sliding else (base, scale)
        q = rope(q, positions, n_rot, layer_base, layer_scale, neox)
        k = rope(k, positions, n_rot, layer_base, layer_scale, neox)
        a = attention(q, k, v, positions, window if sliding else 0, 1.0 / math.sqrt(head_k))
        a = a @ t[p + "attn_output.weight"].T
        if gemma:
            a = rms_norm(a, t[p + "post_attention_norm.weight"], eps)
        x = x + a
        h = rms_norm(x, t[p + "ffn_norm.weight"], eps)
        if p + "ffn_gate_inp.weight" in t:
            f = moe_ffn(h, t, p, n_used, renormalize=arch == "qwen3moe")
        else:
            act = (gelu_f16_table if GELU_TABLE else gelu_tanh) if gemma else silu
            f = (act(h @ t[p + "ffn_gate.weight"].T) * (h @ t[p + "ffn_up.weight"].T)) @ t[p + "ffn_down.weight"].T
        if gemma:
            f = rms_norm(f, t[p + "post_ffw_norm.weight"], eps)
        x = x + f
    x = rms_norm(x, t["output_norm.weight"], eps)
    return x @ t.get("output.weight", t["token_embd.weight"]).T
