"""A long message (a paste) shown collapsed: its first lines and "Show all"; all of it then in a box
of its own height that scrolls, so a 200,000-character paste never becomes a card taller than the
chat (nor costs seconds to lay out as one label)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from engine.chats.long_input import preview

FULL_HEIGHT = 320  # px: the expanded text scrolls inside this


class LongText(QWidget):
    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = ""
        self.preview = QLabel()
        self.preview.setObjectName("messageText")
        self.preview.setTextFormat(Qt.TextFormat.PlainText)
        self.preview.setWordWrap(True)
        self.preview.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.full = QPlainTextEdit()
        self.full.setObjectName("fullText")
        self.full.setAccessibleName("Whole message")
        self.full.setReadOnly(True)
        self.full.setFixedHeight(FULL_HEIGHT)
        self.full.setVisible(False)
        self.toggle = QPushButton()
        self.toggle.setObjectName("showAll")
        self.toggle.clicked.connect(lambda: self.set_expanded(not self.full.isVisible()))
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.toggle)
        row.addStretch()
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(6)
        col.addWidget(self.preview)
        col.addWidget(self.full)
        col.addLayout(row)
        self.set_text(text)

    def set_text(self, text: str) -> None:
        if text == self.text:
            return
        self.text = text
        self.preview.setText(preview(text))
        if self.full.isVisible():
            self.full.setPlainText(text)
        self._label()

    def set_expanded(self, expanded: bool) -> None:
        if expanded and self.full.toPlainText() != self.text:
            self.full.setPlainText(self.text)  # only when asked: a 200k-character document is not free
        self.full.setVisible(expanded)
        self.preview.setVisible(not expanded)
        self._label()

    def _label(self) -> None:
        text = "Show less" if self.full.isVisible() else f"Show all ({len(self.text):,} characters)"
        self.toggle.setText(text)
        self.toggle.setAccessibleName(text)
