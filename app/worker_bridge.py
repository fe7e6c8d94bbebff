"""Qt face of the engine choice (engine/remote/engine_choice.py: which engine answers, the local
worker or a remote endpoint, the idle worker's news held, the engine used last restored). What the
clients' threads report is queued into the GUI thread, where the choice handles it; what it tells
comes out as two signals: the answering engine's protocol messages, and its own events."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from engine import protocol as p
from engine.client import EngineClient
from engine.remote.engine_choice import ChoiceEvent, EngineChoice


class WorkerBridge(QObject):
    # an engine.protocol message of the engine in use, on the GUI thread (the name hides QObject.event,
    # a virtual that Qt still calls in C++: PySide overrides it only with a Python method)
    event = Signal(object)  # type: ignore[assignment]
    changed = Signal(object)  # an engine_choice event (Switched, Loading, ListChanged, ...)
    _posted = Signal(object)  # a callable from any thread, run on the GUI thread

    def __init__(
        self,
        load_for: Callable[[str], p.Load],
        last_engine: str,
        local_path: str | None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._posted.connect(self._run)
        self.choice = EngineChoice(self._tell, load_for, post=self._posted.emit, last_engine=last_engine, local_path=local_path)

    def _run(self, call: Callable[[], None]) -> None:
        call()

    def _tell(self, what: p.Message | ChoiceEvent) -> None:
        (self.event if isinstance(what, p.Message) else self.changed).emit(what)

    @property
    def client(self) -> EngineClient:
        """The engine in use."""
        return self.choice.client

    @property
    def is_remote(self) -> bool:
        return self.choice.is_remote

    @property
    def local_loaded(self) -> p.Loaded | None:
        """The worker's model, kept while a remote engine answers."""
        return self.choice.local_loaded

    def send(self, msg: p.Message) -> bool:
        return self.choice.send(msg)

    def shutdown(self) -> None:
        self.choice.shutdown()
