"""Thin clients for an engine (the only way app/ and the CLI reach a model): the local worker
process (WorkerClient) or a remote OpenAI-compatible server (engine.remote.RemoteClient), both
behind EngineClient so the window's bridge and `specee chat` drive either the same way.

Events arrive on a background thread. Give `on_event` to receive them there (the Qt bridge re-emits
them as signals); without it they queue up for the blocking helpers used by the CLI, bench and tests.
A worker that dies, even by `kill -9`, becomes one `Error(kind="worker_died")` event; `start()`
then launches a fresh one. A worker of another protocol version is refused (`version_mismatch`)
and stopped: its Ready never counts.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self

from engine import protocol as p
from engine.paths import REPO_ROOT, cache_dir

EventHandler = Callable[[p.Message], None]
FROZEN_WORKER_FLAG = "--specee-worker"


class EngineError(RuntimeError):
    """An engine, local or remote, refused or failed a request; kind says how (protocol's ErrorKind).
    Catch this where either engine may answer (the chat loop, the engine choice)."""

    def __init__(self, kind: p.ErrorKind | str, message: str) -> None:
        super().__init__(message)
        # a member whenever the protocol knows the kind (never fail while reporting a failure)
        self.kind = p.ErrorKind(kind) if kind in p.ErrorKind._value2member_map_ else kind


class WorkerError(EngineError):
    """The local worker process refused a request, timed out or is gone."""


def worker_command(python: str | None = None) -> list[str]:
    """The worker runs from the same interpreter, or the frozen app's own executable."""
    if python is None and getattr(sys, "frozen", False):
        return [sys.executable, FROZEN_WORKER_FLAG]
    return [python or sys.executable, "-m", "engine.worker"]


# A log line that says what went wrong (an exception, an assertion, the C runtime or the kernel):
# the rest of a worker's log is load chatter, which tells a user nothing about a crash
_TELLING = re.compile(r"error|exception|fatal|abort|assert|segmentation fault|out of memory|killed|terminate", re.I)


def telling_log_line(lines: list[str]) -> str:
    """The last line of a worker's log that says what went wrong ("" if none does)."""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(("File ", "Traceback")) and _TELLING.search(text):
            return text[:300]
    return ""


class EngineClient:
    """What the window's bridge and `specee chat` use of an engine, local or remote: commands go in
    with send(), events come out to on_event (on a background thread) or, without it, to a queue
    that the blocking helpers read. Choosing the model is engine-specific (each client's load())."""

    error_type: type[EngineError] = EngineError  # what this client raises: each engine has its own

    def __init__(self, on_event: EventHandler | None = None) -> None:
        self._on_event = on_event
        self._events: queue.Queue[p.Message] = queue.Queue()
        self.ready: p.Ready | None = None

    @property
    def alive(self) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> p.Ready:
        raise NotImplementedError

    def stop(self, timeout: float = 5.0) -> None:
        raise NotImplementedError

    def send(self, msg: p.Message) -> None:
        """Raises self.error_type (an EngineError) when the engine cannot take it at all (stopped, gone)."""
        raise NotImplementedError

    def _dispatch(self, msg: p.Message) -> None:
        if isinstance(msg, p.Ready):
            self.ready = msg
        if self._on_event is not None:
            self._on_event(msg)
        else:
            self._events.put(msg)

    # -- blocking helpers (no on_event handler) ---------------------------------------------------

    def next_event(self, timeout: float | None = None) -> p.Message:
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            raise self.error_type(p.ErrorKind.TIMEOUT, f"no reply from the engine within {timeout:.0f}s") from None

    def wait_for(self, kind: type[p.Message], timeout: float = 60.0) -> p.Message:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.next_event(max(0.01, deadline - time.monotonic()))
            if isinstance(msg, kind):
                return msg
            if isinstance(msg, p.Error):
                raise self.error_type(msg.kind, msg.message)

    def generate(
        self,
        messages: list[dict[str, str]],
        sampling: p.Sampling | None = None,
        request_id: str | None = None,
        report_margins: bool = False,
        continue_answer: bool = False,
        stream: bool = True,
    ) -> str:
        """stream=False: the answer's text comes as one Token at its end (p.Generate.stream)."""
        rid = request_id or uuid.uuid4().hex[:12]
        self.send(p.Generate(rid, messages, sampling or p.Sampling(), report_margins, continue_answer, stream=stream))
        return rid

    def stream(
        self,
        messages: list[dict[str, str]],
        sampling: p.Sampling | None = None,
        timeout: float = 600.0,
        continue_answer: bool = False,
    ) -> Iterator[p.Message]:
        """Yield this request's events up to and including Done; an Error raises self.error_type.
        continue_answer: messages end with an unfinished answer, to be continued."""
        return self.events_of(self.generate(messages, sampling, continue_answer=continue_answer), timeout)

    def events_of(self, rid: str, timeout: float = 600.0) -> Iterator[p.Message]:
        """The events of request rid, up to and including Done; an Error raises self.error_type."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.next_event(max(0.01, deadline - time.monotonic()))
            if isinstance(msg, p.Error) and msg.request_id in ("", rid):
                raise self.error_type(msg.kind, msg.message)
            if getattr(msg, "request_id", rid) != rid:
                continue
            yield msg
            if isinstance(msg, p.Done):
                return

    def cancel(self, request_id: str = "") -> None:
        self.send(p.Cancel(request_id))

    def __enter__(self) -> Self:
        if not self.alive:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class WorkerClient(EngineClient):
    error_type = WorkerError

    def __init__(self, on_event: EventHandler | None = None, python: str | None = None, command: list[str] | None = None) -> None:
        """python: another interpreter for the worker (benchmarks against upstream); command: the
        whole worker command line (tests that start it in a particular way)."""
        super().__init__(on_event)
        self._python = python
        self._command = command
        self._proc: subprocess.Popen[str] | None = None
        self._send_lock = threading.Lock()
        self._stopping = False
        self._stderr_tail: deque[str] = deque(maxlen=30)
        self._stderr_reader: threading.Thread | None = None
        self.log_path: Path | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 60.0) -> p.Ready:
        """Start (or restart) the worker and wait until it reports ready."""
        self.stop()
        self._stopping = False
        self._events = queue.Queue()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        env["PYTHONUNBUFFERED"] = "1"
        logs = cache_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / "worker.log"
        self._stderr_tail.clear()
        self._proc = subprocess.Popen(
            self._command or worker_command(self._python),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
            env=env,
            # its own session: a terminal's Ctrl+C (SIGINT to the foreground process group) stops
            # the frontend's answer, not the engine; it still exits when our end of stdin closes
            start_new_session=os.name == "posix",
            creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
        )
        proc = self._proc
        threading.Thread(target=self._read_events, args=(proc,), name="worker-events", daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._read_stderr, args=(proc,), name="worker-stderr", daemon=True)
        self._stderr_reader.start()
        if self._on_event is None:
            ready = self.wait_for(p.Ready, timeout=timeout)
            assert isinstance(ready, p.Ready)
            self.ready = ready
            return ready
        return p.Ready(pid=proc.pid)

    def stop(self, timeout: float = 5.0) -> None:
        proc = self._proc
        if proc is None:
            return
        self._stopping = True
        if proc.poll() is None:
            try:
                self.send(p.Shutdown())
                proc.wait(timeout=timeout)
            except (WorkerError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        self._proc = None

    def kill(self) -> None:
        """Hard-kill (used by tests and by a user's "force stop")."""
        if self._proc and self._proc.poll() is None:
            self._proc.kill()

    # -- I/O ------------------------------------------------------------------------------------

    def send(self, msg: p.Message) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            raise WorkerError(p.ErrorKind.WORKER_DIED, "The engine process is not running; restart it.")
        try:
            with self._send_lock:
                proc.stdin.write(p.encode(msg) + "\n")
                proc.stdin.flush()
        except UnicodeEncodeError as exc:  # a lone surrogate: the request's fault, and nothing was written
            why = f"the request holds text that is not valid Unicode ({exc.reason})"
            raise WorkerError(p.ErrorKind.BAD_REQUEST, why) from exc
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise WorkerError(p.ErrorKind.WORKER_DIED, f"The engine process is gone ({exc}); restart it.") from exc

    def _read_events(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                self._dispatch(p.decode(line))
            except p.VersionMismatch as exc:
                # an engine from another install: refuse it rather than misread what it says
                self._stopping = True
                proc.kill()
                self._dispatch(p.Error(kind=p.ErrorKind.VERSION_MISMATCH, message=str(exc)))
            except p.ProtocolError:
                self._stderr_tail.append(f"[bad event line] {line[:200]}")
        code = proc.wait()
        if not self._stopping and proc is self._proc:
            self._dispatch(p.Error(kind=p.ErrorKind.WORKER_DIED, message=self._death_message(code)))

    def _read_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None and self.log_path is not None
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in proc.stderr:
                log.write(line)
                log.flush()
                self._stderr_tail.append(line.rstrip())

    def _death_message(self, code: int) -> str:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout=2.0)  # the log's last lines, written as it died
        line = telling_log_line(list(self._stderr_tail))
        detail = f"\nThe log's last error: {line}" if line else ""
        return (
            f"The engine process {how}. Your conversation is kept; restart the engine to continue. Log: {self.log_path}{detail}"
        )

    # -- the model ------------------------------------------------------------------------------

    def load(
        self,
        model_path: str | Path,
        placement: p.Placement | None = None,
        mode: p.Mode | str = p.Mode.VANILLA,
        timeout: float = 300.0,
        n_draft: int = 0,
        exit_check_every: int = 0,
        exit_fill: bool = True,
        exits: bool = True,
        drafter: str = "",
        draft_model: str = "",
        keep_kv: bool = True,
        measure_reference: bool = True,
        n_parallel: int = 1,
    ) -> p.Loaded:
        # a known string becomes a Mode in Load, and validate() refuses another with a clear message
        load = p.Load(str(model_path), placement or p.Placement(), mode, n_draft, exit_check_every, exit_fill, exits,  # type: ignore[arg-type]
                      drafter, draft_model, keep_kv, measure_reference=measure_reference, n_parallel=n_parallel)  # fmt: skip
        return self.load_intent(load, timeout)

    def load_intent(self, load: p.Load, timeout: float = 300.0) -> p.Loaded:
        """Send the intent and wait for the worker's answer; the worker validates it (Load.validate)
        and decides the rest. WorkerError (e.g. bad_settings, model_file) when it refuses."""
        self.send(load)
        deadline = time.monotonic() + timeout
        while True:
            loaded = self.wait_for(p.Loaded, timeout=max(0.01, deadline - time.monotonic()))
            assert isinstance(loaded, p.Loaded)
            if not loaded.kept:  # an earlier refused load's model, loaded again: not this load's answer
                return loaded
