"""Runs the acceleration trainers (`specee train eagle`, then `specee train exits`) for a model in
a background process, reporting progress lines; explains how to get PyTorch when it is missing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, Signal

from engine.models.acceleration import acceleration_folder


def training_available() -> bool:
    return importlib.util.find_spec("torch") is not None and not getattr(sys, "frozen", False)


HOW_TO = (
    "Training acceleration needs the optional training extra (PyTorch, CPU): run "
    "`pip install -e '.[train]'` in the app's environment, then try again."
)


class TrainRunner(QObject):
    progress = Signal(str)
    finished = Signal(bool, str)  # ok, message

    def __init__(self, model_path: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model = Path(model_path)
        self.out = acceleration_folder(self.model)  # the worker hashed the loaded model: a cache hit
        self.steps = [
            ["train", "eagle", "--model", str(self.model), "--out", str(self.out / "eagle.gguf")],
            ["train", "exits", "--model", str(self.model), "--out", str(self.out / "exits.gguf")],
        ]
        self.proc: QProcess | None = None

    def start(self) -> bool:
        if not training_available():
            self.finished.emit(False, HOW_TO)
            return False
        self._next()
        return True

    def cancel(self) -> None:
        if self.proc is not None:
            self.steps = []
            self.proc.kill()

    def _next(self) -> None:
        if not self.steps:
            self.finished.emit(True, f"Acceleration for {self.model.name} is trained; reload the model to use it.")
            return
        args = self.steps.pop(0)
        self.proc = QProcess(self)
        self.proc.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        self.proc.readyReadStandardOutput.connect(self._read)
        self.proc.finished.connect(self._done)
        self.progress.emit(f"specee {args[0]} {args[1]}…")
        self.proc.start(sys.executable, ["-m", "engine.cli", *args])

    def _read(self) -> None:
        assert self.proc is not None
        text = bytes(self.proc.readAllStandardOutput().data()).decode(errors="replace")
        lines = [seg.strip() for seg in text.replace("\r", "\n").split("\n") if seg.strip()]
        if lines:
            self.progress.emit(lines[-1][-160:])

    def _done(self, code: int, _status: QProcess.ExitStatus) -> None:
        if code != 0:
            self.steps = []
            self.finished.emit(False, f"training stopped (exit code {code}); see the progress line above")
            return
        self._next()
