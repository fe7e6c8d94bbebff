"""`specee bench --cost-curve`: what one decode call of n rows (logits for every row, as a
speculative verification needs) costs relative to n = 1, for ggml's one-row vec_dot kernels, our
multi-column kernels (patch 0009) and ggml's repacked layout, measured side by side in one run,
next to the physical floor of one token: the bytes a decode step reads divided by the measured
read bandwidth.

Every accelerated lossless mode lives on this curve: a draft of k tokens pays off only if the
verify call of k+1 rows costs less than the tokens it is expected to accept."""

from __future__ import annotations

from pathlib import Path

from engine.llm.decode_cost import SIZES, measure


def floor_ms(model_path: Path, bandwidth_gbs: float) -> tuple[float, int]:
    """(ms, bytes): one token must read every layer and the lm_head once (the token embedding row
    only), so weights / bandwidth bounds a memory-bound decode step from below."""
    from engine.placement.model_facts import facts_from_gguf

    facts = facts_from_gguf(model_path)
    read = sum(facts.layer_bytes) + facts.output_bytes
    return read / (bandwidth_gbs * 1e9) * 1e3, read


def report(model_path: Path, threads: int, sizes: tuple[int, ...] = SIZES) -> tuple[str, dict]:
    from engine.placement.machine import measure_cpu_bandwidth

    bandwidth = measure_cpu_bandwidth()
    floor, read = floor_ms(model_path, bandwidth)
    from engine.llm.decode_cost import multicol_available
    from engine.models.gguf_file import inspect_gguf
    from engine.placement.weights_layout import repack_is_exact

    flat = ["ggml vec_dot", "multi, chunks", "multi-column"] if multicol_available() else ["ggml vec_dot"]
    repacked = measure(model_path, True, threads, ["repacked ggml", "repacked"], sizes)
    curves = measure(model_path, False, threads, flat, sizes) + repacked
    used = "repacked" if repack_is_exact(inspect_gguf(model_path)) else flat[-1]
    head = f"{'kernels':<13} {'n=1 ms':>8} " + " ".join(f"{f'n={n}':>7}" for n in sizes[1:])
    lines = [
        f"cost of one decode call of n rows (logits for every row), {model_path.name}, {threads} threads",
        head,
        *(f"{c.kernels:<13} {c.ms[1]:8.2f} " + " ".join(f"{c.ratio(n):6.2f}x" for n in sizes[1:]) for c in curves),
        f"the worker decodes this model with the {used} kernels (the batch-invariant choice)",
        f"physical floor of one token: {read / 1e6:.0f} MB of weights / {bandwidth:.1f} GB/s = {floor:.1f} ms "
        f"(the worker's at n=1: {next(c for c in curves if c.kernels == used).ms[1] / floor:.2f}x the floor)",
        "per-token ms at n=16: " + ", ".join(f"{c.kernels} {c.ms[sizes[-1]] / sizes[-1]:.1f}" for c in curves),
    ]
    by_name = {c.kernels: c for c in curves}
    if "multi, chunks" in by_name:
        chunks, split = by_name["multi, chunks"], by_name["multi-column"]
        lines.append(
            "weight rows split by thread (patch 0019) against upstream's small chunks: "
            + ", ".join(f"n={n} {chunks.ms[n] / split.ms[n]:.2f}x faster" for n in sizes)
        )
    if "repacked ggml" in by_name:
        ggml, ours = by_name["repacked ggml"], by_name["repacked"]
        lines.append(
            "repacked: our kernels (patch 0020) against ggml's gemv/gemm: "
            + ", ".join(f"n={n} {ggml.ms[n] / ours.ms[n]:.2f}x faster" for n in sizes)
        )
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
