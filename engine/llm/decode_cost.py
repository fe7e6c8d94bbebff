"""What one decode call of n rows (logits for every row, as a speculative verification needs) costs
relative to n = 1, for ggml's one-row vec_dot kernels, our multi-column kernels (patch 0009) and
ggml's repacked layout, measured side by side in one run (`specee bench --cost-curve`,
engine/bench/cost_curve.py, puts it next to the physical floor of one token)."""

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


# name -> (weights repacked, multi-column kernels, weight rows split by thread): ggml's vec_dot one
# row at a time in upstream's small chunks taken in turns (upstream, batch-invariant); the same with
# our multi-column kernels computing up to eight rows per weight row (patch 0009, same arithmetic);
# those with each thread streaming one run of weight rows (patch 0019, what the worker runs); and
# ggml's repacked layout (Q4_K batch-invariant by patch 0008) with ggml's own kernels (gemv/gemm,
# other types vec_dot) and with ours (Q4_K's interleaved blocks by patch 0020, others multi-column)
KERNELS = {
    "ggml vec_dot": (False, False, False),
    "multi, chunks": (False, True, False),
    "multi-column": (False, True, True),
    "repacked ggml": (True, False, True),
    "repacked": (True, True, True),
}


def measure(
    model_path: Path, repack: bool, threads: int, kernels: list[str], sizes: tuple[int, ...] = SIZES, repeats: int = 11
) -> list[CostCurve]:
    """Curves for the kernel variants sharing one weights layout, measured in interleaved rounds
    (every size and variant once per round) so a slow spell of the machine hits all alike."""
    from llama_cpp import llama_cpp as C

    from engine.llm.load import flash_attention
    from engine.llm.target import Target
    from engine.native import set_multicol, set_split_by_thread

    # attention as the worker's target on the CPU
    llm = Target.load(model_path, n_ctx=512, n_batch=512, n_threads=threads, n_threads_batch=threads,
                      flash_attn=flash_attention(0), repack=repack)  # fmt: skip
    try:
        ctx = llm.ctx
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
                    set_split_by_thread(KERNELS[k][2])
                    for n in sizes:
                        ms = decode([tokens[(r + i) % len(tokens)] for i in range(n)], len(prefix), True)
                        C.llama_memory_seq_rm(mem, 0, len(prefix), -1)
                        if r:  # the first round warms caches and allocates the output buffer
                            times[(k, n)].append(ms)
            for c in curves:
                c.ms = {n: statistics.median(times[(c.kernels, n)]) for n in sizes}
        finally:
            set_multicol(True)
            set_split_by_thread(True)
            C.llama_batch_free(batch)
        return curves
    finally:
        llm.close()


def multicol_available() -> bool:
    """Whether this build has our multi-column kernels (patch 0009)."""
    from engine.native import multicol_available as available

    return available()
