"""Light and dark themes: follow the system's colour scheme (Qt 6.5+), SPECEE_THEME=light|dark
forces one (screenshots, tests)."""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication


def wants_dark() -> bool:
    forced = os.environ.get("SPECEE_THEME", "").lower()
    if forced in ("light", "dark"):
        return forced == "dark"
    return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def apply_theme(app: QApplication) -> str:
    app.setStyle("Fusion")  # the same look everywhere; honours the palette below
    if not wants_dark():
        app.setPalette(app.style().standardPalette())
        return "light"
    pal = QPalette()
    base, text, window = QColor(30, 31, 34), QColor(225, 226, 229), QColor(43, 45, 49)
    for role, color in (
        (QPalette.ColorRole.Window, window),
        (QPalette.ColorRole.WindowText, text),
        (QPalette.ColorRole.Base, base),
        (QPalette.ColorRole.AlternateBase, window),
        (QPalette.ColorRole.Text, text),
        (QPalette.ColorRole.Button, window),
        (QPalette.ColorRole.ButtonText, text),
        (QPalette.ColorRole.ToolTipBase, window),
        (QPalette.ColorRole.ToolTipText, text),
        (QPalette.ColorRole.PlaceholderText, QColor(140, 142, 147)),
        (QPalette.ColorRole.Highlight, QColor(88, 101, 242)),
        (QPalette.ColorRole.HighlightedText, QColor(255, 255, 255)),
        (QPalette.ColorRole.Link, QColor(130, 170, 255)),
    ):
        pal.setColor(role, color)
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(120, 122, 126))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(120, 122, 126))
    app.setPalette(pal)
    return "dark"
