"""The composer under the chat: the answer's actions (Continue, Regenerate, Edit last, Copy answer),
a note while a question is edited (with Cancel edit),
the chat's system prompt and sampling preset, the message box (Enter sends, Shift+Enter adds a line)
and Send/Stop. It only draws and says what was asked; the window acts on it."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFocusEvent, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
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
    """Enter sends, Shift+Enter inserts a newline. The chat's scrolling keys (PageUp/PageDown,
    Ctrl+Home/Ctrl+End) are the chat pane's, and Ctrl+Z with nothing of its own to undo is the
    window's (undo a deleted chat): it lets those shortcuts run instead of taking the keys."""

    submitted = Signal()
    CHAT_KEYS = tuple(QKeySequence(k) for k in ("PgUp", "PgDown", "Ctrl+Home", "Ctrl+End"))

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent):
            pressed = QKeySequence(event.keyCombination())
            nothing_to_undo = event.matches(QKeySequence.StandardKey.Undo) and not self.document().isUndoAvailable()
            if pressed in self.CHAT_KEYS or nothing_to_undo:
                event.ignore()
                return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class SystemPromptEdit(QLineEdit):
    """The chat's system prompt on one line, where it rarely fits: unless it is being edited it
    shows its start (setText and typing leave the cursor at the end, which scrolled the start out
    of view); the whole prompt is in the tooltip."""

    def __init__(self) -> None:
        super().__init__()
        self.textChanged.connect(self.setToolTip)

    def setText(self, text: str | None) -> None:
        super().setText(text)
        self.setCursorPosition(0)

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        # left for another control, not for a menu or another window (the edit goes on there)
        if event.reason() not in (Qt.FocusReason.PopupFocusReason, Qt.FocusReason.ActiveWindowFocusReason):
            self.setCursorPosition(0)


class Composer(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.system_edit = SystemPromptEdit()
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
        self.continue_button.setToolTip("The answer was cut at the length limit, stopped or interrupted: write more of it")
        self.continue_button.setVisible(False)
        # while a question is edited: what sending will do, and the way out (nothing changed yet)
        self.edit_note = QLabel("Editing a question: Send branches the chat there; the current version is kept.")
        self.edit_note.setObjectName("editNote")
        self.edit_note.setWordWrap(True)
        self.cancel_edit_button = button("Cancel edit")
        self.cancel_edit_button.setToolTip("Leave the question as it is (Esc)")
        self.edit_row = QWidget()
        edit_row = QHBoxLayout(self.edit_row)
        edit_row.setContentsMargins(0, 0, 0, 0)
        edit_row.addWidget(self.edit_note, 1)
        edit_row.addWidget(self.cancel_edit_button)
        self.edit_row.setVisible(False)

        actions = QHBoxLayout()
        actions.setSpacing(6)
        for b in (self.continue_button, self.regen_button, self.edit_button, self.copy_button):
            actions.addWidget(b)
        actions.addStretch()
        actions.addWidget(self.system_edit, 2)
        actions.addWidget(self.preset)
        # the message's live token count against the room left in the context, or why it will not fit
        self.count_label = QLabel()
        self.count_label.setObjectName("countLabel")
        self.count_label.setAccessibleName("Message length")
        self.count_label.setWordWrap(True)
        self.count_label.setVisible(False)
        box = QFrame()
        box.setObjectName("composer")  # the rounded message box of the theme
        box_col = QVBoxLayout(box)
        box_col.setContentsMargins(8, 6, 8, 6)
        box_col.setSpacing(2)
        row = QHBoxLayout()
        box_col.addLayout(row)
        box_col.addWidget(self.count_label)
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
        col.addWidget(self.edit_row)
        col.addWidget(box)

    def show_count(self, text: str, over: bool) -> None:
        """The count line: muted, or in the warning colour when the message will not fit."""
        self.count_label.setText(text)
        self.count_label.setVisible(bool(text))
        if self.count_label.property("over") != over:
            self.count_label.setProperty("over", over)
            self.count_label.style().unpolish(self.count_label)
            self.count_label.style().polish(self.count_label)

    def set_state(
        self, busy: bool, loaded: bool, has_answer: bool, has_question: bool, can_continue: bool = False, editing: str = ""
    ) -> None:
        """Which actions apply now: an answer streams (busy), a model answers (loaded), the chat ends
        with an answer, the chat has a question to edit, the last answer can go on, the question
        being edited (its text as it stands in the chat; "" when none is)."""
        idle = not busy and loaded
        enabled: dict[QWidget, bool] = {
            self.stop_button: busy,
            self.send_button: idle,
            # with no engine answering (it crashed), Regenerate and Continue restart it, as the
            # interrupted answer's footer offers
            self.regen_button: not busy and has_answer and (loaded or can_continue),
            self.edit_button: not busy and has_question,
            self.copy_button: has_answer,  # nothing to copy in an empty chat
        }
        shown = {self.continue_button: not busy and can_continue, self.edit_row: bool(editing)}
        focused = QApplication.focusWidget()
        if focused is not None and (
            enabled.get(focused) is False or any(not on and w.isAncestorOf(focused) for w, on in shown.items())
        ):
            # the button pressed goes away (Stop once the answer ends): the message box takes the
            # focus first, before Qt hands it to the next widget in the chain (a card's Copy,
            # which scrolled the chat to the top) where Space would press it
            self.input.setFocus()
        for w, on in enabled.items():
            w.setEnabled(on)
        self.send_button.setText("Send edit" if editing else "Send")  # the accessible name stays "Send"
        if editing:
            short = " ".join(editing.split())
            short = short if len(short) <= 48 else short[:47] + "…"
            self.edit_note.setText(f"Editing “{short}”: Send branches the chat there; the current version is kept.")
        for w, on in shown.items():
            w.setVisible(on)
