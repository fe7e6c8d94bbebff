"""Light and dark themes: one palette of named colours per theme, the Qt palette and the window's
stylesheet built from it. The system's colour scheme is followed (Qt 6.5+); SPECEE_THEME=light|dark
forces one (screenshots, tests)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from engine import knobs


@dataclass(frozen=True)
class Colors:
    name: str
    window: str  # the chat's background
    sidebar: str
    surface: str  # header, composer, inputs
    border: str
    text: str
    muted: str
    accent: str
    accent_text: str
    user_card: str
    assistant_card: str
    code_bg: str
    danger: str


LIGHT = Colors(
    name="light",
    window="#f7f7f8",
    sidebar="#eeeef1",
    surface="#ffffff",
    border="#dcdce2",
    text="#1f2023",
    muted="#6b6e76",
    accent="#4f5bd5",
    accent_text="#ffffff",
    user_card="#e8ebff",
    assistant_card="#ffffff",
    code_bg="#f4f5f7",
    danger="#c2410c",
)
DARK = Colors(
    name="dark",
    window="#1e1f22",
    sidebar="#191a1c",
    surface="#2b2d31",
    border="#3a3c42",
    text="#e3e4e7",
    muted="#9a9ca3",
    accent="#7c87f5",
    accent_text="#ffffff",
    user_card="#33375a",
    assistant_card="#2b2d31",
    code_bg="#16171a",
    danger="#fb923c",
)


def forced_theme() -> str | None:
    """SPECEE_THEME's "light" or "dark" (screenshots, tests), else None; another value is ignored
    with a warning: a theme is no reason to refuse to start."""
    try:
        return knobs.THEME.choice()
    except knobs.KnobError as exc:
        logging.getLogger(__name__).warning("%s", exc)
        return None


def wants_dark() -> bool:
    forced = forced_theme()
    if forced is not None:
        return forced == "dark"
    return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def resolve(choice: str) -> str:
    """ "light" or "dark" for a Settings choice (System / Light / Dark); "system" asks the OS."""
    if choice in ("light", "dark"):
        return choice
    return "dark" if wants_dark() else "light"


def startup_theme(choice: str) -> str:
    """The theme to start in: SPECEE_THEME (screenshots, tests) overrides the saved choice."""
    return forced_theme() or resolve(choice)


def current() -> Colors:
    """The theme the application runs in (set by apply_theme)."""
    app = QApplication.instance()
    name = app.property("specee_theme") if app else None
    return DARK if name == "dark" else LIGHT


def apply_theme(app: QApplication, name: str | None = None) -> str:
    """Set the application's palette and UI font for `name` (default: the system's scheme)."""
    colors = (DARK if name == "dark" else LIGHT) if name else (DARK if wants_dark() else LIGHT)
    app.setStyle("Fusion")  # the same look everywhere; honours the palette below
    font = QFont(app.font())
    font.setPointSizeF(max(font.pointSizeF(), 10.5))  # readable chat text on every platform
    app.setFont(font)
    pal = QPalette()
    muted = QColor(colors.muted)
    for role, color in (
        (QPalette.ColorRole.Window, colors.window),
        (QPalette.ColorRole.WindowText, colors.text),
        (QPalette.ColorRole.Base, colors.surface),
        (QPalette.ColorRole.AlternateBase, colors.sidebar),
        (QPalette.ColorRole.Text, colors.text),
        (QPalette.ColorRole.Button, colors.surface),
        (QPalette.ColorRole.ButtonText, colors.text),
        (QPalette.ColorRole.ToolTipBase, colors.surface),
        (QPalette.ColorRole.ToolTipText, colors.text),
        (QPalette.ColorRole.PlaceholderText, colors.muted),
        (QPalette.ColorRole.Highlight, colors.accent),
        (QPalette.ColorRole.HighlightedText, colors.accent_text),
        (QPalette.ColorRole.Link, colors.accent),
        (QPalette.ColorRole.Mid, colors.border),
    ):
        pal.setColor(role, QColor(color))
    for role in (QPalette.ColorRole.ButtonText, QPalette.ColorRole.Text, QPalette.ColorRole.WindowText):
        pal.setColor(QPalette.ColorGroup.Disabled, role, muted)
    app.setPalette(pal)
    app.setProperty("specee_theme", colors.name)
    return colors.name


def stylesheet(c: Colors) -> str:
    """The window's look: rounded cards and inputs, a quiet sidebar, one accent colour, and a
    visible focus ring on every control (keyboard users see where they are)."""
    return f"""
