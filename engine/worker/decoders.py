"""Token sources per acceleration mode. Each turns prompt tokens into a stream of sampled tokens;
the session around them handles text, stop strings, cancel and stats the same way for all."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import llama_cpp
from llama_cpp import Llama

from engine import native
from engine import protocol as p


class Decoder(Protocol):
    def cached_prefix(self, tokens: list[int]) -> int: ...
    def stream(self, tokens: list[int], s: p.Sampling) -> Iterator[int]: ...
    def kv_used(self) -> int: ...
    def accel_stats(self) -> dict[str, float]: ...
    def forget(self) -> None: ...  # drop the KV prefix bookkeeping (another decoder used the context)
    def close(self) -> None: ...


def _prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _sampler(llm: Llama, s: p.Sampling):  # type: ignore[no-untyped-def]
    return llm._init_sampler(
        top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, typical_p=1.0, temp=s.temperature, repeat_penalty=s.repeat_penalty,
        frequency_penalty=0.0, presence_penalty=0.0, tfs_z=1.0, mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1,
        penalize_nl=True, logits_processor=None, grammar=None,
    )  # fmt: skip


class VanillaDecoder:
    """One target forward pass per token (llama-cpp-python's own loop)."""

    def __init__(self, llm: Llama) -> None:
        self.llm = llm

    def cached_prefix(self, tokens: list[int]) -> int:
        cached = _prefix(self.llm._input_ids[: self.llm.n_tokens].tolist(), tokens)
        return min(cached, len(tokens) - 1)  # llama_cpp re-evaluates at least one token

    def stream(self, tokens: list[int], s: p.Sampling) -> Iterator[int]:
        gen = self.llm.generate(
            tokens, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, temp=s.temperature, repeat_penalty=s.repeat_penalty
        )
        try:
            for tok in gen:
                yield tok
                if self.llm.n_tokens + 1 >= self.llm.n_ctx():
                    return  # context full
        finally:
            gen.close()

    def kv_used(self) -> int:
        return self.llm.n_tokens

    def accel_stats(self) -> dict[str, float]:
        return {}

    def forget(self) -> None:
        self.llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.llm._ctx.ctx), True)

    def close(self) -> None:
        pass


class EagleDecoder:
    """EAGLE-3 speculative decoding in native/src/eagle.cpp: draft a chain, verify in one batch."""

    def __init__(self, llm: Llama, head_path: Path, n_draft: int, n_threads: int) -> None:
        self.llm = llm
        self.lib = native.lib()
        params = llama_cpp.llama_model_default_params()
        self._draft_model = llama_cpp.llama_model_load_from_file(str(head_path).encode(), params)
        if not self._draft_model:
            raise RuntimeError(f"llama.cpp could not load the EAGLE head {head_path.name}")
        self._eagle = self.lib.specee_eagle_init(llm._ctx.ctx, self._draft_model, n_draft, n_threads)
        if not self._eagle:
            llama_cpp.llama_model_free(self._draft_model)
            raise RuntimeError(self.lib.specee_last_error().decode())
        self.n_draft = n_draft
        self._kv: list[int] = []  # tokens in the target KV (the eagle loop bypasses llm's bookkeeping)
        self._stats = native.EagleStats()
        self._out = (ctypes.c_int32 * (n_draft + 1))()

    def cached_prefix(self, tokens: list[int]) -> int:
        return _prefix(self._kv, tokens)

    def stream(self, tokens: list[int], s: p.Sampling) -> Iterator[int]:
        smpl = _sampler(self.llm, s)
        n_keep = self.cached_prefix(tokens)
        self.lib.specee_eagle_reset_stats(self._eagle)
        self._stats = native.EagleStats()
        arr = (ctypes.c_int32 * len(tokens))(*tokens)
        self._kv = []  # unknown until the prefill succeeds
        first = self.lib.specee_eagle_prefill(self._eagle, arr, len(tokens), n_keep, smpl.sampler)
        if first < 0:
            raise RuntimeError(self.lib.specee_last_error().decode())
        emitted = [first]
        self._kv = list(tokens)
        yield first
        while True:
            n = self.lib.specee_eagle_step(self._eagle, smpl.sampler, self._out, self.n_draft + 1, ctypes.byref(self._stats))
            if n < 0:
                raise RuntimeError(self.lib.specee_last_error().decode())
            if n == 0:
                return  # context full
            new = list(self._out[:n])
            emitted += new
            self._kv = (tokens + emitted)[: self.lib.specee_eagle_n_past(self._eagle)]
            yield from new

    def kv_used(self) -> int:
        return len(self._kv)

    def forget(self) -> None:
        self._kv = []

    def accel_stats(self) -> dict[str, float]:
        st = self._stats
        steps = max(st.n_steps, 1)
        return {
            "acceptance_length": st.n_emitted / steps,  # tokens per target forward pass
            "drafted": st.n_drafted,
            "accepted": st.n_accepted,
            "accept_rate": st.n_accepted / max(st.n_drafted, 1),
            "draft_ms_per_step": st.t_draft_ms / steps,
            "verify_ms_per_step": st.t_verify_ms / steps,
            "feed_ms_per_step": st.t_feed_ms / steps,
        }

    def close(self) -> None:
        if self._eagle:
            self.lib.specee_eagle_free(self._eagle)
            self._eagle = None
        if self._draft_model:
            llama_cpp.llama_model_free(self._draft_model)
            self._draft_model = None
