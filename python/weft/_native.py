"""weft._native — ctypes declarations of libweft's C API (include/weft.h) and the library's loading.

The library is looked for, in order: the file named by the environment variable WEFT_LIBRARY; the
copy `pip install` bundled into this package (weft/libweft.so.N); the system's search path
(ctypes.util.find_library, LD_LIBRARY_PATH).
"""
import ctypes
import ctypes.util
import os

API_VERSION_MAJOR = 1

WEFT_OK = 0
STATUS_NAMES = {
    0: "WEFT_OK",
    1: "WEFT_ERR_INVALID_ARGUMENT",
    2: "WEFT_ERR_IO",
    3: "WEFT_ERR_BAD_FILE",
    4: "WEFT_ERR_CONTEXT_FULL",
    5: "WEFT_ERR_BUFFER_TOO_SMALL",
    6: "WEFT_ERR_ABORTED",
    7: "WEFT_ERR_NO_MEMORY",
    8: "WEFT_ERR_UNSUPPORTED",
    9: "WEFT_ERR_INTERNAL",
}
WEFT_ERR_BUFFER_TOO_SMALL = 5
FINISH_REASONS = {0: "stop", 1: "length", 2: "cancelled"}
SEED_RANDOM = 0xFFFFFFFF


class WeftError(ValueError):
    """A failed call of libweft: `status` is its weft_status name ("WEFT_ERR_CONTEXT_FULL" ...), the
    message says what was wrong. A ValueError, as llama-cpp-python raises for a bad path or a prompt
    longer than the context."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = STATUS_NAMES.get(status, "WEFT_ERR_UNKNOWN")
        self.code = status


token = ctypes.c_int32
token_p = ctypes.POINTER(token)


class LoraParams(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char_p), ("scale", ctypes.c_float)]


class ModelParams(ctypes.Structure):
    _fields_ = [
        ("use_mmap", ctypes.c_bool),
        ("device", ctypes.c_char_p),
        ("n_gpu_layers", ctypes.c_int32),
        ("loras", ctypes.POINTER(LoraParams)),
        ("n_loras", ctypes.c_size_t),
        ("quiet", ctypes.c_bool),
    ]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class SessionParams(ctypes.Structure):
    _fields_ = [
        ("n_ctx", ctypes.c_uint32),
        ("n_batch", ctypes.c_uint32),
        ("n_threads", ctypes.c_int32),
        ("n_threads_batch", ctypes.c_int32),
        ("context_shift", ctypes.c_bool),
    ]


class LogitBias(ctypes.Structure):
    _fields_ = [("token", token), ("bias", ctypes.c_float)]


class SamplingParams(ctypes.Structure):
    _fields_ = [
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("typical_p", ctypes.c_float),
        ("top_n_sigma", ctypes.c_float),
        ("repeat_last_n", ctypes.c_int32),
        ("repeat_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("dynatemp_range", ctypes.c_float),
        ("dynatemp_exponent", ctypes.c_float),
        ("xtc_probability", ctypes.c_float),
        ("xtc_threshold", ctypes.c_float),
        ("dry_multiplier", ctypes.c_float),
        ("dry_base", ctypes.c_float),
        ("dry_allowed_length", ctypes.c_int32),
        ("dry_penalty_last_n", ctypes.c_int32),
        ("dry_sequence_breakers", ctypes.POINTER(ctypes.c_char_p)),
        ("n_dry_sequence_breakers", ctypes.c_size_t),
        ("mirostat", ctypes.c_int32),
        ("mirostat_tau", ctypes.c_float),
        ("mirostat_eta", ctypes.c_float),
        ("seed", ctypes.c_uint32),
        ("min_keep", ctypes.c_size_t),
        ("samplers", ctypes.c_char_p),
        ("logit_bias", ctypes.POINTER(LogitBias)),
        ("n_logit_bias", ctypes.c_size_t),
        ("grammar", ctypes.c_char_p),
        ("json_schema", ctypes.c_char_p),
    ]


class GenerateParams(ctypes.Structure):
    _fields_ = [
        ("max_tokens", ctypes.c_int32),
        ("sampling", SamplingParams),
        ("stop", ctypes.POINTER(ctypes.c_char_p)),
        ("n_stop", ctypes.c_size_t),
        ("ignore_eos", ctypes.c_bool),
    ]


class GenerateResult(ctypes.Structure):
    _fields_ = [
        ("finish", ctypes.c_int),
        ("n_prompt_tokens", ctypes.c_int32),
        ("n_cached_tokens", ctypes.c_int32),
        ("n_generated_tokens", ctypes.c_int32),
        ("prompt_ms", ctypes.c_double),
        ("generate_ms", ctypes.c_double),
    ]


STREAM_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_size_t, token_p, ctypes.c_size_t,
                                   ctypes.c_void_p)

_P = ctypes.c_void_p
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_SIGNATURES = {
    "weft_version": (ctypes.c_int, []),
    "weft_version_string": (ctypes.c_char_p, []),
    "weft_last_error": (ctypes.c_char_p, []),
    "weft_model_params_init": (None, [ctypes.POINTER(ModelParams)]),
    "weft_model_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ModelParams), ctypes.POINTER(_P)]),
    "weft_model_free": (None, [_P]),
    "weft_model_n_vocab": (ctypes.c_int32, [_P]),
    "weft_model_n_embd": (ctypes.c_int32, [_P]),
    "weft_model_n_ctx_train": (ctypes.c_int32, [_P]),
    "weft_model_is_encoder": (ctypes.c_bool, [_P]),
    "weft_model_describe": (ctypes.c_char_p, [_P]),
    "weft_model_token_bos": (token, [_P]),
    "weft_model_token_eos": (token, [_P]),
    "weft_tokenize": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool, ctypes.c_bool, token_p,
                                     ctypes.c_size_t, _SIZE_P]),
    "weft_detokenize": (ctypes.c_int, [_P, token_p, ctypes.c_size_t, ctypes.c_bool, ctypes.c_char_p,
                                       ctypes.c_size_t, _SIZE_P]),
    "weft_chat_apply_template": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(ChatMessage), ctypes.c_size_t,
                                                ctypes.c_bool, ctypes.c_char_p, ctypes.c_size_t, _SIZE_P]),
    "weft_session_params_init": (None, [ctypes.POINTER(SessionParams)]),
    "weft_session_create": (ctypes.c_int, [_P, ctypes.POINTER(SessionParams), ctypes.POINTER(_P)]),
    "weft_session_free": (None, [_P]),
    "weft_session_n_ctx": (ctypes.c_uint32, [_P]),
    "weft_session_reset": (ctypes.c_int, [_P]),
    "weft_session_abort": (None, [_P]),
    "weft_generate_params_init": (None, [ctypes.POINTER(GenerateParams)]),
    "weft_generate": (ctypes.c_int, [_P, token_p, ctypes.c_size_t, ctypes.POINTER(GenerateParams), STREAM_CALLBACK,
                                     _P, ctypes.POINTER(GenerateResult)]),
    "weft_session_logits": (ctypes.c_int, [_P, token_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_float),
                                           ctypes.c_size_t]),
    "weft_session_embed": (ctypes.c_int, [_P, token_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_bool,
                                          ctypes.POINTER(ctypes.c_float), ctypes.c_size_t]),
    "weft_session_state_save": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, _SIZE_P]),
    "weft_session_state_load": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    "weft_session_cached_tokens": (ctypes.c_int, [_P, token_p, ctypes.c_size_t, _SIZE_P]),
}


def _candidates():
    env = os.environ.get("WEFT_LIBRARY")
    if env:
        return [env]  # named explicitly: that file or an error, never a silent other one
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, f"libweft.so.{API_VERSION_MAJOR}")]
    system = ctypes.util.find_library("weft")
    if system:
        found.append(system)
    found.append(f"libweft.so.{API_VERSION_MAJOR}")  # LD_LIBRARY_PATH and the loader's cache
    return found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        major = lib.weft_version() // 10000
        if major != API_VERSION_MAJOR:
            raise ImportError(f"{path}: C API version {major}, this module speaks version {API_VERSION_MAJOR}")
        return lib
    raise ImportError("libweft not found (set WEFT_LIBRARY to the path of libweft.so.1, or install weft with "
                      "`cmake --install`): tried " + "; ".join(tried))


lib = _load()


def check(status):
    """Raises WeftError with the library's message when status is not WEFT_OK."""
    if status != WEFT_OK:
        raise WeftError(status, lib.weft_last_error().decode("utf-8", "replace"))
