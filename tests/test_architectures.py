"""The real engine on tiny random models of each llama-family architecture we support (tests/tiny_models.py):
the worker loads them and generates deterministically, llama.cpp's layer capture (what EAGLE heads
and the SpecEE predictors read) works on each architecture's graph, and, in-process with tiny
random EAGLE-3 heads, EAGLE is lossless and SpecEE's exit machinery (candidate logits, graph jump,
K/V fill of the skipped layers) is exact on every architecture's graph builder."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest
from llama_cpp import Llama

from engine import native
from engine import protocol as p
from engine.client import WorkerClient
from engine.llm.chat_prompt import ChatPrompt
from engine.llm.decoders import DrafterDecoder, SpecEEDecoder, VanillaDecoder
from engine.llm.target import Target
from engine.models.acceleration import ACCELERATED_ARCHS
from engine.models.gguf_file import inspect_gguf
from engine.paths import REPO_ROOT
from tests.test_specee_engine import _seq_kv_rows, _take
from tests.tiny_models import ARCHITECTURES, RMS_EPS, ROPE_FREQ_BASE, write_tiny_eagle_head, write_tiny_gguf

N_LAYER = 3
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> dict[tuple[str, bool], Path]:
    """(arch, tied) -> model. Tied tiny models mostly echo the last token (its own embedding dominates
    the residual), so the untied ones are what make the determinism check see varied text."""
    folder = tmp_path_factory.mktemp("tiny-models")
    return {
        (arch, tied): write_tiny_gguf(
            folder / f"{arch}-{'tied' if tied else 'untied'}.gguf", arch, n_layer=N_LAYER, tied=tied, tokenizer_from=model_path
        )
        for arch in ARCHITECTURES
        for tied in (True, False)
    }


@pytest.fixture(scope="module")
def worker() -> Iterator[WorkerClient]:
    client = WorkerClient()
    client.start()
    yield client
    client.stop()


def _greedy(client: WorkerClient) -> p.Done:
    done = list(client.stream(HI, p.Sampling.greedy(8)))[-1]
    assert isinstance(done, p.Done)
    return done


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_worker_loads_and_generates_deterministically(
    worker: WorkerClient, tiny_models: dict[tuple[str, bool], Path], arch: str, tied: bool
) -> None:
    loaded = worker.load(tiny_models[arch, tied], p.Placement(n_ctx=512), mode="vanilla")
    assert (loaded.architecture, loaded.n_layer, loaded.n_vocab) == (arch, N_LAYER, 49152)
    first, second = _greedy(worker), _greedy(worker)
    assert first.n_generated == len(first.tokens) == 8 and first.finish_reason == "length"
    assert first.n_prompt > 5, "the copied chat template must wrap the message"
    assert (first.tokens, first.text) == (second.tokens, second.text)


# Runs in a child process: on an architecture whose graph does not record layer inputs llama.cpp does
# not return NULL but aborts the process (GGML_ASSERT "layer input tensor is null" in our patched
# llama-graph.cpp), which in-process would take the whole test session down.
_CAPTURE_CHECK = """
import json, sys
import llama_cpp
import numpy as np
from engine import native

lib = native.lib()
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)
tokens = llm.tokenize(b"Hello there, how are you today?", add_bos=False)
lib.specee_capture_layer_input(llm._ctx.ctx, 1, True)
llm.eval(tokens)
ptr = lib.specee_layer_input(llm._ctx.ctx, 1)
rows = None
if ptr:
    h = np.ctypeslib.as_array(ptr, shape=(len(tokens), llama_cpp.llama_model_n_embd(llm._model.model)))
    rows = {"finite": bool(np.isfinite(h).all()), "nonzero": bool(np.abs(h).sum(axis=1).all())}
