"""SpecEE early exit in the native engine, checked in-process against references: exits off equals
vanilla, a forced exit emits the best candidate of that layer as numpy computes it, and the graph
jump leaves the KV cache right for the layers that did run."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest
from llama_cpp import Llama

from engine import native
from engine import protocol as p
from engine.llm.chat_prompt import ChatPrompt
from engine.llm.decoders import SpecEEDecoder, VanillaDecoder, make_sampler
from engine.llm.load import capture_head_layers
from engine.llm.target import Target
from engine.models.acceleration import head_target_layers
from engine.models.exit_predictors import ExitPredictors
from engine.models.gguf_file import inspect_gguf
from engine.paths import RESOURCES_DIR
from tests.conftest import BACKENDS, device_cases, gpu_layers

HEAD = RESOURCES_DIR / "acceleration" / "smollm2-135m-instruct-q4_1" / "eagle.gguf"
QUESTIONS = ("Explain how a bicycle works.", "Write a haiku about autumn rain.", "What is 17 times 23?")


def _llm(model_path: Path, backend: str = "cpu") -> Target:
    return Target.load(model_path, n_ctx=1024, n_batch=512, n_threads=2, n_threads_batch=2, n_gpu_layers=gpu_layers(backend))


def _reference_llm(model_path: Path) -> Llama:
    """llama-cpp-python's own loop over a plain context: the reference the native code is checked against."""
    return Llama(model_path=str(model_path), n_ctx=1024, n_batch=512, n_threads=2, n_threads_batch=2, verbose=False)


@pytest.fixture(scope="module", params=BACKENDS)
def llm(model_path: Path, request: pytest.FixtureRequest) -> Iterator[Target]:
    m = _llm(model_path, request.param)
    if request.param == "gpu":
        capture_head_layers(m, head_target_layers(HEAD))  # as the worker does on a GPU, before any decode
    yield m
    m.close()


def _on_gpu(llm: Target) -> bool:
    return llm.n_gpu_layers != 0


def _tokens(llm: Target, model_path: Path, text: str) -> list[int]:
    chat = ChatPrompt.for_model(llm, inspect_gguf(model_path).chat_template)
    return chat.fit([{"role": "user", "content": text}], 512).tokens


def _take(stream, n: int) -> list[int]:
    out = []
    for tok in stream:
        out.append(tok)
        if len(out) >= n:
            break
    stream.close()
    return out


def test_with_exits_off_specee_output_equals_vanilla(llm: Target, model_path: Path) -> None:
    vanilla = VanillaDecoder(llm)
    for q in device_cases(QUESTIONS, "gpu" if _on_gpu(llm) else "cpu", keep=1):
        tokens = _tokens(llm, model_path, q)
        want = _take(vanilla.stream(tokens, p.Sampling.greedy(40)), 40)
        vanilla.forget()
        dec = SpecEEDecoder(llm, HEAD, None, 2, exits=False)
        try:
            assert _take(dec.stream(tokens, p.Sampling.greedy(40)), 40) == want, q
            assert dec.accel_stats()["mean_layers"] == 30.0 and dec.accel_stats()["exit_rate"] == 0.0
        finally:
            dec.close()


