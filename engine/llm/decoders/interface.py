"""What every token source is to the session around it: the Decoder protocol, the prompt-reading
progress callback and the exception a stopped reading raises."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Protocol

from engine import protocol as p
from engine.llm.kv_states import Aux

# Decoder.stream's progress: called with the prompt tokens in the cache so far while a long prompt
# is read, after each batch of it (the last: all of them, just before the first token)
Progress = Callable[[int], None]


class PromptInterrupted(RuntimeError):
    """The prompt's reading was stopped (a Cancel raised the context's abort flag mid-batch); the
    cache keeps the batches read before it (kv_tokens says which)."""


class Decoder(Protocol):
    def cached_prefix(self, tokens: list[int]) -> int: ...
    # step_us: how long native code may go on before it hands its tokens over (0: one step a call);
    # a generator: its consumer close()s it to end the native loop where it stopped reading
    def stream(
        self, tokens: list[int], s: p.Sampling, *, step_us: int = 0, progress: Progress | None = None
    ) -> Generator[int, None, None]: ...
    def kv_used(self) -> int: ...
    def accel_stats(self) -> dict[str, float]: ...
    def forget(self) -> None: ...  # drop the KV prefix bookkeeping (another decoder used the context)
    def set_threads(self, n: int) -> None: ...  # a draft context's threads (the target's are the worker's)
    def close(self) -> None: ...
    # gap between the top two logits the last token was chosen from; nan where the mode does not know it
    def last_margin(self) -> float: ...

    # whether the target's KV cache alone is this decoder's state (a saved one may be restored:
    # engine/llm/kv_states.py); kv_tokens: the tokens in it; adopt: a restored cache holds these.
    # Read-only here: a decoder may answer it with a class attribute, an instance one or a property.
    @property
    def restorable(self) -> bool: ...

    def kv_tokens(self) -> list[int]: ...
    # the target's cache holds `tokens` now (restored, or handed back by the batch); `aux`: the
    # drafter's own cache of them saved with it (head_state), if any
    def adopt(self, tokens: list[int], aux: Aux | None = None) -> None: ...
    def head_state(self) -> Aux | None: ...  # the drafter's own cache, to keep beside the target's
