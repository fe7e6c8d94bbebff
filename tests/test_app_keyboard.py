"""The keyboard and the start (issue 23, items 9 and 10): the chat scrolls from the keyboard, a code
block's Copy is reachable, Ctrl+Z, search, Ctrl+Q, focus rings; a later start goes straight to the
chat and keys typed meanwhile reach the message box."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from engine import protocol as p


def test_a_later_start_goes_straight_to_the_chat(qtbot, model_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Every start showed the first run's "one-time step" welcome for seconds, and keys typed
    meanwhile were lost; with the default model installed there is no step to show."""
    win = MainWindow(sampling=p.Sampling.greedy(8))  # no model named: the installed default
    qtbot.addWidget(win)
    pages: list[object] = []
    win.pages.currentChanged.connect(lambda _i: pages.append(win.pages.currentWidget()))
    win.show()
    win.activateWindow()
    win.start_engine()
    qtbot.waitExposed(win)
    assert win.pages.currentWidget() is not win.welcome
    qtbot.waitUntil(lambda: QApplication.focusWidget() is win.input, timeout=5_000)
    assert not win.model_loaded
    qtbot.keyClicks(QApplication.focusWidget(), "typed while it loads")
    qtbot.waitUntil(lambda: win.model_loaded, timeout=120_000)
    assert win.welcome not in pages and win.pages.currentWidget() is not win.welcome
    assert win.input.toPlainText() == "typed while it loads"
    assert win.model_switch.currentData() == str(model_path)
    win.close()
