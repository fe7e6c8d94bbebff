"""The target's attention setting, and the small llama.cpp calls the tools share (the target itself:
engine/llm/target.py)."""

from __future__ import annotations

from pathlib import Path

from engine import knobs
from engine.llm.target import Target


def flash_attention(n_gpu_layers: int) -> bool:
    """Flash attention for the target where every layer runs on the CPU: one fused op per layer in
    place of six, 18% more decode tok/s on the default model (92.7 -> 109.3, 16 dev prompts; plain
    llama-server turns it on by default). Verify rows stay equal to one-token decodes (patch 0018: a
    lone row takes the same pass as a batch's rows). Off where layers are on a GPU: its kernels for
    one row and for a batch are not the same computation."""
    return n_gpu_layers == 0


def open_model(
    model_path: str | Path, *, n_ctx: int = 512, n_batch: int = 512, n_threads: int | None = None,
    n_threads_batch: int | None = None,
) -> Target:  # fmt: skip
    """A model in this process, for tools: training, benchmarks."""
    return Target.load(model_path, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads, n_threads_batch=n_threads_batch)


def vocab_only(model_path: str | Path) -> Target:
    """The model's tokenizer alone (no weights): chat formatting for a peer server's requests."""
    return Target.vocab_only(model_path)


def is_end_of_generation(llm: Target, token: int) -> bool:
    """Whether the token ends a turn (end of text, end of turn, ...) for this model's vocabulary."""
    return llm.is_eog(token)


def capture_head_layers(llm: Target, layers: list[int]) -> None:
    """Store, from the first decode on, the layer inputs an EAGLE head reads. Turning that on
    re-reserves llama.cpp's scheduler, which after a decode on Vulkan corrupted the heap (an eagle or
    specee decoder made once vanilla had answered, on lavapipe); before any decode it is free, and
    the decoders' own later request then changes nothing (native/src/capture.cpp)."""
    from engine import native

    lib = native.lib()
    for layer in layers:
        lib.specee_capture_layer_input(llm.ctx, layer, True)


def prompt_batch(n_ctx: int) -> int:
    """Prompt rows a llama_decode takes (llama.cpp's n_batch and n_ubatch alike): 512, as llama.cpp's
    ubatch; SPECEE_TEST_PROMPT_BATCH=N sets it (measurements: `specee bench --long --modes vanilla:batch=N`).
    2048 was not shown to read a long prompt faster (issue 46, docs/measurements.md)."""
    forced = knobs.PROMPT_BATCH.text() or ""
    return min(int(forced) if forced.isdigit() and int(forced) > 0 else 512, n_ctx)
