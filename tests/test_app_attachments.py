"""Chat with a file in the real window (offscreen) with the real worker (issue 23, item 17): a PDF
built here goes with the question as quoted context under its name and shows as a chip on it; a
file too big for the context says so before sending (counted by the worker); unreadable or binary
files say why; nothing typed or attached is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.main_window import MainWindow
from engine import protocol as p
from engine.chats.store import ConversationStore
from tests.pdf_fixture import write_pdf


@pytest.fixture
def answer_tokens() -> int:
    return 16


def test_a_pdf_goes_with_the_question_quoted_under_its_name_and_shows_as_a_chip(
    qtbot, window: MainWindow, store: ConversationStore, tmp_path: Path
) -> None:
    pdf = write_pdf(tmp_path / "recipe.pdf", ["Mix flour, water and salt.", "Bake for forty minutes at 230 C."])
    sent: list[p.Message] = []
    send = window.panel._send
    window.panel._send = lambda msg: sent.append(msg) or send(msg)
    window.panel.attach_file(str(pdf))
    bar = window.panel.files
    assert len(bar.chips) == 1 and "recipe.pdf · 2 pages" in bar.chips[0].findChildren(type(bar.message))[0].text()
    qtbot.waitUntil(lambda: window.chat.count is not None, timeout=60_000)  # the worker counted it
    assert window.chat.count.n_prompt > 20 and bar.message.text().startswith("Fits: ")
    window.input.setPlainText("How long does it bake?")
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.request_id, timeout=120_000)
    [gen] = [m for m in sent if isinstance(m, p.Generate)]
    question = gen.messages[-1]["content"]
    assert question.startswith('File "recipe.pdf":\n```\n[page 1]\nMix flour, water and salt.')
    assert "Bake for forty minutes at 230 C." in question and question.endswith("\n\nHow long does it bake?")
    assert bar.chips == [] and not bar.message.isVisible()  # sent: the bar is empty for the next message
    card = window.view.cards[0]
    assert "Attached: recipe.pdf · 2 pages" in card.footer.text() and card.footer.isVisible()
    assert window.messages[-1]["content"]  # answered
    stored = store.get(window.conv_id).messages[0]
    assert stored.content == "How long does it bake?" and [a.name for a in stored.attachments] == ["recipe.pdf"]


def test_a_file_too_big_for_the_context_says_so_before_sending_and_nothing_is_lost(
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    big = tmp_path / "notes.txt"
    big.write_text("The quick brown fox jumps over the lazy dog. " * 3000)  # ~30,000 tokens, 135 KB
    window.input.setPlainText("Summarise this")
    window.panel.attach_file(str(big))
    bar = window.panel.files
    qtbot.waitUntil(lambda: bool(window.chat.attachment_problem), timeout=60_000)
    n_ctx = window.loaded.n_ctx
    assert bar.message.isVisible() and "notes.txt does not fit: with your message it takes" in bar.message.text()
    assert f"{n_ctx:,}-token context leaves" in bar.message.text()
    assert not window.send_button.isEnabled()
    qtbot.keyClick(window.input, Qt.Key.Key_Return)  # refused before anything is sent
    assert not window.request_id and window.messages == [] and window.input.toPlainText() == "Summarise this"
    assert len(bar.chips) == 1
    remove = bar.chips[0].findChildren(type(bar.attach_button).__mro__[1])[0]  # type: ignore[var-annotated]  # its ×
    qtbot.mouseClick(remove, Qt.MouseButton.LeftButton)
    assert bar.chips == [] and window.chat.attachments == [] and not bar.message.isVisible()
    assert window.send_button.isEnabled()


def test_binary_and_unreadable_files_say_why_and_change_nothing(qtbot, window: MainWindow, tmp_path: Path) -> None:
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(500))
    window.input.setPlainText("my draft")
    window.panel.attach_file(str(tmp_path / "photo.jpg"))
    bar = window.panel.files
    assert "photo.jpg is a binary file, not text" in bar.message.text() and bar.message.isVisible()
    window.panel.attach_file(str(tmp_path / "missing.md"))
    assert "missing.md is not there any more" in bar.message.text()
    assert bar.chips == [] and window.input.toPlainText() == "my draft" and window.messages == []


def test_files_dropped_on_the_chat_are_attached(qtbot, window: MainWindow, tmp_path: Path) -> None:
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDropEvent

    (tmp_path / "a.py").write_text("print('hi')\n")
    (tmp_path / "b.md").write_text("# B\n")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path / "a.py")), QUrl.fromLocalFile(str(tmp_path / "b.md"))])
    drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    window.panel.dropEvent(drop)
    assert [a.name for a in window.chat.attachments] == ["a.py", "b.md"] and len(window.panel.files.chips) == 2
    assert window.chat.attachments[0].language == "python"
