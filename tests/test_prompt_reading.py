"""A long prompt's reading (prefill), as the user lives it: the worker says how far it is
(PromptProgress, a batch at a time), Stop ends it mid-batch (the target context's abort flag, not
after the batch of several seconds), and what was read before the Stop stays cached, so sending
the same prompt again goes on from there. Every mode reads through its own prefill (Python's chunks
for vanilla, the native drafter and SpecEE prefills in parts), and the batched path has its own."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from engine import protocol as p
from engine.chats.render import message_footer
from engine.chats.session import ChatSession
from engine.client import WorkerClient

N_CTX = 2048  # batches of 512 prompt tokens
# ~1,300 tokens: three batches, the last read with the first token
LONG = "Summarise this list in one line:\n" + " ".join(
    f"Item {i}: the ferry from harbour {i % 9} left at {i % 12 + 1} o'clock with {i * 3} passengers." for i in range(70)
)


def _worker(model_path: Path, mode: str, n_parallel: int = 1) -> WorkerClient:
    client = WorkerClient()
    client.start()
    # measure_reference off: vanilla's background measurement would use the context between the requests
    client.load(model_path, p.Placement(n_ctx=N_CTX), mode=mode, measure_reference=False, n_parallel=n_parallel)
    return client


@pytest.mark.parametrize(("mode", "n_parallel"), [("vanilla", 1), ("ngram", 1), ("eagle", 1), ("specee", 1), ("vanilla", 2)])
def test_stop_ends_a_long_prompts_reading_mid_batch_and_keeps_what_was_read(model_path: Path, mode: str, n_parallel: int) -> None:
    client = _worker(model_path, mode, n_parallel)
    try:
        # a prompt of its own: the cases before kept theirs on disk, and any mode restores them
        messages = [{"role": "user", "content": f"({mode}, {n_parallel}) {LONG}"}]
        rid = client.generate(messages, p.Sampling.greedy(8))
        progress: list[p.PromptProgress] = []
        for ev in client.events_of(rid):
            if isinstance(ev, p.PromptProgress):
                progress.append(ev)
                if ev.n_done >= 512:  # the second batch is being read now: Stop
                    client.cancel(rid)
            assert not isinstance(ev, p.Token), "Stop came seconds before the prompt's end"
            if isinstance(ev, p.Done):
                done = ev
                break
        assert done.finish_reason == "cancelled" and done.n_generated == 0
        assert progress[0].n_done == progress[0].n_cached == 0 and progress[0].n_prompt > 2 * 512
        # the batch under way when Stop came was not finished: no word of it after the Stop
        assert [ev.n_done for ev in progress] == [0, 512], "the reading went on after Stop"

        events = list(client.stream(messages, p.Sampling.greedy(8)))
        stats = [e for e in events if isinstance(e, p.Stats)][-1]
        assert isinstance(events[-1], p.Done) and events[-1].finish_reason == "length"
        assert stats.n_prompt_cached >= 511, "the batch read before the Stop was read again"
        again = [e for e in events if isinstance(e, p.PromptProgress)]
        assert again[0].n_done == again[0].n_cached >= 511  # as llama-server's prompt_progress: cache, processed, total
        assert again[-1].n_done == again[-1].n_prompt and all(a.n_done < b.n_done for a, b in itertools.pairwise(again))
    finally:
        client.stop()


def test_a_short_prompt_reads_without_progress_events(model_path: Path) -> None:
    client = _worker(model_path, "vanilla")
    try:
        events = list(client.stream([{"role": "user", "content": "Hi"}], p.Sampling.greedy(4)))
        assert not [e for e in events if isinstance(e, p.PromptProgress)]
    finally:
        client.stop()


def test_the_chat_shows_how_far_the_prompt_is_read_until_the_first_token() -> None:
    chat = ChatSession()
    gen = chat.send("a long paste")
    assert gen is not None
    assert chat.on_event(p.PromptProgress(gen.request_id, 3500, 0, 1234)) == "progress"
    assert "Reading the prompt: 1,234 of 3,500 tokens" in message_footer(chat.messages[-1])
    assert chat.on_event(p.PromptProgress("another request", 3500, 0, 2000)) == ""
    chat.on_event(p.Token(gen.request_id, "Sure"))
    assert not any("Reading" in line for line in message_footer(chat.messages[-1]))
