"""`specee bench --long`: how long a long prompt takes to read, ours beside plain llama-server (issue 46).

Every side reads the same documents (engine/bench/long_documents.py: 1k, 4k and 16k prompt tokens, or
up to the model's context less 1k), cold (nothing of a prompt cached: the peer's cache_prompt is off;
our worker first reads a one-token raw prompt, so the chat template's first tokens are not kept from
the document before), interleaved length by length and side by side, so machine drift hits all alike.
Per length: the time to the first token, prompt tokens a second, and ours over the peer's.

Sides (--modes with --long):
  vanilla[:threads=N][+batch=N]  our worker in vanilla mode, as `specee bench` runs it (one place);
                                 batch: prompt rows per llama_decode (n_batch and n_ubatch; 512)
  serve[:parallel=N][+threads=N][+batch=N]  `specee serve --mode vanilla` (its default places), over HTTP
  peer[:FLAGS]                   plain llama-server, -np 1; FLAGS: more of its flags, e.g. "-ub 2048"
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from engine import knobs
from engine import protocol as p
from engine.bench.long_documents import Documents, context_for, long_lengths

# an answer's first token is all that is timed; a second one shows the answer went on
MAX_TOKENS = 2
# a 16k-token prompt on a 1.5B model on two busy cores reads for many minutes
READ_TIMEOUT_S = 3600.0
WARMUP_TOKENS = 256
LONG_SIDES = "vanilla,peer"


@dataclass
class LongSample:
    side: str
    length: int  # the document's prompt tokens, as asked
    n_prompt: int  # the prompt's tokens the side reports
    n_read: int  # ... of them read now (not taken from a cache)
    ttft_ms: float
    prefill_tok_s: float
    n_threads: int = 0  # our worker: the threads in use at the end (fewer while other processes are busy)


class Side(Protocol):
    name: str
    about: str

    def read(self, messages: list[dict[str, str]], tokens: list[int], length: int) -> LongSample: ...

    def stop(self) -> None: ...


def parse_options(spec: str) -> tuple[str, dict[str, str]]:
    """ "serve:parallel=1+threads=2" -> ("serve", {"parallel": "1", "threads": "2"}); a peer's options are its flags."""
    kind, _, opts = spec.partition(":")
    if kind == "peer":
        return kind, {"flags": opts}
    out: dict[str, str] = {}
    for opt in filter(None, opts.split("+")):
        key, eq, value = opt.partition("=")
        known = ("threads", "parallel", "batch") if kind == "serve" else ("threads", "batch")
        if not eq or key not in known or not value.isdigit():
            raise SystemExit(f"specee bench --long: unknown side option {opt!r} in {spec!r} (see --help)")
        out[key] = value
    if kind not in ("vanilla", "serve"):
        raise SystemExit(f"specee bench --long: unknown side {spec!r}; use vanilla, serve or peer (see --help)")
    return kind, out


@contextlib.contextmanager
def _prompt_batch(batch: int) -> Iterator[None]:
    """A worker started meanwhile reads prompts `batch` rows a call (engine/worker/session.py prompt_batch)."""
    before = os.environ.get(knobs.PROMPT_BATCH.name)
    if batch:
        os.environ[knobs.PROMPT_BATCH.name] = str(batch)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(knobs.PROMPT_BATCH.name, None)
        else:
            os.environ[knobs.PROMPT_BATCH.name] = before


class WorkerSide:
    """Our worker, vanilla, one place, no kept caches: the bench's vanilla mode."""

    def __init__(self, name: str, model: Path, n_ctx: int, n_threads: int, batch: int = 0) -> None:
        from engine.client import WorkerClient

        self.name = name
        self.client = WorkerClient()
        with _prompt_batch(batch):
            self.client.start()
        placement = p.Placement(n_ctx=n_ctx, n_threads=n_threads)
        loaded = self.client.load(str(model), placement, mode="vanilla", keep_kv=False, measure_reference=False)
        self.about = f"our worker, vanilla, {loaded.n_threads} threads{'' if n_threads else ' (auto)'}, n_ctx {loaded.n_ctx}"
        self.about += f", prompt batch {batch}" if batch else ""

    def _answer(self, request: p.Generate) -> tuple[p.Stats, p.Done]:
        stats, done = p.Stats(), p.Done()
        self.client.send(request)
        for ev in self.client.events_of(request.request_id, READ_TIMEOUT_S):
            if isinstance(ev, p.Stats):
                stats = ev
            elif isinstance(ev, p.Done):
                done = ev
        return stats, done

    def read(self, messages: list[dict[str, str]], tokens: list[int], length: int) -> LongSample:
        # a raw one-token prompt first: the cache then shares nothing with the document's template start
        self._answer(p.Generate(f"reset-{time.monotonic_ns()}", [], p.Sampling.greedy(1), prompt="~", stream=False))
        ask = p.Generate(f"long-{time.monotonic_ns()}", messages, p.Sampling.greedy(MAX_TOKENS), stream=False)
        stats, done = self._answer(ask)
        return LongSample(self.name, length, done.n_prompt, done.n_prompt - stats.n_prompt_cached, stats.ttft_ms,
                          stats.prefill_tok_s, stats.n_threads)  # fmt: skip

    def stop(self) -> None:
        self.client.stop()


