"""tests/reference/forward.py — the NumPy reference logits of a float GGUF model for a token sequence.

    python3 forward.py MODEL.gguf TOKENS [gelu=table|gelu=float] OUT.bin
TOKENS is a comma-separated list of ids; gelu= picks GELU through the reference engine's f16 table
(the default) or in float (see ref_transformer.py); OUT.bin receives the logits of every position, float64,
little-endian, position-major ([n_tokens, n_vocab]). The architecture's forward pass comes from the
ref_*.py module that knows it.
"""
import sys

import numpy as np

from gguf_np import read_gguf

TRANSFORMERS = ("llama", "qwen3", "qwen3moe", "gemma3")


def main():
    model, tokens_arg, *options, out = sys.argv[1:]
    options = dict(o.split("=", 1) for o in options)
    meta, tensors = read_gguf(model)
    tokens = np.array([int(s) for s in tokens_arg.split(",")], dtype=np.int64)
    arch = meta["general.architecture"]
    if arch in TRANSFORMERS:
        import ref_transformer as ref

        ref.GELU_TABLE = options.get("gelu", "table") == "table"
    else:
        try:
            ref = __import__("ref_" + arch)
        except ImportError:
            sys.exit(f"forward.py: no NumPy reference for architecture '{arch}'")
    result = np.ascontiguousarray(ref.logits(meta, tensors, tokens), dtype="<f8")
    with open(out, "wb") as f:
        f.write(result.tobytes())


if __name__ == "__main__":
    main()
