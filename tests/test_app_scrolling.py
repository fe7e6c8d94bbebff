"""Scrolling the chat (issue 23, items 2 and 3): a long chat opens on its last message, not on an
empty pane past it; the view follows new text unless the reader scrolled up."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtWidgets import QPlainTextEdit, QPushButton, QWidget

from app.main_window import MainWindow
from engine import protocol as p
from engine.chats.store import ConversationStore
from tests.conftest import loaded_window
from tests.test_app import ask

# prose with code blocks: the wrapped labels' minimum heights once ran the scroll range ~2,500 px
# past the last card, more than the whole pane at the default window size
CODE = "```python\n" + "x = 'a long line of code' * 10 + another_call(a, b, c)\n" * 5 + "```"
LONG_ANSWER = "\n\n".join(f"Step {i}: " + "explain this part " * 25 + "\n\n" + CODE for i in range(30))


def long_chat(store: ConversationStore, title: str = "long") -> str:
    conv = store.create(title, "", {})
    store.append(conv.id, "user", "Explain it step by step")
    store.append(conv.id, "assistant", LONG_ANSWER + f"\n\nThe end of {title}.")
    return conv.id


def in_view(win: MainWindow, widget: QWidget) -> bool:
    """Whether the widget is on screen in the chat's viewport (at least partly)."""
    viewport = win.view.viewport()
    top_left = widget.mapTo(viewport, widget.rect().topLeft())
    return QRect(top_left, widget.size()).intersects(viewport.rect()) and not widget.visibleRegion().isEmpty()


def shows_the_end(win: MainWindow) -> bool:
    """The last card's bottom is in the viewport and the pane does not run on past it."""
    viewport, last = win.view.viewport(), win.view.cards[-1]
    bottom = last.mapTo(viewport, last.rect().bottomLeft()).y()
    return 0 < bottom <= viewport.height() and viewport.height() - bottom < 60


@pytest.fixture
def answer_tokens() -> int:
    return 32


def open_window(qtbot, tmp_path: Path, store: ConversationStore) -> MainWindow:
    win = MainWindow(model_path=tmp_path / "none.gguf", store=store)  # no engine: what it shows
    qtbot.addWidget(win)
    win.resize(*MainWindow.DEFAULT_SIZE)
    win.show()
    qtbot.waitExposed(win)
    return win


def test_a_long_chat_opens_on_its_last_message(qtbot, tmp_path: Path, store: ConversationStore) -> None:
    """From the sidebar, from a search result and after a restart, a long chat showed an empty pane:
    the scroll range ran far past the last message."""
    short = store.create("short", "", {})
    store.append(short.id, "user", "Hi")
    first, second = long_chat(store, "first"), long_chat(store, "second")
    win = open_window(qtbot, tmp_path, store)
    win.sidebar.select(short.id)
    win.sidebar.select(first)  # from the sidebar
    qtbot.waitUntil(lambda: shows_the_end(win), timeout=5_000)
    canvas = win.view.widget()
    assert canvas.height() - win.view.cards[-1].geometry().bottom() < 40  # no empty run after the last card
    win.new_conversation()
    win.sidebar.search.setText("The end of second")  # from a search result
    qtbot.waitUntil(lambda: win.sidebar.list.count() == 1)
    win.sidebar.list.setCurrentRow(0)
    assert win.conv_id == second
    qtbot.waitUntil(lambda: shows_the_end(win), timeout=5_000)
    win.close()
    again = open_window(qtbot, tmp_path, store)  # after a restart
    again.sidebar.select(first)
    qtbot.waitUntil(lambda: shows_the_end(again), timeout=5_000)
    assert "The end of first." in again.transcript()