class ServeSide:
    """`specee serve --mode vanilla` in a process of its own, with an empty cache folder, streamed chat requests."""

    def __init__(self, name: str, model: Path, n_ctx: int, n_threads: int, parallel: int | None, batch: int = 0) -> None:
        from engine.serve.launcher import ServerProcess

        self.name = name
        args = ["--ctx", str(n_ctx), "--threads", str(n_threads)] + (["--parallel", str(parallel)] if parallel else [])
        self._cache = tempfile.TemporaryDirectory(prefix="specee-long-serve-")
        before = os.environ.get(knobs.CACHE_DIR.name)
        os.environ[knobs.CACHE_DIR.name] = self._cache.name  # no kept conversation from an earlier run answers
        try:
            self.server = ServerProcess(model=model, mode="vanilla", extra_args=args)
            with _prompt_batch(batch):
                self.server.start()
        finally:
            if before is None:
                os.environ.pop(knobs.CACHE_DIR.name, None)
            else:
                os.environ[knobs.CACHE_DIR.name] = before
        self.about = f"specee serve --mode vanilla {' '.join(args)}" + (f", prompt batch {batch}" if batch else "")
        with urllib.request.urlopen(f"{self.server.url}/v1/models", timeout=30) as r:
            self._model_id = json.load(r)["data"][0]["id"]

    def _post(self, path: str, body: dict) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(self.server.host, self.server.port, timeout=READ_TIMEOUT_S)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"specee serve answered HTTP {resp.status}: {resp.read()[:300]!r}")
        return resp

    def read(self, messages: list[dict[str, str]], tokens: list[int], length: int) -> LongSample:
        from engine.bench.serve_load import sse_chunks

        # a one-token raw prompt first, into the place the document takes (the lowest free one):
        # its cache then holds nothing of the chat template's start
        self._post("/v1/completions", {"model": self._model_id, "prompt": "~", "max_tokens": 1}).read()
        body = {"model": self._model_id, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        t0 = time.perf_counter()
        resp = self._post("/v1/chat/completions", body)
        ttft, usage = 0.0, dict[str, Any]()
        for chunk in sse_chunks(resp):
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content") and not ttft:
                ttft = time.perf_counter() - t0
            usage = chunk.get("usage") or usage
        resp.close()
        n_prompt = int(usage.get("prompt_tokens", 0))
        read = n_prompt - int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
        return LongSample(self.name, length, n_prompt, read, ttft * 1000, read / ttft if ttft else 0.0)

    def stop(self) -> None:
        self.server.stop()
        self._cache.cleanup()


class PeerSide:
    """Plain llama-server, one slot, fed our chat formatting's token ids, its prompt cache off."""

    def __init__(self, name: str, binary: Path, model: Path, n_ctx: int, n_threads: int, flags: str) -> None:
        from engine.bench.peer import PeerServer
        from engine.paths import cache_dir

        self.name = name
        # a log per side: two peers in one run wrote over each other's
        log = cache_dir() / "logs" / f"peer-long-{re.sub(r'[^A-Za-z0-9.]+', '_', flags).strip('_') or 'plain'}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.server = PeerServer(binary, model, n_threads, n_ctx, flags.split(), log)
        self.about = f"llama-server -t {n_threads} -c {n_ctx} -np 1 {flags}".rstrip()

    def read(self, messages: list[dict[str, str]], tokens: list[int], length: int) -> LongSample:
        r = self.server.complete(tokens, MAX_TOKENS, cache_prompt=False, timeout=READ_TIMEOUT_S)
        return LongSample(self.name, length, len(tokens), r.n_prompt_read, r.ttft_ms, r.prefill_tok_s)

    def stop(self) -> None:
        self.server.stop()


@dataclass
class LongReport:
    model: str
    n_ctx: int
    lengths: list[int]
    repeat: int
    sides: dict[str, str] = field(default_factory=dict)  # name -> what it runs
    samples: list[LongSample] = field(default_factory=list)


def run_long(
    model: Path, sides: list[str], lengths: list[int] | None = None, repeat: int = 1, n_threads: int = 0,
    peer_server: str | None = None, warmup: bool = True,
) -> dict:  # fmt: skip
    """Read documents of each length on every side, interleaved; the report as a dict (see summarize).
    lengths None: the model's (long_lengths of its training context)."""
    from engine.hardware import physical_cores
    from engine.llm.chat_prompt import ChatPrompt
    from engine.llm.load import vocab_only
    from engine.models.gguf_file import inspect_gguf

    parsed = [(spec, *parse_options(spec)) for spec in sides]  # a wrong side is told before anything runs
    info = inspect_gguf(model)
    lengths = sorted(lengths or long_lengths(info.n_ctx_train))
    n_ctx = context_for(lengths, info.n_ctx_train)
    vocab = vocab_only(model)
    try:
        chat = ChatPrompt.for_model(vocab, info.chat_template)
        docs = Documents(
            chat,
            lambda text: vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False),
            lambda toks: vocab.detokenize(toks).decode("utf-8", "replace"),
        )
        # every document made first: each side then reads the very same ones
        warm = docs.next(min(WARMUP_TOKENS, min(lengths))) if warmup else None
        plan = [(length, docs.next(length)) for length in lengths for _ in range(max(1, repeat))]
    finally:
        vocab.close()
    threads = n_threads or physical_cores()
    report = LongReport(str(model), n_ctx, lengths, max(1, repeat))
    running: list[Side] = []
    try:
        for spec, kind, opts in parsed:
            t = int(opts.get("threads", n_threads))
            side: Side
            if kind == "vanilla":
                side = WorkerSide(spec, model, n_ctx, t, int(opts.get("batch", 0)))
            elif kind == "serve":
                parallel = int(opts["parallel"]) if "parallel" in opts else None
                side = ServeSide(spec, model, n_ctx, t, parallel, int(opts.get("batch", 0)))
            else:
                if not peer_server:
                    raise SystemExit("the peer side needs llama-server: `python native/build.py --server` builds it")
                side = PeerSide(spec, Path(peer_server), model, n_ctx, int(opts.get("threads", threads)), opts["flags"])
            running.append(side)
            report.sides[spec] = side.about
        if warm is not None:  # one-off costs (the weights paged in, threads started) before any timed read
            for side in running:
                side.read(*warm, len(warm[1]))
        for i, (length, (messages, tokens)) in enumerate(tqdm(plan, desc="long prompts", unit="doc", file=sys.stderr)):
            # the order of the sides turns every document: neither always reads right after the other
            for side in running[i % len(running) :] + running[: i % len(running)]:
                report.samples.append(side.read(messages, tokens, length))
    finally:
        for side in running:
            side.stop()
    return summarize(report)


