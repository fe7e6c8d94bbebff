"""A request's Stop, as both sides of the worker read it: Python checks it between tokens, and
llama.cpp's CPU backend reads its byte between graph nodes while a prompt is read (the context's
abort callback, native specee_interrupt_requested), so Stop ends a long prefill within one node,
not after the batch of several seconds it would otherwise finish."""

from __future__ import annotations

import ctypes
import threading

from engine.native import interrupt_hooks


class StopFlag:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._byte = ctypes.c_bool(False)

    def set(self) -> None:
        self._byte.value = True
        self._event.set()

    def clear(self) -> None:
        self._event.clear()
        self._byte.value = False

    def is_set(self) -> bool:
        return self._event.is_set()

    @property
    def address(self) -> int:
        """The byte's address, for llama_set_abort_callback's data."""
        return ctypes.addressof(self._byte)


class StopReading:
    """While a prompt is read: the target context's abort callback reads the request's stop flag,
    so a Stop ends llama_decode between graph nodes (it returns 2 and drops that batch's rows).
    Only then: a decode step stopped midway would lose where the cache ends. A plain
    threading.Event (tests driving a session directly) stops between tokens only."""

    def __init__(self, ctx: int, cancelled: threading.Event | StopFlag) -> None:
        self._ctx = ctx
        self._on = isinstance(cancelled, StopFlag)
        if isinstance(cancelled, StopFlag):
            set_abort, requested = interrupt_hooks()
            set_abort(ctx, requested, cancelled.address)

    def close(self) -> None:
        if self._on:
            interrupt_hooks()[0](self._ctx, None, None)
            self._on = False