llm.close()
print(json.dumps({"captured": bool(ptr), "rows": rows}))
"""


def _why(stderr: str) -> str:
    """ggml follows an assert with a long gdb backtrace: the assert or the Python error is the reason."""
    lines = stderr.strip().splitlines()
    reasons = [line for line in lines if "GGML_ASSERT" in line or "GGML_ABORT" in line or "Error" in line]
    return "\n".join(reasons[:3] or lines[-20:])


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_layer_capture_records_layer_inputs(tiny_models: dict[tuple[str, bool], Path], arch: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CAPTURE_CHECK, str(tiny_models[arch, True])],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{arch}: capturing layer 1's input failed (exit {proc.returncode}): {_why(proc.stderr)}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["captured"], f"{arch}: specee_layer_input(ctx, 1) is NULL after a decode with capture on"
    assert result["rows"] == {"finite": True, "nonzero": True}


def test_the_python_fallback_list_of_architectures_is_the_native_librarys(native_build: dict) -> None:
    """The native library owns the list (specee_exit_archs); engine.models.acceleration keeps a copy
    for code that runs without it, and the tiny models cover every listed architecture."""
    assert native.exit_archs() == ACCELERATED_ARCHS
    assert set(ARCHITECTURES) == set(native.exit_archs())


# ---- EAGLE and SpecEE in-process on the tiny models -------------------------------------------

N_CTX = 512
N_TOKENS = 24
QUESTION = "Explain how a bicycle works."


@pytest.fixture(scope="module")
def llms(tiny_models: dict[tuple[str, bool], Path]) -> Iterator[Callable[[str, bool], Target]]:
    """(arch, tied) -> an in-process context on that tiny model, opened on first use."""
    opened: dict[tuple[str, bool], Target] = {}

    def get(arch: str, tied: bool = False) -> Target:
        if (arch, tied) not in opened:
            opened[arch, tied] = Target.load(tiny_models[arch, tied], n_ctx=N_CTX, n_threads=2, n_threads_batch=2)
        return opened[arch, tied]

    yield get
    for llm in opened.values():
        llm.close()


@pytest.fixture(scope="module")
def heads(tiny_models: dict[tuple[str, bool], Path], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Path]:
    """(arch, tied) -> an EAGLE-3 head for that tiny model, written on first use (a few seconds each).
    Untied models get a random head over a random 512-token draft vocabulary: its drafts are
    rejected. Tied models echo their last token, and a head warm-started on the target's own rows
    over the full vocabulary drafts that echo: its drafts are accepted, so verification also has to
    keep accepted rows and drop the rest of a partly rejected chain."""
    folder = tmp_path_factory.mktemp("tiny-heads")

    @cache
    def get(arch: str, tied: bool = False) -> Path:
        out = folder / f"{arch}-{'tied' if tied else 'untied'}-eagle.gguf"
        if tied:
            return write_tiny_eagle_head(out, tiny_models[arch, tied], draft_vocab=49152, warm_start=True)
        return write_tiny_eagle_head(out, tiny_models[arch, tied])

    return get


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_specee_exit_arch_supported_reads_the_list(llms: Callable[[str, bool], Target], arch: str) -> None:
    assert native.lib().specee_exit_arch_supported(llms(arch, False).model)


def _tokens(llm: Target, model: Path, text: str = QUESTION) -> list[int]:
    chat = ChatPrompt.for_model(llm, inspect_gguf(model).chat_template)
    return chat.fit([{"role": "user", "content": text}], N_CTX).tokens


def _vanilla(llm: Target, tokens: list[int], n: int = N_TOKENS) -> list[int]:
    """Greedy tokens of a plain decode; the context is left clean for the next decoder."""
    vanilla = VanillaDecoder(llm)
    vanilla.forget()  # another decoder may have used this context
    try:
        return _take(vanilla.stream(tokens, p.Sampling.greedy(n)), n)
    finally:
        vanilla.forget()


def _eagle_and_vanilla(llm: Target, model: Path, head: Path, gated: bool) -> tuple[list[int], list[int], dict]:
    """The greedy answer of a 3-draft eagle chain with `head`, vanilla's, and eagle's statistics."""
    tokens = _tokens(llm, model)
    want = _vanilla(llm, tokens)
    dec = DrafterDecoder(llm, "eagle", n_draft=3, n_threads=2, draft_model=head, gated=gated)
    try:
        got = _take(dec.stream(tokens, p.Sampling.greedy(N_TOKENS)), N_TOKENS)
        return got, want, dec.accel_stats()
    finally:
        dec.close()


@pytest.mark.parametrize("tied", [False, True], ids=["untied-drafts-rejected", "tied-drafts-accepted"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_eagle_greedy_output_equals_vanilla(
    llms: Callable[[str, bool], Target],
    heads: Callable[[str, bool], Path],
    tiny_models: dict[tuple[str, bool], Path],
    arch: str,
    tied: bool,
) -> None:
    got, want, st = _eagle_and_vanilla(llms(arch, tied), tiny_models[arch, tied], heads(arch, tied), gated=False)
    assert got == want
    assert st["drafted"] > 0
    if tied:  # else the accepted-draft path went untested
        assert st["accepted"] > 0, st


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_gated_chain_never_verifies_the_drafts_of_a_head_that_is_never_sure(
    llms: Callable[[str, bool], Target], heads: Callable[[str, bool], Path], tiny_models: dict[tuple[str, bool], Path], arch: str
) -> None:
    """A random head spreads its probability over the whole vocabulary: gated, no draft of it is worth
    a verify row, so every step decodes one row as vanilla does (and the answer is vanilla's)."""
    got, want, st = _eagle_and_vanilla(llms(arch, False), tiny_models[arch, False], heads(arch, False), gated=True)
    assert got == want
    assert st["drafted"] == 0 and st["acceptance_length"] == 1.0, st
    assert st["eagle_gate"]["verify_ms"][0] > 0 and st["eagle_gate"]["verify_ms"][1] == 0


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_specee_with_exits_off_equals_vanilla(
    llms: Callable[[str, bool], Target], heads: Callable[[str, bool], Path], tiny_models: dict[tuple[str, bool], Path], arch: str
) -> None:
    llm = llms(arch, False)
    tokens = _tokens(llm, tiny_models[arch, False])
    want = _vanilla(llm, tokens)
    dec = SpecEEDecoder(llm, heads(arch, False), None, 2, exits=False)
    try:
        got = _take(dec.stream(tokens, p.Sampling.greedy(N_TOKENS)), N_TOKENS)
        st = dec.accel_stats()
    finally:
        dec.close()
    assert got == want
    assert st["mean_layers"] == N_LAYER and st["exit_rate"] == 0.0


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_an_exit_at_the_last_layer_leaves_the_cache_exactly_as_vanilla(
    llms: Callable[[str, bool], Target], heads: Callable[[str, bool], Path], tiny_models: dict[tuple[str, bool], Path], arch: str
) -> None:
    """Skipping only the lm_head must not disturb any K/V: later full-depth tokens equal a plain
    decode of the same text."""
    llm = llms(arch, False)
    tokens = _tokens(llm, tiny_models[arch, False])
    dec = SpecEEDecoder(llm, heads(arch, False), None, 2, force_layer=N_LAYER - 1)
    try:
        run = dec.stream(tokens, p.Sampling.greedy(64))
        forced = [next(run) for _ in range(6)]  # the prefill's token, then 5 exits after the last layer
        dec.lib.specee_ee_configure(dec._ee, False, -1, 0, 0.0, 0)  # from here: full depth
        after = [next(run) for _ in range(12)]
        run.close()
        hist = dec.accel_stats()["exit_hist"]
    finally:
        dec.close()
    assert hist[N_LAYER - 1] >= 3 and hist[N_LAYER] >= 12, hist  # the exits did happen, then full depth
    assert after == _vanilla(llm, [*tokens, *forced], 12)


@cache
def _weights(model: Path) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF as float32 in numpy's row-major shape (ggml's ne reversed)."""
    reader = gguf.GGUFReader(str(model))
    return {
        t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
        for t in reader.tensors
    }


def _rms_norm(x: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps)


def _rope(x: np.ndarray, pos: int, base: float, neox: bool) -> np.ndarray:
    """ggml_rope_ext on x [n_head, head_dim] at one position: NORM rotates adjacent pairs
    (2i, 2i+1), NEOX the halves (i, i + head_dim/2); theta_i = pos * base^(-2i/head_dim)."""
    d = x.shape[-1]
    theta = pos * base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    cos, sin = np.cos(theta), np.sin(theta)
    x0, x1 = (x[:, : d // 2], x[:, d // 2 :]) if neox else (x[:, 0::2], x[:, 1::2])
    r0, r1 = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    return np.concatenate([r0, r1], axis=-1) if neox else np.stack([r0, r1], axis=-1).reshape(x.shape)


def _fill_reference(model: Path, h: np.ndarray, layer: int, pos: int, head_dim: int, neox: bool) -> tuple[np.ndarray, np.ndarray]:
    """K and V that layer `layer` computes from input h at position pos: rmsnorm * attn_norm, the
    projections with qwen2's biases, qwen3's per-head K RMS norm before RoPE, then RoPE on K."""
    w = _weights(model)
    b = f"blk.{layer}"
    x = _rms_norm(h, RMS_EPS) * w[f"{b}.attn_norm.weight"]
    k = w[f"{b}.attn_k.weight"] @ x + w.get(f"{b}.attn_k.bias", 0.0)
    v = w[f"{b}.attn_v.weight"] @ x + w.get(f"{b}.attn_v.bias", 0.0)
    k = k.reshape(-1, head_dim)  # [n_head_kv, head_dim]
    if f"{b}.attn_k_norm.weight" in w:
        k = _rms_norm(k, RMS_EPS) * w[f"{b}.attn_k_norm.weight"]
    k = _rope(k, pos, ROPE_FREQ_BASE, neox)
    return k.reshape(-1), v


KVRows = tuple[list[np.ndarray], list[np.ndarray]]  # per layer K rows, V rows


def _exit_state(model: Path, tokens: list[int], layer: int, pos: int) -> tuple[np.ndarray, KVRows]:
    """A plain context decodes tokens: the output of `layer` at the last token (what layer + 1 reads)
    and every layer's K/V rows at `pos`."""
    ref = Llama(model_path=str(model), n_ctx=N_CTX, n_threads=2, n_threads_batch=2, verbose=False)
    try:
        lib = native.lib()
        lib.specee_capture_layer_input(ref._ctx.ctx, layer + 1, True)
        ref.eval(tokens)
        assert len(tokens) <= ref.n_batch  # one decode batch: its last row is the last token
        n_embd = llama_cpp.llama_model_n_embd(ref._model.model)
        h = np.ctypeslib.as_array(lib.specee_layer_input(ref._ctx.ctx, layer + 1), shape=(len(tokens), n_embd))[-1].copy()
        return h, _seq_kv_rows(ref._ctx.ctx, pos)
    finally:
        ref.close()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_an_exit_fills_the_skipped_layers_kv_from_the_exit_state(
    llms: Callable[[str, bool], Target], heads: Callable[[str, bool], Path], tiny_models: dict[tuple[str, bool], Path], arch: str
) -> None:
    """An exit after layer 0: layer 0 keeps what a plain decode writes; layer 1 reads h_0 as its
    input anyway, so its fill must be bit-identical to the full pass (the fill graph computes K/V
    exactly as the architecture's own layer does: biases, K norm, RoPE); layer 2 gets K/V from h_0,
    as numpy computes them from the GGUF. The exit's token is the best candidate at layer 0."""
    exit_layer = 0
    model = tiny_models[arch, False]
    llm = llms(arch, False)
    tokens = _tokens(llm, model)
    pos = len(tokens)  # where the first early-exit step writes
    dec = SpecEEDecoder(llm, heads(arch, False), None, 2, force_layer=exit_layer)
    try:
        run = dec._run(tokens, p.Sampling.greedy(4), record=False)
        first, _, _ = next(run)
        token, _, cands = next(run)
        run.close()  # type: ignore[attr-defined]
        st = dec.accel_stats()
        k_fill, v_fill = _seq_kv_rows(llm.ctx, pos)
    finally:
        dec.close()
    assert st["mean_layers"] == exit_layer + 1 and st["exit_rate"] == 1.0
    h, (k_full, v_full) = _exit_state(model, [*tokens, first], exit_layer, pos)

    w = _weights(model)
    out = w.get("output.weight", w["token_embd.weight"])
    cand_logits = out[cands] @ (_rms_norm(h, RMS_EPS) * w["output_norm.weight"])
    assert token == cands[int(np.argmax(cand_logits))]

    for layer in range(exit_layer + 2):
        np.testing.assert_array_equal(k_fill[layer], k_full[layer], err_msg=f"K of layer {layer}")
        np.testing.assert_array_equal(v_fill[layer], v_full[layer], err_msg=f"V of layer {layer}")
    head_dim = llama_cpp.llama_model_n_embd(llm.model) // llama_cpp.llama_model_n_head(llm.model)
    neox = llama_cpp.llama_model_rope_type(llm.model) == llama_cpp.LLAMA_ROPE_TYPE_NEOX  # qwen2, qwen3
    for layer in range(exit_layer + 2, N_LAYER):
        k_want, v_want = _fill_reference(model, h, layer, pos, head_dim, neox)
        for name, got, want, full in (("K", k_fill[layer], k_want, k_full[layer]), ("V", v_fill[layer], v_want, v_full[layer])):
            # the cache stores f16: equal up to its rounding (2^-11 relative), where the full pass,
            # from layer 1's output instead of h_0, is off by 0.08 or more on these models
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=f"{name} of skipped layer {layer}")
            assert not np.allclose(full, want, rtol=1e-2, atol=1e-2), f"{name} {layer}: fill and full pass agree"
