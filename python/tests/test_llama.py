"""weft.Llama: llama-cpp-python's surface (the calls and the OpenAI-shaped dicts they return) over libweft."""
import json
import os
import subprocess

import pytest

import weft

PROMPT = "Once upon a time"


def greedy(llm, prompt=PROMPT, **kwargs):
    kwargs.setdefault("max_tokens", 32)
    return llm(prompt, temperature=0, repeat_penalty=1.0, **kwargs)


def test_completion_is_an_openai_text_completion(llm):
    out = greedy(llm)
    assert out["object"] == "text_completion"
    assert out["id"].startswith("cmpl-")
    assert isinstance(out["created"], int)
    choice = out["choices"][0]
    assert set(choice) == {"text", "index", "logprobs", "finish_reason"}
    assert choice["finish_reason"] in ("stop", "length")
    assert choice["text"]
    usage = out["usage"]
    assert usage["prompt_tokens"] == len(llm.tokenize(PROMPT.encode(), special=True))
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] <= 32
    assert llm.create_completion(PROMPT, max_tokens=32, temperature=0, repeat_penalty=1.0)["choices"][0]["text"] \
        == choice["text"]


def test_greedy_text_is_what_weft_run_prints(llm, stories_path):
    binary = os.environ.get("WEFT_BINARY")
    if not binary:
        pytest.skip("WEFT_BINARY (the weft executable) not set")
    run = subprocess.run([binary, "run", "-m", stories_path, "-p", PROMPT, "-n", "40", "--temp", "0",
                          "--repeat-penalty", "1.0"], capture_output=True, text=True, check=True)
    assert greedy(llm, max_tokens=40)["choices"][0]["text"] + "\n" == run.stdout


def test_streaming_yields_chunks_that_add_up(llm):
    whole = greedy(llm)["choices"][0]["text"]
    chunks = list(greedy(llm, stream=True))
    assert len(chunks) > 2
    assert all(c["object"] == "text_completion" for c in chunks)
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole


def test_leaving_a_stream_early_stops_it(llm):
    stream = greedy(llm, max_tokens=200, stream=True)
    first = next(stream)
    assert first["choices"][0]["finish_reason"] is None
    stream.close()  # the generation thread ends; the session is free again
    assert greedy(llm, max_tokens=4)["usage"]["completion_tokens"] <= 4


def test_stop_strings_end_the_text(llm):
    whole = greedy(llm, max_tokens=48)["choices"][0]["text"]
    stop = whole[whole.index(" ", 10):][:4]
    out = greedy(llm, max_tokens=48, stop=[stop])
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["choices"][0]["text"] == whole[: whole.index(stop)]
    assert greedy(llm, max_tokens=48, stop=stop)["choices"][0]["text"] == whole[: whole.index(stop)]


def test_sampling_with_a_seed_repeats(llm):
    a = llm(PROMPT, max_tokens=24, temperature=1.0, seed=7)["choices"][0]["text"]
    b = llm(PROMPT, max_tokens=24, temperature=1.0, seed=7)["choices"][0]["text"]
    assert a == b


