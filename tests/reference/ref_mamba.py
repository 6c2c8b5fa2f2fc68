"""tests/reference/ref_mamba.py — the NumPy forward pass of Mamba (Mamba-1), float64.

Written from the Mamba paper (Gu & Dao 2023, Algorithm 2: the selective scan) and the reference engine's
GGUF conventions, independently of weft's graph code: per block RMSNorm, in_proj to x and the gate z,
a causal depthwise convolution of width d_conv over time (+ bias, SiLU), x_proj to dt, B, C (each
RMS-normed when mamba.ssm.dt_b_c_rms, as Falcon-Mamba), dt_proj (+ bias) and softplus, the recurrence
h_t = exp(dt A) h_{t-1} + dt B_t x_t with y_t = C_t h_t + D x_t, the gate y * silu(z), out_proj and the
residual; then the final RMSNorm and the output projection (tied to token_embd when absent).
ssm_a is stored as A = -exp(A_log), [d_inner, d_state] in NumPy order.
"""
import numpy as np

from gguf_np import arch_key


def rms_norm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.log1p(np.exp(x))


def mixer(t, p, x, d_conv, d_state, dt_rank, eps, dt_b_c_rms):
    """x [n_tokens, n_embd] (normed) -> [n_tokens, n_embd] for one sequence starting from zero state."""
    n_tokens = x.shape[0]
    xz = x @ t[p + "ssm_in.weight"].T  # [n_tokens, 2 d_inner]
    d_inner = xz.shape[1] // 2
    xs, z = xz[:, :d_inner], xz[:, d_inner:]

    conv_w = t[p + "ssm_conv1d.weight"]  # [d_inner, d_conv]: column d_conv - 1 multiplies the current input
    padded = np.concatenate([np.zeros((d_conv - 1, d_inner)), xs], axis=0)
    conv = np.stack([np.sum(padded[i:i + d_conv].T * conv_w, axis=1) for i in range(n_tokens)])
    xs = silu(conv + t[p + "ssm_conv1d.bias"])

    x_db = xs @ t[p + "ssm_x.weight"].T  # [n_tokens, dt_rank + 2 d_state]
    dt, B, C = x_db[:, :dt_rank], x_db[:, dt_rank:dt_rank + d_state], x_db[:, dt_rank + d_state:]
    if dt_b_c_rms:
        dt, B, C = rms_norm(dt, eps), rms_norm(B, eps), rms_norm(C, eps)
    delta = softplus(dt @ t[p + "ssm_dt.weight"].T + t[p + "ssm_dt.bias"])  # [n_tokens, d_inner]

    A = t[p + "ssm_a"]  # [d_inner, d_state]
    h = np.zeros((d_inner, d_state))
    y = np.zeros((n_tokens, d_inner))
    for i in range(n_tokens):
        h = np.exp(delta[i][:, None] * A) * h + (delta[i] * xs[i])[:, None] * B[i][None, :]
        y[i] = h @ C[i]
    y = (y + xs * t[p + "ssm_d"]) * silu(z)
    return y @ t[p + "ssm_out.weight"].T


def logits(meta, t, tokens):
    def key(suffix):
        return arch_key(meta, suffix)

    n_layer = key("block_count")
    eps = key("attention.layer_norm_rms_epsilon")
    d_conv, d_state, dt_rank = key("ssm.conv_kernel"), key("ssm.state_size"), key("ssm.time_step_rank")
    dt_b_c_rms = bool(arch_key(meta, "ssm.dt_b_c_rms", False))
    h = t["token_embd.weight"][tokens]
    for il in range(n_layer):
        p = f"blk.{il}."
        x = rms_norm(h, eps) * t[p + "attn_norm.weight"]
        h = h + mixer(t, p, x, d_conv, d_state, dt_rank, eps, dt_b_c_rms)
    h = rms_norm(h, eps) * t["output_norm.weight"]
    out = t.get("output.weight", t["token_embd.weight"])
    return h @ out.T
