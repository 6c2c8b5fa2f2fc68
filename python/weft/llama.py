"""weft.llama — Llama: llama-cpp-python's most used surface over libweft (weft._native).

A script written for llama-cpp-python runs by changing `from llama_cpp import Llama` to
`from weft import Llama`; what differs is listed in weft's README (Library, Python).
"""
import ctypes
import json
import queue
import threading
import time
import uuid

from . import _native
from ._native import WeftError, check, lib


def _fetch_tokens(call):
    """call(buffer, capacity, byref(count)) once to learn the count, then again to fill the tokens."""
    n = ctypes.c_size_t()
    status = call(None, 0, ctypes.byref(n))
    if status not in (_native.WEFT_OK, _native.WEFT_ERR_BUFFER_TOO_SMALL):
        check(status)
    out = (_native.token * max(n.value, 1))()
    check(call(out, n.value, ctypes.byref(n)))
    return list(out[: n.value])


def _fetch_bytes(call):
    """The same for bytes (text gets room for its NUL)."""
    n = ctypes.c_size_t()
    status = call(None, 0, ctypes.byref(n))
    if status not in (_native.WEFT_OK, _native.WEFT_ERR_BUFFER_TOO_SMALL):
        check(status)
    buf = ctypes.create_string_buffer(n.value + 1)
    check(call(buf, n.value + 1, ctypes.byref(n)))
    return buf.raw[: n.value]


class LlamaState:
    """What save_state returns and load_state takes: the session's cache as bytes, and its tokens."""

    def __init__(self, input_ids, llama_state, seed):
        self.input_ids = list(input_ids)
        self.n_tokens = len(self.input_ids)
        self.llama_state = bytes(llama_state)
        self.llama_state_size = len(self.llama_state)
        self.seed = seed


def _stop_list(stop):
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _grammar_text(grammar):
    """llama-cpp-python takes a LlamaGrammar object; weft takes GBNF text (or an object with one)."""
    if grammar is None or isinstance(grammar, str):
        return grammar
    for attr in ("_grammar", "grammar", "text"):
        value = getattr(grammar, attr, None)
        if isinstance(value, str):
            return value
    raise ValueError("grammar: give GBNF text (a str)")


