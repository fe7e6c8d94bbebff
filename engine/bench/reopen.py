"""Time to first token when reopening a long conversation after the engine restarted (issue 24):
build a conversation of about N prompt tokens, answer it, quit the worker (its KV cache goes to disk),
start a fresh worker and ask the next question; the same question on a worker with no kept cache is
the full-prefill reference. Run: python -m engine.bench.reopen [--model M] [--tokens 3000]"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from engine import protocol as p
from engine.client import WorkerClient
from engine.models.default_model import ensure_default_model

FILLER = "Here is one more paragraph of the notes we keep going over, about lighthouses, tides and ships. "


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args()
    model = args.model or ensure_default_model()
    cache = Path(tempfile.mkdtemp(prefix="specee-reopen-"))
    os.environ["SPECEE_CACHE_DIR"] = str(cache)  # the workers inherit it: no user state is used or left
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
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
