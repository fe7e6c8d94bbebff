"""Speculative decoding behind one native handle: EAGLE, a draft model, the copy drafter or
llama.cpp's n-gram drafters propose, the target verifies."""

from __future__ import annotations

import ctypes
from collections.abc import Generator
from pathlib import Path
from typing import Any

from engine import native
from engine import protocol as p
from engine.hashing import sha256_file
from engine.llm.decoders.interface import Progress
from engine.llm.decoders.native_loop import _load_draft_model, _NativeLoop, _prefill
from engine.llm.decoders.sampling import greedy_alone, make_sampler
from engine.llm.target import Target

# the copy drafter's buckets (native/src/spec/copy-draft.h), as its accel stats name them: a match
# length, and whether the earlier occurrences of the context's last two tokens went on alike; its
# estimates come in COPY_BUCKETS' order
COPY_MATCH_BUCKETS = ("2", "3", "4", "5-7", "8-15", "16+")
COPY_ALIKE = ("one", "agree", "disagree")
COPY_BUCKETS = tuple(f"{length} {alike}" for alike in COPY_ALIKE for length in COPY_MATCH_BUCKETS)


class DrafterDecoder(_NativeLoop):
    """Speculative decoding behind one native handle (specee_drafter_*, native/src/spec/drafter.cpp):
    a drafter proposes, the target verifies in one batch and every token is sampled from the target.
    drafter: "eagle" (draft_model: an EAGLE-3 head), "draft-simple" (draft_model: a smaller model with
    the target's tokenizer) or one of llama.cpp's n-gram drafters ("ngram-simple", ...).
    gated (eagle): each step verifies only as many of the head's up to n_draft drafts as pay on this
    machine (native/src/draft-gate.h), else always n_draft."""

    def __init__(
        self,
        llm: Target,
        drafter: str,
        n_draft: int,
        n_threads: int,
        draft_model: Path | None = None,
        head_on_gpu: bool = False,
        gated: bool = False,
    ) -> None:
        self.llm = llm
        self.drafter = drafter
        # the n-gram drafters read the prompt the prefill hands them: the target's cache is all; an
        # EAGLE head's own cache is kept beside it (head_state) and rows past what it shares trimmed
        self.restorable = drafter in ("copy", "eagle") or drafter.startswith("ngram")
        self._head_id = sha256_file(Path(draft_model)) if drafter == "eagle" and draft_model is not None else ""
        self.lib = native.spec_lib()
        self.n_draft = n_draft
        self._handle = None
        self._kv = []  # unknown until a prefill succeeds
        if draft_model is not None:
            what = "EAGLE head" if drafter == "eagle" else "draft model"
            self._draft_model = _load_draft_model(draft_model, head_on_gpu, what)
        self._handle = self.lib.specee_drafter_init(llm.ctx, drafter.encode(), self._draft_model, n_draft, n_threads)
        if not self._handle:
            msg = self.lib.specee_drafter_last_error().decode()
            self.close()
            raise RuntimeError(msg)
        self.gated = gated and drafter == "eagle"
        self.lib.specee_drafter_set_gated(self._handle, self.gated)
        self._stats = native.DrafterStats()
        self._out = (ctypes.c_int32 * max(256, n_draft + 1))()  # the tokens of one specee_drafter_steps call

    def _error(self) -> RuntimeError:
        return RuntimeError(self.lib.specee_drafter_last_error().decode())

    def _head_ctx(self) -> Any:
        return self.lib.specee_drafter_draft_context(self._handle) if self._head_id else None

    def stream(
        self, tokens: list[int], s: p.Sampling, *, step_us: int = 0, progress: Progress | None = None
    ) -> Generator[int, None, None]:
        """step_us: how long native code may go on stepping before it hands its tokens over (0: one
        step a call); a consumer that stops early leaves the steps past its last token in the cache.
        progress: see Progress."""
        smpl = make_sampler(self.llm, s)
        sampler = None if greedy_alone(s) else smpl.sampler  # greedy alone: specee_greedy's arg max
        self.lib.specee_drafter_reset_stats(self._handle)
        self._stats = native.DrafterStats()
        first = _prefill(self, tokens, self.lib.specee_drafter_prefill, self._handle, sampler, progress, self._error)
        yield first
        per_step = self.n_draft + 1

        def steps(room: int) -> int:
            stats = ctypes.byref(self._stats)
            n = self.lib.specee_drafter_steps(self._handle, sampler, self._out, room, per_step, step_us, stats)
            if n < 0:
                raise self._error()
            return int(n)

        n_past = lambda: self.lib.specee_drafter_n_past(self._handle)  # noqa: E731
        yield from self._stepped(steps, n_past, self._out, tokens, first, s.max_tokens, per_step)

    def accel_stats(self) -> dict[str, float]:
        st = self._stats
        steps = max(st.n_steps, 1)
        out = {
            "acceptance_length": st.n_emitted / steps,  # tokens per target forward pass
            "drafted": st.n_drafted,
            "accepted": st.n_accepted,
            "accept_rate": st.n_accepted / max(st.n_drafted, 1),
            "draft_ms_per_step": st.t_draft_ms / steps,
            "verify_ms_per_step": st.t_verify_ms / steps,
        }
        if self.drafter == "eagle":  # only EAGLE feeds the accepted tokens' features to its head
            out["feed_ms_per_step"] = st.t_feed_ms / steps
        p = (ctypes.c_double * len(COPY_BUCKETS))()
        if self.lib.specee_drafter_copy_acceptance(self._handle, p, len(p)):
            # what the copy drafter has learnt, per match length and agreement: why it drafts where it does
            out["copy_acceptance"] = {b: round(v, 3) for b, v in zip(COPY_BUCKETS, p, strict=True)}
        gate = native.GateInfo()
        if self.gated and self.lib.specee_drafter_gate_info(self._handle, ctypes.byref(gate)):
            # what the gate has learnt: how often a draft the head gave p = 0.0-0.1 .. 0.9-1.0 was
            # confirmed (its first and its later chain drafts), and this machine's costs
            out["eagle_gate"] = {
                "first": [round(v, 3) for v in gate.first],
                "later": [round(v, 3) for v in gate.later],
                "verify_ms": [round(v, 2) for v in gate.verify_ms],
                "step_ms": round(gate.step_ms, 2),
                "draft_ms": round(gate.draft_ms, 2),
            }
        return out

    def set_threads(self, n: int) -> None:
        if self._handle:
            self.lib.specee_drafter_set_threads(self._handle, n)

    def close(self) -> None:
        if self._handle:
            self.lib.specee_drafter_free(self._handle)
            self._handle = None
        self._free_draft_model()