def _schema_of(response_format):
    """The JSON Schema text an OpenAI response_format asks for, or None."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        schema = response_format.get("schema")
        return json.dumps(schema) if schema is not None else '{"type": "object"}'
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema", spec)
        return json.dumps(schema)
    if kind == "text":
        return None
    raise ValueError(f"response_format type {kind!r}: weft knows text, json_object and json_schema")


class Llama:
    """A model and one session (context) over it. llama-cpp-python's constructor arguments that weft
    does not use are accepted and ignored (see README)."""

    def __init__(self, model_path, *, n_gpu_layers=0, main_gpu=0, vocab_only=False, use_mmap=True,
                 use_mlock=False, seed=_native.SEED_RANDOM, n_ctx=512, n_batch=512, n_threads=None,
                 n_threads_batch=None, embedding=False, last_n_tokens_size=64, lora_path=None, lora_scale=1.0,
                 chat_format=None, verbose=True, device=None, **kwargs):
        self._model = None
        self._session = None
        self.model_path = str(model_path)
        self.verbose = verbose
        self._seed = seed
        self.chat_format = chat_format
        self.last_n_tokens_size = last_n_tokens_size
        self._callback_error = None

        mp = _native.ModelParams()
        lib.weft_model_params_init(ctypes.byref(mp))
        mp.use_mmap = bool(use_mmap)
        mp.quiet = not verbose
        mp.n_gpu_layers = int(n_gpu_layers)
        if device:
            mp.device = device.encode()
        if lora_path:
            self._loras = (_native.LoraParams * 1)(_native.LoraParams(str(lora_path).encode(), float(lora_scale)))
            mp.loras = self._loras
            mp.n_loras = 1
        handle = ctypes.c_void_p()
        check(lib.weft_model_load(self.model_path.encode(), ctypes.byref(mp), ctypes.byref(handle)))
        self._model = handle

        sp = _native.SessionParams()
        lib.weft_session_params_init(ctypes.byref(sp))
        sp.n_ctx = int(n_ctx or 0)
        sp.n_batch = int(n_batch or 512)
        sp.n_threads = int(n_threads or 0)
        sp.n_threads_batch = int(n_threads_batch or 0)
        handle = ctypes.c_void_p()
        check(lib.weft_session_create(self._model, ctypes.byref(sp), ctypes.byref(handle)))
        self._session = handle
        self._lock = threading.Lock()  # one call on the session at a time
        if verbose:
            import sys
            print(f"weft: {self.model_path}: {lib.weft_model_describe(self._model).decode()}", file=sys.stderr)

    # ---- lifetime

    def close(self):
        if self._session:
            lib.weft_session_free(self._session)
            self._session = None
        if self._model:
            lib.weft_model_free(self._model)
            self._model = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the model

    def n_ctx(self):
        return int(lib.weft_session_n_ctx(self._session))

    def n_vocab(self):
        return int(lib.weft_model_n_vocab(self._model))

    def n_embd(self):
        return int(lib.weft_model_n_embd(self._model))

    def token_bos(self):
        return int(lib.weft_model_token_bos(self._model))

    def token_eos(self):
        return int(lib.weft_model_token_eos(self._model))

    def tokenize(self, text, add_bos=True, special=False):
        """Tokens of text (bytes): add_bos adds the BOS (and what else the vocabulary adds), special
        reads control tokens written in the text."""
        if isinstance(text, str):
            raise TypeError("tokenize takes bytes (text.encode('utf-8')), as llama-cpp-python does")
        return _fetch_tokens(lambda out, capacity, n: lib.weft_tokenize(self._model, text, len(text), add_bos, special,
                                                                        out, capacity, n))

    def detokenize(self, tokens, prev_tokens=None, special=False):
        """The bytes tokens spell."""
        arr = (_native.token * max(len(tokens), 1))(*tokens)
        return _fetch_bytes(lambda buf, capacity, n: lib.weft_detokenize(self._model, arr, len(tokens), special, buf,
                                                                         capacity, n))

    def apply_chat_template(self, messages, add_generation_prompt=True):
        """The messages (dicts with role and content) as prompt text in the model's chat template."""
        msgs = (_native.ChatMessage * max(len(messages), 1))()
        for i, m in enumerate(messages):
            content = m.get("content")
            if content is None:
                content = ""
            if not isinstance(content, str):  # a list of parts: the text ones
                content = "".join(p.get("text", "") for p in content if p.get("type") == "text")
            msgs[i] = _native.ChatMessage(str(m["role"]).encode(), content.encode("utf-8"))
        name = self.chat_format.encode() if self.chat_format else None
        return _fetch_bytes(lambda buf, capacity, n: lib.weft_chat_apply_template(
            self._model, name, msgs, len(messages), add_generation_prompt, buf, capacity, n)).decode("utf-8")

    # ---- the session

    def reset(self):
        """Forgets the cached tokens."""
        with self._lock:
            check(lib.weft_session_reset(self._session))

    def save_state(self):
        with self._lock:
            data = _fetch_bytes(lambda buf, capacity, n: lib.weft_session_state_save(self._session, buf, capacity, n))
            tokens = _fetch_tokens(lambda out, capacity, n: lib.weft_session_cached_tokens(self._session, out,
                                                                                           capacity, n))
            return LlamaState(tokens, data, self._seed)

    def load_state(self, state):
        with self._lock:
            data = state.llama_state
            check(lib.weft_session_state_load(self._session, data, len(data)))

    # ---- completions

    def _generate_params(self, max_tokens, temperature, top_p, min_p, typical_p, top_k, stop, frequency_penalty,
                         presence_penalty, repeat_penalty, mirostat_mode, mirostat_tau, mirostat_eta, seed, grammar,
                         json_schema, logit_bias):
        gp = _native.GenerateParams()
        lib.weft_generate_params_init(ctypes.byref(gp))
        gp.max_tokens = -1 if max_tokens is None or max_tokens <= 0 else int(max_tokens)
        s = gp.sampling
        s.temperature = float(temperature)
        s.top_p = float(top_p)
        s.min_p = float(min_p)
        s.typical_p = float(typical_p)
        s.top_k = int(top_k)
        s.frequency_penalty = float(frequency_penalty)
        s.presence_penalty = float(presence_penalty)
        s.repeat_penalty = float(repeat_penalty)
        s.repeat_last_n = int(self.last_n_tokens_size)
        s.mirostat = int(mirostat_mode)
        s.mirostat_tau = float(mirostat_tau)
        s.mirostat_eta = float(mirostat_eta)
        seed = self._seed if seed is None else seed
        s.seed = _native.SEED_RANDOM if seed is None or seed < 0 else int(seed) & 0xFFFFFFFF
        keep = []  # the buffers the struct points into live as long as it does
        text = _grammar_text(grammar)
        if text:
            keep.append(text.encode())
            s.grammar = keep[-1]
        if json_schema:
            keep.append(json_schema.encode())
            s.json_schema = keep[-1]
        if logit_bias:
            biases = (_native.LogitBias * len(logit_bias))(
                *[_native.LogitBias(int(t), float(b)) for t, b in logit_bias.items()])
            keep.append(biases)
            s.logit_bias = biases
            s.n_logit_bias = len(logit_bias)
        stops = [x.encode("utf-8") for x in _stop_list(stop) if x]
        if stops:
            arr = (ctypes.c_char_p * len(stops))(*stops)
            keep.append(arr)
            gp.stop = arr
            gp.n_stop = len(stops)
        return gp, keep

    def _prompt_tokens(self, prompt):
        if isinstance(prompt, (list, tuple)):
            tokens = [int(t) for t in prompt]
        else:
            tokens = self.tokenize(prompt.encode("utf-8"), add_bos=True, special=True) if prompt else []
        if not tokens:
            tokens = [self.token_bos()]
        return tokens

    def _run(self, tokens, gp, on_piece):
        """weft_generate on this thread; on_piece(text bytes) returns False to stop. The finish reason
        and the token counts."""
        arr = (_native.token * len(tokens))(*tokens)
        result = _native.GenerateResult()

        def callback(text, length, _ids, _n, _user):
            try:
                return bool(on_piece(ctypes.string_at(text, length)))
            except BaseException as e:  # an exception must not cross the C call: re-raised after it
                self._callback_error = e
                return False

        c_callback = _native.STREAM_CALLBACK(callback)
        self._callback_error = None
        with self._lock:
            status = lib.weft_generate(self._session, arr, len(tokens), ctypes.byref(gp), c_callback, None,
                                       ctypes.byref(result))
        if self._callback_error is not None:
            raise self._callback_error
        check(status)
        return _native.FINISH_REASONS.get(result.finish, "stop"), result.n_prompt_tokens, result.n_generated_tokens

    def _whole(self, tokens, gp):
        """The generated text, the finish reason and OpenAI's usage dict."""
        pieces = []
        finish, n_prompt, n_generated = self._run(tokens, gp, lambda data: pieces.append(data) or True)
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_generated, "total_tokens": n_prompt + n_generated}
        return b"".join(pieces).decode("utf-8", "replace"), finish, usage

    def _stream(self, tokens, gp):
        """Yields ("piece", bytes) as they come, then ("done", (finish, n_prompt, n_generated)): the
        generation runs on a thread of its own; leaving the generator early stops it."""
        pieces = queue.Queue()
        stopping = threading.Event()

        def on_piece(data):
            pieces.put(("piece", data))
            return not stopping.is_set()

        def work():
            try:
                pieces.put(("done", self._run(tokens, gp, on_piece)))
            except BaseException as e:
                pieces.put(("error", e))

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            while True:
                kind, value = pieces.get()
                if kind == "error":
                    raise value
                yield kind, value
                if kind == "done":
                    return
        finally:
            stopping.set()
            worker.join()

    def create_completion(self, prompt, suffix=None, max_tokens=16, temperature=0.8, top_p=0.95, min_p=0.05,
                          typical_p=1.0, logprobs=None, echo=False, stop=None, frequency_penalty=0.0,
                          presence_penalty=0.0, repeat_penalty=1.0, top_k=40, stream=False, seed=None,
                          mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1, model=None, grammar=None,
                          logit_bias=None, json_schema=None, **kwargs):
        """Text after prompt (str or tokens): an OpenAI text_completion dict, or with stream=True a
        generator of text_completion chunks."""
        if logprobs:
            raise ValueError("logprobs: not supported by weft's Python module yet")
        if suffix:
            raise ValueError("suffix (infill): not supported by weft's Python module")
        tokens = self._prompt_tokens(prompt)
        gp, keep = self._generate_params(max_tokens, temperature, top_p, min_p, typical_p, top_k, stop,
                                         frequency_penalty, presence_penalty, repeat_penalty, mirostat_mode,
                                         mirostat_tau, mirostat_eta, seed, grammar, json_schema, logit_bias)
        ident = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        name = model or self.model_path
        prefix = prompt if echo and isinstance(prompt, str) else ""
        if stream:
            return self._completion_chunks(tokens, gp, keep, ident, created, name, prefix)
        text, finish, usage = self._whole(tokens, gp)
        return {"id": ident, "object": "text_completion", "created": created, "model": name,
                "choices": [{"text": prefix + text, "index": 0, "logprobs": None, "finish_reason": finish}],
                "usage": usage}

    def _completion_chunks(self, tokens, gp, keep, ident, created, name, prefix):
        def chunk(text, finish):
            return {"id": ident, "object": "text_completion", "created": created, "model": name,
                    "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}

        if prefix:
            yield chunk(prefix, None)
        for kind, value in self._stream(tokens, gp):
            if kind == "piece":
                yield chunk(value.decode("utf-8", "replace"), None)
            else:
                yield chunk("", value[0])
        del keep

    def __call__(self, prompt, *args, **kwargs):
        return self.create_completion(prompt, *args, **kwargs)

    def create_chat_completion(self, messages, functions=None, function_call=None, tools=None, tool_choice=None,
                               temperature=0.2, top_p=0.95, top_k=40, min_p=0.05, typical_p=1.0, stream=False,
                               stop=None, seed=None, response_format=None, max_tokens=None, presence_penalty=0.0,
                               frequency_penalty=0.0, repeat_penalty=1.0, mirostat_mode=0, mirostat_tau=5.0,
                               mirostat_eta=0.1, model=None, grammar=None, logit_bias=None, logprobs=None,
                               top_logprobs=None, **kwargs):
        """The assistant's answer to messages in the model's chat template: an OpenAI chat.completion
        dict, or with stream=True a generator of chat.completion.chunk dicts. response_format
        {"type": "json_object", "schema": {...}} constrains the answer to the schema (weft's JSON
        Schema grammar); without "schema", to a JSON object."""
        if functions or tools:
            raise ValueError("functions / tools: not supported by weft's Python module yet")
        if logprobs:
            raise ValueError("logprobs: not supported by weft's Python module yet")
        text = self.apply_chat_template(messages, add_generation_prompt=True)
        tokens = self.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        gp, keep = self._generate_params(max_tokens, temperature, top_p, min_p, typical_p, top_k, stop,
                                         frequency_penalty, presence_penalty, repeat_penalty, mirostat_mode,
                                         mirostat_tau, mirostat_eta, seed, grammar, _schema_of(response_format),
                                         logit_bias)
        ident = f"chatcmpl-{uuid.uuid4()}"
        created = int(time.time())
        name = model or self.model_path
        if stream:
            return self._chat_chunks(tokens, gp, keep, ident, created, name)
        text, finish, usage = self._whole(tokens, gp)
        return {"id": ident, "object": "chat.completion", "created": created, "model": name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                             "finish_reason": finish}],
                "usage": usage}

    def _chat_chunks(self, tokens, gp, keep, ident, created, name):
        def chunk(delta, finish):
            return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": name,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        yield chunk({"role": "assistant"}, None)
        for kind, value in self._stream(tokens, gp):
            if kind == "piece":
                yield chunk({"content": value.decode("utf-8", "replace")}, None)
            else:
                yield chunk({}, value[0])
        del keep

    # ---- embeddings and logits

    def embed(self, input, normalize=False, truncate=True):
        """The pooled embedding of a text (a list of floats), or of each text of a list."""
        texts = [input] if isinstance(input, str) else list(input)
        out = [self._embed_one(t, normalize)[0] for t in texts]
        return out[0] if isinstance(input, str) else out

    def _embed_one(self, text, normalize):
        tokens = self.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        arr = (_native.token * max(len(tokens), 1))(*tokens)
        n = self.n_embd()
        buf = (ctypes.c_float * n)()
        with self._lock:
            check(lib.weft_session_embed(self._session, arr, len(tokens), -1, normalize, buf, n))
        return list(buf), len(tokens)

    def create_embedding(self, input, model=None):
        """An OpenAI embedding list: one entry per text of input (a str or a list of them)."""
        texts = [input] if isinstance(input, str) else list(input)
        data, n_tokens = [], 0
        for i, text in enumerate(texts):
            vector, n = self._embed_one(text, False)
            n_tokens += n
            data.append({"object": "embedding", "embedding": vector, "index": i})
        return {"object": "list", "data": data, "model": model or self.model_path,
                "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}

    def logits(self, tokens):
        """The logits after each of tokens (decoded from position 0 in a context of their own): a list of
        n_vocab-float rows."""
        n_vocab = self.n_vocab()
        arr = (_native.token * max(len(tokens), 1))(*tokens)
        buf = (ctypes.c_float * (len(tokens) * n_vocab))()
        with self._lock:
            check(lib.weft_session_logits(self._session, arr, len(tokens), buf, len(buf)))
        return [list(buf[i * n_vocab:(i + 1) * n_vocab]) for i in range(len(tokens))]


__all__ = ["Llama", "LlamaState", "WeftError"]
