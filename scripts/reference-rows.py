#!/usr/bin/python3
"""Per-row agreement of weft with the reference engine on any model and text.

Runs the reference engine's `llama-perplexity --kl-divergence-base` and weft's
`weft perplexity --kl-divergence-base` on the same model, text and -c, reads both files of
log-probabilities and prints, per scored position, the NMSE of weft's log-probabilities against the
reference's (over the tokens the reference keeps: within 16 nats of its top token), then the
distribution and the worst rows. A yardstick for development; nothing in the build uses it.

    scripts/reference-rows.py -m model.gguf -f text.txt -c 256 \\
        --weft build/weft --reference ../shared/bench/reference/llama-perplexity
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np


def read_reference(path):
    """llama-perplexity's file: '_logits_', n_ctx, n_vocab, n_chunk (int32), tokens, then per
    scored position 2 * ((n_vocab + 1) / 2) + 4 uint16: step and lowest log-prob (floats), codes
    (0: clipped)."""
    data = open(path, "rb").read()
    assert data[:8] == b"_logits_", path
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<3i", data, 8)
    off = 20
    tokens = np.frombuffer(data, np.int32, n_ctx * n_chunk, off)
    off += 4 * n_ctx * n_chunk
    nv = 2 * ((n_vocab + 1) // 2) + 4
    raw = np.frombuffer(data, np.uint16, offset=off).reshape(-1, nv)
    step = raw[:, 0:2].copy().view(np.float32)[:, 0]
    lo = raw[:, 2:4].copy().view(np.float32)[:, 0]
    codes = raw[:, 4:4 + n_vocab].astype(np.float64)
    logp = lo[:, None] + codes * step[:, None]
    return dict(n_ctx=n_ctx, n_vocab=n_vocab, n_chunk=n_chunk, tokens=tokens, logp=logp, kept=codes > 0)


def read_weft(path):
    data = open(path, "rb").read()
    assert data[:8] == b"WEFTKLD1", path
    version, n_ctx, n_vocab, n_chunk = struct.unpack_from("<4I", data, 8)
    (n_tok,) = struct.unpack_from("<Q", data, 24)
    off = 32 + 4 * n_tok
    row = 8 + 2 * n_vocab
    n_rows = (len(data) - off) // row
    logp = np.empty((n_rows, n_vocab))
    for r in range(n_rows):
        lo, step = struct.unpack_from("<2f", data, off + r * row)
        codes = np.frombuffer(data, np.uint16, n_vocab, off + r * row + 8)
        logp[r] = lo + codes * step
    return dict(n_ctx=n_ctx, n_vocab=n_vocab, n_chunk=n_chunk, logp=logp)


def row_nmse(ref, got):
    num = np.where(ref["kept"], (got - ref["logp"]) ** 2, 0).sum(1)
    den = np.where(ref["kept"], ref["logp"] ** 2, 0).sum(1)
    return num / den


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True)
    ap.add_argument("-c", "--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=-1)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--weft", default=os.path.join(here, "..", "build", "weft"))
    ap.add_argument("--reference", default=os.path.join(here, "..", "..", "shared", "bench", "reference",
                                                         "llama-perplexity"))
    ap.add_argument("--reference-base", help="reuse this llama-perplexity file instead of running it")
    ap.add_argument("--worst", type=int, default=8, help="rows to list")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ref_path = args.reference_base or os.path.join(tmp, "ref.kld")
        common = ["-f", args.file, "-c", str(args.ctx), "-t", str(args.threads), "--chunks", str(args.chunks)]
        if not args.reference_base:
            subprocess.run([args.reference, "-m", args.model, *common, "-b", str(args.ctx),
                            "--kl-divergence-base", ref_path], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        weft_path = os.path.join(tmp, "weft.kld")
        subprocess.run([args.weft, "perplexity", "-m", args.model, *common, "--kl-divergence-base", weft_path],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ref = read_reference(ref_path)
        got = read_weft(weft_path)
    n = min(len(ref["logp"]), len(got["logp"]))
    ref = {k: (v[:n] if k in ("logp", "kept") else v) for k, v in ref.items()}
    e = row_nmse(ref, got["logp"][:n])
    per_chunk = args.ctx - 1 - args.ctx // 2
    print(f"{os.path.basename(args.model)}: {n} rows, NMSE median {np.median(e):.2e} mean {e.mean():.2e} "
          f"max {e.max():.2e}; rows > 1e-5: {(e > 1e-5).sum()}, > 1e-4: {(e > 1e-4).sum()}")
    for r in np.argsort(-e)[:args.worst]:
        print(f"  chunk {r // per_chunk} position {args.ctx // 2 + r % per_chunk}: {e[r]:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
