"""Fixtures of the weft Python tests: the model built into weft (models/stories260K.gguf) and one
Llama over it for the whole session (loading is cheap, but a shared one also tests reuse)."""
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STORIES = os.path.join(ROOT, "models", "stories260K.gguf")
FIXTURES = os.environ.get("WEFT_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures"))


@pytest.fixture(scope="session")
def stories_path():
    return STORIES


@pytest.fixture(scope="session")
def llm():
    import weft

    model = weft.Llama(model_path=STORIES, n_ctx=512, n_threads=2, verbose=False)
    yield model
    model.close()


@pytest.fixture(scope="session")
def bert_path():
    path = os.path.join(FIXTURES, "models", "tiny-bert-F32.gguf")
    if not os.path.exists(path):
        pytest.skip(f"needs the shared fixtures ({path} is absent)")
    return path
