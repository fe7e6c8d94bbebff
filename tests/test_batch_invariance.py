"""Lossless speculation rests on one property of the CPU kernels: a row decoded inside a batch of n
rows gets exactly the logits a one-token decode gives it. Checked on a K-quantised model (the
types of the reference models), written by the test and quantised by llama.cpp itself."""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from llama_cpp import llama_cpp as C

from engine import native
from engine.llm.target import Target
from tests.conftest import HAS_GPU, NO_GPU, ON_LAVAPIPE
from tests.tiny_models import write_tiny_gguf

MAX_VERIFY_ROWS = 17  # the longest draft the worker accepts (16) plus the verified token


@pytest.fixture(scope="module")
def q4_k_model(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Path:
    folder = tmp_path_factory.mktemp("kquant")
    f32 = write_tiny_gguf(folder / "f32.gguf", "qwen2", n_layer=2, n_embd=256, n_ff=512, tokenizer_from=model_path)
    out = folder / "q4_k_m.gguf"
    params = C.llama_model_quantize_default_params()
    params.ftype = C.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = 2
    rc = C.llama_model_quantize(str(f32).encode(), str(out).encode(), ctypes.byref(params))
    assert rc == 0
    return out


def _decode(llm: Target, tokens: list[int], start: int, keep: bool) -> np.ndarray:
    """Logits of every row of one decode call; `keep` = False drops the rows from the cache again."""
    ctx, n_vocab = llm.ctx, llm.n_vocab()
    batch = C.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, start + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        batch.n_tokens = len(tokens)
        assert C.llama_decode(ctx, batch) == 0
        logits = np.ctypeslib.as_array(C.llama_get_logits(ctx), shape=(len(tokens), n_vocab)).copy()
    finally:
        C.llama_batch_free(batch)
    if not keep:
        C.llama_memory_seq_rm(C.llama_get_memory(ctx), 0, start, -1)
    return logits


def _verify_sizes_that_change_row_0(llm: Target) -> list[int]:
    """After a cached 40-token conversation: the verify sizes (2..17 rows) whose row 0 differs from
    a one-token decode of the same token."""
    prefix = list(range(100, 140))
    _decode(llm, prefix, 0, keep=True)
    drafts = list(range(300, 300 + MAX_VERIFY_ROWS))
    one = _decode(llm, drafts[:1], len(prefix), keep=False)[0]
    return [
        n for n in range(2, MAX_VERIFY_ROWS + 1) if not np.array_equal(_decode(llm, drafts[:n], len(prefix), keep=False)[0], one)
    ]


def _rows_that_depend_on_the_chunking(llm: Target, n_tokens: int, cut: int) -> list[int]:
    """A prompt of n_tokens decoded in one batch and as cut + the rest: the rows that differ."""
    tokens = list(range(200, 200 + n_tokens))
    whole = _decode(llm, tokens, 0, keep=False)
    chunked = np.concatenate([_decode(llm, tokens[:cut], 0, keep=True), _decode(llm, tokens[cut:], cut, keep=False)])
    return [i for i in range(n_tokens) if not np.array_equal(whole[i], chunked[i])]


@pytest.mark.parametrize("repack", [False, True], ids=["file-layout", "repacked"])
def test_every_verify_batch_size_reproduces_the_one_token_decode_exactly(q4_k_model: Path, repack: bool) -> None:
    """Both layouts the worker may load: the file layout (vec_dot; never ggml's tiled matmul, patch
    0007) and ggml's repacked Q4_K blocks (gemv and gemm rounding alike, patch 0008)."""
    llm = Target.load(q4_k_model, n_ctx=256, n_batch=256, n_threads=2, repack=repack)
    try:
        differ = _verify_sizes_that_change_row_0(llm)
        assert differ == [], f"verify batches of {differ} rows change row 0's logits"
    finally:
        llm.close()


@pytest.mark.parametrize("repack", [False, True], ids=["file-layout", "repacked"])
def test_a_prompt_gets_the_same_logits_whatever_its_chunks(q4_k_model: Path, repack: bool) -> None:
    """60 tokens in one batch or as 21 + 39 (another cached prefix): every row identical. ggml's
    tiled matmul (batches of 8+ rows, K-quants not repacked) broke this: patch 0007 turns it off."""
    llm = Target.load(q4_k_model, n_ctx=256, n_batch=256, n_threads=2, repack=repack)
    try:
        differ = _rows_that_depend_on_the_chunking(llm, 60, 21)
        assert differ == [], f"rows {differ[:10]} depend on the chunking"
    finally:
        llm.close()


def test_with_flash_attention_verify_rows_and_prompt_chunks_match_one_token_decodes(model_path: Path) -> None:
    """The worker's CPU target runs flash attention (engine.llm.load.flash_attention). ggml's CPU
    kernel split a lone row's pass over 512+ KV cells into partial sums and took 64-row tiles for
    prompts, each rounding otherwise than a batch's rows (ngram/eagle answers left vanilla's: 10/16
    identical); patch 0018 keeps one pass per row. Checked past 512 cells and across 64 rows."""
    llm = Target.load(model_path, n_ctx=1024, n_batch=1024, n_threads=2, flash_attn=True)
    try:
        prefix = [100 + i % 900 for i in range(600)]
        _decode(llm, prefix, 0, keep=True)
        drafts = list(range(300, 300 + MAX_VERIFY_ROWS))
        one = _decode(llm, drafts[:1], len(prefix), keep=False)[0]
        for n in (2, 4, 9, MAX_VERIFY_ROWS):
            assert np.array_equal(_decode(llm, drafts[:n], len(prefix), keep=False)[0], one), f"{n} rows"
        C.llama_memory_clear(C.llama_get_memory(llm.ctx), True)
        differ = _rows_that_depend_on_the_chunking(llm, 150, 70)
        assert differ == [], f"rows {differ[:10]} depend on the chunking"
    finally:
        llm.close()


def _kv_bytes(llm: Target) -> bytes:
    """Sequence 0's cached K/V as llama.cpp serialises it."""
    ctx = llm.ctx
    size = C.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    assert C.llama_state_seq_get_data(ctx, buf, size, 0) == size
    return bytes(buf)


def _prefill(llm: Target, tokens: list[int], cuts: tuple[int, ...]) -> tuple[np.ndarray, bytes]:
    """Every row's logits and the K/V left behind, the prompt decoded in the chunks that `cuts` make."""
    C.llama_memory_clear(C.llama_get_memory(llm.ctx), True)
    edges = [0, *cuts, len(tokens)]
    rows = [_decode(llm, tokens[a:b], a, keep=True) for a, b in itertools.pairwise(edges)]
    return np.concatenate(rows), _kv_bytes(llm)


def test_flash_attention_rows_are_the_same_in_any_batch(model_path: Path) -> None:
    """native/src/kernels/flash_attn_rows.cpp: every query row's attention is one f32 arithmetic over
    fixed blocks of 64 KV cells, in tiles of query rows (63 rows: 21 positions x the 3 query heads
    sharing a KV head in the default model), dot products 16 rows at a time on AVX-512. A 300-token
    prompt (many tiles and blocks, rows of one tile masked at different cells) must give every row's
    logits and the K/V it leaves bit for bit as other chunkings and one-token decodes for its last
    rows; against ggml's one pass per row (fp16 accumulators, tiles off) only rounding may differ."""
    tokens = [100 + (i * 37) % 1500 for i in range(300)]
    llm = Target.load(model_path, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, flash_attn=True)
    try:
        logits, kv = _prefill(llm, tokens, ())
        native.set_attention_tiles(False)
        try:
            per_row_logits, _ = _prefill(llm, tokens, ())
        finally:
            native.set_attention_tiles(True)
        assert not np.array_equal(logits, per_row_logits), "the f32 rows did not run (tiles off changed nothing)"
        spread = float(np.abs(per_row_logits).max())
        assert float(np.abs(logits - per_row_logits).max()) < 0.1 * spread, "more than rounding apart from ggml's rows"
        # these token ids are no text, so many rows are near ties (real text: 96% the same top token)
        same_top = np.mean(logits.argmax(axis=1) == per_row_logits.argmax(axis=1))
        assert same_top > 0.8, f"only {same_top:.0%} of rows keep ggml's top token"
        for cuts in ((1, 77, 200), (13, 14, 151, 280)):
            chunked_logits, chunked_kv = _prefill(llm, tokens, cuts)
            differ = [i for i in range(len(tokens)) if not np.array_equal(logits[i], chunked_logits[i])]
            assert differ == [], f"chunks {cuts}: rows {differ[:10]} changed"
            assert kv == chunked_kv, f"chunks {cuts}: the K/V changed"
        one_by_one, one_by_one_kv = _prefill(llm, tokens, tuple(range(260, 300)))
        assert np.array_equal(logits[260:], one_by_one[260:]), "a one-token decode differs from its prompt row"
        assert kv == one_by_one_kv, "one-token decodes left other K/V"
    finally:
        llm.close()


def test_the_worker_repacks_only_where_the_kernels_are_batch_invariant(q4_k_model: Path, model_path: Path) -> None:
    from engine.models.gguf_file import inspect_gguf
    from engine.placement.weights_layout import repack_is_exact

    assert repack_is_exact(inspect_gguf(q4_k_model))  # Q4_K (+ Q6_K, not repacked on x86)
    assert not repack_is_exact(inspect_gguf(model_path))  # Q4_1: nothing to repack


def _switch_keeps_every_logit(
    llm: Target, sizes: tuple[int, ...], switch: Callable[[bool], None], taken: Callable[[], int], what: str
) -> None:
    """Every logit of a batch of each size after a 40-token prefix, decoded with a native switch off
    and then on, must be bit-identical; `taken` counts the switched path, proving it ran only when on."""
    _decode(llm, list(range(100, 140)), 0, keep=True)
    drafts = list(range(300, 300 + max(sizes)))
    try:
        for n in sizes:
            switch(False)
            before = taken()
            off = _decode(llm, drafts[:n], 40, keep=False)
            assert taken() == before, f"{what}: switched off, yet taken"
            switch(True)
            on = _decode(llm, drafts[:n], 40, keep=False)
            assert taken() > before, f"{n} rows did not go through {what}"
            assert np.array_equal(on, off), f"{n} rows: {what} changed a logit"
    finally:
        switch(True)


@pytest.mark.parametrize("which", ["q4_k_m", "q4_k_m-repacked", "default-q4_1"])
def test_multi_column_kernels_compute_every_row_exactly_as_ggml_vec_dot(which: str, q4_k_model: Path, model_path: Path) -> None:
    """Patch 0009: a verify batch takes each weight row against up to eight activation rows at once
    (their block scales converted once per call); every row's logits must equal, bit for bit, ggml's
    own one-row vec_dot on the same batch, also where a batch spans two groups of columns
    (Q4_K/Q6_K here, Q4_1/Q8_0 in the default model; Q5_0 and Q5_K are covered by kernel-bench).
    Repacked (patch 0020): Q4_K's interleaved blocks against ggml's gemv (1-3 rows) and gemm (4+)."""
    import platform

    from engine.native import multicol_available, multicol_rows, set_multicol

    if platform.machine().lower() in ("x86_64", "amd64"):
        assert multicol_available(), "this x86 build should carry the AVX2 multi-column kernels"
    if not multicol_available():
        pytest.skip("no multi-column kernels for this CPU")
    path = model_path if which == "default-q4_1" else q4_k_model
    llm = Target.load(path, n_ctx=256, n_batch=256, n_threads=2, repack=which == "q4_k_m-repacked")
    try:
        _switch_keeps_every_logit(llm, (2, 3, 4, 6, 8, 9, 12), set_multicol, multicol_rows, "the multi-column kernels")
    finally:
        llm.close()


@pytest.mark.parametrize("which", ["default-q4_1", "q4_k_m-repacked"])
def test_weight_rows_split_by_thread_leave_every_logit_as_it_was(which: str, q4_k_model: Path, model_path: Path) -> None:
    """Patch 0019: a decode or a small verify batch gives each thread one run of weight rows
    instead of upstream's small chunks taken in turns (ggml's mul_mat and its repacked layout's).
    Only which thread computes a row changes, so every logit of 1-16 rows must equal, bit for bit,
    the chunked schedule's."""
    from engine.native import set_split_by_thread, split_by_thread_count

    repacked = which == "q4_k_m-repacked"
    path = q4_k_model if repacked else model_path
    llm = Target.load(path, n_ctx=256, n_batch=256, n_threads=2, repack=repacked)
    try:
        _switch_keeps_every_logit(llm, (1, 2, 4, 16), set_split_by_thread, split_by_thread_count, "the split by thread")
    finally:
        llm.close()


def test_kernel_bench_finds_every_type_exact_against_ggml() -> None:
    """native/build.py --kernel-bench: random weights of every type the kernels cover (and some
    they leave to ggml), each row of 1- to 8-row calls, our kernels off and on, against its one-row
    call by ggml and against ggml's own vec_dot; and our kernels must have run for every covered type."""
    import platform
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    built = subprocess.run([sys.executable, str(root / "native" / "build.py"), "--kernel-bench"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    program = built.stdout.strip().splitlines()[-1]
    out = subprocess.run([program, "512", "256", "2"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines()[1:] if line.strip()]
    expected = {"q4_1", "q5_0", "q8_0", "q4_K", "q5_K", "q6_K"}
    if platform.machine().lower() in ("x86_64", "amd64"):
        expected.add("q4_K/repack")  # the layout the worker loads Q4_K_M files in there
    assert {r.split()[0] for r in rows} >= expected
    bad = [r for r in rows if " DIFF" in r or "!= ggml" in r]
    assert bad == [], bad
    # every type listed has our kernels on this CPU, and they ran (their row count grew)
    flags = Path("/proc/cpuinfo").read_text(errors="replace").split() if Path("/proc/cpuinfo").exists() else []
    if "avx2" in flags:  # the x86 kernels (AVX2, AVX-512 where there); other CPUs run ggml's
        skipped = [r for r in rows if "(not ours" in r and r.split()[0] in expected]
        assert skipped == [], skipped


# Where the tiny model's two layers go on a GPU device (lavapipe where there is no real GPU): all of
# them, the last one (upstream's layout) or the first one (SpecEE's, patch 0003); the rest on the CPU.
GPU_PLACEMENTS = {"gpu-all": (-1, "last"), "gpu-last-1": (1, "last"), "gpu-first-1": (1, "first")}


def _gpu_llama(path: Path, where: str) -> Target:
    from engine import native

    n_gpu, layout = GPU_PLACEMENTS[where]
    if layout == "first":
        native.lib().specee_set_first_layers_on_gpu(n_gpu, False)
    try:
        return Target.load(path, n_ctx=256, n_batch=256, n_threads=2, n_gpu_layers=n_gpu, repack=False)
    finally:
        if layout == "first":
            native.lib().specee_set_first_layers_on_gpu(-1, False)


@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
@pytest.mark.parametrize("where", GPU_PLACEMENTS)
@pytest.mark.parametrize("which", ["q4_k_m", "default-q4_1"])
def test_on_the_gpu_every_verify_batch_size_reproduces_the_one_token_decode(
    q4_k_model: Path, model_path: Path, which: str, where: str
) -> None:
    """The GPU backend's kernels (patches 0012, 0013 for Vulkan): a verify batch of 2..17 rows gives
    row 0 the logits of a one-token decode, bit for bit, with every layer on the device or a split."""
    if which == "default-q4_1" and where == "gpu-all" and ON_LAVAPIPE:
        pytest.skip("30 layers on a software device take minutes; the tiny model covers every layer on it")
    llm = _gpu_llama(q4_k_model if which == "q4_k_m" else model_path, where)
    try:
        differ = _verify_sizes_that_change_row_0(llm)
        assert differ == [], f"verify batches of {differ} rows change row 0's logits"
    finally:
        llm.close()


@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
@pytest.mark.parametrize("where", GPU_PLACEMENTS)
def test_on_the_gpu_a_prompt_gets_the_same_logits_whatever_its_chunks(q4_k_model: Path, where: str) -> None:
    """Prompt chunks of more than 32 rows take the GPU's matrix-matrix kernels, whose rows do not
    depend on the row count: 80 tokens in one batch or as 40 + 40, every row identical. (A chunk of
    32 rows or fewer takes the one-row kernels instead, like a verify batch, and rounds otherwise.)"""
    llm = _gpu_llama(q4_k_model, where)
    try:
        differ = _rows_that_depend_on_the_chunking(llm, 80, 40)
        assert differ == [], f"rows {differ[:10]} depend on the chunking"
    finally:
        llm.close()


def test_attention_rows_are_exact_to_f32_and_repeatable() -> None:
    """native/build.py --fa-bench: flash attention alone over random Q/K/V under a causal mask
    (default model's heads, and Qwen's 128-wide heads), our rows against attention computed in double
    precision: on AVX-512 and AVX2 the f32 rows must be within f32 rounding (ggml's fp16 accumulators
    are ~1e-3 off); every run of each path must give the same bits, and rows computed alone (as
    decodes are) the bits they had in the batch."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    built = subprocess.run([sys.executable, str(root / "native" / "build.py"), "--fa-bench"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    program = built.stdout.strip().splitlines()[-1]
    flags = Path("/proc/cpuinfo").read_text(errors="replace").split() if Path("/proc/cpuinfo").exists() else []
    for args in (["70", "130", "2", "2"], ["1", "300", "2", "2"], ["37", "90", "2", "2", "128", "12", "2"]):
        out = subprocess.run([program, *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        errors = out.stdout.split("double precision:")[1].split()
        per_row, ours = float(errors[1]), float(errors[3])
        assert per_row < 1e-2, out.stdout
        assert "the same bits as in the batch" in out.stdout, out.stdout
        if {"avx512f", "avx512bw", "avx512dq"} <= set(flags) or {"avx2", "fma", "f16c"} <= set(flags):
            assert ours < 1e-5 < per_row, out.stdout
