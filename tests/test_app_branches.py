"""Editing, versions, Copy and Continue in the real window (offscreen) with the real worker: an edit
deletes nothing until it is sent and then branches the chat (the old branch a page away), any
question can be edited, regenerations are versions, every message copies, each local answer names
its model and mode, and Continue survives leaving the chat, Stop and a worker crash (issue 23,
items 1, 6 and 13)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from engine import protocol as p
from engine.chats.store import ConversationStore
from tests.conftest import loaded_window

LEFT = Qt.MouseButton.LeftButton
CTRL = Qt.KeyboardModifier.ControlModifier


@pytest.fixture
def answer_tokens() -> int:
    return 16


def send(qtbot, win: MainWindow, text: str) -> None:
    win.input.setPlainText(text)
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    assert win.request_id


def ask(qtbot, win: MainWindow, text: str) -> None:
    send(qtbot, win, text)
    qtbot.waitUntil(lambda: not win.request_id, timeout=120_000)


def texts(win: MainWindow) -> list[str]:
    return [m["content"] for m in win.messages]


def stored(store: ConversationStore, conv_id: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in store.get(conv_id).messages]


def test_edit_last_deletes_nothing_until_the_edit_is_sent(qtbot, window: MainWindow, store: ConversationStore) -> None:
    """Edit last removed the last question and answer from the store at once: Ctrl+N, another chat
    or quitting lost them for good, and the draft followed Ctrl+N into the new chat."""
    ask(qtbot, window, "Name a red fruit.")
    ask(qtbot, window, "Name a yellow fruit.")
    conv_id, before = window.conv_id, stored(store, window.conv_id)
    assert len(before) == 4
    qtbot.mouseClick(window.edit_button, LEFT)
    assert stored(store, conv_id) == before and len(window.messages) == 4  # nothing deleted yet
    assert window.input.toPlainText() == "Name a yellow fruit." and window.composer.edit_row.isVisible()
    qtbot.keyClick(window, Qt.Key.Key_N, CTRL)  # Ctrl+N while editing
    assert window.conv_id is None and window.input.toPlainText() == ""  # the draft stays behind
    assert not window.composer.edit_row.isVisible() and stored(store, conv_id) == before
    ask(qtbot, window, "Name a blue animal.")  # another chat
    other = window.conv_id
    window.sidebar.select(conv_id)
    assert window.conv_id == conv_id and len(window.messages) == 4
    qtbot.mouseClick(window.edit_button, LEFT)
    window.sidebar.select(other)  # switching chats while editing
    assert window.conv_id == other and window.input.toPlainText() == "" and stored(store, conv_id) == before
    window.sidebar.select(conv_id)
    qtbot.mouseClick(window.edit_button, LEFT)
    qtbot.mouseClick(window.composer.cancel_edit_button, LEFT)
    assert window.input.toPlainText() == "" and not window.composer.edit_row.isVisible()
    qtbot.mouseClick(window.edit_button, LEFT)
    qtbot.keyClick(window.input, Qt.Key.Key_Escape)  # Esc leaves an edit too (with no answer to stop)
    assert window.input.toPlainText() == "" and not window.composer.edit_row.isVisible()
    qtbot.mouseClick(window.edit_button, LEFT)
    window.input.setPlainText("Name a green fruit.")
    qtbot.keyClick(window.input, Qt.Key.Key_Return)  # the edit is sent: the chat branches there
    qtbot.waitUntil(lambda: not window.request_id, timeout=120_000)
    assert texts(window)[:3] == ["Name a red fruit.", before[1][1], "Name a green fruit."] and len(window.messages) == 4
    pager = window.view.cards[2].message_actions
    assert pager is not None and pager.version_label.text() == "2/2" and pager.prev_button.isVisible()
    qtbot.mouseClick(pager.prev_button, LEFT)  # the replaced turn is a page away
    assert [(m["role"], m["content"]) for m in window.messages] == before
    assert window.view.cards[2].message_actions.version_label.text() == "1/2"
    qtbot.mouseClick(window.edit_button, LEFT)
    window.close()  # quitting while editing
    assert stored(ConversationStore(store.path), conv_id) == before


def test_any_question_can_be_edited_and_the_old_branch_stays(qtbot, window: MainWindow, store: ConversationStore) -> None:
    ask(qtbot, window, "Name a red fruit.")
    ask(qtbot, window, "Name a yellow fruit.")
    old = texts(window)
    first = window.view.cards[0].message_actions
    assert first is not None and first.edit_button.isVisible() and not first.prev_button.isVisible()
    qtbot.mouseClick(first.edit_button, LEFT)
    assert window.input.toPlainText() == "Name a red fruit." and window.composer.edit_row.isVisible()
    window.input.setPlainText("Name a purple fruit.")
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.request_id, timeout=120_000)
    assert [m["role"] for m in window.messages] == ["user", "assistant"] and texts(window)[0] == "Name a purple fruit."
    assert store.get(window.conv_id).messages[0].content == "Name a purple fruit."
    pager = window.view.cards[0].message_actions
    assert pager is not None and pager.version_label.text() == "2/2" and not pager.next_button.isEnabled()
    qtbot.mouseClick(pager.prev_button, LEFT)
    assert texts(window) == old  # the whole old branch, both turns
    qtbot.mouseClick(window.view.cards[0].message_actions.next_button, LEFT)
    assert texts(window)[0] == "Name a purple fruit." and len(window.messages) == 2
    assert window.view.cards[1].message_actions is not None and not window.view.cards[1].message_actions.edit_button.isVisible()


def test_a_search_hit_on_an_older_version_opens_that_branch(qtbot, window: MainWindow) -> None:
    ask(qtbot, window, "Name a red fruit.")
    conv_id = window.conv_id
    qtbot.mouseClick(window.edit_button, LEFT)
    window.input.setPlainText("Name a blue animal.")
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.request_id, timeout=120_000)
    window.new_conversation()
    window.sidebar.search.setText("red fruit")  # only the older version says it
    window.sidebar.select(conv_id)
    assert window.conv_id == conv_id and texts(window)[0] == "Name a red fruit."
    assert window.view.cards[0].message_actions.version_label.text() == "1/2"


def test_regenerations_are_versions_to_page_through(qtbot, window: MainWindow, store: ConversationStore) -> None:
    ask(qtbot, window, "Say hello.")
    first_id = window.messages[1]["id"]
    qtbot.mouseClick(window.regen_button, LEFT)
    pager = window.view.cards[1].message_actions
    assert window.request_id and pager is not None and not pager.prev_button.isEnabled()  # no paging mid-answer
    qtbot.waitUntil(lambda: not window.request_id, timeout=120_000)
    pager = window.view.cards[1].message_actions
    assert pager is not None and pager.version_label.text() == "2/2" and pager.prev_button.isEnabled()
    assert window.messages[1]["id"] != first_id and window.messages[1]["content"]
    qtbot.mouseClick(pager.prev_button, LEFT)
    assert window.messages[1]["id"] == first_id and window.view.cards[1].message_actions.version_label.text() == "1/2"
    assert store.get(window.conv_id).messages[1].id == first_id and len(store.get(window.conv_id).messages[1].versions) == 2


def test_every_message_can_be_copied(qtbot, window: MainWindow) -> None:
    ask(qtbot, window, "Name a red fruit.")
    ask(qtbot, window, "Name a yellow fruit.")
    for i in range(4):
        actions = window.view.cards[i].message_actions
        assert actions is not None
        qtbot.mouseClick(actions.copy_button, LEFT)
        assert QApplication.clipboard().text() == window.messages[i]["content"]


def test_each_local_answer_names_its_model_and_mode(qtbot, window: MainWindow, store: ConversationStore) -> None:
    """Remote answers said which engine wrote them; local ones gave only the mode."""
    ask(qtbot, window, "Name a red fruit.")
    loaded = window.loaded
    assert loaded is not None
    mode = window.messages[1]["stats"]["mode"]
    footer = window.view.cards[1].footer_lines[0]
    assert footer.endswith(f"{loaded.name} · {mode}"), footer
    window.new_conversation()
    window.sidebar.select(store.list()[0].id)  # reopened: still said
    assert window.view.cards[1].footer_lines[0].endswith(f"{loaded.name} · {mode}")


def test_continue_survives_leaving_the_chat_and_restarting(qtbot, model_path: Path, store: ConversationStore) -> None:
    """Continue was offered for an answer cut at the length limit only until the chat was left."""
    with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(12), store=store) as win:
        ask(qtbot, win, "Write a long story about a lighthouse keeper and the sea.")
        conv_id, cut = win.conv_id, win.answer
        assert win.continue_button.isVisible()
        qtbot.keyClick(win, Qt.Key.Key_N, CTRL)
        assert not win.continue_button.isVisible()
        win.sidebar.select(conv_id)
        assert win.continue_button.isVisible() and "[cut at the length limit" in win.transcript()
    again = ConversationStore(store.path)  # the app started again
    with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(12), store=again) as win:
        win.sidebar.select(conv_id)
        assert win.continue_button.isVisible()
        qtbot.mouseClick(win.continue_button, LEFT)
        qtbot.waitUntil(lambda: not win.request_id, timeout=120_000)
        assert win.answer.startswith(cut) and len(win.answer) > len(cut) and len(win.messages) == 2
        assert again.get(conv_id).messages[-1].content == win.answer


def test_stop_leaves_a_stopped_mark_and_offers_continue(qtbot, window: MainWindow, store: ConversationStore) -> None:
    window.sampling = p.Sampling.greedy(400)
    send(qtbot, window, "Tell me a long story about a dragon.")
    qtbot.waitUntil(lambda: len(window.answer) > 20, timeout=60_000)
    qtbot.mouseClick(window.stop_button, LEFT)
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    stopped = window.answer
    assert "[stopped: Continue writes more]" in window.view.cards[1].footer_lines
    assert window.continue_button.isVisible() and store.get(window.conv_id).messages[-1].finish == "cancelled"
    window.sampling = p.Sampling.greedy(8)
    qtbot.mouseClick(window.continue_button, LEFT)
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    assert window.answer.startswith(stopped) and len(window.answer) > len(stopped)
    assert not any("stopped" in line for line in window.view.cards[1].footer_lines)


def test_continue_after_a_worker_crash_restarts_the_engine(qtbot, window: MainWindow) -> None:
    """Continue was shown after a crash but did nothing until Restart engine was pressed."""
    window.sampling = p.Sampling.greedy(400)
    send(qtbot, window, "Tell me a long story about a dragon.")
    qtbot.waitUntil(lambda: len(window.answer) > 20, timeout=60_000)
    os.kill(window.bridge.client.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: window.restart_button.isVisible(), timeout=30_000)
    partial = window.messages[-1]["content"]
    assert window.continue_button.isVisible() and window.continue_button.isEnabled()
    window.sampling = p.Sampling.greedy(8)
    qtbot.mouseClick(window.continue_button, LEFT)  # not Restart engine: Continue restarts it
    qtbot.waitUntil(lambda: window.model_loaded, timeout=90_000)
    qtbot.waitUntil(lambda: not window.request_id and len(window.messages[-1]["content"]) > len(partial), timeout=60_000)
    assert window.messages[-1]["content"].startswith(partial) and "[interrupted" not in window.transcript()
