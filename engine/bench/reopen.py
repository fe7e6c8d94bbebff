"""Time to first token when reopening a long conversation after the engine restarted (issue 24):
build a conversation of about N prompt tokens, answer it, quit the worker (its KV cache goes to disk),
start a fresh worker and ask the next question; the same question on a worker with no kept cache is
the full-prefill reference. Then switching: two long conversations answered in turn on one worker,
each follow-up question timed (its cache kept in memory while the other chat ran).
Run: python -m engine.bench.reopen [--model M] [--tokens 3000]"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from engine import knobs
from engine import protocol as p
from engine.client import WorkerClient
from engine.models.default_model import ensure_default_model
from engine.models.registry import ModelRegistry

FILLER = "Here is one more paragraph of the notes we keep going over, about lighthouses, tides and ships. "
FILLER_B = "Another page from the garden diary: what was sown, what came up, and what the frost took this week. "


def _ask(model: Path, messages: list[dict[str, str]], n_ctx: int) -> tuple[p.Done, p.Stats]:
    client = WorkerClient()
    client.start()
    try:
        client.load(model, p.Placement(n_ctx=n_ctx))
        events = list(client.stream(messages, p.Sampling.greedy(16)))
    finally:
        client.stop()
    done = events[-1]
    assert isinstance(done, p.Done)
    return done, [e for e in events if isinstance(e, p.Stats)][-1]


def _switching(model: Path, n_fill: int, n_ctx: int) -> None:
    """Chats A and B, each ~N tokens, answered in turn on one worker: A, B, A again, B again."""
    client = WorkerClient()
    client.start()
    try:
        client.load(model, p.Placement(n_ctx=n_ctx))
        chats = {
            "A": [{"role": "user", "content": FILLER * n_fill + "Summarise the notes in one line."}],
            "B": [{"role": "user", "content": FILLER_B * n_fill + "Summarise the diary in one line."}],
        }
        for turn, follow_up in enumerate(["And the tides?", "And the ships?"]):
            for name, history in chats.items():
                events = list(client.stream(history, p.Sampling.greedy(16)))
                done, st = events[-1], [e for e in events if isinstance(e, p.Stats)][-1]
                assert isinstance(done, p.Done)
                print(f"switching, chat {name} turn {turn + 1}: {st.n_prompt} prompt tokens, TTFT {st.ttft_ms:.0f} ms,"
                      f" {st.n_prompt_cached} cached")  # fmt: skip
                history += [{"role": "assistant", "content": done.text}, {"role": "user", "content": follow_up}]
    finally:
        client.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="GGUF path or registered id (default: the default model)")
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args()
    model = ModelRegistry().path_for(args.model) if args.model else ensure_default_model()
    cache = Path(tempfile.mkdtemp(prefix="specee-reopen-"))
    os.environ[knobs.CACHE_DIR.name] = str(cache)  # the workers inherit it: no user state is used or left
    try:
        n_fill = max(1, args.tokens // 20)  # ~20 tokens per filler sentence
        history = [{"role": "user", "content": FILLER * n_fill + "Summarise the notes in one line."}]
        first, st0 = _ask(model, history, args.ctx)
        history += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "And the tides?"}]
        kept, st1 = _ask(model, history, args.ctx)  # a fresh worker: the first one quit
        shutil.rmtree(cache / "kv-states", ignore_errors=True)
        cold, st2 = _ask(model, history, args.ctx)
        print(f"conversation: {st1.n_prompt} prompt tokens (first turn {st0.n_prompt}, TTFT {st0.ttft_ms:.0f} ms)")
        print(f"reopened after a restart: TTFT {st1.ttft_ms:.0f} ms, {st1.n_prompt_cached} tokens from the kept cache")
        print(f"full prefill:             TTFT {st2.ttft_ms:.0f} ms, {st2.n_prompt_cached} cached")
        print(f"identical answers: {kept.tokens == cold.tokens}")
        shutil.rmtree(cache / "kv-states", ignore_errors=True)
        _switching(model, n_fill, args.ctx)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
