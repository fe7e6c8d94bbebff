"""Worker process main loop: commands on stdin, events on a private copy of stdout.

The model runs on this process's main thread; a reader thread watches stdin so that `cancel`
lands within one token and a vanished parent (EOF) shuts us down.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import replace
from typing import IO

from engine import protocol as p
from engine.worker.stop_flag import StopFlag

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


def _load_again(load: p.Load | None):  # type: ignore[no-untyped-def]
    """The session of a load that worked before (after another was refused), or None."""
    from engine.worker.session import EngineSession

    if load is None:
        return None
    try:
        return EngineSession(load)
    except Exception:  # the file went away meanwhile: nothing is loaded, the refusal says why
        traceback.print_exc()
        return None


def main() -> int:
    # Ctrl+C in a terminal is meant for the frontend (stop the answer), never for the engine: the
    # client starts us in our own session, and this covers a worker started by hand.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = Channel(_private_stdout())
    commands: queue.Queue[p.Message] = queue.Queue()
    cancel = StopFlag()  # the one-at-a-time request's Stop, read mid-prefill by llama.cpp too
    current: dict[str, str] = {"request_id": ""}
    # requests cancelled by id: answers of the batched path, or one still waiting for its turn
    cancelled_ids: set[str] = set()
    stopping = threading.Event()  # Shutdown, or the client is gone
    batched: list[ConcurrentAnswers | None] = [None]  # the batched path of the loaded session, for the reader

    def read_commands() -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                msg = p.decode(line)
            except p.VersionMismatch as exc:
                channel.emit(p.Error(kind=p.ErrorKind.VERSION_MISMATCH, message=str(exc)))
                continue
            except p.ProtocolError as exc:
                channel.emit(p.Error(kind=p.ErrorKind.BAD_REQUEST, message=f"the engine could not read a command: {exc}"))
                continue
            if isinstance(msg, p.Cancel):
                if not msg.request_id or msg.request_id == current["request_id"]:
                    cancel.set()
                if msg.request_id:
                    cancelled_ids.add(msg.request_id)
                if (together_now := batched[0]) is not None:
                    together_now.stop_reading(msg.request_id)  # a prompt being read stops mid-batch
                continue
            if isinstance(msg, p.Shutdown):
                stopping.set()
                cancel.set()
            commands.put(msg)
            if (together_now := batched[0]) is not None:
                together_now.interrupt(msg)  # a request that can join stops the step under way
        stopping.set()
        cancel.set()
        commands.put(p.Shutdown())

    threading.Thread(target=read_commands, name="commands", daemon=True).start()

    # Import after the thread environment is set: this loads llama.cpp.
    from engine.llm.chat_prompt import ChatFormatError, ContextOverflow
    from engine.models.gguf_file import ModelFileError
    from engine.native import build_info
    from engine.placement.machine import backend_report
    from engine.worker.concurrent import ConcurrentAnswers
    from engine.worker.embeddings import EmbedInputError
    from engine.worker.session import EngineSession, LoadError

    try:
        native = {**build_info(), "gpu": backend_report()}  # the backends loaded and the GPU used, or why none
    except Exception as exc:  # a broken native install must be reported, not crash silently
        channel.emit(p.Error(kind=p.ErrorKind.NATIVE, message=str(exc)))
        return 3
    channel.emit(p.Ready(pid=os.getpid(), native=native))

    session: EngineSession | None = None
    together: ConcurrentAnswers | None = None  # the batched path of a session loaded with n_parallel > 1
    held: deque[p.Message] = deque()  # commands that came while answers decode together and cannot join them

    def refusal(rid: str, exc: Exception) -> p.Error:
        """A Generate the session refused, as the client is told."""
        if isinstance(exc, p.SettingsError):
            return p.Error(rid, p.ErrorKind.BAD_SETTINGS, str(exc))
        if isinstance(exc, ContextOverflow):
            return p.Error(rid, p.ErrorKind.CONTEXT_LENGTH_EXCEEDED, str(exc))
        if isinstance(exc, ChatFormatError):
            return p.Error(rid, p.ErrorKind.BAD_REQUEST, str(exc))
        traceback.print_exc()
        return p.Error(rid, p.ErrorKind.INTERNAL, f"generation failed: {exc}")

    def join(msg: p.Generate) -> None:
        """Start a request beside the answers being decoded (or alone, as the batch's first)."""
        assert together is not None
        if not together.busy:
            cancel.clear()  # a Cancel with no id that came while nothing ran stops nothing later
        if msg.request_id in cancelled_ids:  # its client left while it waited
            cancelled_ids.discard(msg.request_id)
            channel.emit(p.Done(msg.request_id, p.FinishReason.CANCELLED))
            return
        try:
            msg.sampling.validate()
            together.admit(msg, time.perf_counter())
        except Exception as exc:  # the session refused it: the others decode on
            channel.emit(refusal(msg.request_id, exc))

    def batchable(msg: p.Message) -> bool:
        return together is not None and session is not None and isinstance(msg, p.Generate) and session.can_batch(msg)

    while True:
        if together is not None and together.busy:
            # decoding together: requests that came meanwhile join at once while there is room, in
            # arrival order; a command that cannot join waits for the batch to drain, and so does all after it
            if stopping.is_set():
                together.cancel_all()
                break
            if cancel.is_set():  # a Cancel with no id: whatever runs now
                cancel.clear()
                for rid in together.cancel_all():
                    cancelled_ids.discard(rid)
            together.rearm()
            while True:
                if held:
                    nxt = held[0]
                else:
                    try:
                        nxt = commands.get_nowait()
                    except queue.Empty:
                        break
                    held.append(nxt)
                if isinstance(nxt, p.CountTokens) and session is not None and len(held) == 1:
                    held.popleft()  # no decode needed: answered at once
                    try:
                        channel.emit(session.count_tokens(nxt))
                    except ChatFormatError as exc:
                        channel.emit(p.Error(nxt.request_id, p.ErrorKind.BAD_REQUEST, str(exc)))
                    continue
                if not (batchable(nxt) and together.has_room()):
                    break
                held.popleft()
                assert isinstance(nxt, p.Generate)
                join(nxt)
            for rid in together.step(lambda rid: rid in cancelled_ids):
                cancelled_ids.discard(rid)
            continue
        if held:
            msg = held.popleft()
        elif session is not None and session.has_background_work():
            # idle: one unit of auto's measurement at a time; a command arriving interrupts it
            try:
                msg = commands.get(timeout=0.05)
            except queue.Empty:
                decided = session.background_step(lambda: not commands.empty())
                if decided is not None:
                    channel.emit(decided)
                continue
        else:
            msg = commands.get()
        if isinstance(msg, p.Shutdown):
            break
        if isinstance(msg, p.Load):
            together = batched[0] = None  # its session goes
            try:
                msg.validate()  # before the current model goes: a refused load loses nothing
            except p.SettingsError as exc:
                channel.emit(p.Error(kind=p.ErrorKind.BAD_SETTINGS, message=str(exc)))
                if session is not None:  # the client may have stopped answering while it waited
                    channel.emit(replace(session.loaded, kept=True))
                continue
            previous = session.load if session is not None else None
            if session is not None:
                session.close()  # one model in memory at a time
                session = None
            try:
                session = EngineSession(msg)
                together = ConcurrentAnswers(session, channel.emit) if session.batch is not None else None
                batched[0] = together
                channel.emit(session.loaded)
                continue
            except ModelFileError as exc:
                refused = p.Error(kind=p.ErrorKind.MODEL_FILE, message=str(exc))
            except LoadError as exc:
                refused = p.Error(kind=exc.kind, message=str(exc))
            except p.SettingsError as exc:
                refused = p.Error(kind=p.ErrorKind.BAD_SETTINGS, message=str(exc))
            except Exception as exc:  # the worker survives any load failure and says so
                traceback.print_exc()
                refused = p.Error(kind=p.ErrorKind.INTERNAL, message=f"loading failed: {exc}")
            # a refused load keeps the model that was running: it loads again, and says so
            session = _load_again(previous)
            together = ConcurrentAnswers(session, channel.emit) if session is not None and session.batch is not None else None
            batched[0] = together
            if session is not None:
                refused.message += f" {session.loaded.name} stays loaded, as it was."
            channel.emit(refused)
            if session is not None:
                channel.emit(replace(session.loaded, kept=True))
        elif isinstance(msg, p.CountTokens):
            if session is None:
                channel.emit(p.TokenCount(msg.request_id))  # n_ctx 0: nothing loaded to count with
                continue
            try:
                channel.emit(session.count_tokens(msg))
            except ChatFormatError as exc:
                channel.emit(p.Error(msg.request_id, p.ErrorKind.BAD_REQUEST, str(exc)))
        elif isinstance(msg, p.Embed):
            if session is None:
                channel.emit(p.Error(msg.request_id, p.ErrorKind.NO_MODEL, "No model is loaded; load one first."))
                continue
            try:
                channel.emit(session.embed(msg))
            except EmbedInputError as exc:
                channel.emit(p.Error(msg.request_id, exc.kind, str(exc)))
            except Exception as exc:
                channel.emit(refusal(msg.request_id, exc))
        elif isinstance(msg, p.Unload):
            together = batched[0] = None
            if session is not None:
                session.close()
                session = None
            channel.emit(p.Unloaded())
        elif isinstance(msg, p.Generate):
            t0 = time.perf_counter()
            rid = msg.request_id
            if session is None:
                channel.emit(p.Error(rid, p.ErrorKind.NO_MODEL, "No model is loaded; load one first."))
                continue
            if batchable(msg):
                join(msg)
                continue
            if rid in cancelled_ids:  # its client left while it waited behind answers decoded together
                cancelled_ids.discard(rid)
                channel.emit(p.Done(rid, p.FinishReason.CANCELLED))
                continue
            current["request_id"] = rid
            cancel.clear()
            try:
                msg.sampling.validate()
                session.generate(msg, channel.emit, cancel, t0)
            except Exception as exc:
                channel.emit(refusal(rid, exc))
            finally:
                current["request_id"] = ""
                cancelled_ids.discard(rid)
    if session is not None:
        session.close()
    return 0
