"""Requests/s and time to first token of `specee serve` under concurrent streaming clients.

    python -m engine.bench.serve_load --clients 4 --requests 16 --max-tokens 32

Starts the server on the default model (or --model, or uses a running one with --url), sends the
development prompts as streaming chat requests from N client threads at once, and reports
requests/s, output tokens/s and the time to first token and to the last one (p50/p95). The worker
decodes up to --parallel requests together (vanilla, ngram) and the others wait for a place, so
under N clients the time to first token includes that wait: that is what a client sees.

    python -m engine.bench.serve_load --clients 2 --requests 8 --conversation-tokens 3000

Long conversations instead: each client keeps its own chat, opened by a ~N-token document, and
resends the whole history every turn, as OpenAI clients do; the server's kept conversation caches
should spare each turn the shared prefix (time to first token near a single client's, not a full
prefill per request).

    python -m engine.bench.serve_load --clients 4 --requests 32 --mode vanilla --vs-single

The same requests from one client first, then from N, each on a server of its own, and the ratio of
their times to first token (the target: N clients under 2x one). A server started here keeps its
conversation caches in a folder of its own, so no earlier run's saved prompts answer for it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from tqdm import tqdm

from engine import knobs
from engine.prompts import load_prompts
from engine.serve.launcher import ServerProcess


@dataclass
class Result:
    ttft_s: float
    total_s: float
    tokens: int
    prompt_tokens: int = 0
    text: str = ""
    turn: int = 0  # long conversations: the turn of its client's chat (0: the document, a full prefill)


DOCUMENT = "Here is one more paragraph of the notes we keep going over, about lighthouses, tides and ships. "
FOLLOW_UPS = ["And the tides?", "And the ships?", "Who kept the lamp?", "What changed in winter?"]


def sse_chunks(resp: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON chunks of an OpenAI-style event stream up to [DONE]; an error event raises."""
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise RuntimeError(chunk["error"]["message"])
        yield chunk


