"""/v1/embeddings from the loaded model, with the openai client against `specee serve` on the default
model: OpenAI's shapes (float and base64), unit vectors, the same text the same vector, different
texts different ones, token arrays, and clear refusals."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from engine.serve.launcher import ServerProcess
from tests.test_serve import raw_request

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
KEY = "test-key-3f9a"  # tests.test_serve.raw_request sends it
N_EMBD = 576  # SmolLM2-135M's hidden size


@pytest.fixture(scope="module")
def server(model_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(model=model_path, mode="vanilla", api_key=KEY, extra_args=["--parallel", "2", "--ctx", "512"]) as s:
        yield s


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=120)


def vector(embedding: list[float] | str) -> np.ndarray:
    """A vector as the client gives it: floats, or (encoding_format base64 asked for) OpenAI's base64 of float32s."""
    return np.frombuffer(base64.b64decode(embedding), dtype="<f4") if isinstance(embedding, str) else np.array(embedding)


TEXTS = ["The cat sat on the mat.", "def add(a, b):\n    return a + b", "The cat sat on the mat."]


@pytest.mark.parametrize("fmt", ["float", "base64"])
def test_embeddings_have_openais_shape_and_unit_length(server: ServerProcess, fmt: str) -> None:
    reply = client(server).embeddings.create(model=MODEL_ID, input=TEXTS, encoding_format=fmt)
    assert reply.object == "list" and reply.model == MODEL_ID
    assert [d.index for d in reply.data] == [0, 1, 2] and all(d.object == "embedding" for d in reply.data)
    vectors = np.array([vector(d.embedding) for d in reply.data])
    assert vectors.shape == (3, N_EMBD)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert np.allclose(vectors[0], vectors[2], atol=1e-5)  # the same text, the same vector
    assert vectors[0] @ vectors[1] < 0.99  # different texts differ
    assert reply.usage.prompt_tokens == reply.usage.total_tokens > 10
    one = client(server).embeddings.create(model=MODEL_ID, input=TEXTS[1], encoding_format=fmt)
    assert np.allclose(vector(one.data[0].embedding), vectors[1], atol=1e-5)  # alone or among others, the same


def test_the_openai_clients_default_encoding_and_the_chat_beside_it(server: ServerProcess) -> None:
    c = client(server)
    vec = np.array(c.embeddings.create(model=MODEL_ID, input="hello").data[0].embedding)  # base64, decoded by the client
    chat = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0)
    assert chat.choices[0].message.content  # the chat's cache is its own
    assert np.allclose(c.embeddings.create(model=MODEL_ID, input="hello").data[0].embedding, vec, atol=1e-5)


def test_token_arrays_embed_like_their_text(server: ServerProcess) -> None:
    c = client(server)
    text = c.embeddings.create(model=MODEL_ID, input="hello world", encoding_format="float")
    status, tokenized = raw_request(
        server, "POST", "/v1/embeddings", json.dumps({"input": [[1, 2, 3], [4, 5]], "encoding_format": "float"}).encode()
    )
    assert status == 200 and [len(d["embedding"]) for d in tokenized["data"]] == [N_EMBD, N_EMBD]
    assert tokenized["usage"]["prompt_tokens"] == 5
    assert len(text.data[0].embedding) == N_EMBD


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"input": "word " * 2000}, "embeds at most 512 tokens per input"),
        ({"input": ""}, "empty"),
        ({"input": ["a", 3]}, "not a mix"),
        ({"input": [[1, 10**9]]}, "not a token id"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 64}, "dimensions"),
    ],
)
def test_what_cannot_be_embedded_is_a_clear_400(server: ServerProcess, body: dict, words: str) -> None:
    status, reply = raw_request(server, "POST", "/v1/embeddings", json.dumps({"model": MODEL_ID, **body}).encode())
    assert status == 400 and words in reply["error"]["message"], reply
    with pytest.raises(openai.BadRequestError, match="at most 512 tokens"):
        client(server).embeddings.create(model=MODEL_ID, input="word " * 2000)
