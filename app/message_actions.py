"""A message card's own actions, at the right of its header: the versions at its place ("‹ 2/3 ›":
an edited question's or a regenerated answer's), Edit (questions) and Copy. It only draws and says
what was asked; the chat pane acts on it through the ChatSession."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

ARROW_SIZE = QSize(28, 26)  # px: the version arrows' click target (at least 24x24, as WCAG 2.5.8 asks)


def _small(text: str, name: str, tip: str) -> QPushButton:
    b = QPushButton(text)
    b.setObjectName("cardAction")
    b.setAccessibleName(name)
    b.setToolTip(tip)
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    b.setFlat(True)
    return b


class MessageActions(QWidget):
    copy_requested = Signal()
    edit_requested = Signal()
    page_requested = Signal(int)  # -1: the previous version, +1: the next

    def __init__(self, role: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        what = "question" if role == "user" else "answer"
        self.prev_button = _small("‹", f"Previous version of this {what}", "Show the previous version")
        self.next_button = _small("›", f"Next version of this {what}", "Show the next version")
        for arrow in (self.prev_button, self.next_button):  # a comfortable target, not an 11px glyph
            arrow.setStyleSheet("font-size: 20px; padding: 0px;")
            arrow.setMinimumSize(ARROW_SIZE)
        self.version_label = QLabel()
        self.version_label.setObjectName("cardVersion")
        self.version_label.setAccessibleName(f"Version of this {what}")
        edit_tip = "Edit and send again: the chat branches here, this version is kept"
        self.edit_button = _small("Edit", "Edit this question", edit_tip)
        self.copy_button = _small("Copy", f"Copy this {what}", f"Copy this {what}'s text")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(2)
        for w in (self.prev_button, self.version_label, self.next_button, self.edit_button, self.copy_button):
            row.addWidget(w)
        self.edit_button.setVisible(role == "user")
        self.prev_button.clicked.connect(lambda: self.page_requested.emit(-1))
        self.next_button.clicked.connect(lambda: self.page_requested.emit(+1))
        self.edit_button.clicked.connect(self.edit_requested)
        self.copy_button.clicked.connect(self._copy)
        self.set_version(1, 1)

    def set_version(self, index: int, count: int, idle: bool = True) -> None:
        """Version index of count (the pager shows only when there are several); idle: no answer
        streams, so paging and editing may change the chat."""
        many = count > 1
        self.version_label.setText(f"{index}/{count}" if many else "")
        for w in (self.prev_button, self.version_label, self.next_button):
            w.setVisible(many)
        self.prev_button.setEnabled(idle and index > 1)
        self.next_button.setEnabled(idle and index < count)
        self.edit_button.setEnabled(idle)

    def _copy(self) -> None:
        self.copy_requested.emit()
        self.copy_button.setText("Copied")
