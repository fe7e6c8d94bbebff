"""Issue 45, item 2: a menu bar whose entries reach Settings, My models, Download models, Generation,
the model switcher and the Serve API (and the rest of the window's places), standard shortcuts for
them, and a shortcuts help (F1 or Ctrl+/) written from the one registry the keys are bound from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox, QWidget

from app.generation_dialog import GenerationDialog
from app.main_window import MainWindow
from app.menu_bar import MenuBar
from app.model_manager import ModelManager
from app.my_models import MyModels
from app.settings_dialog import SettingsDialog
from app.shortcuts import MENUS, SHORTCUTS, window_keys
from app.shortcuts_help import ShortcutsHelp, key_text
from engine.chats.store import ConversationStore

CTRL, SHIFT = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier


@pytest.fixture
def idle(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    """The real window with no engine started, shown and active (keys need focus)."""
    store = ConversationStore(tmp_path / "chats.db")
    conv = store.create("Alpha", "", {})
    store.append(conv.id, "user", "A question")
    store.append(conv.id, "assistant", "An answer.")
    win = MainWindow(model_path=tmp_path / "none.gguf", store=store)
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: QApplication.activeWindow() is win)
    win.input.setFocus()
    yield win
    for w in QApplication.topLevelWidgets():  # the dialogs a test opened
        if w is not win and w.isVisible():
            w.close()
    win.close()


def shown(kind: type) -> list[QWidget]:
    return [w for w in QApplication.topLevelWidgets() if isinstance(w, kind) and w.isVisible()]


def menu_bar(win: MainWindow) -> MenuBar:
    bar = win.menuBar()
    assert isinstance(bar, MenuBar)
    return bar


def trigger(win: MainWindow, name: str) -> None:
    menu_bar(win).actions_by_name[name].trigger()


def test_the_menus_hold_every_window_action_with_its_keys(idle: MainWindow) -> None:
    bar = menu_bar(idle)
    assert [a.text().replace("&", "") for a in bar.actions()] == list(MENUS)
    for s in SHORTCUTS:
        if s.menu:
            action = bar.actions_by_name[s.name]
            assert action in bar.menus[s.menu].actions() and action.text() == s.label
            assert [k.toString() for k in action.shortcuts()] == [QKeySequence(k).toString() for k in s.keys]
    keys = [QKeySequence(k).toString() for k in window_keys()]
    assert len(keys) == len(set(keys)), "two actions on one key: Qt runs neither"


def test_every_key_bound_in_the_window_is_in_the_registry(idle: MainWindow) -> None:
    """The help is written from the registry: a key bound anywhere else would be missing from it."""
    registered = {QKeySequence(k).toString() for s in SHORTCUTS for k in s.keys}
    bound = {k.toString() for a in idle.findChildren(QAction) for k in a.shortcuts()}
    bound |= {s.key().toString() for s in idle.findChildren(QShortcut)}  # the chat pane's scrolling keys
    assert bound and bound <= registered, f"not in app/shortcuts.py: {bound - registered}"


@pytest.mark.parametrize(("key", "mods"), [(Qt.Key.Key_F1, Qt.KeyboardModifier.NoModifier), (Qt.Key.Key_Slash, CTRL)])
def test_f1_and_ctrl_slash_open_the_help_listing_every_shortcut(qtbot, idle: MainWindow, key: Qt.Key, mods) -> None:
    qtbot.keyClick(idle.input, key, mods)
    (help_,) = shown(ShortcutsHelp)
    listed = help_.listed()  # type: ignore[attr-defined]
    for s in SHORTCUTS:
        if s.keys:
            assert (key_text(s), s.label.replace("…", "")) in listed, s
    assert len(listed) == len([s for s in SHORTCUTS if s.keys])
    trigger(idle, "shortcuts")  # asked again: the same one, not a second
    assert shown(ShortcutsHelp) == [help_]


@pytest.mark.parametrize(
    ("name", "key", "mods", "kind"),
    [
        ("settings", Qt.Key.Key_Comma, CTRL, SettingsDialog),
        ("generation", Qt.Key.Key_G, CTRL, GenerationDialog),
        ("my_models", Qt.Key.Key_M, CTRL | SHIFT, MyModels),
        ("download_models", Qt.Key.Key_D, CTRL | SHIFT, ModelManager),
    ],
)
def test_menu_entries_and_their_keys_open_their_dialogs(
    qtbot, idle: MainWindow, name: str, key: Qt.Key, mods, kind: type
) -> None:
    trigger(idle, name)
    qtbot.waitUntil(lambda: len(shown(kind)) == 1)
    shown(kind)[0].close()
    qtbot.waitUntil(lambda: not shown(kind))
    idle.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is idle)
    qtbot.keyClick(idle.input, key, mods)
    qtbot.waitUntil(lambda: len(shown(kind)) == 1)


def test_ctrl_l_opens_the_model_switcher(qtbot, idle: MainWindow) -> None:
    qtbot.keyClick(idle.input, Qt.Key.Key_L, CTRL)
    qtbot.waitUntil(lambda: idle.model_switch.view().isVisible())
    assert idle.model_switch.hasFocus() or idle.model_switch.view().hasFocus()
    idle.model_switch.hidePopup()


def test_serve_api_from_the_menu_is_the_switch_and_says_why_not(qtbot, idle: MainWindow) -> None:
    idle.serve_switch.set_blocked("Serve API serves a local model; the chat now uses lab (remote).")
    qtbot.keyClick(idle.input, Qt.Key.Key_S, CTRL | SHIFT)
    assert "serves a local model" in idle.state_label.text() and not idle.serve_switch.toggle.isChecked()
    idle.serve_switch.set_blocked("")
    idle.model_path = None  # no local model: the switch's own refusal
    failed: list[str] = []
    idle.serve_switch.failed.connect(failed.append)
    trigger(idle, "serve")
    assert failed == ["There is no local model to serve yet: load one first."]
    menu = menu_bar(idle).menus["Server"]
    menu.aboutToShow.emit()
    assert not menu_bar(idle).actions_by_name["copy_api_address"].isEnabled()  # nothing served: nothing to copy
    assert not menu_bar(idle).actions_by_name["serve"].isChecked()


def test_chat_menu_entries_do_what_their_buttons_and_keys_do(qtbot, idle: MainWindow, tmp_path: Path, monkeypatch) -> None:
    alpha = idle.store.list()[0].id
    idle.sidebar.select(alpha)
    trigger(idle, "new_chat")
    assert idle.conv_id is None
    trigger(idle, "search")
    assert QApplication.focusWidget() is idle.sidebar.search
    idle.sidebar.delete(alpha)
    assert idle.sidebar.list.count() == 0
    trigger(idle, "undo_delete")
    assert idle.sidebar.list.count() == 1
    idle.sidebar.select(alpha)
    idle.panel.edit(0)
    assert idle.chat.editing is not None
    trigger(idle, "stop")  # with no answer streaming: leaves the edit
    assert idle.chat.editing is None
    note = tmp_path / "notes.txt"
    note.write_text("attached text")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(note), ""))
    trigger(idle, "attach")
    assert [a.name for a in idle.chat.attachments] == ["notes.txt"]
    exported = tmp_path / "alpha.json"
    exported.write_text(idle.store.export_json(alpha))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(exported), ""))
    trigger(idle, "import_chat")
    assert idle.sidebar.list.count() == 2 and idle.conv_id != alpha
    abouts: list[str] = []
    monkeypatch.setattr(QMessageBox, "about", lambda _parent, title, _text: abouts.append(title))
    trigger(idle, "about")
    assert abouts == ["About SpecEE Chat"]


def test_ctrl_q_in_the_menu_quits(qtbot, idle: MainWindow) -> None:
    trigger(idle, "quit")
    qtbot.waitUntil(lambda: not idle.isVisible(), timeout=5_000)