def summarize(report: LongReport) -> dict:
    """Per length and side: median time to first token and prompt tok/s; each side's ratio to the
    first peer side (its time over the peer's: below 1 is faster) and to the first side."""
    rows = []
    names = list(report.sides)
    peer = next((n for n in names if n.startswith("peer")), None)
    for length in report.lengths:
        row: dict = {"length": length, "sides": {}}
        for name in names:
            got = [s for s in report.samples if s.side == name and s.length == length]
            if not got:
                continue
            row["sides"][name] = {
                "ttft_ms": statistics.median(s.ttft_ms for s in got),
                "prefill_tok_s": statistics.median(s.prefill_tok_s for s in got),
                "n_prompt": got[0].n_prompt,
                "n_read": min(s.n_read for s in got),
            }
        if peer and peer in row["sides"]:
            ref = row["sides"][peer]["ttft_ms"]
            for got in row["sides"].values():
                got["ttft_vs_peer"] = round(got["ttft_ms"] / ref, 3) if ref else None
        rows.append(row)
    return {
        "model": report.model,
        "n_ctx": report.n_ctx,
        "lengths": report.lengths,
        "repeat": report.repeat,
        "peer": peer,
        "sides": report.sides,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "rows": rows,
        "samples": [asdict(s) for s in report.samples],
    }


def print_long(report: dict) -> None:
    print(f"model: {report['model']}  context: {report['n_ctx']}  documents per length and side: {report['repeat']} (cold)")
    for name, about in report["sides"].items():
        print(f"  {name}: {about}")
    header = f"{'tokens':>7}  {'side':<28}{'TTFT s':>9}{'prompt tok/s':>14}{'read':>7}"
    header += f"{'vs peer':>9}" if report["peer"] else ""
    print(header)
    print("-" * len(header))
    for row in report["rows"]:
        for name, got in row["sides"].items():
            ratio = got.get("ttft_vs_peer")
            line = f"{row['length']:>7}  {name:<28}{got['ttft_ms'] / 1000:>9.2f}{got['prefill_tok_s']:>14.1f}{got['n_read']:>7}"
            print(line + (f"{ratio:>8.3f}x" if ratio else ""))
    if report["peer"]:
        print("vs peer: the side's time to the first token over the peer's (below 1: faster)")
