"""What a user waits for in a long chat, through `specee serve` and the official openai client, per
mode (issue 45): time to the first token of a ~N-token chat's first turn (cold), the same request
again (Regenerate), Continue, the next turn, the next turn after the server restarted, and how long a
short request waits after a client left while its long prompt was being read (Stop). A pause
between requests lets the worker's idle time run (auto's measurement, an explicit mode's vanilla
reference): that is when a chat's cache used to be lost. Each mode starts from an empty cache
folder, as on a machine where nothing was measured yet.
Run: python -m engine.bench.next_turn [--model M] [--modes auto,vanilla,ngram] [--tokens 3000]"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import tempfile
import time
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

from engine import knobs
from engine.bench.reopen import FILLER
from engine.models.default_model import ensure_default_model
from engine.models.registry import ModelRegistry
from engine.serve.launcher import ServerProcess


def _first_token_s(url: str, model: str, messages: list[dict[str, str]], max_tokens: int = 16) -> tuple[float, str]:
    """Seconds to the first streamed text, and the whole answer (openai client, streamed)."""
    import openai
    from openai.types.chat import ChatCompletionMessageParam

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=900)
    t0 = time.perf_counter()
    first, text = 0.0, ""
    chunks = client.chat.completions.create(
        model=model,
        messages=cast("list[ChatCompletionMessageParam]", messages),
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
    )
    for chunk in chunks:
        piece = chunk.choices[0].delta.content if chunk.choices else None
        if piece:
            first = first or time.perf_counter() - t0
            text += piece
    return first or time.perf_counter() - t0, text  # an empty answer: its end


def _leave_while_read(url: str, model: str, messages: list[dict[str, str]]) -> None:
    """A streamed request whose client closes the connection once the prompt's reading began."""
    parts = urlsplit(url)
    assert parts.hostname, url  # the server's own address
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=900)
    body = {"model": model, "messages": messages, "max_tokens": 16, "stream": True, "return_progress": True}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    rsp = conn.getresponse()
    while b"prompt_progress" not in (line := rsp.readline()) and line:
        pass
    assert conn.sock is not None
    conn.sock.close()
    conn.close()


def run_mode(model: Path, mode: str, n_tokens: int, n_ctx: int, pause_s: float) -> dict[str, float]:
    os.environ[knobs.CACHE_DIR.name] = tempfile.mkdtemp(prefix=f"specee-next-turn-{mode}-")
    args = ["--parallel", "1", "--ctx", str(n_ctx)]
    name = model.stem
    chat = [{"role": "user", "content": FILLER * max(1, n_tokens // 20) + f"({mode}) Summarise the notes in one line."}]
    out: dict[str, float] = {}
    with ServerProcess(model=model, mode=mode, extra_args=args) as server:
        name = json.loads(_get(server.url, "/v1/models"))["data"][0]["id"]
        out["first turn (cold)"], answer = _first_token_s(server.url, name, chat)
        time.sleep(pause_s)
        out["same request again"], _ = _first_token_s(server.url, name, chat)
        time.sleep(pause_s)
        out["continue"], more = _first_token_s(server.url, name, [*chat, {"role": "assistant", "content": answer}])
        time.sleep(pause_s)
        chat += [{"role": "assistant", "content": answer + more}, {"role": "user", "content": "And the tides?"}]
        out["next turn"], answer = _first_token_s(server.url, name, chat)
        chat += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And the ships?"}]
        _leave_while_read(server.url, name, [{"role": "user", "content": FILLER * max(1, n_tokens // 20) + "Other notes."}])
        hi = [{"role": "user", "content": "Hi"}]
        out["short request after a client left mid-prompt"], _ = _first_token_s(server.url, name, hi)
    with ServerProcess(model=model, mode=mode, extra_args=args) as server:
        out["next turn after a restart"], _ = _first_token_s(server.url, name, chat)
    return out


def _get(url: str, path: str) -> str:
    parts = urlsplit(url)
    assert parts.hostname, url  # the server's own address
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", path)
    return conn.getresponse().read().decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="GGUF path or registered id (default: the default model)")
    ap.add_argument("--modes", default="auto,vanilla,ngram,eagle,specee")
    ap.add_argument("--tokens", type=int, default=3000, help="the chat's length in prompt tokens, about")
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--pause", type=float, default=5.0, help="seconds between requests (the worker's idle time)")
    args = ap.parse_args()
    model = ModelRegistry().path_for(args.model) if args.model else ensure_default_model()
    results = {mode: run_mode(model, mode, args.tokens, args.ctx, args.pause) for mode in args.modes.split(",")}
    rows = list(next(iter(results.values())))
    print(f"time to first token, seconds ({model.name}, ~{args.tokens}-token chat, `specee serve --parallel 1`)")
    print(f"{'':46}" + "".join(f"{m:>10}" for m in results))
    for row in rows:
        print(f"{row:46}" + "".join(f"{results[m][row]:10.2f}" for m in results))


if __name__ == "__main__":
    main()