def _reference_candidate_logits(model_path: Path, h: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """final norm + the candidates' rows of the (tied) lm_head, in numpy from the GGUF itself."""
    r = gguf.GGUFReader(str(model_path))
    t = {x.name: x for x in r.tensors}
    norm_w = np.array(t["output_norm.weight"].data, dtype=np.float32)
    emb = t["output.weight"] if "output.weight" in t else t["token_embd.weight"]
    rows = gguf.quants.dequantize(np.asarray(emb.data)[cands], emb.tensor_type).astype(np.float32)
    eps = float(r.fields["llama.attention.layer_norm_rms_epsilon"].parts[-1][0])
    x = h / np.sqrt(np.mean(h.astype(np.float64) ** 2) + eps) * norm_w
    return rows @ x.astype(np.float32)


def _reference_output(model_path: Path, tokens: list[int], layer: int, kv_pos: int = -1):
    """A plain context decodes tokens; returns the output of `layer` at the last token (the input
    layer + 1 receives) and, with kv_pos >= 0, the K/V rows written at that position."""
    ref = _reference_llm(model_path)
    try:
        lib = native.lib()
        lib.specee_capture_layer_input(ref._ctx.ctx, layer + 1, True)
        ref.eval(tokens)
        last = ref.n_tokens % ref.n_batch or ref.n_batch  # rows of the last decode batch
        n_embd = llama_cpp.llama_model_n_embd(ref._model.model)
        h = np.ctypeslib.as_array(lib.specee_layer_input(ref._ctx.ctx, layer + 1), shape=(last, n_embd))[-1].copy()
        return h, (_seq_kv_rows(ref._ctx.ctx, kv_pos) if kv_pos >= 0 else None)
    finally:
        ref.close()


@pytest.mark.parametrize("layer", [9, 21])
def test_forced_exit_emits_the_best_candidate_of_that_layer(llm: Target, model_path: Path, layer: int) -> None:
    tokens = _tokens(llm, model_path, QUESTIONS[0])
    dec = SpecEEDecoder(llm, HEAD, None, 2, force_layer=layer)
    try:
        run = dec._run(tokens, p.Sampling.greedy(4), record=False)
        first, _, _ = next(run)
        token, _, cands = next(run)
        run.close()  # type: ignore[attr-defined]
        assert dec.accel_stats()["mean_layers"] == layer + 1 and dec.accel_stats()["exit_rate"] == 1.0
    finally:
        dec.close()
    h, _ = _reference_output(model_path, [*tokens, first], layer)
    logits = _reference_candidate_logits(model_path, h, cands)
    assert token == cands[int(np.argmax(logits))]
    assert token in cands


def test_record_mode_logits_match_the_numpy_reference(llm: Target, model_path: Path) -> None:
    tokens = _tokens(llm, model_path, QUESTIONS[1])
    dec = SpecEEDecoder(llm, HEAD, None, 2)
    try:
        rec_run = dec.record(tokens, p.Sampling.greedy(4))
        _tok, rec, cands = next(rec_run)
        rec_run.close()  # type: ignore[attr-defined]
        first = dec._kv[len(tokens)]  # the prefill's token, decoded by that first step
    finally:
        dec.close()
    h, _ = _reference_output(model_path, [*tokens, first], 11)
    want = _reference_candidate_logits(model_path, h, cands)
    if _on_gpu(llm):  # the reference runs on the CPU; a GPU sums in another order
        assert np.linalg.norm(rec[11] - want) / np.linalg.norm(want) < 1e-2
        assert np.argmax(rec[11]) == np.argmax(want)
    else:
        np.testing.assert_allclose(rec[11], want, rtol=1e-3, atol=1e-3)


def test_an_exit_at_the_last_layer_leaves_the_cache_exactly_as_vanilla(llm: Target, model_path: Path) -> None:
    """Skipping only the lm_head must not disturb any K/V: later full-depth tokens equal a plain
    decode of the same text."""
    tokens = _tokens(llm, model_path, QUESTIONS[2])
    dec = SpecEEDecoder(llm, HEAD, None, 2, force_layer=29)
    try:
        run = dec.stream(tokens, p.Sampling.greedy(64))
        forced = [next(run) for _ in range(6)]
        dec.lib.specee_ee_configure(dec._ee, False, -1, 0, 0.0, 0)  # from here: full depth
        after = [next(run) for _ in range(12)]
        run.close()
        assert dec.accel_stats()["exit_rate"] < 1.0
    finally:
        dec.close()
    vanilla = VanillaDecoder(llm)
    want = _take(vanilla.stream([*tokens, *forced], p.Sampling.greedy(12)), 12)
    vanilla.forget()
    assert after == want


def _seq_kv_rows(ctx, pos: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """K and V rows (per layer, float32) of the cell at `pos` of sequence 0, parsed from
    llama_state_seq_get_data (llama-kv-cache.cpp state_write: meta, then K rows, then V)."""
    n = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * n)()
    assert llama_cpp.llama_state_seq_get_data(ctx, buf, n, 0) == n
    raw, off = bytes(buf), 0

    def take(fmt: str):
        nonlocal off
        vals = struct.unpack_from(fmt, raw, off)
        off += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    take("<I")  # magic
    assert take("<i") == 0  # sequence
    assert take("<I") == 1  # one stream
    n_cells = take("<I")
    positions = []
    for _ in range(n_cells):
        pos_i, n_seq = take("<iI")
        positions.append(pos_i)
        off += 4 * n_seq
    cell = positions.index(pos)
    v_trans, n_layer = take("<II")
    f16 = int(gguf.GGMLQuantizationType.F16)
    ks = []
    for _ in range(n_layer):
        k_type, row = take("<iQ")
        assert k_type == f16
        ks.append(np.frombuffer(raw, np.float16, row // 2, off + cell * row).astype(np.float32))
        off += row * n_cells
    vs = []
    for _ in range(n_layer):
        if v_trans:
            v_type, el, n_embd_v = take("<iII")
            assert v_type == f16 and el == 2
            col = np.frombuffer(raw, np.float16, n_embd_v * n_cells, off).reshape(n_embd_v, n_cells)[:, cell]
            vs.append(col.astype(np.float32))
            off += el * n_embd_v * n_cells
        else:
            v_type, row = take("<iQ")
            vs.append(np.frombuffer(raw, np.float16, row // 2, off + cell * row).astype(np.float32))
            off += row * n_cells
    assert off == len(raw)
    return ks, vs


def test_an_exit_fills_the_skipped_layers_kv_from_the_exit_state(llm: Target, model_path: Path) -> None:
    """Layers up to the exit keep exactly what a plain decode writes; every skipped layer l gets
    V = Wv_l (rmsnorm(h_exit) * attn_norm_l), as numpy computes it from the GGUF."""
    exit_layer = 14
    tokens = _tokens(llm, model_path, QUESTIONS[0])
    pos = len(tokens)  # where the first early-exit step writes
    dec = SpecEEDecoder(llm, HEAD, None, 2, force_layer=exit_layer)
    try:
        run = dec._run(tokens, p.Sampling.greedy(4), record=False)
        first, _, _ = next(run)
        next(run)
        run.close()  # type: ignore[attr-defined]
        k_exit, v_exit = _seq_kv_rows(llm.ctx, pos)
    finally:
        dec.close()
    h, (k_ref, v_ref) = _reference_output(model_path, [*tokens, first], exit_layer, kv_pos=pos)
    # Layers up to the exit ran; layer exit+1 reads h_exit as its own input, so its fill is the
    # full pass's own computation: all bit-identical to the plain decode.
    for layer in range(exit_layer + 2):
        if _on_gpu(llm):
            # the reference runs on the CPU; with a GPU device, prompt batches of 32+ rows run even
            # the CPU layers' matrix products there (llama.cpp's op offload), in another order
            for got, ref in ((k_exit[layer], k_ref[layer]), (v_exit[layer], v_ref[layer])):
                assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 3e-2, layer
        else:
            np.testing.assert_array_equal(k_exit[layer], k_ref[layer])
            np.testing.assert_array_equal(v_exit[layer], v_ref[layer])
    r = gguf.GGUFReader(str(model_path))
    t = {x.name: x for x in r.tensors}
    eps = float(r.fields["llama.attention.layer_norm_rms_epsilon"].parts[-1][0])
    hn = h / np.sqrt(np.mean(h.astype(np.float64) ** 2) + eps)
    for layer in (exit_layer + 2, 22, 29):
        wv = t[f"blk.{layer}.attn_v.weight"]
        w = gguf.quants.dequantize(np.asarray(wv.data), wv.tensor_type).astype(np.float32)  # [n_embd_v, n_embd]
        x = (hn * np.array(t[f"blk.{layer}.attn_norm.weight"].data, dtype=np.float32)).astype(np.float32)
        want = w @ x
        # ggml quantizes the activations to 8 bits for the matmul and stores V as f16: close,
        # not equal; the full pass's V (what a plain decode writes) is far from both. On the GPU the
        # product runs in another order (0.0301 seen on lavapipe on an AVX2 EPYC).
        tol = 0.05 if _on_gpu(llm) else 0.03
        assert np.linalg.norm(v_exit[layer] - want) / np.linalg.norm(want) < tol, layer
        assert np.linalg.norm(v_ref[layer] - want) / np.linalg.norm(want) > 0.2, layer


def test_exit_predictors_for_another_model_are_refused(tmp_path: Path, model_path: Path) -> None:
    from engine.models.acceleration import AccelerationError
    from engine.models.exit_predictors import ExitPredictors, LayerPredictor, load_predictors, save_predictors

    preds = ExitPredictors(4, 30, "0" * 64)
    preds.layers[20] = LayerPredictor(np.ones((8, 14), np.float32), np.zeros(8, np.float32), np.ones(8, np.float32), 0.5, 1.0)
    path = tmp_path / "exits.gguf"
    save_predictors(preds, path)
    back = load_predictors(path)
    assert back.layers[20].b2 == 0.5 and back.layers[20].w1.shape == (8, 14)
    with pytest.raises(AccelerationError) as err:
        load_predictors(path, model_path)
    assert err.value.kind == "wrong_predictors" and "specee train exits" in str(err.value)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(AccelerationError) as err:
        load_predictors(path)
    assert err.value.kind == "bad_predictors"


def test_native_predictor_features_equal_the_trainers() -> None:
    """The trainer computes features in numpy; the engine in C++: they must agree exactly."""
    from engine.train.exits import N_FEATURES, features

    rng = np.random.default_rng(3)
    lib = native.lib()
    f32 = ctypes.POINTER(ctypes.c_float)
    for k in (4, 32):
        rec = rng.normal(0, 4, size=(5, 30, k)).astype(np.float32)
        draft_lp = np.sort(-rng.exponential(2.0, size=(5, k)).astype(np.float32), axis=-1)[:, ::-1].copy()
        want = features(rec, draft_lp)
        for s in range(5):
            for layer in (0, 1, 17, 29):
                out = np.zeros(N_FEATURES, np.float32)
                lp = rec[s, layer - 1].ctypes.data_as(f32) if layer else None
                lib.specee_exit_features(
                    rec[s, layer].ctypes.data_as(f32), lp, draft_lp[s].ctypes.data_as(f32), k, out.ctypes.data_as(f32)
                )
                np.testing.assert_allclose(out, want[s, layer], rtol=1e-5, atol=1e-5)


def test_an_exit_onto_a_stop_token_is_confirmed_at_full_depth(llm: Target, model_path: Path) -> None:
    """SpecEE never ends an answer early: an exit whose token is an end-of-generation token or a
    token of a stop string is declined, and the full lm_head decides that step."""
    tokens = _tokens(llm, model_path, QUESTIONS[0])
    dec = SpecEEDecoder(llm, HEAD, None, 2, force_layer=21)
    try:
        forced = _take(dec.stream(tokens, p.Sampling.greedy(8)), 8)  # every step exits after layer 21
        assert dec.accel_stats()["exit_rate"] == 1.0 and dec.accel_stats()["confirmed_endings"] == 0
        i, text = next(
            (i, llm.detokenize([t]).decode())
            for i, t in enumerate(forced[1:], 1)
            if llm.tokenize(llm.detokenize([t]), add_bos=False, special=True) == [t]
        )
        stop = p.Sampling.greedy(8)
        stop.stop = [text]
        got = _take(dec.stream(tokens, stop), i + 1)
        st = dec.accel_stats()
    finally:
        dec.close()
    assert got[:i] == forced[:i]
    assert st["confirmed_endings"] >= 1 and st["exit_hist"][-1] >= 1  # step i ran the full lm_head
    vanilla = VanillaDecoder(llm)
    want = _take(vanilla.stream([*tokens, *forced[:i]], p.Sampling.greedy(1)), 1)
    vanilla.forget()
    assert got[i] == want[0]


def test_a_verify_batch_feeds_the_head_as_one_row_steps_would(llm: Target, model_path: Path) -> None:
    """The combined mode's verify (specee_ee_verify): the drafts it accepts and the token after
    them are the target's own, and the head is left as if those tokens had been decoded one row at a
    time: the next step's candidates are the same. Also after a draft rejected halfway."""
    tokens = _tokens(llm, model_path, QUESTIONS[0])
    dec = SpecEEDecoder(llm, HEAD, None, 2, exits=False)
    try:
        steps = list(zip(dec._run(tokens, p.Sampling.greedy(12), record=False), range(12), strict=False))
        want = [tok for (tok, _, _), _ in steps]  # want[0]: the prefill's; step i decodes want[i], emits want[i + 1]
        cands = [c for (_, _, c), _ in steps[1:]]  # the candidates step i picks among
        lib = native.lib()
        smpl = make_sampler(llm, p.Sampling.greedy(12))
        arr = (ctypes.c_int32 * len(tokens))(*tokens)
        assert lib.specee_ee_prefill(dec._ee, arr, len(tokens), 0, smpl.sampler) == want[0]
        n_past = lib.specee_ee_n_past(dec._ee)
        out, tok = (ctypes.c_int32 * 4)(), (ctypes.c_int32 * 1)()
        got_cands = np.zeros(len(cands[0]), np.int32)
        cp = got_cands.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))

        def verify(draft: list[int]) -> list[int]:
            n = lib.specee_ee_verify(dec._ee, smpl.sampler, (ctypes.c_int32 * len(draft))(*draft), len(draft), out)
            return list(out[:n])

        assert verify(want[1:4]) == want[1:5]  # all three confirmed, then the target's next token
        assert lib.specee_ee_n_past(dec._ee) == n_past + 4
        assert lib.specee_ee_step(dec._ee, smpl.sampler, tok, None, cp, None) == 1
        assert tok[0] == want[5] and list(got_cands) == list(cands[4])
        wrong = (want[7] + 1) % llm.n_vocab()
        assert verify([want[6], wrong, want[8]]) == want[6:8]  # the second draft is rejected
        assert lib.specee_ee_step(dec._ee, smpl.sampler, tok, None, cp, None) == 1
        assert tok[0] == want[8] and list(got_cands) == list(cands[7])
    finally:
        dec.close()


COPY_PROMPT = (
    "Repeat this list exactly, twice: apples, pears, plums, cherries, apricots, peaches, figs, dates, "
    "grapes, melons, lemons, limes."
)


def test_the_combined_mode_with_exits_off_equals_vanilla_and_verifies_copy_drafts(llm: Target, model_path: Path) -> None:
    """copy_draft > 0: the copy drafter's drafts are verified through the early-exit handle and the
    other steps are its one-row steps; with exits off every token is the target's own."""
    tokens = _tokens(llm, model_path, COPY_PROMPT)
    vanilla = VanillaDecoder(llm)
    want = _take(vanilla.stream(tokens, p.Sampling.greedy(64)), 64)
    vanilla.forget()
    dec = SpecEEDecoder(llm, HEAD, None, 2, exits=False, copy_draft=8)
    try:
        got = _take(dec.stream(tokens, p.Sampling.greedy(64), step_us=20_000), 64)
        st = dec.accel_stats()
        again = _take(dec.stream([*tokens, *got[:-1], 0][: len(tokens)], p.Sampling.greedy(64)), 64)
    finally:
        dec.close()
    assert got == want
    assert st["accepted"] > 0 and st["verify_steps"] > 0, st  # drafts were verified, and some confirmed
    assert st["steps"] + st["verify_steps"] < len(want) - 1  # fewer target passes than tokens
    assert st["exit_rate"] == 0.0
    assert again == want  # the cached prompt reused: the same answer


def _draft_vocab() -> set[int]:
    return {int(t) for t in next(t for t in gguf.GGUFReader(str(HEAD)).tensors if t.name == "d2t").data}


# A made-up name the answer copies: several of its tokens are not in the head's draft vocabulary
RARE_NAME_PROMPT = "My cat is called Zorblathix Quenvirrup. Write two sentences about Zorblathix Quenvirrup."


def test_the_shortlist_holds_the_cached_tokens_beside_the_draft_vocabulary(llm: Target, model_path: Path) -> None:
    """After the last layer the shortlist's logits (the draft vocabulary's lm_head rows, then the
    rows of the cached tokens it lacks) give the full lm_head's arg max and top logit wherever
    that token is in either: also where the answer copies a name from the prompt. The shortlist
    runs on the CPU: with the lm_head on a GPU, which rounds otherwise, away from ties."""
    gpu = _on_gpu(llm)
    tokens = _tokens(llm, model_path, RARE_NAME_PROMPT)
    dv = _draft_vocab()
    dec = SpecEEDecoder(llm, HEAD, None, 2)
    steps = []
    try:
        for n, (tok, rec, _cands) in enumerate(dec.record(tokens, p.Sampling.greedy(40))):
            full = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, 0), shape=(llm.n_vocab(),))
            top2 = np.sort(full)[-2:]
            steps.append((tok, rec[-1, :4].copy(), float(top2[1]), float(top2[1] - top2[0]), list(dec._kv)))
            if n >= 39:
                break
    finally:
        dec.close()
    copied = 0
    for tok, vocab, top, gap, cached in steps:
        if (tok in dv or tok in cached) and (not gpu or gap > 0.1):
            assert int(vocab[3]) == tok and vocab[0] == pytest.approx(top, rel=2e-2 if gpu else 0, abs=1e-3)
            copied += tok not in dv
    assert copied >= 2  # the name's rare tokens came from the cached rows


def test_without_layer_predictors_the_head_never_runs_and_the_shortlist_exits(llm: Target, model_path: Path) -> None:
    """Predictors with a shortlist predictor and no layer: no EAGLE head runs (no candidates, no
    head cache to keep), and each exit emits the shortlist's arg max, which is vanilla's token
    wherever that token is in the shortlist (on the CPU, where both round alike). A predictor
    never sure leaves vanilla's answer."""
    tokens = _tokens(llm, model_path, RARE_NAME_PROMPT)
    vanilla = VanillaDecoder(llm)
    want = _take(vanilla.stream(tokens, p.Sampling.greedy(40)), 40)
    vanilla.forget()
    dv = _draft_vocab()
    first_miss = next((i for i, t in enumerate(want) if i and t not in dv and t not in tokens + want[:i]), len(want))
    always = ExitPredictors(32, llm.n_layer(), "", vocab_head=([0.0, 0.0, 0.0], 1.0, 0.0))
    never = ExitPredictors(32, llm.n_layer(), "", vocab_head=([0.0, 0.0, 0.0], 0.0, 1.0))
    for preds in (always, never):
        dec = SpecEEDecoder(llm, HEAD, preds, 2)
        try:
            assert not dec.uses_head and dec.head_state() is None
            got = _take(dec.stream(tokens, p.Sampling.greedy(40)), 40)
            st = dec.accel_stats()
        finally:
            dec.close()
        assert st["cand_hit_rate"] == 0.0 and st["exit_rate"] == st["vocab_head_rate"]
        if preds is never:
            assert got == want and st["exit_rate"] == 0.0
        else:
            assert all(t in dv or t in tokens + got[:i] for i, t in enumerate(got) if i)  # the shortlist's tokens
            assert st["exit_rate"] >= 0.9  # every step but those whose token would end the answer
            if not _on_gpu(llm):
                assert got[:first_miss] == want[:first_miss] and first_miss >= 8
