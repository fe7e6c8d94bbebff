"""A chat's Generation controls in the real window (offscreen) with the real worker (issue 23, item
15): set in the dialog, sent with each request, kept with the chat and back when it reopens, refused
in words outside the protocol's limits, and a chat's own context length loads the model with it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.generation_dialog import GenerationDialog
from app.main_window import MainWindow
from engine import protocol as p
from engine.chats.generation import Generation
from engine.chats.store import ConversationStore


def ask(qtbot, win: MainWindow, text: str) -> None:
    win.input.setPlainText(text)
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not win.request_id, timeout=120_000)


def sent_messages(win: MainWindow) -> list[p.Message]:
    """What the chat pane sends the engine from now on."""
    sent: list[p.Message] = []
    send = win.panel._send
    win.panel._send = lambda msg: sent.append(msg) or send(msg)
    return sent


def open_dialog(qtbot, win: MainWindow) -> GenerationDialog:
    qtbot.mouseClick(win.panel.files.generation_button, Qt.MouseButton.LeftButton)
    dialogs = [w for w in QApplication.topLevelWidgets() if isinstance(w, GenerationDialog) and w.isVisible()]
    assert len(dialogs) == 1
    return dialogs[0]


def test_a_window_with_no_sampling_given_caps_no_answer_at_512_tokens(qtbot, model_path: Path, tmp_path: Path) -> None:
    win = MainWindow(model_path=model_path, store=ConversationStore(tmp_path / "c.db"))
    qtbot.addWidget(win)
    assert win.sampling.max_tokens == 0 and win.chat.generation == Generation()  # the context's room; Continue for more
    win.close()


def test_the_generation_dialog_sets_this_chats_controls_and_they_come_back_with_it(qtbot, window: MainWindow, store) -> None:
    sent = sent_messages(window)
    dialog = open_dialog(qtbot, window)
    assert dialog.fields["max_tokens"].value() == 24 and dialog.preset.currentText() == "Custom"
    for name, value in (("top_k", 7), ("min_p", 0.1), ("repeat_penalty", 1.25), ("max_tokens", 6)):
        dialog.fields[name].setValue(value)
    dialog.system_preset.setCurrentText("Concise")
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible()
    assert window.system_edit.text().startswith("Answer in as few words")
    ask(qtbot, window, "Tell me about the sea.")
    [gen] = [m for m in sent if isinstance(m, p.Generate)]
    s = gen.sampling
    assert (s.temperature, s.top_k, s.min_p, s.repeat_penalty, s.max_tokens) == (0.0, 7, 0.1, 1.25, 6)
    assert gen.messages[0] == {"role": "system", "content": window.system_edit.text()}
    assert window.messages[-1]["stats"]["n_generated"] <= 6
    first = window.conv_id
    assert Generation.from_dict(store.get(first).generation).max_tokens == 6
    window.new_conversation()  # a new chat: the defaults
    assert window.sampling.max_tokens == 24 and window.sampling.top_k == 1
    dialog = open_dialog(qtbot, window)
    dialog.preset.setCurrentText("Creative")  # a preset fills temperature and top-p
    assert (dialog.fields["temperature"].value(), dialog.fields["top_p"].value()) == (1.0, 0.98)
    dialog.reject()
    assert window.sampling.temperature == 0.0  # Cancel changes nothing
    window.open_conversation(first)
    assert window.sampling.max_tokens == 6 and window.sampling.top_k == 7 and window.preset.currentText() == "Custom"


def test_values_outside_the_limits_are_refused_in_words_and_change_nothing(qtbot, window: MainWindow) -> None:
    before = window.chat.generation
    dialog = open_dialog(qtbot, window)
    dialog.fields["n_ctx"].setValue(100)  # the box allows it; the engine's limits do not
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert dialog.isVisible() and dialog.error.isVisible()
    assert dialog.error.text() == "Context length must be 0 (the app's setting) or 256..1048576 tokens, got 100"
    dialog.fields["n_ctx"].setValue(0)
    dialog.fields["top_p"].setMinimum(0.0)  # the other boxes keep to the limits; past them, the session says why
    dialog.fields["top_p"].setValue(0.0)
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert dialog.isVisible() and dialog.error.text() == "Top-p must be in (0, 1], got 0.0"
    assert window.chat.generation == before
    dialog.reject()


def test_a_chats_own_context_length_loads_the_model_with_it_and_other_chats_get_theirs_back(qtbot, window: MainWindow) -> None:
    ask(qtbot, window, "Hi")
    first = window.conv_id
    app_ctx = window.loaded.n_ctx
    dialog = open_dialog(qtbot, window)
    dialog.fields["n_ctx"].setValue(512)
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.model_loaded and window.loaded.n_ctx == 512, timeout=120_000)
    ask(qtbot, window, "Hello again")
    assert window.messages[-1]["content"] and window.context_label.text().endswith("/512")
    window.new_conversation()  # a chat of the app's context
    qtbot.waitUntil(lambda: window.model_loaded and window.loaded.n_ctx == app_ctx, timeout=120_000)
    window.open_conversation(first)
    assert not window.model_loaded  # it reloads at once
    window.new_conversation()  # ... and the chat changes again before it has loaded: the model follows the chat shown
    qtbot.waitUntil(lambda: window.model_loaded and window.loaded.n_ctx == app_ctx, timeout=120_000)
    window.open_conversation(first)
    qtbot.waitUntil(lambda: window.model_loaded and window.loaded.n_ctx == 512, timeout=120_000)
