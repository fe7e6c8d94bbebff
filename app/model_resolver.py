"""Finds (first run: installs) the default model off the GUI thread, reporting its steps."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal

from engine.models.default_model import ensure_default_model


class ModelResolver(QObject):
    resolved = Signal(str)  # the model file's path
    failed = Signal(str)
    progress = Signal(str)

    def run(self, repair: bool = False) -> None:
        """repair: the file is damaged: fetch it again (verified)."""

        def work() -> None:
            try:
                self.resolved.emit(str(ensure_default_model(self.progress.emit, repair=repair)))
            except Exception as exc:
                self.failed.emit(str(exc))

        threading.Thread(target=work, name="model-resolver", daemon=True).start()
