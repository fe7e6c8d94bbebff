"""Qt face of the engine client: worker events become a Qt signal delivered on the GUI thread."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from engine import protocol as p
from engine.client import WorkerClient, WorkerError


class WorkerBridge(QObject):
    event = Signal(object)  # an engine.protocol message, delivered queued on the GUI thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        # Emitting from the client's reader thread queues the call into this object's thread.
        self.client = WorkerClient(on_event=self.event.emit)

    def start(self) -> None:
        self.client.start()

    def send(self, msg: p.Message) -> bool:
        try:
            self.client.send(msg)
            return True
        except WorkerError as exc:
            self.event.emit(p.Error(getattr(msg, "request_id", ""), exc.kind, str(exc)))
            return False

    def shutdown(self) -> None:
        self.client.stop()
