"""Issue 45, item 1: the app reopens where it was left, on the chat that was open, with the message
that was being written; every chat keeps its own unsent draft as the user switches chats and across
restarts (engine/chats/drafts.py, beside the store); a damaged drafts file costs nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from engine.chats.drafts import drafts_path
from engine.chats.store import ConversationStore


def chat(store: ConversationStore, title: str) -> str:
    conv = store.create(title, "", {})
    store.append(conv.id, "user", f"A question in {title}")
    store.append(conv.id, "assistant", f"The answer in {title}.")
    return conv.id


def chats(db: Path, *titles: str) -> list[str]:
    """A store at db holding a chat per title (a question and its answer); their ids."""
    store = ConversationStore(db)
    ids = [chat(store, title) for title in titles]
    store.close()
    return ids


@contextmanager
def app_session(qtbot, db: Path) -> Iterator[MainWindow]:
    """One run of the app over the store at db (no engine: drafts need none), quit at the end."""
    win = MainWindow(model_path=db.parent / "none.gguf", store=ConversationStore(db))
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: QApplication.activeWindow() is win)  # keys need focus
    try:
        yield win
    finally:
        win.close()
        win.store.close()


def type_into(qtbot, win: MainWindow, text: str) -> None:
    win.input.setFocus()
    qtbot.keyClicks(win.input, text)


def test_each_chat_keeps_its_own_draft_when_switching(qtbot, tmp_path: Path) -> None:
    """The message box's text followed the user into every other chat (and was sent there)."""
    db = tmp_path / "chats.db"
    a, b = chats(db, "Alpha", "Beta")
    with app_session(qtbot, db) as win:
        type_into(qtbot, win, "for a new chat")
        win.sidebar.select(a)
        assert win.conv_id == a and win.input.toPlainText() == ""
        type_into(qtbot, win, "half a question for Alpha")
        win.sidebar.select(b)
        assert win.conv_id == b and win.input.toPlainText() == ""
        type_into(qtbot, win, "Beta's")
        win.sidebar.select(a)
        assert win.input.toPlainText() == "half a question for Alpha"
        assert win.input.textCursor().atEnd()  # typing goes on where it stopped
        type_into(qtbot, win, ", finished")
        qtbot.keyClick(win, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        assert win.conv_id is None and win.input.toPlainText() == "for a new chat"
        win.sidebar.select(b)
        assert win.input.toPlainText() == "Beta's"
        win.sidebar.select(a)
        assert win.input.toPlainText() == "half a question for Alpha, finished"


def test_the_app_reopens_on_the_last_chat_with_its_draft(qtbot, tmp_path: Path) -> None:
    """A restart opened a new empty chat, and whatever was being written was gone."""
    db = tmp_path / "chats.db"
    a, b = chats(db, "Alpha", "Beta")
    with app_session(qtbot, db) as win:
        win.sidebar.select(a)
        type_into(qtbot, win, "Alpha's unsent line")
        win.sidebar.select(b)
        type_into(qtbot, win, "line one")
        qtbot.keyClick(win.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
        type_into(qtbot, win, "line two, not sent")
        # quit at once: no pause in typing for the draft to be written before
    with app_session(qtbot, db) as again:  # the app started again
        assert again.conv_id == b and again.sidebar.current_id() == b
        assert [m["content"] for m in again.messages] == ["A question in Beta", "The answer in Beta."]
        assert again.input.toPlainText() == "line one\nline two, not sent"
        again.sidebar.select(a)
        assert again.input.toPlainText() == "Alpha's unsent line"
        qtbot.keyClick(again, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    with app_session(qtbot, db) as third:  # a new chat was open at quit: a new chat it is
        assert third.conv_id is None and third.input.toPlainText() == ""
        third.sidebar.select(b)
        assert third.input.toPlainText() == "line one\nline two, not sent"


def test_a_draft_is_written_once_typing_pauses(qtbot, tmp_path: Path) -> None:
    """A crash or a kill loses at most the last moment's typing, not the draft."""
    db = tmp_path / "chats.db"
    with app_session(qtbot, db) as win:
        type_into(qtbot, win, "kept if the app is killed")
        path = drafts_path(db)
        qtbot.waitUntil(lambda: path.exists() and "kept if the app is killed" in path.read_text(encoding="utf-8"))


def test_a_deleted_chat_does_not_reopen(qtbot, tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    a, _ = chats(db, "Alpha", "Beta")
    with app_session(qtbot, db) as win:
        win.sidebar.select(a)
        type_into(qtbot, win, "about to be deleted")
        win.sidebar.delete(a)  # gone for good at the next start
        assert win.conv_id is None
    with app_session(qtbot, db) as again:
        assert again.conv_id is None and again.input.toPlainText() == ""
        assert [again.sidebar.list.item(i).text() for i in range(again.sidebar.list.count())] == ["Beta"]
        assert a not in again.drafts.texts


def test_a_damaged_drafts_file_says_so_and_loses_nothing_else(qtbot, tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    (a,) = chats(db, "Alpha")
    drafts_path(db).write_text('{"format": "specee-chat-drafts", "current": "', encoding="utf-8")  # cut short
    with app_session(qtbot, db) as win:
        (kept,) = tmp_path.glob("chats.drafts.json.damaged-*")
        assert "were damaged" in win.transcript() and kept.name in win.transcript()
        assert kept.read_text(encoding="utf-8").startswith('{"format"')  # set aside, not deleted
        assert win.sidebar.list.count() == 1 and win.conv_id is None
        win.sidebar.select(a)
        assert [m["content"] for m in win.messages] == ["A question in Alpha", "The answer in Alpha."]
        type_into(qtbot, win, "a fresh draft")
    with app_session(qtbot, db) as again:  # the file is whole again
        assert again.conv_id == a and again.input.toPlainText() == "a fresh draft"
        assert "damaged" not in again.transcript()


def test_an_edit_does_not_eat_the_draft(qtbot, tmp_path: Path) -> None:
    """Edit puts the question into the message box; the draft it replaced comes back after."""
    db = tmp_path / "chats.db"
    a, b = chats(db, "Alpha", "Beta")
    with app_session(qtbot, db) as win:
        win.sidebar.select(a)
        type_into(qtbot, win, "my draft")
        win.panel.edit(0)
        assert win.input.toPlainText() == "A question in Alpha" and win.drafts.get(a) == "my draft"
        qtbot.keyClick(win.input, Qt.Key.Key_Escape)  # leave the edit
        qtbot.waitUntil(lambda: win.input.toPlainText() == "my draft")
        win.panel.edit(0)
        qtbot.keyClick(win.input, Qt.Key.Key_X)  # the edit is typed in: still not the draft
        assert win.drafts.get(a) == "my draft"
        win.sidebar.select(b)  # leaving the chat drops the edit
        win.sidebar.select(a)
        assert win.input.toPlainText() == "my draft"


def test_a_question_sent_takes_its_draft_and_the_new_chat_reopens_by_its_id(qtbot, model_path: Path, tmp_path: Path) -> None:
    """With the real worker: the first question of a new chat is no draft once sent (in no chat),
    the chat it made is the one that reopens, with the follow-up being written."""
    from engine import protocol as p
    from tests.conftest import loaded_window

    db = tmp_path / "chats.db"
    with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(8), store=ConversationStore(db)) as win:
        type_into(qtbot, win, "Name a colour.")
        qtbot.keyClick(win.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: not win.request_id, timeout=120_000)
        conv_id = win.conv_id
        assert conv_id and win.input.toPlainText() == "" and win.drafts.texts == {}
        type_into(qtbot, win, "And another?")
        qtbot.keyClick(win, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        assert win.input.toPlainText() == ""  # the question sent is in no new chat's box
        win.sidebar.select(conv_id)
        assert win.input.toPlainText() == "And another?"
    win.store.close()
    with app_session(qtbot, db) as again:
        assert again.conv_id == conv_id and again.input.toPlainText() == "And another?"
        assert [m["role"] for m in again.messages] == ["user", "assistant"]
