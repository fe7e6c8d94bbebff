"""The first-run pane: while the default model is fetched and loaded nothing needs deciding, so it
only says what is happening; the chat replaces it as soon as the engine has loaded the model."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QVBoxLayout, QWidget


class WelcomePane(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcome")
        title = QLabel("Welcome to SpecEE Chat")
        title.setObjectName("welcomeTitle")
        intro = QLabel(
            "A private assistant that runs entirely on this computer. The default model is being "
            "prepared; after this one-time step everything works offline."
        )
        intro.setObjectName("welcomeText")
        intro.setWordWrap(True)
        self.step = QLabel("Getting ready…")
        self.step.setAccessibleName("Setup progress")
        self.bar = QProgressBar()
        self.bar.setRange(0, 0)  # busy: the steps report no fraction
        self.bar.setTextVisible(False)
        box = QWidget()  # one centred column of fixed width, so the text wraps evenly
        box.setFixedWidth(460)
        inner = QVBoxLayout(box)
        inner.setSpacing(14)
        for w in (title, intro, self.bar, self.step):
            inner.addWidget(w)  # no alignment flag: a wrapped label then gets the height it needs
            if isinstance(w, QLabel):
                w.setAlignment(Qt.AlignmentFlag.AlignCenter)
        intro.setFixedWidth(440)
        intro.setMinimumHeight(intro.heightForWidth(440))  # all of it, not the label's guessed height
        col = QVBoxLayout(self)
        col.addStretch(2)
        col.addWidget(box, 0, Qt.AlignmentFlag.AlignHCenter)
        col.addStretch(3)

    def set_step(self, text: str) -> None:
        self.step.setText(text[:1].upper() + text[1:] + ("" if text.endswith(("…", ".")) else "…"))
