"""Saved KV caches of conversations the target answered before (issue 24, item 2): llama.cpp's
sequence state (llama_state_seq_get_data) of the tokens then in the cache, kept in memory up to a
byte budget, least recently used first out. Switching back to a conversation restores its cache, so
only what is new is prefilled. The state is only valid for the context it came from (same model,
build and context settings), which is why it lives beside that one context and dies with it."""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from typing import Any

import llama_cpp

from engine.sequences import common_prefix

DEFAULT_BUDGET_BYTES = 512 * 1024 * 1024
# a saved state is worth restoring only when it spares this many more tokens than the live cache
MIN_GAIN_TOKENS = 32


class KvStates:
    def __init__(self, ctx: Any, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self._ctx = ctx
        self.budget = budget_bytes
        self._states: OrderedDict[tuple[int, ...], bytes] = OrderedDict()

    def used_bytes(self) -> int:
        return sum(len(b) for b in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def save(self, tokens: list[int]) -> None:
        """Keep sequence 0's cache, which holds exactly `tokens`."""
        if not tokens:
            return
        size = llama_cpp.llama_state_seq_get_size(self._ctx, 0)
        if size <= 0 or size > self.budget:
            return
        buf = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, 0) != size:
            return
        key = tuple(tokens)
        # a saved prefix of this conversation is superseded by the longer state
        for old in [k for k in self._states if len(k) <= len(key) and key[: len(k)] == k]:
            del self._states[old]
        self._states[key] = bytes(buf)
        while self.used_bytes() > self.budget:
            self._states.popitem(last=False)

    def best(self, tokens: list[int]) -> tuple[int, tuple[int, ...] | None]:
        """The saved state sharing the longest prefix with `tokens`, and that prefix's length."""
        best_n, best_key = 0, None
        for key in self._states:
            n = common_prefix(list(key), tokens)
            if n > best_n:
                best_n, best_key = n, key
        return best_n, best_key

    def restore(self, key: tuple[int, ...]) -> list[int] | None:
        """Load a saved state into sequence 0 (the live cache is dropped); its tokens, or None
        (the cache left empty) where llama.cpp refused it."""
        data = self._states.pop(key)
        mem = llama_cpp.llama_get_memory(self._ctx)
        llama_cpp.llama_memory_clear(mem, True)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_seq_set_data(self._ctx, buf, len(data), 0) != len(data):
            llama_cpp.llama_memory_clear(mem, True)
            return None
        self._states[key] = data  # most recently used now
        return list(key)
