"""What the natively looped decoders (DrafterDecoder, SpecEEDecoder) share: the draft model they
load, the target's KV bookkeeping, the EAGLE head's cache beside it, and a prefill read in parts."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import llama_cpp

from engine.llm.decoders.interface import Progress
from engine.llm.kv_states import Aux, seq_state, set_seq_state
from engine.llm.target import Target
from engine.sequences import common_prefix


def _load_draft_model(path: Path, on_gpu: bool, what: str) -> Any:
    params = llama_cpp.llama_model_default_params()
    # Explicitly with the target's last layer (engine/worker/modes.py, ModeMakers._head_on_gpu): llama.cpp's default
    # offloads everything, so a CPU-placed target would ship features to the GPU every step.
    params.n_gpu_layers = 999 if on_gpu else 0
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load the {what} {path.name}")
    return model


class _NativeLoop:
    """What the natively looped decoders share: a draft model they load (an EAGLE head or a
    smaller model) and the tokens in the target's KV cache, which their loop keeps."""

    llm: Target
    _draft_model: Any = None
    _kv: list[int]

    def cached_prefix(self, tokens: list[int]) -> int:
        return common_prefix(self._kv, tokens)

    # restorable (Decoder's): each subclass says, DrafterDecoder per drafter and SpecEEDecoder per
    # exits (a property there, which a writable attribute here would forbid)
    _head_id = ""  # the EAGLE head file's sha256, where there is one (head_state's tag)

    def kv_used(self) -> int:
        return len(self._kv)

    def kv_tokens(self) -> list[int]:
        return list(self._kv)

    def _head_ctx(self) -> Any:
        """The EAGLE head's context (its sequence 0: the head's cache of the target's tokens), or None."""
        return None

    def head_state(self) -> Aux | None:
        """The EAGLE head's cache of the target's tokens (its sequence 0), tagged with the head's
        sha256: restored with the target's, the next answer drafts exactly as it would have in the
        same process (rows past the kept tokens are dropped by the next prefill)."""
        ctx = self._head_ctx()
        buf = seq_state(ctx, 0) if ctx else None
        return (self._head_id, buf) if buf is not None else None

    def adopt(self, tokens: list[int], aux: Aux | None = None) -> None:
        """The target's cache holds `tokens` now. The head's cache is set from `aux` where that was
        saved with them by this head; else its rows are kept only as far as the tokens it saw
        agree with the new ones (a row pairs token P+1 with the target's features at P)."""
        ctx = self._head_ctx()
        if ctx:
            mem = llama_cpp.llama_get_memory(ctx)
            restored = False
            if aux is not None and aux[0] == self._head_id:
                llama_cpp.llama_memory_seq_rm(mem, 0, -1, -1)
                restored = set_seq_state(ctx, 0, aux[1])
            if not restored:
                keep = max(0, common_prefix(self._kv, tokens) - 1)
                llama_cpp.llama_memory_seq_rm(mem, 0, keep, -1)
        self._kv = list(tokens)

    def forget(self) -> None:
        self._kv = []

    def last_margin(self) -> float:
        return math.nan

    def _stepped(
        self, steps: Callable[[int], int], n_past: Callable[[], int], out: Any, tokens: list[int], first: int,
        max_tokens: int, per_step: int,
    ) -> Iterator[int]:  # fmt: skip
        """The tokens after `first` (the prefill's sample; _kv holds `tokens` then) from a native
        multi-step call, `steps(room)` (how many it wrote to out, 0: context full), keeping _kv
        equal to the target's cache (`n_past()` tokens of the prompt and the answer so far)."""
        seen = [*tokens, first]  # the prompt and the answer so far; the cache holds a prefix of it
        kv = self._kv  # the prompt, set by the caller before it yielded `first`
        left = (max_tokens or 1 << 30) - 1
        while left > 0:  # the last step may give more than max_tokens: the consumer takes what it asked
            n = steps(min(len(out), max(left, per_step)))  # no more steps than the answer may still take
            if n == 0:
                return  # context full
            new = out[:n]
            left -= n
            seen += new
            past = n_past()
            if past < len(kv):
                del kv[past:]
            else:  # in place: copying the whole conversation every step cost ~10 us per 1000 tokens
                kv += seen[len(kv) : past]
            yield from new

    def _free_draft_model(self) -> None:
        if self._draft_model:
            llama_cpp.llama_model_free(self._draft_model)
            self._draft_model = None


def _prefill(
    dec: _NativeLoop, tokens: list[int], prefill: Any, handle: Any, sampler: Any,
    progress: Progress | None, error: Callable[[], RuntimeError],
) -> int:  # fmt: skip
    """A native prefill (`prefill(handle, tokens, n, n_keep, sampler)`, one call for the whole
    prompt) after the cached prefix; returns the first answer token, dec._kv then holding `tokens`.
    Where a progress callback is given, the prompt but its last batch is read a batch a call (each
    call's greedy pick unused), so that progress is told after each batch and a stopped reading
    keeps the batches read before it. The rows are those a whole prefill gives (the CPU kernels are
    batch-invariant: each call re-decodes its first token alone)."""
    arr = (ctypes.c_int32 * len(tokens))(*tokens)
    n_keep = dec.cached_prefix(tokens)
    n_batch = dec.llm.n_batch
    if progress is not None and len(tokens) - n_keep > n_batch:
        for end in range(n_keep + n_batch, len(tokens), n_batch):
            dec._kv = tokens[: max(n_keep - 1, 0)]  # what a failed call leaves: it re-decodes from n_keep - 1
            if prefill(handle, arr, end, n_keep, None) < 0:
                raise error()
            dec._kv, n_keep = tokens[:end], end
            progress(end)
    dec._kv = tokens[: max(n_keep - 1, 0)]  # until the prefill succeeds (a stopped one keeps this)
    first = prefill(handle, arr, len(tokens), n_keep, sampler)
    if first < 0:
        raise error()
    if progress is not None:
        progress(len(tokens))
    dec._kv = list(tokens)
    return int(first)