def test_chat_completion_is_an_openai_chat_completion(llm):
    messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "A story."}]
    out = llm.create_chat_completion(messages=messages, max_tokens=16, temperature=0)
    assert out["object"] == "chat.completion"
    assert out["id"].startswith("chatcmpl-")
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert isinstance(message["content"], str)
    assert out["usage"]["completion_tokens"] <= 16

    chunks = list(llm.create_chat_completion(messages=messages, max_tokens=16, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == message["content"]


def test_response_format_json_schema_gives_valid_json(llm):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green"]}}, "required": ["color"],
              "additionalProperties": False}
    out = llm.create_chat_completion(messages=[{"role": "user", "content": "A color?"}], max_tokens=64,
                                     response_format={"type": "json_object", "schema": schema}, temperature=0.8,
                                     seed=3)
    value = json.loads(out["choices"][0]["message"]["content"])
    assert value["color"] in ("red", "green")
    out = llm.create_chat_completion(messages=[{"role": "user", "content": "JSON?"}], max_tokens=200,
                                     response_format={"type": "json_object"}, temperature=0, seed=1)
    if out["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(out["choices"][0]["message"]["content"]), dict)


def test_tokenize_and_detokenize(llm):
    tokens = llm.tokenize(b"Once upon a time, a girl")
    assert tokens[0] == llm.token_bos()
    assert llm.detokenize(tokens[1:]).strip() == b"Once upon a time, a girl"
    assert llm.tokenize(b"Hello", add_bos=False)[0] != llm.token_bos()
    with pytest.raises(TypeError):
        llm.tokenize("not bytes")
    assert llm.n_vocab() > 0 and llm.n_ctx() == 512


def test_save_and_load_state(llm):
    llm.reset()
    greedy(llm, max_tokens=8)
    state = llm.save_state()
    assert state.n_tokens > 0 and state.llama_state_size == len(state.llama_state) > 0
    llm.reset()
    llm.load_state(state)
    assert llm.save_state().input_ids == state.input_ids
    damaged = weft.LlamaState(state.input_ids, state.llama_state[: state.llama_state_size // 2], None)
    with pytest.raises(weft.WeftError) as e:
        llm.load_state(damaged)
    assert e.value.status == "WEFT_ERR_BAD_FILE"


def test_a_bad_path_raises(tmp_path):
    with pytest.raises(ValueError) as e:
        weft.Llama(model_path=str(tmp_path / "missing.gguf"), verbose=False)
    assert "missing.gguf" in str(e.value)
    assert e.value.status == "WEFT_ERR_IO"


def test_a_hostile_file_raises(tmp_path, stories_path):
    data = open(stories_path, "rb").read()
    for name, content in [("truncated.gguf", data[:4096]), ("text.gguf", b"not a model"),
                          ("counts.gguf", data[:8] + b"\x7f" * 8 + data[16:])]:
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(weft.WeftError) as e:
            weft.Llama(model_path=str(path), verbose=False)
        assert e.value.status == "WEFT_ERR_BAD_FILE"
        assert name in str(e.value)


def test_a_prompt_longer_than_the_context_raises(stories_path):
    small = weft.Llama(model_path=stories_path, n_ctx=32, verbose=False)
    with pytest.raises(ValueError) as e:
        small(PROMPT * 20, max_tokens=4)
    assert e.value.status == "WEFT_ERR_CONTEXT_FULL"
    assert "context" in str(e.value)
    assert small(PROMPT, max_tokens=4, temperature=0)["choices"][0]["text"] is not None  # still usable
    small.close()


def test_bad_sampling_parameters_raise(llm):
    with pytest.raises(ValueError) as e:
        llm(PROMPT, max_tokens=4, top_p=2.0)
    assert "top_p" in str(e.value)
    with pytest.raises(ValueError):
        llm(PROMPT, max_tokens=4, grammar="root ::= (")


def test_embeddings_of_an_encoder(bert_path):
    encoder = weft.Llama(model_path=bert_path, embedding=True, verbose=False)
    out = encoder.create_embedding(["hello world", "a second text"])
    assert out["object"] == "list"
    assert [d["index"] for d in out["data"]] == [0, 1]
    assert len(out["data"][0]["embedding"]) == encoder.n_embd()
    assert out["usage"]["prompt_tokens"] > 0
    assert encoder.embed("hello world") == out["data"][0]["embedding"]
    encoder.close()


def test_embeddings_of_a_decoder_raise(llm):
    with pytest.raises(weft.WeftError) as e:
        llm.create_embedding("hello")
    assert e.value.status == "WEFT_ERR_UNSUPPORTED"


def test_logits_predict_the_greedy_token(llm):
    tokens = llm.tokenize(PROMPT.encode(), special=True)
    rows = llm.logits(tokens)
    assert len(rows) == len(tokens) and len(rows[-1]) == llm.n_vocab()
    best = max(range(llm.n_vocab()), key=rows[-1].__getitem__)
    assert greedy(llm, max_tokens=1)["choices"][0]["text"].strip() == llm.detokenize([best]).decode().strip()
