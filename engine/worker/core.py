"""The worker's core, apart from its process shell (engine/worker/process.py), as vLLM keeps EngineCore
apart from EngineCoreProc: the loaded session, its batched path and the commands held behind it,
driven one command or one step at a time on the model thread. It knows nothing of stdin, stdout or
signals: events go to `emit`, commands come through an Inbox, so tests drive it directly."""

from __future__ import annotations

import queue
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from engine import protocol as p
from engine.llm.chat_prompt import ChatFormatError, ContextOverflow
from engine.models.gguf_file import ModelFileError
from engine.worker.concurrent import ConcurrentAnswers
from engine.worker.embeddings import EmbedInputError
from engine.worker.inbox import Inbox
from engine.worker.modes import LoadError
from engine.worker.session import EngineSession

# how long an idle worker with background work (auto's measurement) waits for a command between two units of it
IDLE_POLL_S = 0.05


class WorkerCore:
    def __init__(self, emit: Callable[[p.Message], None], inbox: Inbox | None = None) -> None:
        self.emit = emit
        self.inbox = inbox if inbox is not None else Inbox()
        self.session: EngineSession | None = None
        self.together: ConcurrentAnswers | None = None  # the batched path of a session loaded with n_parallel > 1
        self.held: deque[p.Message] = deque()  # commands that came while answers decode together and cannot join them

    def step(self) -> bool:
        """One turn of the worker: a step of the answers decoded together, else one unit of idle
        work or one command (waited for). False once the worker is to stop."""
        if self.together is not None and self.together.busy:
            return self._step_together(self.together)
        msg = self._next_command()
        return True if msg is None else self.handle(msg)

    def handle(self, msg: p.Message) -> bool:
        """One command, on the model thread (a Cancel goes to Inbox.put instead). False: Shutdown."""
        if isinstance(msg, p.Shutdown):
            return False
        if isinstance(msg, p.Load):
            self._load(msg)
        elif isinstance(msg, p.CountTokens):
            if self.session is None:
                self.emit(p.TokenCount(msg.request_id))  # n_ctx 0: nothing loaded to count with
            else:
                self._count_tokens(self.session, msg)
        elif isinstance(msg, p.Embed):
            self._embed(msg)
        elif isinstance(msg, p.Unload):
            self._set_together(None)
            self._close_session()
            self.emit(p.Unloaded())
        elif isinstance(msg, p.Generate):
            self._generate(msg)
        return True

    def close(self) -> None:
        """The worker ends: the model goes."""
        self._close_session()

    # -- the loop's two halves ------------------------------------------------------------------

    def _step_together(self, together: ConcurrentAnswers) -> bool:
        """Decoding together: requests that came meanwhile join at once while there is room, in
        arrival order; a command that cannot join waits for the batch to drain, and so does all after it."""
        inbox = self.inbox
        if inbox.stopping.is_set():
            together.cancel_all()
            return False
        if inbox.cancel.is_set():  # a Cancel with no id: whatever runs now
            inbox.cancel.clear()
            for rid in together.cancel_all():
                inbox.cancelled_ids.discard(rid)
        together.rearm()
        while True:
            if self.held:
                nxt = self.held[0]
            else:
                try:
                    nxt = inbox.commands.get_nowait()
                except queue.Empty:
                    break
                self.held.append(nxt)
            if isinstance(nxt, p.CountTokens) and self.session is not None and len(self.held) == 1:
                self.held.popleft()  # no decode needed: answered at once
                self._count_tokens(self.session, nxt)
                continue
            if not (self._batchable(nxt) and together.has_room()):
                break
            self.held.popleft()
            assert isinstance(nxt, p.Generate)
            self._join(together, nxt)
        for rid in together.step(lambda rid: rid in inbox.cancelled_ids):
            inbox.cancelled_ids.discard(rid)
        return True

    def _next_command(self) -> p.Message | None:
        """A held command, else the next to come; None after a unit of idle work when none came."""
        if self.held:
            return self.held.popleft()
        commands = self.inbox.commands
        if self.session is not None and self.session.has_background_work():
            # idle: one unit of auto's measurement at a time; a command arriving interrupts it
            try:
                return commands.get(timeout=IDLE_POLL_S)
            except queue.Empty:
                decided = self.session.background_step(lambda: not commands.empty())
                if decided is not None:
                    self.emit(decided)
                return None
        return commands.get()

    # -- commands -------------------------------------------------------------------------------

    def _load(self, msg: p.Load) -> None:
        self._set_together(None)  # its session goes
        try:
            msg.validate()  # before the current model goes: a refused load loses nothing
        except p.SettingsError as exc:
            self.emit(p.Error(kind=p.ErrorKind.BAD_SETTINGS, message=str(exc)))
            if self.session is not None:  # the client may have stopped answering while it waited
                self.emit(replace(self.session.loaded, kept=True))
            return
        previous = self.session.load if self.session is not None else None
        self._close_session()  # one model in memory at a time
        try:
            self.session = EngineSession(msg)
            self._set_together(ConcurrentAnswers(self.session, self.emit) if self.session.batch is not None else None)
            self.emit(self.session.loaded)
            return
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
        self.session = _load_again(previous)
        session = self.session
        self._set_together(ConcurrentAnswers(session, self.emit) if session is not None and session.batch is not None else None)
        if session is not None:
            refused.message += f" {session.loaded.name} stays loaded, as it was."
        self.emit(refused)
        if session is not None:
            self.emit(replace(session.loaded, kept=True))

    def _count_tokens(self, session: EngineSession, msg: p.CountTokens) -> None:
        try:
            self.emit(session.count_tokens(msg))
        except ChatFormatError as exc:
            self.emit(p.Error(msg.request_id, p.ErrorKind.BAD_REQUEST, str(exc)))

    def _embed(self, msg: p.Embed) -> None:
        if self.session is None:
            self.emit(p.Error(msg.request_id, p.ErrorKind.NO_MODEL, "No model is loaded; load one first."))
            return
        try:
            self.emit(self.session.embed(msg))
        except EmbedInputError as exc:
            self.emit(p.Error(msg.request_id, exc.kind, str(exc)))
        except Exception as exc:
            self.emit(_refusal(msg.request_id, exc))

    def _generate(self, msg: p.Generate) -> None:
        t0 = time.perf_counter()
        rid, inbox = msg.request_id, self.inbox
        if self.session is None:
            self.emit(p.Error(rid, p.ErrorKind.NO_MODEL, "No model is loaded; load one first."))
            return
        if self.together is not None and self._batchable(msg):
            self._join(self.together, msg)
            return
        if rid in inbox.cancelled_ids:  # its client left while it waited behind answers decoded together
            inbox.cancelled_ids.discard(rid)
            self.emit(p.Done(rid, p.FinishReason.CANCELLED))
            return
        inbox.current = rid
        inbox.cancel.clear()
        try:
            msg.sampling.validate()
            self.session.generate(msg, self.emit, inbox.cancel, t0)
        except Exception as exc:
            self.emit(_refusal(rid, exc))
        finally:
            inbox.current = ""
            inbox.cancelled_ids.discard(rid)

    # -- the batched path -----------------------------------------------------------------------

    def _batchable(self, msg: p.Message) -> bool:
        return (
            self.together is not None and self.session is not None
            and isinstance(msg, p.Generate) and self.session.can_batch(msg)
        )  # fmt: skip

    def _join(self, together: ConcurrentAnswers, msg: p.Generate) -> None:
        """Start a request beside the answers being decoded (or alone, as the batch's first)."""
        if not together.busy:
            self.inbox.cancel.clear()  # a Cancel with no id that came while nothing ran stops nothing later
        if msg.request_id in self.inbox.cancelled_ids:  # its client left while it waited
            self.inbox.cancelled_ids.discard(msg.request_id)
            self.emit(p.Done(msg.request_id, p.FinishReason.CANCELLED))
            return
        try:
            msg.sampling.validate()
            together.admit(msg, time.perf_counter())
        except Exception as exc:  # the session refused it: the others decode on
            self.emit(_refusal(msg.request_id, exc))

    def _set_together(self, together: ConcurrentAnswers | None) -> None:
        """The batched path, here and for the command reader (which interrupts its steps)."""
        self.together = self.inbox.batched = together

    def _close_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def _refusal(rid: str, exc: Exception) -> p.Error:
    """A Generate the session refused, as the client is told."""
    if isinstance(exc, p.SettingsError):
        return p.Error(rid, p.ErrorKind.BAD_SETTINGS, str(exc))
    if isinstance(exc, ContextOverflow):
        return p.Error(rid, p.ErrorKind.CONTEXT_LENGTH_EXCEEDED, str(exc))
    if isinstance(exc, ChatFormatError):
        return p.Error(rid, p.ErrorKind.BAD_REQUEST, str(exc))
    traceback.print_exc()
    return p.Error(rid, p.ErrorKind.INTERNAL, f"generation failed: {exc}")


def _load_again(load: p.Load | None) -> EngineSession | None:
    """The session of a load that worked before (after another was refused), or None."""
    if load is None:
        return None
    try:
        return EngineSession(load)
    except Exception:  # the file went away meanwhile: nothing is loaded, the refusal says why
        traceback.print_exc()
        return None
