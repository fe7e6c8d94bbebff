"""Qt face of the engines: the local worker (WorkerClient) and, when the user picks one, a remote
OpenAI-compatible server (RemoteClient). Their events become one Qt signal delivered on the GUI
thread, for the engine in use.

The local worker stays up (its model loaded) while a remote engine answers, so switching back is
instant: what it says about itself meanwhile (Loaded, AutoDecided, errors outside a request) is
kept and told when the window uses it again, never shown as the current engine's state. Events of
a request (Token, Stats, Done, a request's Error) always pass: ChatSession matches them by id, and
a stopped answer's Done may arrive after a switch."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from engine import protocol as p
from engine.client import EngineClient, WorkerClient, WorkerError
from engine.remote.client import RemoteClient
from engine.remote.endpoints import Endpoint


class WorkerBridge(QObject):
    event = Signal(object)  # an engine.protocol message of the engine in use, on the GUI thread
    _local_event = Signal(object)  # from the worker's reader thread, queued into the GUI thread
    _remote_event = Signal(object, object)  # (client, message): a replaced client's events are dropped

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.local = WorkerClient(on_event=self._local_event.emit)
        self.remote: RemoteClient | None = None
        self.local_loaded: p.Loaded | None = None  # the worker's model, kept while a remote engine answers
        self.local_decided: p.AutoDecided | None = None
        self._held: list[p.Message] = []  # the worker's other news while not in use
        self._local_event.connect(self._on_local)
        self._remote_event.connect(self._on_remote)

    @property
    def client(self) -> EngineClient:
        """The engine in use."""
        return self.remote or self.local

    @property
    def is_remote(self) -> bool:
        return self.remote is not None

    def start(self) -> None:
        self.local.start()

    def send(self, msg: p.Message, client: EngineClient | None = None) -> bool:
        try:
            (client or self.client).send(msg)
            return True
        except WorkerError as exc:
            self.event.emit(p.Error(getattr(msg, "request_id", ""), exc.kind, str(exc)))
            return False

    def use_remote(self, endpoint: Endpoint, api_key: str | None) -> None:
        """Answer with this endpoint from now on (nothing is contacted until a Load or Generate)."""
        self._stop_remote()
        remote = RemoteClient(endpoint, api_key, on_event=lambda msg: self._remote_event.emit(remote, msg))
        self.remote = remote
        remote.start()

    def use_local(self, replay: bool = True) -> bool:
        """The local worker answers again. replay: tell the window its model as if just loaded
        (instant; False when a new Load follows). Returns whether a loaded model was told."""
        self._stop_remote()
        held, self._held = self._held, []
        told = replay and self.local_loaded is not None
        if told:
            self.event.emit(self.local_loaded)
            if self.local_decided is not None:
                self.event.emit(self.local_decided)
        for msg in held:
            self.event.emit(msg)
        return told

    def shutdown(self) -> None:
        self._stop_remote()
        self.local.stop()

    def _stop_remote(self) -> None:
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.stop()

    def _on_local(self, msg: p.Message) -> None:
        if isinstance(msg, p.Loaded):
            self.local_loaded, self.local_decided = msg, None
        elif isinstance(msg, p.AutoDecided):
            self.local_decided = msg
        elif isinstance(msg, p.Unloaded) or (
            isinstance(msg, p.Error) and msg.kind in (p.ErrorKind.WORKER_DIED, p.ErrorKind.VERSION_MISMATCH)
        ):
            self.local_loaded = self.local_decided = None  # nothing to go back to without a new Load
        if self.remote is None or isinstance(msg, p.Ready) or getattr(msg, "request_id", ""):
            self.event.emit(msg)  # Ready: the worker's build, for About, whichever engine answers
        elif not isinstance(msg, p.Loaded | p.AutoDecided):
            self._held.append(msg)

    def _on_remote(self, client: RemoteClient, msg: p.Message) -> None:
        # a replaced client's request events still pass (its stopped answer's Done), nothing else
        if not isinstance(msg, p.Ready) and (client is self.remote or getattr(msg, "request_id", "")):
            self.event.emit(msg)
