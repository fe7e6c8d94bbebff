"""SpecEE early exit: one target pass per token that may stop at an earlier layer."""

from __future__ import annotations

import ctypes
import random
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine import native
from engine import protocol as p
from engine.hashing import sha256_file
from engine.llm.decoders.interface import Progress
from engine.llm.decoders.native_loop import _load_draft_model, _NativeLoop, _prefill
from engine.llm.decoders.sampling import make_sampler
from engine.llm.target import Target
from engine.models.exit_predictors import ExitPredictors


class SpecEEDecoder(_NativeLoop):
    """SpecEE early exit in native/src/early-exit.cpp: one target pass per token that stops at the
    first layer whose predictor is sure the token is settled among the head's candidates.
    copy_draft > 0, the combined mode: the copy drafter (ngram's, up to copy_draft tokens) drafts
    where a draft pays and the target verifies at full depth; the other steps exit early
    (specee_drafter_init_exits)."""

    def __init__(
        self,
        llm: Target,
        head_path: Path,
        predictors: ExitPredictors | None,
        n_threads: int,
        *,
        exits: bool = True,
        force_layer: int = -1,
        shadow_every: int = 0,
        fill: bool = True,
        n_cand: int = 32,
        head_on_gpu: bool = False,
        copy_draft: int = 0,
    ) -> None:
        self.llm = llm
        self.lib = native.lib()
        self._kv = []
        self._ee = None
        self._copy = None  # the combined mode's drafter handle (specee_drafter_*), bound to _ee
        self.copy_draft = copy_draft
        self.n_cand = predictors.n_cand if predictors else n_cand
        self._draft_model = _load_draft_model(head_path, head_on_gpu, "EAGLE head")
        self._ee = self.lib.specee_ee_init(llm.ctx, self._draft_model, self.n_cand, n_threads)
        if not self._ee:
            msg = self.lib.specee_last_error().decode()
            self.close()
            raise RuntimeError(msg)
        self.n_layer = llm.n_layer()
        self._head_id = sha256_file(Path(head_path))
        # exits only after the last layer skip no layer, so the cache holds no filled-in K/V and is
        # what any mode would have computed: it may be kept and restored (engine/llm/kv_states.py)
        self._exits_skip_layers = bool(predictors and min(predictors.layers, default=self.n_layer) < self.n_layer - 1)
        self.lib.specee_ee_set_fill(self._ee, fill)
        # Predictors with no layer to check exit only after the last layer, on the shortlist: the
        # EAGLE head (whose candidates only layer checks read) need not run at all
        self.uses_head = not (predictors and not predictors.layers and predictors.vocab_head is not None)
        self.lib.specee_ee_set_use_head(self._ee, self.uses_head)
        self.exits, self.force_layer, self.shadow_every = exits, force_layer, shadow_every
        if predictors and predictors.vocab_head is not None:
            w, b, thr = predictors.vocab_head
            if self.lib.specee_ee_set_vocab_predictor(self._ee, _f32(np.asarray(w, np.float32)), b, thr) != 0:
                self.close()
                raise RuntimeError(self.lib.specee_last_error().decode())
        if predictors:
            for layer, pr in predictors.layers.items():
                rc = self.lib.specee_ee_set_predictor(
                    self._ee, layer, pr.w1.shape[0], _f32(pr.w1), _f32(pr.b1), _f32(pr.w2), float(pr.b2), float(pr.threshold)
                )
                if rc != 0:
                    self.close()
                    raise RuntimeError(self.lib.specee_last_error().decode())
        self._ee_stats = native.EeStats()
        self._tok = (ctypes.c_int32 * 1)()
        if copy_draft > 0:
            self._copy = native.spec_lib().specee_drafter_init_exits(llm.ctx, self._ee, copy_draft)
            if not self._copy:
                msg = native.spec_lib().specee_drafter_last_error().decode()
                self.close()
                raise RuntimeError(msg)
            self._copy_stats = native.DrafterStats()
            self._out = (ctypes.c_int32 * 256)()

    def _error(self) -> RuntimeError:
        return RuntimeError(self.lib.specee_last_error().decode())

    @property
    def restorable(self) -> bool:
        return not self._exits_skip_layers and self.force_layer < 0

    def _head_ctx(self) -> Any:
        return self.lib.specee_ee_draft_context(self._ee) if self._ee and self.uses_head else None

    def _configure(self, s: p.Sampling) -> None:
        seed = s.seed if s.seed >= 0 else random.getrandbits(32)
        exits = self.exits and not exits_would_ignore(s)
        self.lib.specee_ee_configure(self._ee, exits, self.force_layer, self.shadow_every, s.temperature, seed)
        # An exit never emits a token of a stop string (nor an end-of-generation token): the full
        # lm_head confirms it, so a premature exit cannot end the answer early. Nor a token biased
        # down (logit_bias < 0): the sampler chain decides whether it may come.
        stop_strings = {t for st in s.stop for t in self.llm.tokenize(st.encode(), add_bos=False, special=True)}
        stop = sorted(stop_strings | {int(token) for token, bias in s.logit_bias.items() if bias < 0})
        self.lib.specee_ee_set_stop_tokens(self._ee, (ctypes.c_int32 * max(len(stop), 1))(*stop), len(stop))

    def stream(
        self, tokens: list[int], s: p.Sampling, *, step_us: int = 0, progress: Progress | None = None
    ) -> Generator[int, None, None]:
        if self._copy:
            yield from self._combined(tokens, s, step_us, progress)
            return
        # one native step (one token) a call whatever step_us asks: specee_ee_step has no multi-step form yet
        yield from (tok for tok, _rec, _cands in self._run(tokens, s, record=False, progress=progress))

    def _combined(self, tokens: list[int], s: p.Sampling, step_us: int, progress: Progress | None) -> Iterator[int]:
        spec = native.spec_lib()
        smpl = make_sampler(self.llm, s)  # an exit step samples with it: never None here
        self._configure(s)
        self.lib.specee_ee_reset_stats(self._ee)
        spec.specee_drafter_reset_stats(self._copy)
        self._ee_stats, self._copy_stats = native.EeStats(), native.DrafterStats()
        first = _prefill(self, tokens, spec.specee_drafter_prefill, self._copy, smpl.sampler, progress, self._copy_error)
        yield first
        per_step = self.copy_draft + 1

        def steps(room: int) -> int:
            stats = ctypes.byref(self._copy_stats)
            n = spec.specee_drafter_steps(self._copy, smpl.sampler, self._out, room, per_step, step_us, stats)
            if n < 0:
                raise self._copy_error()
            self.lib.specee_ee_get_stats(self._ee, ctypes.byref(self._ee_stats))
            return int(n)

        n_past = lambda: self.lib.specee_ee_n_past(self._ee)  # noqa: E731
        yield from self._stepped(steps, n_past, self._out, tokens, first, s.max_tokens, per_step)

    def _copy_error(self) -> RuntimeError:
        return RuntimeError(native.spec_lib().specee_drafter_last_error().decode())

    def record(self, tokens: list[int], s: p.Sampling) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Full-depth greedy steps with every layer's candidate logits plus the head's log-probs of
        the candidates [n_layer + 1, n_cand] and the candidates (predictor training data); the
        first token comes from the prefill and has no record."""
        for tok, rec, cands in self._run(tokens, s, record=True):
            if rec is not None:
                yield tok, rec, cands

    def _run(
        self, tokens: list[int], s: p.Sampling, record: bool, progress: Progress | None = None
    ) -> Iterator[tuple[int, np.ndarray | None, np.ndarray]]:
        smpl = make_sampler(self.llm, s)
        self._configure(s)
        self.lib.specee_ee_reset_stats(self._ee)
        self._ee_stats = native.EeStats()
        first = _prefill(self, tokens, self.lib.specee_ee_prefill, self._ee, smpl.sampler, progress, self._error)
        cands = np.zeros(self.n_cand, dtype=np.int32)
        # per layer the candidates' logits, then the head's log-probabilities of them, then the
        # draft-vocabulary head's features and arg max token
        rec = np.zeros((self.n_layer + 2, self.n_cand), dtype=np.float32) if record else None
        rec_p = _f32(rec) if rec is not None else None
        cands_p = cands.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        yield first, None, cands
        prev = first
        while True:
            n = self.lib.specee_ee_step(self._ee, smpl.sampler, self._tok, rec_p, cands_p, ctypes.byref(self._ee_stats))
            if n < 0:
                raise RuntimeError(self.lib.specee_last_error().decode())
            if n == 0:
                return  # context full
            self._kv.append(prev)
            prev = self._tok[0]
            yield prev, (rec.copy() if rec is not None else None), cands.copy()

    def accel_stats(self) -> dict[str, Any]:
        st = self._ee_stats
        steps = max(st.n_steps, 1)
        out: dict[str, Any] = {
            "steps": st.n_steps,
            "exit_rate": st.n_exits / steps,
            "vocab_head_rate": st.n_vocab_exits / steps,
            "mean_layers": st.n_layers_run / steps,
            "n_layer": self.n_layer,
            "cand_hit_rate": st.n_cand_hits / steps,
            "exit_hist": list(st.exit_hist[: self.n_layer + 1]),
            "target_ms_per_step": st.t_target_ms / steps,
            "draft_ms_per_step": st.t_draft_ms / steps,
            "confirmed_endings": st.n_confirmed,
            "uses_head": self.uses_head,
        }
        if self._copy:
            cs = self._copy_stats
            verify_steps = cs.n_steps - st.n_steps  # the steps that verified copy drafts
            out["verify_steps"] = verify_steps
            out["drafted"], out["accepted"] = cs.n_drafted, cs.n_accepted
            out["accept_rate"] = cs.n_accepted / max(cs.n_drafted, 1)
            out["acceptance_length"] = cs.n_emitted / max(cs.n_steps, 1)  # tokens per target pass
            # the drafter's step time less the exit steps' own: what the verify steps took
            verify_ms = cs.t_verify_ms - st.t_target_ms - st.t_draft_ms
            out["verify_ms_per_verify_step"] = verify_ms / max(verify_steps, 1)
        if st.n_shadow:
            out["shadow_steps"] = st.n_shadow
            out["shadow_exits"] = st.n_shadow_exits
            out["exit_precision"] = st.n_shadow_correct / max(st.n_shadow_exits, 1)
        return out

    def set_threads(self, n: int) -> None:
        if self._ee:
            self.lib.specee_ee_set_threads(self._ee, n)

    def close(self) -> None:
        if self._copy:
            native.spec_lib().specee_drafter_free(self._copy)  # before the early-exit handle it is bound to
            self._copy = None
        if self._ee:
            self.lib.specee_ee_free(self._ee)
            self._ee = None
        self._free_draft_model()


def exits_would_ignore(s: p.Sampling) -> bool:
    """Whether SpecEE's exits would skip part of this sampling: an exit emits the token its layer is
    sure of without the sampler chain, so a bias up (which may make another token win) or a frequency
    or presence penalty (the request asks for them explicitly) needs every step at full depth."""
    return bool(s.frequency_penalty or s.presence_penalty or any(bias > 0 for bias in s.logit_bias.values()))


def _f32(a: np.ndarray) -> Any:
    assert a.dtype == np.float32 and a.flags["C_CONTIGUOUS"]
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
