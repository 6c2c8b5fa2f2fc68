"""weft: run LLMs from GGUF files, from Python (over libweft, weft's C API).

    from weft import Llama
    llm = Llama(model_path="model.gguf", n_ctx=2048)
    print(llm("Once upon a time", max_tokens=32)["choices"][0]["text"])
"""
from ._native import WeftError, lib as _lib
from .llama import Llama, LlamaState

__version__ = "0.1.0"


def version():
    """The version of the libweft this module loaded: "weft 0.1.0 (C API 1.0.0)"."""
    return _lib.weft_version_string().decode()


__all__ = ["Llama", "LlamaState", "WeftError", "version"]