def stream_chat(url: str, model: str, prompt: str | list[dict[str, str]], max_tokens: int, api_key: str | None) -> Result:
    """One streaming chat request over plain HTTP (no client library needed to measure); `prompt`:
    the user's question, or a whole history."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=600)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft, tokens, n_prompt, text = 0.0, 0, 0, []
    for chunk in sse_chunks(resp):
        content = chunk["choices"][0]["delta"].get("content") if chunk["choices"] else None
        if content:
            ttft = ttft or time.perf_counter() - t0
            text.append(content)
        if chunk.get("usage"):
            tokens, n_prompt = chunk["usage"]["completion_tokens"], chunk["usage"]["prompt_tokens"]
    conn.close()
    return Result(ttft, time.perf_counter() - t0, tokens, n_prompt, "".join(text))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(
    url: str, model: str, clients: int, requests: int, max_tokens: int, api_key: str | None, conversation_tokens: int = 0
) -> dict:
    prompts = [p.text for p in load_prompts()]
    stream_chat(url, model, prompts[0], 4, api_key)  # warm-up: the first answer pays one-off costs
    local = threading.local()

    def next_request(i: int) -> str | list[dict[str, str]]:
        if not conversation_tokens:
            return prompts[i % len(prompts)]
        if not hasattr(local, "history"):  # this client's conversation: its own document
            doc = f"Client {threading.current_thread().name}'s notes. " + DOCUMENT * max(1, conversation_tokens // 20)
            local.history = [{"role": "user", "content": doc + "Summarise the notes in one line."}]
        else:
            local.history.append({"role": "user", "content": FOLLOW_UPS[i % len(FOLLOW_UPS)]})
        return local.history

    results: list[Result] = []
    errors: list[str] = []
    next_index = iter(range(requests))
    lock = threading.Lock()
    bar = tqdm(total=requests, desc=f"{clients} clients", unit="req", file=sys.stderr)

    def client() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            try:
                result = stream_chat(url, model, next_request(i), max_tokens, api_key)
                if conversation_tokens:
                    result.turn = len(local.history) // 2
                    local.history.append({"role": "assistant", "content": result.text})
            except (OSError, RuntimeError) as exc:
                errors.append(str(exc))
                continue
            finally:
                bar.update(1)
            with lock:
                results.append(result)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, name=str(k + 1)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    bar.close()
    ttft = [r.ttft_s * 1000 for r in results]
    total = [r.total_s * 1000 for r in results]
    later = [r.ttft_s * 1000 for r in results if r.turn > 0]
    return {
        "clients": clients,
        "requests": len(results),
        "errors": errors,
        "max_tokens": max_tokens,
        "conversation_tokens": conversation_tokens,
        "prompt_tokens_p50": round(statistics.median([r.prompt_tokens for r in results])) if results else None,
        "ttft_ms_later_turns_p50": round(statistics.median(later), 1) if later else None,
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(results) / wall, 3),
        "output_tok_per_s": round(sum(r.tokens for r in results) / wall, 1),
        "ttft_ms_p50": round(statistics.median(ttft), 1) if ttft else None,
        "ttft_ms_mean": round(statistics.mean(ttft), 1) if ttft else None,
        "ttft_ms_p95": round(percentile(ttft, 0.95), 1) if ttft else None,
        "latency_ms_p50": round(statistics.median(total), 1) if total else None,
        "latency_ms_p95": round(percentile(total, 0.95), 1) if total else None,
        "results": [{**asdict(r), "text": r.text[:200]} for r in results],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.bench.serve_load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=16, help="requests in all, shared by the clients")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", help="GGUF path or registered id (default: the default model)")
    ap.add_argument("--mode", default="auto", help="the server's acceleration mode")
    ap.add_argument("--parallel", type=int, help="the server's --parallel (default: its own, sized by the machine)")
    ap.add_argument("--threads", type=int, help="the server's --threads (default: auto, following the machine's load)")
    ap.add_argument("--url", help="measure a server that is already running (e.g. http://127.0.0.1:8080)")
    ap.add_argument("--api-key", help="that server's API key")
    ap.add_argument("--conversation-tokens", type=int, default=0,
                    help="each client keeps one long conversation opened by a document of about this many tokens")  # fmt: skip
    ap.add_argument("--vs-single", action="store_true",
                    help="the same requests from one client first; report the ratio of the times to first token")  # fmt: skip
    ap.add_argument("--json", help="write the full report here")
    args = ap.parse_args(argv)
    if args.vs_single and args.url:
        ap.error("--vs-single starts a server per pass; it cannot measure one that runs (--url)")
    if args.vs_single:
        single = measure(args, clients=1)
        print(summary(single, args), file=sys.stderr)
    report = measure(args, clients=args.clients)
    if args.vs_single:
        for key in ("ttft_ms_p50", "ttft_ms_mean"):
            report[f"{key}_vs_single"] = round(report[key] / max(single[key], 1e-9), 2)
        report["single"] = {k: v for k, v in single.items() if k != "results"}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(summary(report, args))
    return 1 if report["errors"] else 0


def measure(args: argparse.Namespace, clients: int) -> dict:
    """One pass: on the server at --url, or on a fresh one with a cache folder of its own."""
    if args.url:
        return measure_at(args.url.rstrip("/"), args.api_key, args, clients)
    extra = ["--parallel", str(args.parallel)] if args.parallel is not None else []
    extra += ["--threads", str(args.threads)] if args.threads is not None else []
    server = ServerProcess(model=args.model, mode=args.mode, extra_args=extra)
    print(f"starting specee serve for {clients} client{'s' if clients > 1 else ''} ...", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="specee-serve-load-") as cache:
        before = os.environ.get(knobs.CACHE_DIR.name)
        os.environ[knobs.CACHE_DIR.name] = cache  # the server's environment is read at start
        try:
            url = server.start()
        finally:
            if before is None:
                os.environ.pop(knobs.CACHE_DIR.name)
            else:
                os.environ[knobs.CACHE_DIR.name] = before
        try:
            return measure_at(url, None, args, clients)
        finally:
            server.stop()


def measure_at(url: str, api_key: str | None, args: argparse.Namespace, clients: int) -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with urllib.request.urlopen(urllib.request.Request(f"{url}/v1/models", headers=headers), timeout=30) as r:
        model = json.load(r)["data"][0]["id"]
    report = run(url, model, clients, args.requests, args.max_tokens, api_key, args.conversation_tokens)
    with urllib.request.urlopen(f"{url}/health", timeout=30) as r:
        health = json.load(r)
        report.update(model=model, mode=health.get("mode", "?"), parallel=health.get("parallel", 1))
    return report


def summary(report: dict, args: argparse.Namespace) -> str:
    return (
        f"{report['model']} ({report['mode']}, {report['parallel']} at once), {report['clients']} streaming clients,"
        f" {report['requests']} requests of"
        f" {report['max_tokens']} tokens"
        + (
            f" in long conversations (prompt p50 {report['prompt_tokens_p50']} tokens; time to first token after"
            f" the first turn p50 {report['ttft_ms_later_turns_p50']} ms)"
            if args.conversation_tokens
            else ""
        )
        + f": {report['requests_per_s']} requests/s, {report['output_tok_per_s']} tok/s;"
        f" time to first token p50 {report['ttft_ms_p50']} ms, mean {report['ttft_ms_mean']} ms,"
        f" p95 {report['ttft_ms_p95']} ms"
        + (
            f" ({report['ttft_ms_p50_vs_single']}x one client's p50, {report['ttft_ms_mean_vs_single']}x its mean)"
            if "ttft_ms_p50_vs_single" in report
            else ""
        )
        + f"; latency p50 {report['latency_ms_p50']} ms, p95 {report['latency_ms_p95']} ms"
        + (f"; {len(report['errors'])} errors: {report['errors'][0]}" if report["errors"] else "")
    )


if __name__ == "__main__":
    sys.exit(main())
