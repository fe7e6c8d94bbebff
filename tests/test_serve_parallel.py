"""`specee serve --parallel N`: concurrent requests decoded together (vanilla and ngram), one at a time in
the accelerated single-sequence modes; real servers on the default model, driven by the openai client."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from engine import protocol as p
from engine.cli import main as cli_main
from engine.serve.bridge import Turns
from engine.serve.launcher import ServerProcess
from tests.test_serve import wait_idle

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
QUESTIONS = ["Name a fruit.", "What is 2 plus 2?", "Say hello in French.", "Name a planet."]
COUNT = [{"role": "user", "content": "Count from 1 to 1000, separated by commas."}]


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=120)


def ask(server: ServerProcess, text: str, max_tokens: int) -> str:
    messages = [{"role": "user", "content": text}]
    reply = client(server).chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=max_tokens, temperature=0)
    return reply.choices[0].message.content or ""


def stream_all(server: ServerProcess, texts: list[str], max_tokens: int) -> list[str]:
    """Streaming requests from one thread each, all at once."""
    out: dict[int, str] = {}

    def run(i: int) -> None:
        stream = client(server).chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": texts[i]}], max_tokens=max_tokens, temperature=0, stream=True
        )
        out[i] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return [out.get(i, "<no answer>") for i in range(len(texts))]


@pytest.fixture(scope="module")
def batched(model_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(model=model_path, mode="vanilla", extra_args=["--parallel", "4", "--ctx", "1024"])
    server.start(timeout=180)
    yield server
    server.stop()


def test_concurrent_streams_answer_as_they_do_alone(batched: ServerProcess) -> None:
    state = batched.health()
    assert state["parallel"] == 4 and state["mode"] == "vanilla"
    alone = [ask(batched, q, 24) for q in QUESTIONS]
    assert stream_all(batched, QUESTIONS, 24) == alone
    # more clients than places: the others wait their turn, and still get their own answers
    assert stream_all(batched, QUESTIONS + QUESTIONS[::-1], 24) == alone + alone[::-1]


def test_a_client_leaving_mid_batch_leaves_the_others_intact(batched: ServerProcess) -> None:
    before = wait_idle(batched)["cancelled"]
    alone = [ask(batched, q, 32) for q in QUESTIONS[:3]]
    leaving = client(batched).chat.completions.create(model=MODEL_ID, messages=COUNT, max_tokens=600, temperature=0, stream=True)
    received = 0
    for chunk in leaving:
        received += bool(chunk.choices and chunk.choices[0].delta.content)
        if received >= 2:
            break
    others: list[str] = []
    runner = threading.Thread(target=lambda: others.extend(stream_all(batched, QUESTIONS[:3], 32)))
    runner.start()
    leaving.close()  # the client goes away while the others decode beside it
    runner.join(180)
    assert others == alone
    assert wait_idle(batched, timeout=30)["cancelled"] == before + 1


def test_the_accelerated_modes_keep_the_queue(model_path: Path) -> None:
    with ServerProcess(model=model_path, mode="eagle", extra_args=["--parallel", "4", "--ctx", "1024"]) as server:
        assert server.health()["parallel"] == 1
        running = client(server).chat.completions.create(
            model=MODEL_ID, messages=COUNT, max_tokens=600, temperature=0, stream=True
        )
        next(iter(running))  # it holds the one place now
        waiting = threading.Thread(target=lambda: ask(server, "Say hi.", 4))
        waiting.start()
        deadline = time.monotonic() + 20
        while server.health()["queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.health()["queued"] == 1 and server.health()["in_flight"] == 1
        running.close()
        waiting.join(60)
        assert not waiting.is_alive()


@pytest.mark.parametrize("value", ["0", "-3", "17", "100000"])
def test_absurd_parallel_values_are_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["serve", "--parallel", value]) == 2
    err = capsys.readouterr().err
    assert f"--parallel must be 1 (one request at a time) to {p.N_PARALLEL_MAX}" in err and value in err


def test_turns_serve_in_arrival_order_up_to_the_capacity() -> None:
    async def scenario() -> None:
        turns = Turns(2)
        got: list[int] = []

        async def take(i: int) -> None:
            await turns.acquire()
            got.append(i)

        await take(0)
        await take(1)
        waiters = [asyncio.create_task(take(i)) for i in (2, 3, 4)]
        await asyncio.sleep(0)
        assert got == [0, 1] and turns.waiting == 3
        waiters[1].cancel()  # a client that leaves while waiting gives up its place in line
        await asyncio.sleep(0)
        turns.release()
        await asyncio.sleep(0)
        assert got == [0, 1, 2] and turns.held == 2
        turns.resize(1)  # auto switched to a mode that answers one at a time
        turns.release()
        await asyncio.sleep(0)
        assert got == [0, 1, 2] and turns.held == 1
        turns.resize(3)
        await asyncio.sleep(0)
        assert got == [0, 1, 2, 4] and turns.held == 2 and turns.waiting == 0

    asyncio.run(scenario())
