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
from dataclasses import replace
from typing import IO

from engine import protocol as p

# OpenMP threads may spin only briefly before sleeping: on a 2-core laptop long spinning starves
# the GUI. Measured here (SmolLM2-135M, 2 threads): OMP_WAIT_POLICY=PASSIVE (no spin at all) cuts
# decode from ~105 to ~32 tok/s, while a short spin keeps full speed and an idle worker at ~0% CPU.
# Set before llama.cpp (and its OpenMP runtime) is loaded.
THREAD_ENV = {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "0"}


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
    for key, value in THREAD_ENV.items():
        os.environ.setdefault(key, value)
    # Ctrl+C in a terminal is meant for the frontend (stop the answer), never for the engine: the
    # client starts us in our own session, and this covers a worker started by hand.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = Channel(_private_stdout())
    commands: queue.Queue[p.Message] = queue.Queue()
    cancel = threading.Event()
    current: dict[str, str] = {"request_id": ""}

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
                continue
            if isinstance(msg, p.Shutdown):
                cancel.set()
            commands.put(msg)
        cancel.set()
        commands.put(p.Shutdown())

    threading.Thread(target=read_commands, name="commands", daemon=True).start()

    # Import after the thread environment is set: this loads llama.cpp.
    from engine.llm.chat_prompt import ChatFormatError, ContextOverflow
    from engine.models.gguf_file import ModelFileError
    from engine.native import build_info
    from engine.placement.machine import backend_report
    from engine.worker.session import EngineSession, LoadError

    try:
        native = {**build_info(), "gpu": backend_report()}  # the backends loaded and the GPU used, or why none
    except Exception as exc:  # a broken native install must be reported, not crash silently
        channel.emit(p.Error(kind=p.ErrorKind.NATIVE, message=str(exc)))
        return 3
    channel.emit(p.Ready(pid=os.getpid(), native=native))

    session: EngineSession | None = None
    while True:
        if session is not None and session.has_background_work():
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
        elif isinstance(msg, p.Unload):
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
            current["request_id"] = rid
            cancel.clear()
            try:
                msg.sampling.validate()
                session.generate(msg, channel.emit, cancel, t0)
            except p.SettingsError as exc:
                channel.emit(p.Error(rid, p.ErrorKind.BAD_SETTINGS, str(exc)))
            except ContextOverflow as exc:
                channel.emit(p.Error(rid, p.ErrorKind.CONTEXT_LENGTH_EXCEEDED, str(exc)))
            except ChatFormatError as exc:
                channel.emit(p.Error(rid, p.ErrorKind.BAD_REQUEST, str(exc)))
            except Exception as exc:
                traceback.print_exc()
                channel.emit(p.Error(rid, p.ErrorKind.INTERNAL, f"generation failed: {exc}"))
            finally:
                current["request_id"] = ""
    if session is not None:
        session.close()
    return 0
