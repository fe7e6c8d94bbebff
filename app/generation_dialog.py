"""A chat's Generation controls: sampling (with its presets), the answer's length limit, the context
length and the system prompt (with presets). It only draws them and says what was asked: the chat's
ChatSession.set_generation checks them by the protocol's limits (engine/chats/generation.py), and a
refusal shows here, in its words, with the dialog left open and nothing changed."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine import protocol as p
from engine.chats.generation import CUSTOM, LABELS, SAMPLING_PRESETS, SYSTEM_PRESETS, Generation

HELP = {
    "temperature": "How adventurous the wording is: 0 always takes the likeliest token.",
    "top_p": "Sample only from the likeliest tokens that together make up this share.",
    "top_k": "Sample only from this many likeliest tokens (0: no limit).",
    "min_p": "Leave out tokens less likely than this share of the likeliest one.",
    "repeat_penalty": "Above 1 makes repeating recent words less likely.",
    "max_tokens": "Where an answer stops; Continue writes more. At 0 it runs as long as the context has room.",
    "n_ctx": "How much of the chat the model can see at once. This chat reloads the model with it; "
    "at 0 it uses the length under Settings.",
}


class GenerationDialog(QDialog):
    applied = Signal(object, str)  # (Generation, system prompt): asked for; the window's answer is accept() or show_error()

    def __init__(self, gen: Generation, system_prompt: str, app_n_ctx: int = 0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Generation for this chat")
        self.setObjectName("generationDialog")
        self.preset = QComboBox()
        self.preset.addItems([*SAMPLING_PRESETS, CUSTOM])
        self.preset.setAccessibleName("Sampling preset")
        self.fields: dict[str, QDoubleSpinBox | QSpinBox] = {}
        form = QFormLayout()
        form.addRow("Preset", self.preset)
        for name, lo, hi, step, decimals in (
            ("temperature", 0.0, 5.0, 0.05, 2), ("top_p", 0.01, 1.0, 0.01, 2), ("top_k", 0, 100_000, 1, 0),
            ("min_p", 0.0, 0.99, 0.01, 2), ("repeat_penalty", 0.5, 3.0, 0.05, 2),
            ("max_tokens", 0, 1_000_000, 64, 0), ("n_ctx", 0, p.N_CTX_MAX, 256, 0),
        ):  # fmt: skip
            box: QDoubleSpinBox | QSpinBox = QSpinBox() if decimals == 0 else QDoubleSpinBox()
            if isinstance(box, QDoubleSpinBox):
                box.setDecimals(decimals)
            box.setRange(lo, hi)  # type: ignore[arg-type]
            box.setSingleStep(step)  # type: ignore[arg-type]
            box.setAccessibleName(LABELS[name])
            box.setToolTip(HELP[name])
            self.fields[name] = box
            form.addRow(LABELS[name], box)
        self.fields["max_tokens"].setSpecialValueText("As long as the context has room")
        app = f" ({app_n_ctx:,} tokens)" if app_n_ctx else ""
        self.fields["n_ctx"].setSpecialValueText(f"The app's setting{app}")
        self.system_preset = QComboBox()
        self.system_preset.addItems([*SYSTEM_PRESETS, CUSTOM])
        self.system_preset.setAccessibleName("System prompt preset")
        self.system_edit = QPlainTextEdit(system_prompt)
        self.system_edit.setAccessibleName("System prompt")
        self.system_edit.setPlaceholderText("What the model is told before the chat (optional)")
        self.system_edit.setFixedHeight(84)
        form.addRow("System prompt", self.system_preset)
        form.addRow("", self.system_edit)
        self.error = QLabel()
        self.error.setObjectName("generationError")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c0392b;")
        self.error.setVisible(False)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(lambda: self.applied.emit(self.result_generation(), self.system_edit.toPlainText()))
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        col = QVBoxLayout(self)
        col.addLayout(form)
        col.addWidget(self.error)
        col.addWidget(buttons)
        self.set_generation(gen)
        self._show_system_preset()
        self.preset.currentTextChanged.connect(self._on_preset)
        for name in ("temperature", "top_p"):
            self.fields[name].valueChanged.connect(self._show_preset)
        self.system_preset.currentTextChanged.connect(self._on_system_preset)
        self.system_edit.textChanged.connect(self._show_system_preset)

    def set_generation(self, gen: Generation) -> None:
        for name, box in self.fields.items():
            box.setValue(getattr(gen, name))
        self._show_preset()

    def result_generation(self) -> Generation:
        values = {name: box.value() for name, box in self.fields.items()}
        return Generation(**values)  # type: ignore[arg-type]

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))

    def _on_preset(self, name: str) -> None:
        if name in SAMPLING_PRESETS:
            self.set_generation(self.result_generation().with_preset(name))

    def _show_preset(self) -> None:
        self.preset.blockSignals(True)
        self.preset.setCurrentText(self.result_generation().preset)
        self.preset.blockSignals(False)

    def _on_system_preset(self, name: str) -> None:
        if name in SYSTEM_PRESETS:
            self.system_edit.setPlainText(SYSTEM_PRESETS[name])

    def _show_system_preset(self) -> None:
        text = self.system_edit.toPlainText().strip()
        name = next((n for n, t in SYSTEM_PRESETS.items() if t == text), CUSTOM)
        self.system_preset.blockSignals(True)
        self.system_preset.setCurrentText(name)
        self.system_preset.blockSignals(False)
