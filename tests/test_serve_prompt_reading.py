"""`specee serve` and a long prompt (issue 45): a streamed request asking llama-server's
return_progress gets prompt_progress chunks while the prompt is read (the official openai client
reads them as extra fields), and a client that closes its connection while its prompt is read frees
the engine at once: the reading stops mid-batch instead of running to the end, so a short request
sent right after does not wait for it (with --parallel 1, it waited 46.9 s)."""

from __future__ import annotations

import http.client
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import openai
import pytest

from engine.serve.launcher import ServerProcess

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
# ~1,300 tokens: three batches of 512
LONG = "Summarise this list in one line:\n" + " ".join(
    f"Item {i}: the ferry from harbour {i % 9} left at {i % 12 + 1} o'clock with {i * 3} passengers." for i in range(70)
)


@pytest.fixture(scope="module")
def server(model_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(model=model_path, mode="vanilla", extra_args=["--parallel", "1", "--ctx", "2048"]) as s:
        yield s


def _progress(server: ServerProcess, content: str) -> list[dict]:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=300)
    chunks = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": content}], max_tokens=4, temperature=0, stream=True,
        extra_body={"return_progress": True},
    )  # fmt: skip
    return [ch.model_extra["prompt_progress"] for ch in chunks if ch.model_extra and "prompt_progress" in ch.model_extra]


def test_a_streamed_request_asking_for_it_gets_the_prompts_progress(server: ServerProcess) -> None:
    seen = _progress(server, f"(progress) {LONG}")
    assert seen[0]["cache"] == seen[0]["processed"] == 0 and seen[0]["total"] > 1024
    assert [s["processed"] for s in seen[:3]] == [0, 512, 1024]
    assert seen[-1]["processed"] == seen[-1]["total"] and all(s["total"] == seen[0]["total"] for s in seen)
    assert all(b["time_ms"] >= a["time_ms"] for a, b in itertools.pairwise(seen))


def test_a_client_that_leaves_while_its_prompt_is_read_frees_the_engine_at_once(server: ServerProcess) -> None:
    body = {
        "model": MODEL_ID, "messages": [{"role": "user", "content": f"(leaving) {LONG}"}], "max_tokens": 4,
        "temperature": 0, "stream": True, "return_progress": True,
    }  # fmt: skip
    url = urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    rsp = conn.getresponse()
    while b"prompt_progress" not in (line := rsp.readline()):  # reading began: leave
        assert line, "the stream ended without saying the prompt was being read"
    conn.sock.close()  # the connection closes under the response (as a client killed mid-request)
    conn.close()
    short = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=300)
    answer = short.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert answer.choices[0].message.content
    # the prompt of the client that left was not read on: asked again, what is cached of it is the
    # batches read before it left (its first, at most), not the whole prompt
    seen = _progress(server, f"(leaving) {LONG}")
    assert seen[0]["cache"] <= 512 < seen[0]["total"] - 512
