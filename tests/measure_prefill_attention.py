"""Prompt reading with flash attention: the query-row tiles (native/src/kernels/flash_attn_rows.cpp)
against ggml's one pass per row (engine.native.set_attention_tiles), in one run, and plain llama-server beside.

Each 512-token batch of the prompt is decoded twice at the same position, once per kernel (the
first of the pair's rows dropped from the cache again, the order alternating), so both see the
same machine load; a prompt's time per kernel is the sum of its batches. Then the same tokens go
through llama-server's /completion (cache_prompt off), whose prompt_ms is its reading time.

    PYTHONPATH=$PWD .venv/bin/python tests/measure_prefill_attention.py --lengths 4096 7168 \\
        --server ~/.cache/specee-chat/native/server-*/llama-server
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import urllib.request
from pathlib import Path

from llama_cpp import Llama
from llama_cpp import llama_cpp as C

from engine import native

MODEL = Path.home() / ".local/share/specee-chat/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
UBATCH = 512


def decode(llm: Llama, tokens: list[int], start: int, keep: bool) -> float:
    ctx = llm._ctx.ctx
    batch = C.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, start + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        t0 = time.perf_counter()
        assert C.llama_decode(ctx, batch) == 0
        C.llama_synchronize(ctx)
        took = time.perf_counter() - t0
    finally:
        C.llama_batch_free(batch)
    if not keep:
        C.llama_memory_seq_rm(C.llama_get_memory(ctx), 0, start, -1)
    return took


def use_tiles(on: bool) -> None:
    native.set_attention_tiles(on)


def ours(llm: Llama, tokens: list[int]) -> dict[str, float]:
    C.llama_memory_clear(C.llama_get_memory(llm._ctx.ctx), True)
    total = {"tiles": 0.0, "per_row": 0.0}
    for n, start in enumerate(range(0, len(tokens), UBATCH)):
        chunk = tokens[start : start + UBATCH]
        order = [True, False] if n % 2 == 0 else [False, True]
        took = {}
        for i, tiles in enumerate(order):
            use_tiles(tiles)
            took[tiles] = decode(llm, chunk, start, keep=i == 1)
        total["tiles"] += took[True]
        total["per_row"] += took[False]
        ratio = took[True] / took[False]
        print(f"  batch at {start:5d}: tiles {took[True]:6.2f} s  per row {took[False]:6.2f} s  ratio {ratio:.2f}", flush=True)
    use_tiles(True)
    return total


def server_prompt_s(port: int, tokens: list[int]) -> float:
    body = json.dumps({"prompt": tokens, "n_predict": 1, "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as resp:
        out = json.load(resp)
    return out["timings"]["prompt_ms"] / 1000


def start_server(binary: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [binary, "-m", str(MODEL), "-t", "2", "-c", "8192", "-fa", "on", "--port", str(port), "-np", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("llama-server did not come up")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 7168])
    parser.add_argument("--server", help="plain llama-server binary to time beside ours")
    parser.add_argument("--port", type=int, default=18093)
    args = parser.parse_args()

    llm = Llama(model_path=str(MODEL), n_ctx=8192, n_batch=UBATCH, n_ubatch=UBATCH, flash_attn=True, n_threads=2, verbose=False)
    text = TEXT.read_text() * 20
    all_tokens = llm.tokenize(text.encode())
    server = start_server(args.server, args.port) if args.server else None
    try:
        for length in args.lengths:
            tokens = all_tokens[:length]
            print(f"{length} tokens:", flush=True)
            total = ours(llm, tokens)
            tiles, per_row = total["tiles"], total["per_row"]
            line = f"  total: tiles {tiles:.1f} s, per row {per_row:.1f} s, ratio {tiles / per_row:.2f}"
            if server:
                peer = server_prompt_s(args.port, tokens)
                line += f"; llama-server {peer:.1f} s, tiles/llama-server {total['tiles'] / peer:.2f}"
            print(line, flush=True)
    finally:
        if server:
            server.terminate()
            server.wait()
        llm.close()


if __name__ == "__main__":
    main()
