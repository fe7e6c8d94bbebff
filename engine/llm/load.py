"""Loading a model with our weights layout, and the small llama.cpp calls the tools share."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
from llama_cpp import Llama


@contextlib.contextmanager
def batch_invariant_weights(repack: bool) -> Iterator[None]:
    """Load the target with the CPU backend's runtime repacking on or off. Off, the weights stay in
    their file layout and every batch size runs through the same vec_dot kernels; on only where the
    repacked kernels are batch-invariant too (weights_layout.repack_is_exact). Before, a verify batch
    drifted from vanilla (Qwen2.5-Coder-1.5B Q4_K_M: 7/20 ngram answers identical). llama-cpp-python
    exposes no switch, so llama_model_default_params is wrapped while the target loads."""
    from llama_cpp import llama_cpp as bindings  # what llama.py's Llama calls

    original = bindings.llama_model_default_params

    def params():  # type: ignore[no-untyped-def]
        mp = original()
        mp.use_extra_bufts = repack
        return mp

    bindings.llama_model_default_params = params
    try:
        yield
    finally:
        bindings.llama_model_default_params = original


@contextlib.contextmanager
def parallel_sequences(n_seq: int) -> Iterator[None]:
    """Contexts created meanwhile hold n_seq sequences (engine/llm/batched.py decodes them together),
    each in a KV cache of its own (n_ctx / n_seq cells). Not one unified cache: there a sequence's
    positions could land in cells out of order (a freed hole taken by a later token), flash
    attention then sums over them in another order, and an answer decoded beside others was no
    longer the one it gets alone. n_seq 1 changes nothing. llama-cpp-python exposes neither
    setting, so the defaults are wrapped."""
    from llama_cpp import llama_cpp as bindings

    if n_seq <= 1:
        yield
        return
    original = bindings.llama_context_default_params

    def params():  # type: ignore[no-untyped-def]
        cp = original()
        cp.n_seq_max = n_seq
        cp.kv_unified = False
        return cp

    bindings.llama_context_default_params = params
    try:
        yield
    finally:
        bindings.llama_context_default_params = original


def flash_attention(n_gpu_layers: int) -> bool:
    """Flash attention for the target where every layer runs on the CPU: one fused op per layer in
    place of six, 18% more decode tok/s on the default model (92.7 -> 109.3, 16 dev prompts; plain
    llama-server turns it on by default). Verify rows stay equal to one-token decodes (patch 0018: a
    lone row takes the same pass as a batch's rows). Off where layers are on a GPU: its kernels for
    one row and for a batch are not the same computation."""
    return n_gpu_layers == 0


def open_model(model_path: str | Path, **params: object) -> Llama:
    """A model in this process (llama-cpp-python's Llama, quiet), for tools: training, benchmarks."""
    return Llama(model_path=str(model_path), verbose=False, **params)  # type: ignore[arg-type]


def vocab_only(model_path: str | Path) -> Llama:
    """The model's tokenizer alone (no weights): chat formatting for a peer server's requests."""
    return Llama(model_path=str(model_path), vocab_only=True, verbose=False)


def is_end_of_generation(llm: Llama, token: int) -> bool:
    """Whether the token ends a turn (end of text, end of turn, ...) for this model's vocabulary."""
    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, token))


def capture_head_layers(llm: Llama, layers: list[int]) -> None:
    """Store, from the first decode on, the layer inputs an EAGLE head reads. Turning that on
    re-reserves llama.cpp's scheduler, which after a decode on Vulkan corrupted the heap (an eagle or
    specee decoder made once vanilla had answered, on lavapipe); before any decode it is free, and
    the decoders' own later request then changes nothing (native/src/capture.cpp)."""
    from engine import native

    lib = native.lib()
    for layer in layers:
        lib.specee_capture_layer_input(llm._ctx.ctx, layer, True)
