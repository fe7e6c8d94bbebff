"""The composer under the chat: the answer's actions (Continue, Regenerate, Edit last, Copy answer),
the chat's system prompt and sampling preset, the message box (Enter sends, Shift+Enter adds a line)
and Send/Stop. It only draws and says what was asked; the window acts on it."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

PRESETS = {  # name -> (temperature, top_p)
    "Precise": (0.2, 0.9),
    "Balanced": (0.7, 0.95),
    "Creative": (1.0, 0.98),
}


def button(text: str, role: str = "") -> QPushButton:
    """A push button named for screen readers; role "primary" / "danger" is styled by the theme."""
    b = QPushButton(text)
    b.setAccessibleName(text)
    if role:
        b.setObjectName(role)
    return b


class PromptEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter inserts a newline."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class Composer(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.system_edit = QLineEdit()
        self.system_edit.setPlaceholderText("System prompt for this chat (optional)")
        self.system_edit.setAccessibleName("System prompt")
        self.preset = QComboBox()
        self.preset.addItems(list(PRESETS))
        self.preset.setCurrentText("Balanced")
        self.preset.setAccessibleName("Sampling preset")
        self.preset.setToolTip("How adventurous the answers are")
        self.input = PromptEdit()
        self.input.setAccessibleName("Message")
        self.input.setPlaceholderText("Message the model (Enter sends, Shift+Enter for a new line)")
        self.input.setFixedHeight(72)
        # Tab leaves the message box: a tab character is rarely what a chat wants
        self.input.setTabChangesFocus(True)
        self.send_button = button("Send", "primary")
        self.stop_button = button("Stop")
        self.stop_button.setEnabled(False)
        self.regen_button = button("Regenerate")
        self.edit_button = button("Edit last")
        self.copy_button = button("Copy answer")
        self.continue_button = button("Continue", "primary")
        self.continue_button.setToolTip("The answer stopped at the length limit: generate more of it")
        self.continue_button.setVisible(False)

        actions = QHBoxLayout()
        actions.setSpacing(6)
        for b in (self.continue_button, self.regen_button, self.edit_button, self.copy_button):
            actions.addWidget(b)
        actions.addStretch()
        actions.addWidget(self.system_edit, 2)
        actions.addWidget(self.preset)
        box = QFrame()
        box.setObjectName("composer")  # the rounded message box of the theme
        row = QHBoxLayout(box)
        row.setContentsMargins(8, 6, 8, 6)
        row.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch()
        row.addLayout(buttons)
        col = QVBoxLayout(self)
        col.setContentsMargins(20, 8, 20, 12)
        col.setSpacing(8)
        col.addLayout(actions)
        col.addWidget(box)

    def set_state(self, busy: bool, loaded: bool, has_answer: bool, has_question: bool) -> None:
        """Which actions apply now: an answer streams (busy), a model answers (loaded), the chat ends
        with an answer, the chat has a question to edit."""
        idle = not busy and loaded
        self.stop_button.setEnabled(busy)
        self.send_button.setEnabled(idle)
        self.regen_button.setEnabled(idle and has_answer)
        self.edit_button.setEnabled(not busy and has_question)
        self.copy_button.setEnabled(has_answer)  # nothing to copy in an empty chat