QMainWindow, #chatPane {{ background: {c.window}; }}
#sidebar {{ background: {c.sidebar}; border-right: 1px solid {c.border}; }}
#sidebar QListWidget {{ background: transparent; border: none; padding: 2px; }}
#sidebar QListWidget::item {{ padding: 7px 8px; border-radius: 6px; }}
#sidebar QListWidget::item:selected {{ background: {c.user_card}; color: {c.text}; }}
#header {{ background: {c.surface}; border-bottom: 1px solid {c.border}; }}
#appTitle {{ font-weight: 600; font-size: 15px; }}
#accelBadge {{ color: {c.muted}; }}
#chatScroll, #chatCanvas {{ background: {c.window}; border: none; }}
#card_user {{ background: {c.user_card}; border-radius: 12px; }}
#card_assistant {{ background: {c.assistant_card}; border: 1px solid {c.border}; border-radius: 12px; }}
#card_notice {{ background: transparent; border: 1px dashed {c.border}; border-radius: 10px; }}
#card_notice QLabel {{ color: {c.muted}; }}
#card_error {{ background: transparent; border: 1px solid {c.danger}; border-radius: 10px; }}
#avatar_user, #avatar_assistant {{ border-radius: 13px; font-weight: 700; color: {c.accent_text}; }}
#avatar_user {{ background: #8b5cf6; }}
#avatar_assistant {{ background: {c.accent}; }}
#roleLabel {{ font-weight: 600; }}
#cardFooter, #noticeText, #hint {{ color: {c.muted}; }}
#codeBlock {{ background: {c.code_bg}; border: 1px solid {c.border}; border-radius: 8px; }}
#codeLang {{ color: {c.muted}; font-size: 11px; }}
#codeText {{ background: transparent; }}
QPushButton#codeCopy {{ padding: 2px 10px; font-size: 11px; border-radius: 6px; }}
QPushButton#cardAction {{
    background: transparent; border: 1px solid transparent; border-radius: 5px; padding: 1px 6px;
    font-size: 11px; color: {c.muted};
}}
QPushButton#cardAction:hover {{ border-color: {c.border}; color: {c.text}; }}
QPushButton#cardAction:disabled {{ color: {c.border}; }}
QPushButton#cardAction:focus {{ border: 1px solid palette(highlight); }}
#cardVersion, #editNote {{ color: {c.muted}; font-size: 11px; }}
#composer {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 12px; }}
#composer QPlainTextEdit {{ background: transparent; border: none; }}
#countLabel {{ color: {c.muted}; font-size: 11px; }}
#countLabel[over="true"] {{ color: {c.danger}; }}
QPlainTextEdit#fullText {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 6px; }}
QLineEdit, QComboBox {{
    background: {c.surface}; border: 1px solid {c.border}; border-radius: 6px; padding: 4px 8px;
}}
QComboBox::drop-down {{ border: none; width: 22px; }}
QComboBox {{ combobox-popup: 0; }}
QComboBox QAbstractItemView {{
    background: {c.surface}; color: {c.text}; border: 1px solid {c.border}; outline: none; padding: 4px;
    selection-background-color: {c.accent}; selection-color: {c.accent_text};
}}
QComboBox QAbstractItemView::item {{ padding: 6px 8px; min-height: 20px; }}
#sidebar QPushButton {{ text-align: left; padding: 7px 10px; }}
QPushButton {{
    background: {c.surface}; border: 1px solid {c.border}; border-radius: 6px; padding: 5px 12px;
}}
QPushButton:hover {{ border-color: {c.accent}; }}
QPushButton:disabled {{ color: {c.muted}; }}
QPushButton#primary {{ background: {c.accent}; color: {c.accent_text}; border: none; font-weight: 600; }}
QPushButton#primary:disabled {{ background: {c.border}; color: {c.muted}; }}
QPushButton#danger {{ color: {c.danger}; }}
#welcome {{ background: {c.window}; }}
#welcomeTitle {{ font-size: 22px; font-weight: 600; }}
#welcomeText {{ color: {c.muted}; font-size: 13px; }}
#welcome QProgressBar {{ border: none; background: {c.border}; border-radius: 3px; max-height: 6px; }}
#welcome QProgressBar::chunk {{ background: {c.accent}; border-radius: 3px; }}
QListWidget {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 8px; padding: 4px; }}
QListWidget::item {{ padding: 6px 8px; border-radius: 6px; }}
QListWidget::item:selected {{ background: {c.user_card}; color: {c.text}; }}
QStatusBar {{ background: {c.surface}; border-top: 1px solid {c.border}; color: {c.muted}; }}
QPlainTextEdit:focus, QLineEdit:focus, QTextBrowser:focus, QListWidget:focus, QComboBox:focus {{
    border: 2px solid palette(highlight); border-radius: 6px;
}}
#composer QPlainTextEdit:focus {{ border: 2px solid palette(highlight); border-radius: 8px; }}
#sidebar QListWidget:focus {{ border: 2px solid palette(highlight); border-radius: 8px; }}
QPushButton:focus {{ border: 2px solid palette(highlight); }}
QPushButton#primary:focus {{ border: 2px solid {c.text}; }}
"""
