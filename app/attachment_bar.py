"""The row above the message box: Attach file…, the files that go with the next message as chips
(each with ×), Generation… (the chat's controls), and why a file cannot go (unreadable, binary, too
big, does not fit the context). It only draws; the chat pane acts."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

from engine.chats.attachments import Attachment


class AttachmentBar(QWidget):
    attach_requested = Signal()
    generation_requested = Signal()
    removed = Signal(int)  # the chip's index

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attach_button = QPushButton("Attach file…")
        self.attach_button.setAccessibleName("Attach file")
        self.attach_button.setToolTip("Give a text, Markdown, source code or PDF file to the model with your next message")
        self.generation_button = QPushButton("Generation…")
        self.generation_button.setAccessibleName("Generation")
        self.generation_button.setToolTip("This chat's temperature, answer length, context length and system prompt")
        self.chips: list[QFrame] = []
        self.chip_row = QHBoxLayout()
        self.chip_row.setSpacing(6)
        self.message = QLabel()
        self.message.setObjectName("attachmentMessage")
        self.message.setWordWrap(True)
        self.message.setVisible(False)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.attach_button)
        row.addLayout(self.chip_row)
        row.addStretch()
        row.addWidget(self.generation_button)
        col = QVBoxLayout(self)
        col.setContentsMargins(20, 6, 20, 0)
        col.setSpacing(4)
        col.addLayout(row)
        col.addWidget(self.message)
        self.attach_button.clicked.connect(self.attach_requested)
        self.generation_button.clicked.connect(self.generation_requested)

    def show_files(self, files: list[Attachment], message: str = "", error: bool = False) -> None:
        """The chips of the files that go with the next message, and a line about them."""
        for chip in self.chips:
            self.chip_row.removeWidget(chip)
            chip.deleteLater()
        self.chips = [self._chip(i, a) for i, a in enumerate(files)]
        for chip in self.chips:
            self.chip_row.addWidget(chip)
        self.message.setText(message)
        self.message.setStyleSheet("color: #c0392b;" if error else "")
        self.message.setVisible(bool(message))

    def _chip(self, index: int, a: Attachment) -> QFrame:
        chip = QFrame()
        chip.setObjectName("attachmentChip")
        chip.setStyleSheet("#attachmentChip { border: 1px solid palette(mid); border-radius: 10px; }")
        label = QLabel(a.label)
        label.setToolTip(f"{a.name}: {len(a.text):,} characters go to the model, quoted under the file's name")
        remove = QToolButton()
        remove.setText("×")
        remove.setAccessibleName(f"Remove {a.name}")
        remove.setAutoRaise(True)
        remove.clicked.connect(lambda: self.removed.emit(index))
        row = QHBoxLayout(chip)
        row.setContentsMargins(8, 1, 2, 1)
        row.setSpacing(2)
        row.addWidget(label)
        row.addWidget(remove)
        return chip
