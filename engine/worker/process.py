"""The worker process's shell around its core (engine/worker/core.py): commands on stdin, events on
a private copy of stdout, signals.

The model runs on this process's main thread (WorkerCore, one step at a time); a reader thread
watches stdin so that `cancel` lands within one token and a vanished parent (EOF) shuts us down.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import IO

from engine import protocol as p
from engine.worker.inbox import Inbox

# OpenMP's own wait policy, as llama-server runs with: ggml's barrier between two operations is an
# OpenMP barrier, so a short spin (GOMP_SPINCOUNT=10000, set here before) put a thread to sleep
# whenever its partner was late by ~0.1 ms (preempted, a slower share of a matmul) and woke it with a
# futex: ~2 sleeps a token on Qwen2.5-Coder-1.5B, and its decode 1.6% slower than with libgomp's
# default spin (median of 24 dev prompts, two workers interleaved). An idle worker still sleeps
# within milliseconds (tests/test_worker.py); OMP_WAIT_POLICY=PASSIVE (never spin) cost ~3x.


class Channel:
    """Serialised, flushed event writes (the reader thread and the model thread both emit)."""

    def __init__(self, out: IO[str]) -> None:
        self._out, self._lock = out, threading.Lock()

    def emit(self, msg: p.Message) -> None:
        line = p.encode(msg) + "\n"
        with self._lock:
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, ValueError):
                pass  # the client is gone; stdin EOF will end us


def _private_stdout() -> IO[str]:
    """Events go to a duplicate of fd 1; fd 1 itself then points at stderr, so stray prints from
    C code (or a library) can never corrupt the protocol stream."""
    fd = os.dup(sys.stdout.fileno())
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1)


def read_commands(lines: Iterable[str], inbox: Inbox, emit: Callable[[p.Message], None]) -> None:
    """The reader thread: each line a command for the inbox (a Cancel acts at once); a line that is not
    one is answered with an Error; the end of stdin (the client is gone) shuts the worker down."""
    for line in lines:
        if not line.strip():
            continue
        try:
            msg = p.decode(line)
        except p.VersionMismatch as exc:
            emit(p.Error(kind=p.ErrorKind.VERSION_MISMATCH, message=str(exc)))
            continue
        except p.ProtocolError as exc:
            emit(p.Error(kind=p.ErrorKind.BAD_REQUEST, message=f"the engine could not read a command: {exc}"))
            continue
        inbox.put(msg)
    inbox.close()


def main() -> int:
    # Ctrl+C in a terminal is meant for the frontend (stop the answer), never for the engine: the
    # client starts us in our own session, and this covers a worker started by hand.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = Channel(_private_stdout())
    inbox = Inbox()
    threading.Thread(target=read_commands, args=(sys.stdin, inbox, channel.emit), name="commands", daemon=True).start()

    # Import after the reader has started: this loads llama.cpp.
    from engine.worker.core import WorkerCore  # noqa: I001 (first: llama_cpp loads before our C API, as it always has)
    from engine import knobs
    from engine.native import apply_kernel_knobs, build_info
    from engine.placement.machine import backend_report

    try:
        knobs.check_all()  # a knob set to a value it does not take is said now, not mid-answer
    except knobs.KnobError as exc:
        channel.emit(p.Error(kind=p.ErrorKind.BAD_SETTINGS, message=str(exc)))
        return 2
    try:
        native = {**build_info(), "gpu": backend_report()}  # the backends loaded and the GPU used, or why none
        apply_kernel_knobs()  # the kernels read no environment: their switches are set here, once
    except Exception as exc:  # a broken native install must be reported, not crash silently
        channel.emit(p.Error(kind=p.ErrorKind.NATIVE, message=str(exc)))
        return 3
    channel.emit(p.Ready(pid=os.getpid(), native=native))

    core = WorkerCore(channel.emit, inbox)
    while core.step():
        pass
    core.close()
    return 0