def test_the_view_follows_a_new_question_and_its_answer(qtbot, window: MainWindow, store: ConversationStore) -> None:
    """A new question and its streaming answer landed below the fold although the reader had not
    scrolled up; scrolled up, the reader stays where they are while the answer streams."""
    conv = long_chat(store)
    window.sidebar.refresh()
    window.sidebar.select(conv)
    bar = window.view.verticalScrollBar()
    bar.setValue(bar.maximum() // 3)  # the reader scrolled up to read ...
    window.sampling = p.Sampling.greedy(120)
    ask(qtbot, window, "Now tell me a long story about a lighthouse keeper.")  # ... then asks again: the end
    missed: list[int] = []
    following = [True]

    def check(msg: p.Message) -> None:
        if following[0] and isinstance(msg, p.Token) and window.chat.answer and not shows_the_end(window):
            missed.append(bar.value())

    window.bridge.event.connect(check)
    qtbot.waitUntil(lambda: len(window.answer) > 200 or not window.request_id, timeout=60_000)
    qtbot.waitUntil(lambda: shows_the_end(window), timeout=2_000)
    following[0] = False
    bar.setValue(bar.maximum() // 2)  # scrolled up while it streams: the view stays put
    where = bar.value()
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    window.bridge.event.disconnect(check)
    assert abs(bar.value() - where) <= 4
    assert len(missed) <= 2, f"the answer's end was out of view at {len(missed)} tokens"


# -- long input (item 16) ----------------------------------------------------------------------------


def test_the_message_box_counts_its_tokens_against_the_room_left(qtbot, window: MainWindow) -> None:
    """A live token count of the message box, by the worker's tokenizer, against the room the
    context leaves (the whole prompt the send would make, less the answer's reserve)."""
    label = window.composer.count_label
    window.input.setPlainText("What is the capital of France?")
    qtbot.waitUntil(lambda: window.panel.draft.count is not None, timeout=10_000)
    count = window.panel.draft.count
    assert count.n_ctx == window.n_ctx and 5 <= count.n_text <= 12
    assert f"{count.n_text} tokens" in label.text() and f"{count.n_budget - count.n_prompt:,} left" in label.text()
    window.input.setPlainText("What is the capital of France? And of Spain, Italy and Portugal?")
    qtbot.waitUntil(lambda: window.panel.draft.count.n_text > count.n_text, timeout=10_000)  # live
    window.input.clear()
    qtbot.waitUntil(lambda: label.text() == "", timeout=5_000)


def test_a_huge_paste_warns_before_sending_and_stays_findable(qtbot, model_path: Path, store: ConversationStore) -> None:
    """After a 200,000-character paste neither the answer nor the "characters were cut" notice could
    be found. Now: a warning before sending what will not fit (Send again sends anyway), the paste
    shown collapsed with "Show all", and the answer and the notice in view at the end. A context of
    1024 tokens: what does not fit is cut all the same, and the prefill of what does takes seconds
    (at the default 4096 it took 73 s of a 120 s limit on a slow 2-core machine)."""
    from engine.settings import load_settings, save_settings

    before = load_settings()
    save_settings(replace(before, n_ctx=1024))
    try:
        with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(8), store=store) as window:
            _paste_and_send_anyway(qtbot, window)
    finally:
        save_settings(before)


def _paste_and_send_anyway(qtbot, window: MainWindow) -> None:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    paste = " ".join(words[i % len(words)] + str(i % 97) for i in range(40_000))[:200_000]
    window.input.setPlainText("Summarize this:\n" + paste)
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    warning = window.composer.count_label
    qtbot.waitUntil(lambda: "will not fit" in warning.text(), timeout=30_000)
    assert not window.request_id and len(window.input.toPlainText()) > 200_000  # nothing sent, nothing lost
    assert "cut" in warning.text() and warning.isVisible()
    qtbot.keyClick(window.input, Qt.Key.Key_Return)  # send anyway
    assert window.request_id
    qtbot.waitUntil(lambda: not window.request_id, timeout=120_000)
    question, answer, *notices = window.view.cards
    (notice,) = [n for n in notices if "characters were cut" in n.plain_text()]
    assert question.role == "user" and answer.role == "assistant"
    qtbot.waitUntil(lambda: shows_the_end(window), timeout=5_000)
    assert in_view(window, notice) and in_view(window, answer)
    assert question.height() < window.view.viewport().height()  # collapsed
    show_all = question.findChild(QPushButton, "showAll")
    assert show_all is not None and show_all.isVisible() and "200,0" in show_all.text()
    assert paste[-40:] in window.transcript()  # all of it is there, for copying and search
    qtbot.mouseClick(show_all, Qt.MouseButton.LeftButton)
    full = question.findChild(QPlainTextEdit, "fullText")
    assert full is not None and full.isVisible() and full.toPlainText().endswith(paste[-40:])
    assert question.height() < 2 * window.view.viewport().height()  # all of it, scrolling in its own box
