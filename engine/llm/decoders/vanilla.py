"""Vanilla decoding: one target forward pass per token, in a native loop of our own."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Generator

import llama_cpp
import numpy as np

from engine import native
from engine import protocol as p
from engine.llm.decoders.interface import Progress, PromptInterrupted
from engine.llm.decoders.sampling import Grammar, greedy_alone, make_sampler
from engine.llm.kv_states import Aux
from engine.llm.target import Target
from engine.sequences import common_prefix


class VanillaDecoder:
    """One target forward pass per token, in a loop of our own over llama.cpp's C API
    (native specee_vanilla_run: a one-token llama_decode and llama.cpp's sampler chain per token,
    several tokens a call; no logits copied into Python; llama-cpp-python's generate also re-trimmed
    the cache and kept its own arrays every token). Prefill chunks as llama-cpp-python's eval did (n_batch rows from the
    first uncached token), so answers are token-identical to it."""

    def __init__(self, llm: Target, n_ctx: int = 0) -> None:
        """n_ctx: the room of its sequence (0: the context's; less where the context holds several)."""
        self.llm = llm
        self._ctx = llm.ctx
        self._n_vocab = llm.n_vocab()
        self._n_batch = llm.n_batch
        self._n_ctx = n_ctx or llm.n_ctx()
        self._kv: list[int] = []  # the tokens in the target's KV cache
        self._batch = llama_cpp.llama_batch_init(max(self._n_batch, 1), 0, 1)
        self._out = (ctypes.c_int32 * 512)()  # specee_vanilla_run's tokens of one call

    def cached_prefix(self, tokens: list[int]) -> int:
        return min(common_prefix(self._kv, tokens), len(tokens) - 1)  # one token re-decoded for its logits

    def _decode_chunk(self, tokens: list[int], pos0: int) -> None:
        b = self._batch
        n = len(tokens)
        b.n_tokens = n
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = pos0 + i
            b.seq_id[i][0] = 0
            b.n_seq_id[i] = 1
            b.logits[i] = False
        b.logits[n - 1] = True
        rc = llama_cpp.llama_decode(self._ctx, b)
        if rc == 2:  # the abort flag: llama.cpp dropped this chunk's rows
            raise PromptInterrupted("the prompt's reading was stopped")
        if rc != 0:
            raise RuntimeError("llama.cpp could not decode the prompt")

    def stream(
        self, tokens: list[int], s: p.Sampling, grammar: str | Grammar = "", *, step_us: int = 0, progress: Progress | None = None
    ) -> Generator[int, None, None]:
        """The answer's tokens as they are picked, at most s.max_tokens (0: until the context is full).
        step_us: how long native code may go on picking and decoding before it hands its tokens over
        (the first token always comes at once). 0: one token at a time, each decoded only when the
        next is asked for, so last_margin and logprobs read the logits the token came from; more
        saves the per-token calls, and a consumer that stops early leaves up to that much decoded
        past its last token in the cache (kv_tokens says so). progress: see Progress."""
        if not tokens or len(tokens) >= self._n_ctx:
            raise ValueError("the prompt is empty or does not fit in the context")
        smpl = make_sampler(self.llm, s, grammar)
        start = self.cached_prefix(tokens)
        self._kv = tokens[:start]
        # sequence 0: the only one, unless engine/llm/batched.py keeps others beside it
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self._ctx), 0, start, -1)
        for c0 in range(start, len(tokens), self._n_batch):
            end = min(c0 + self._n_batch, len(tokens))
            try:
                self._decode_chunk(tokens[c0:end], c0)
            except PromptInterrupted:
                raise  # the chunks before it stay cached: the same prompt again goes on from there
            except RuntimeError:
                self._kv = []  # where the cache ends is unknown
                raise
            self._kv = tokens[:end]
            if progress is not None:
                progress(end)
        kv = list(tokens)
        self._kv = kv
        # greedy alone: specee_greedy's arg max (the same token) rather than the chain
        run, ctx, out = native.lib().specee_vanilla_run, self._ctx, self._out
        sampler = None if greedy_alone(s, grammar) else smpl.sampler
        left = s.max_tokens or self._n_ctx
        pending, budget = -1, 0  # the first token's logits came with the prefill: it comes at once
        while left > 0 and len(kv) + 1 < self._n_ctx:
            n = run(ctx, sampler, pending, len(kv), self._n_ctx, min(left, len(out)), budget, out)
            if n <= 0:
                self._kv = []  # where the cache ends is unknown: the next answer prefills from scratch
                raise RuntimeError("llama.cpp could not decode a token")
            got = out[:n]
            if pending >= 0:
                kv.append(pending)
            kv.extend(got[:-1])  # every token but the last is in the cache now
            left -= n
            pending, budget = got[-1], step_us
            yield from got

    restorable = True

    def kv_used(self) -> int:
        return len(self._kv)

    def kv_tokens(self) -> list[int]:
        return list(self._kv)

    def adopt(self, tokens: list[int], aux: Aux | None = None) -> None:
        self._kv = list(tokens)

    def head_state(self) -> Aux | None:
        return None

    def accel_stats(self) -> dict[str, float]:
        return {}

    def last_margin(self) -> float:
        # the context still holds the logits the last token was sampled from (the next decode
        # runs only when the stream is resumed)
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, -1), shape=(self._n_vocab,))
        top2 = np.partition(row, -2)[-2:]
        return float(top2[1] - top2[0])

    def logprobs(self, token: int, n_top: int) -> tuple[float, list[tuple[int, float]]]:
        """The last token's log-probability under the model's distribution (log-softmax of the
        full-vocabulary logits it was sampled from, before any sampler), and the n_top most likely
        tokens with theirs, most likely first. Read only when asked: plain answers copy no logits."""
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, -1), shape=(self._n_vocab,))
        row = row.astype(np.float64)
        top = float(row.max())
        log_z = top + math.log(float(np.exp(row - top).sum()))
        best: list[tuple[int, float]] = []
        if n_top > 0:
            idx = np.argpartition(row, -n_top)[-n_top:]
            idx = idx[np.argsort(-row[idx], kind="stable")]
            best = [(int(i), float(row[i] - log_z)) for i in idx]
        return float(row[token] - log_z), best

    def forget(self) -> None:
        self._kv = []
        self.llm.clear()

    def set_threads(self, n: int) -> None:
        pass  # no context of its own

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
