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
        self.bar.setFixedWidth(360)
        col = QVBoxLayout(self)
        col.addStretch(2)
        for w in (title, intro, self.bar, self.step):
            col.addWidget(w, 0, Qt.AlignmentFlag.AlignHCenter)
            w.setMaximumWidth(520)
        intro.setAlignment(Qt.AlignmentFlag.AlignCenter)
        col.addStretch(3)

    def set_step(self, text: str) -> None:
        self.step.setText(text[:1].upper() + text[1:] + ("" if text.endswith(("…", ".")) else "…"))
