"""Settings: acceleration mode, threads, context length; where models live; what the engine chose."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel, QSpinBox

from engine.hardware import physical_cores
from engine.models.download import models_dir
from engine.settings import MODES, AppSettings


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, engine_state: str = "", parent=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.mode = QComboBox()
        self.mode.addItems(list(MODES))
        self.mode.setCurrentText(settings.mode)
        self.mode.setAccessibleName("Acceleration mode")
        self.threads = QSpinBox()
        self.threads.setRange(0, 256)
        self.threads.setSpecialValueText(f"automatic ({physical_cores()} physical cores)")
        self.threads.setValue(settings.n_threads)
        self.threads.setAccessibleName("Threads")
        self.ctx = QSpinBox()
        self.ctx.setRange(256, 131072)
        self.ctx.setSingleStep(1024)
        self.ctx.setValue(settings.n_ctx)
        self.ctx.setAccessibleName("Context length")
        form = QFormLayout(self)
        form.addRow("Acceleration", self.mode)
        form.addRow("Threads", self.threads)
        form.addRow("Context length (tokens)", self.ctx)
        form.addRow("Model folder", QLabel(str(models_dir())))
        state = QLabel(engine_state or "No model loaded yet.")
        state.setWordWrap(True)
        form.addRow("Engine", state)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def result_settings(self, base: AppSettings) -> AppSettings:
        return AppSettings(self.mode.currentText(), self.threads.value(), self.ctx.value(), base.last_model)
