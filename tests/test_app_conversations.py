"""Conversations in the real window (offscreen) with the real worker: persisted as they stream,
reopened, searched, regenerated and edited; the meter's numbers come from real stats events."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.main_window import MainWindow
from engine import protocol as p
from engine.chats.store import ConversationStore


def ask(qtbot, win: MainWindow, text: str) -> None:
    win.input.setPlainText(text)
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not win.request_id, timeout=120_000)


def test_answers_are_stored_and_conversations_reopen(qtbot, window: MainWindow, store: ConversationStore) -> None:
    window.system_edit.setText("Answer briefly.")
    ask(qtbot, window, "Name a red fruit.")
    conv = store.get(window.conv_id)
    assert conv.title == "Name a red fruit." and conv.system_prompt == "Answer briefly."
    assert [m.role for m in conv.messages] == ["user", "assistant"]
    assert conv.messages[1].content == window.answer and conv.messages[1].complete
    assert conv.messages[1].stats["decode_tok_s"] > 0  # per-message stats kept with the message
    first = window.conv_id
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.conv_id is None and window.messages == [] and window.system_edit.text() == ""
    ask(qtbot, window, "Name a blue animal.")
    assert window.sidebar.list.count() == 2
    window.sidebar.search.setText("fruit")
    assert window.sidebar.list.count() == 1
    window.sidebar.list.setCurrentRow(0)
    assert window.conv_id == first and "red fruit" in window.transcript()
    assert window.system_edit.text() == "Answer briefly."


def test_regenerate_and_edit_last(qtbot, window: MainWindow, store: ConversationStore) -> None:
    ask(qtbot, window, "Say hello.")
    first = window.answer
    qtbot.mouseClick(window.regen_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.request_id, timeout=120_000)
    assert window.answer == first  # greedy: the same answer again, not a second copy
    assert [m.role for m in store.get(window.conv_id).messages] == ["user", "assistant"]  # the branch shown
    assert len(store.get(window.conv_id).messages[1].versions) == 2  # the first answer kept as a version
    qtbot.mouseClick(window.edit_button, Qt.MouseButton.LeftButton)
    # the question goes into the box to edit; nothing leaves the chat until the edit is sent
    assert window.input.toPlainText() == "Say hello." and len(window.messages) == 2
    assert [m.role for m in store.get(window.conv_id).messages] == ["user", "assistant"]


def test_the_meter_shows_numbers_from_stats_events(qtbot, window: MainWindow) -> None:
    seen: list[p.Stats] = []
    window.bridge.event.connect(lambda m: isinstance(m, p.Stats) and seen.append(m))
    window.sampling = p.Sampling.greedy(80)
    ask(qtbot, window, "Write a short poem about the sea.")
    assert seen and "tok/s" in window.meter.text() and "first token" in window.meter.text()
    assert f"first token {seen[-1].ttft_ms:.0f} ms" in window.meter.text()
    assert len(window.meter.sparkline.values) >= 1
    assert window.context_label.text().startswith("context ")


def test_settings_change_reloads_the_engine_in_the_chosen_mode(qtbot, window: MainWindow, isolated_data: Path) -> None:
    dialog = window.open_settings()
    dialog.mode.setCurrentText("vanilla")
    dialog.ctx.setValue(2048)
    loaded: list[p.Loaded] = []
    window.bridge.event.connect(lambda m: isinstance(m, p.Loaded) and loaded.append(m))
    dialog.accept()
    qtbot.waitUntil(lambda: bool(loaded), timeout=60_000)
    assert loaded[-1].mode == "vanilla" and loaded[-1].n_ctx == 2048
    assert window.settings.mode == "vanilla" and (isolated_data / "settings.json").exists()


def test_export_and_import_from_the_sidebar(qtbot, window: MainWindow, store: ConversationStore, tmp_path: Path) -> None:
    ask(qtbot, window, "Name a green vegetable.")
    window.sidebar.export(window.conv_id, "md", str(tmp_path / "chat.md"))
    window.sidebar.export(window.conv_id, "json", str(tmp_path / "chat.json"))
    assert (tmp_path / "chat.md").read_text().startswith("# Name a green vegetable.")
    new_id = window.sidebar.import_file(str(tmp_path / "chat.json"))
    assert new_id
    assert window.conv_id == new_id and window.messages[-1]["content"] == store.get(new_id).messages[-1].content
    assert window.sidebar.list.count() == 2


def test_train_acceleration_explains_how_when_pytorch_is_missing(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    from app import train_runner

    monkeypatch.setattr(train_runner, "training_available", lambda: False)
    runner = train_runner.TrainRunner("/models/x.gguf")
    got: list[tuple[bool, str]] = []
    runner.finished.connect(lambda ok, msg: got.append((ok, msg)))
    assert runner.start() is False
    assert got == [(False, train_runner.HOW_TO)] and "pip install" in got[0][1]
    assert runner.out.name == "x" and runner.steps[0][:2] == ["train", "eagle"] and runner.steps[1][:2] == ["train", "exits"]


def test_past_conversations_are_there_after_restarting_the_app(qtbot, model_path: Path, tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    first = MainWindow(model_path=model_path, sampling=p.Sampling.greedy(12), store=ConversationStore(db))
    qtbot.addWidget(first)
    first.show()
    first.start_engine()
    qtbot.waitUntil(lambda: first.model_loaded, timeout=120_000)
    ask(qtbot, first, "Name a planet.")
    answer, conv_id = first.answer, first.conv_id
    first.close()
    first.store.close()
    again = MainWindow(model_path=model_path, store=ConversationStore(db))  # a new app session
    qtbot.addWidget(again)
    assert again.sidebar.list.count() == 1 and again.conv_id == conv_id  # it reopens where it was left
    assert [m["content"] for m in again.messages] == ["Name a planet.", answer]
    again.close()


def test_a_downloaded_model_is_usable_at_once(
    qtbot, window: MainWindow, model_path: Path, isolated_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.hf_server import HubServer

    with HubServer() as hub:
        hub.add_repo("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", {"copy.Q4_1.gguf": model_path})
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr("engine.models.download._token", lambda: None)
        dialog = window.open_model_manager()
        catalog = [dialog.repos.item(i).data(Qt.ItemDataRole.UserRole) for i in range(dialog.repos.count())]
        assert "HuggingFaceTB/SmolLM2-360M-Instruct-GGUF" in catalog
        dialog.search.setText("SmolLM2-135M")
        dialog.run_search()
        qtbot.waitUntil(lambda: dialog.repos.count() == 1, timeout=10_000)
        dialog.repos.setCurrentRow(0)
        qtbot.waitUntil(lambda: dialog.files.count() == 1, timeout=10_000)
        dialog.files.setCurrentRow(0)
        dialog.start_download()
        qtbot.waitUntil(lambda: dialog.use_button.isEnabled(), timeout=60_000)
        loaded: list[p.Loaded] = []
        window.bridge.event.connect(lambda m: isinstance(m, p.Loaded) and loaded.append(m))
        qtbot.mouseClick(dialog.use_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: bool(loaded), timeout=120_000)
    assert Path(loaded[-1].model_path) == isolated_data / "models" / "copy.Q4_1.gguf"
    ask(qtbot, window, "Say hi.")
    assert window.answer


def test_every_control_has_an_accessible_name(qtbot, model_path: Path, store: ConversationStore) -> None:
    from PySide6.QtWidgets import (
        QAbstractButton,
        QAbstractSpinBox,
        QComboBox,
        QLineEdit,
        QListWidget,
        QPlainTextEdit,
        QTextBrowser,
        QWidget,
    )

    win = MainWindow(model_path=model_path, store=store)
    qtbot.addWidget(win)
    dialogs = [win.open_model_manager(), win.open_settings()]
    kinds = (QAbstractButton, QAbstractSpinBox, QComboBox, QLineEdit, QListWidget, QPlainTextEdit, QTextBrowser)
    for root in (win, *dialogs):
        for w in [c for c in root.findChildren(QWidget) if isinstance(c, kinds)]:
            if isinstance(w, QLineEdit) and isinstance(w.parent(), QAbstractSpinBox | QComboBox):
                continue  # the editor inside a spin box or combo box; the outer control is named
            if type(w).__name__ == "QToolButton" or w.objectName().startswith("qt_"):
                continue  # Qt's internal buttons (scroll arrows, line-edit clear button)
            # a button's visible text is its accessible name unless one is set
            name = w.accessibleName() or (w.text().replace("&", "") if isinstance(w, QAbstractButton) else "")
            assert name, f"{type(w).__name__} {w.objectName()!r} has no accessible name"
    win.close()


def test_settings_show_the_placement_plan(qtbot, window: MainWindow) -> None:
    dialog = window.open_settings()
    from PySide6.QtWidgets import QLabel

    placement = [lbl.text() for lbl in dialog.findChildren(QLabel) if "Placement:" in lbl.text()]
    assert placement and "layers on the CPU" in placement[0] and "predicted" in placement[0]


def test_delete_key_removes_a_chat_with_undo(qtbot, tmp_path: Path) -> None:
    """Del used to delete at once with no confirmation and no way back."""
    from app.sidebar import ConversationSidebar

    store = ConversationStore(tmp_path / "c.db")
    conv = store.create("Thesis notes")
    store.append(conv.id, "user", "months of work")
    bar = ConversationSidebar(store)
    qtbot.addWidget(bar)
    bar.show()
    bar.refresh(current=conv.id)
    qtbot.keyClick(bar, Qt.Key.Key_Delete)
    assert bar.list.count() == 0 and bar.undo_button.isVisible() and "Thesis notes" in bar.undo_button.text()
    qtbot.keyClick(bar, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert bar.list.count() == 1 and bar.current_id() == conv.id and not bar.undo_button.isVisible()
    assert store.get(conv.id).messages[0].content == "months of work"
    qtbot.keyClick(bar, Qt.Key.Key_Delete)
    qtbot.mouseClick(bar.undo_button, Qt.MouseButton.LeftButton)
    assert bar.list.count() == 1
