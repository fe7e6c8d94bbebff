"""`specee bench --cost-curve`: what one decode call of n rows (logits for every row, as a
speculative verification needs) costs relative to n = 1, for ggml's one-row vec_dot kernels, our
multi-column kernels (patch 0009) and ggml's repacked layout, measured side by side in one run,
next to the physical floor of one token: the bytes a decode step reads divided by the measured
read bandwidth.

Every accelerated lossless mode lives on this curve: a draft of k tokens pays off only if the
verify call of k+1 rows costs less than the tokens it is expected to accept."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

SIZES = (1, 2, 4, 8, 16)
PREFIX = 64  # a short conversation's worth of cached positions before the measured calls


@dataclass
class CostCurve:
    kernels: str  # which CPU kernels computed it (KERNELS)
    ms: dict[int, float] = field(default_factory=dict)  # median wall time of one call of n rows

    def ratio(self, n: int) -> float:
        return self.ms[n] / self.ms[1]


# name -> (weights repacked, multi-column kernels): ggml's vec_dot one row at a time (upstream,
# batch-invariant), ours computing up to four rows per weight row (patch 0009, same arithmetic),
# and ggml's repacked layout (Q4_K batch-invariant by patch 0008; other types multi-column)
KERNELS = {"ggml vec_dot": (False, False), "multi-column": (False, True), "repacked": (True, True)}


def floor_ms(model_path: Path, bandwidth_gbs: float) -> tuple[float, int]:
    """(ms, bytes): one token must read every layer and the lm_head once (the token embedding row
    only), so weights / bandwidth bounds a memory-bound decode step from below."""
    from engine.placement.model_facts import facts_from_gguf

    facts = facts_from_gguf(model_path)
    read = sum(facts.layer_bytes) + facts.output_bytes
    return read / (bandwidth_gbs * 1e9) * 1e3, read


def measure(
    model_path: Path, repack: bool, threads: int, kernels: list[str], sizes: tuple[int, ...] = SIZES, repeats: int = 11
) -> list[CostCurve]:
    """Curves for the kernel variants sharing one weights layout, measured in interleaved rounds
    (every size and variant once per round) so a slow spell of the machine hits all alike."""
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as C

    from engine.native import set_multicol
    from engine.worker.session import batch_invariant_weights

    with batch_invariant_weights(repack):
        llm = Llama(model_path=str(model_path), n_ctx=512, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False)
    try:
        ctx = llm._ctx.ctx
        mem = C.llama_get_memory(ctx)
        prefix = llm.tokenize(b"Write a Python function that parses an ISO date and explains each step." * 8)[:PREFIX]
        tokens = llm.tokenize(b" the quick brown fox jumps over the lazy dog and keeps running far away", add_bos=False)
        curves = [CostCurve(k) for k in kernels]
        times: dict[tuple[str, int], list[float]] = {(k, n): [] for k in kernels for n in sizes}
        batch = C.llama_batch_init(max(len(prefix), max(sizes)), 0, 1)
        try:

            def decode(toks: list[int], start: int, all_logits: bool) -> float:
                for i, tok in enumerate(toks):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, start + i, 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = all_logits or i == len(toks) - 1
                batch.n_tokens = len(toks)
                t0 = time.perf_counter()
                if C.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed")
                C.llama_get_logits(ctx)  # synchronises a GPU backend
                return (time.perf_counter() - t0) * 1e3

            decode(prefix, 0, False)
            layout = "repacked" if repack else "file layout"
            for r in tqdm(range(repeats + 1), desc=f"cost curve ({layout})", unit="round", leave=False):
                for k in kernels:
                    set_multicol(KERNELS[k][1])
                    for n in sizes:
                        ms = decode([tokens[(r + i) % len(tokens)] for i in range(n)], len(prefix), True)
                        C.llama_memory_seq_rm(mem, 0, len(prefix), -1)
                        if r:  # the first round warms caches and allocates the output buffer
                            times[(k, n)].append(ms)
            for c in curves:
                c.ms = {n: statistics.median(times[(c.kernels, n)]) for n in sizes}
        finally:
            set_multicol(True)
            C.llama_batch_free(batch)
        return curves
    finally:
        llm.close()


def report(model_path: Path, threads: int, sizes: tuple[int, ...] = SIZES) -> tuple[str, dict]:
    from engine.placement.machine import measure_cpu_bandwidth

    bandwidth = measure_cpu_bandwidth()
    floor, read = floor_ms(model_path, bandwidth)
    from engine.models.gguf_file import inspect_gguf
    from engine.native import multicol_available
    from engine.placement.weights_layout import repack_is_exact

    flat = ["ggml vec_dot", "multi-column"] if multicol_available() else ["ggml vec_dot"]
    curves = measure(model_path, False, threads, flat, sizes) + measure(model_path, True, threads, ["repacked"], sizes)
    used = "repacked" if repack_is_exact(inspect_gguf(model_path)) else flat[-1]
    head = f"{'kernels':<12} {'n=1 ms':>8} " + " ".join(f"{f'n={n}':>7}" for n in sizes[1:])
    lines = [
        f"cost of one decode call of n rows (logits for every row), {model_path.name}, {threads} threads",
        head,
        *(f"{c.kernels:<12} {c.ms[1]:8.2f} " + " ".join(f"{c.ratio(n):6.2f}x" for n in sizes[1:]) for c in curves),
        f"the worker decodes this model with the {used} kernels (the batch-invariant choice)",
        f"physical floor of one token: {read / 1e6:.0f} MB of weights / {bandwidth:.1f} GB/s = {floor:.1f} ms "
        f"(the worker's at n=1: {next(c for c in curves if c.kernels == used).ms[1] / floor:.2f}x the floor)",
        "per-token ms at n=16: " + ", ".join(f"{c.kernels} {c.ms[sizes[-1]] / sizes[-1]:.1f}" for c in curves),
    ]
    data = {
        "model": model_path.name,
        "threads": threads,
        "bandwidth_gbs": bandwidth,
        "floor_ms": floor,
        "bytes_per_token": read,
        "curves": {c.kernels: c.ms for c in curves},
        "worker_kernels": used,
    }
    return "\n".join(lines), data
