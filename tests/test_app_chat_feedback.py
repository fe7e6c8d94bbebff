"""What the chat says while and after it answers, and where the focus goes (issue 45, tried under a
virtual display): a live answer says it is being written (only one that really ended interrupted
says so), Stop and Restart engine hand the focus back to the message box without scrolling the chat,
Continue's footer counts the whole answer, and Regenerate works after a crash as the footer offers.
The real window, offscreen, with the real worker and default model."""

from __future__ import annotations

import os
import re
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


@pytest.fixture
def win(qtbot, model_path: Path, store: ConversationStore):
    """The real window and worker at its default size, active (keys and focus need it)."""
    with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(400), store=store) as w:
        w.resize(*MainWindow.DEFAULT_SIZE)
        w.activateWindow()
        qtbot.waitExposed(w)
        w.input.setFocus()
        qtbot.waitUntil(lambda: QApplication.focusWidget() is w.input)
        yield w


def scrolling_chat(store: ConversationStore) -> str:
    """A chat a few screens long at the default size, short enough for the model to read quickly."""
    conv = store.create("dragons", "", {})
    for i in range(6):
        store.append(conv.id, "user", f"Question {i}: what do dragons eat?")
        store.append(conv.id, "assistant", "\n\n".join(f"Part {j}: dragons eat what they find." for j in range(6)))
    return conv.id


def footer(win: MainWindow) -> list[str]:
    """The lines under the last message (the notices after it have cards of their own)."""
    return win.view.cards[len(win.messages) - 1].footer_lines


def press(qtbot, button) -> None:
    """A keyboard user's press: the button has the focus, Space clicks it."""
    button.setFocus()
    assert QApplication.focusWidget() is button
    qtbot.keyClick(button, Qt.Key.Key_Space)


def test_a_live_answer_says_it_is_written_and_stop_keeps_focus_and_place(qtbot, win: MainWindow, store) -> None:
    """Items 1, 3 and 5: '[interrupted: Continue or Regenerate]' showed under the answer for its whole
    stream; after Stop the focus went to the first card's Copy and the chat scrolled to the top;
    after Continue the footer kept the token count of the part before."""
    conv_id = scrolling_chat(store)  # a chat that runs screens long: a jump to the top shows
    win.sidebar.refresh()
    win.sidebar.select(conv_id)
    assert win.conv_id == conv_id
    win.input.setFocus()
    win.input.setPlainText("Tell me a long story about a dragon.")
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    assert win.request_id
    seen: list[list[str]] = [footer(win)]  # from before the first token (the prompt being read) on
    win.bridge.event.connect(lambda m: isinstance(m, p.Token | p.Stats) and seen.append(footer(win)))
    qtbot.waitUntil(lambda: len(win.answer) > 40 and "tok/s" in " ".join(footer(win)), timeout=60_000)
    # while the prompt is read the footer says how far (tests/test_app_prompt_reading.py), then that it is written
    live = ("[writing…]", "Reading the prompt: ")
    assert all(any(line.startswith(live) for line in lines) for lines in seen), seen
    assert not any("interrupted" in line for lines in seen for line in lines), seen
    bar = win.view.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # it follows the end
    press(qtbot, win.stop_button)
    qtbot.waitUntil(lambda: not win.request_id, timeout=60_000)
    qtbot.wait(100)  # any focus change and scrolling it brings happen in this event loop turn
    assert QApplication.focusWidget() is win.input
    assert bar.value() == bar.maximum() > 0, "the chat scrolled away from the end"
    assert "[stopped: Continue writes more]" in footer(win) and "[writing…]" not in footer(win)

    before = win.messages[-1]["stats"]["n_generated"]
    assert f"{before} tokens" in footer(win)[0]
    win.sampling = p.Sampling.greedy(8)
    qtbot.mouseClick(win.continue_button, LEFT)
    assert "[writing…]" in footer(win)
    qtbot.waitUntil(lambda: not win.request_id, timeout=60_000)
    total = int(re.search(r"(\d+) tokens", footer(win)[0]).group(1))
    assert total == before + 8, footer(win)  # the whole answer: the part before and the 8 tokens Continue wrote
    assert store.get(win.conv_id).messages[-1].stats["n_generated"] == total  # as reopened later


def test_after_a_crash_regenerate_restarts_the_engine_and_restart_keeps_the_focus_home(qtbot, win: MainWindow) -> None:
    """Items 1, 3 and 5: the interrupted answer offers Regenerate, which was greyed; after Restart
    engine the focus landed on Serve API, where Space would start the server."""
    win.input.setPlainText("Tell me a long story about a dragon.")
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(win.answer) > 20, timeout=60_000)
    os.kill(win.bridge.client.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: win.restart_button.isVisible(), timeout=30_000)
    assert "[interrupted: Continue or Regenerate]" in footer(win) and "[writing…]" not in footer(win)
    first_id = win.messages[-1]["id"]
    assert win.regen_button.isEnabled(), "Regenerate is offered: it must be enabled"
    win.sampling = p.Sampling.greedy(8)
    qtbot.mouseClick(win.regen_button, LEFT)  # not Restart engine: Regenerate restarts it
    qtbot.waitUntil(lambda: win.model_loaded, timeout=90_000)
    qtbot.waitUntil(lambda: not win.request_id and win.messages[-1]["id"] != first_id, timeout=60_000)
    assert win.messages[-1]["content"] and win.messages[-1]["finish"] == "length"
    assert win.view.cards[len(win.messages) - 1].message_actions.version_label.text() == "2/2"
    assert "[interrupted" not in win.transcript()

    win.sampling = p.Sampling.greedy(400)
    win.input.setPlainText("Tell me another long story.")
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(win.answer) > 20, timeout=60_000)
    os.kill(win.bridge.client.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: win.restart_button.isVisible(), timeout=30_000)
    press(qtbot, win.restart_button)
    assert not win.restart_button.isVisible()
    assert QApplication.focusWidget() is win.input, QApplication.focusWidget()
    qtbot.waitUntil(lambda: win.model_loaded, timeout=90_000)
    assert QApplication.focusWidget() is win.input and not win.serve_switch.serving


@pytest.fixture
def idle(qtbot, tmp_path: Path, store: ConversationStore):
    """The real window with no engine (what it shows of stored chats), at its default size, active."""
    w = MainWindow(model_path=tmp_path / "none.gguf", store=store)
    qtbot.addWidget(w)
    w.resize(*MainWindow.DEFAULT_SIZE)
    w.show()
    w.activateWindow()
    qtbot.waitExposed(w)
    yield w
    w.close()


def test_a_search_result_shows_its_snippet_and_opens_on_the_matching_message(qtbot, idle: MainWindow, store) -> None:
    """Item 4: a search result was a bare title, and opening it showed the chat's end, not the match."""
    conv = store.create("Lighthouse stories", "", {})
    for i in range(8):
        store.append(conv.id, "user", f"Question {i}: tell me more about the keeper.")
        said = "In the evenings the keeper played the violin to the gulls." if i == 1 else "The keeper kept the lamp lit."
        store.append(conv.id, "assistant", "\n\n".join([f"Part {i}: the keeper climbed the stairs again."] * 4 + [said]))
    store.create("Another chat", "", {})
    idle.sidebar.refresh()
    plain_row = idle.sidebar.list.sizeHintForRow(0)
    qtbot.keyClicks(idle.sidebar.search, "violin")
    row = idle.sidebar.list.item(0)
    assert idle.sidebar.list.count() == 1 and row.text() == "Lighthouse stories"  # the title stays the row's text
    assert "keeper played the violin" in row.toolTip(), row.toolTip()
    assert idle.sidebar.list.sizeHintForRow(0) > plain_row  # a line for the snippet under the title
    idle.sidebar.list.grab()  # it paints
    qtbot.keyClick(idle.sidebar.search, Qt.Key.Key_Return)
    assert idle.conv_id == conv.id
    matched = idle.view.cards[3]  # the second answer said it
    assert idle.view.matched == 3 and matched.property("match") and "violin" in matched.plain_text()
    qtbot.wait(50)  # the cards settle
    viewport = idle.view.viewport()
    top = matched.mapTo(viewport, matched.rect().topLeft()).y()
    assert 0 <= top < viewport.height() // 3, top  # near the top of the view, whole or from its start
    last = idle.view.cards[-1]
    assert last.mapTo(viewport, last.rect().topLeft()).y() > viewport.height()  # not at the chat's end
    # opened without a search: at its end, nothing highlighted
    idle.sidebar.search.clear()
    idle.new_conversation()
    idle.sidebar.select(conv.id)
    bar = idle.view.verticalScrollBar()
    assert idle.view.matched is None and not any(c.property("match") for c in idle.view.cards)
    assert bar.value() == bar.maximum() > 0


def test_version_arrows_system_prompt_and_undo_label_read_and_click_well(qtbot, idle: MainWindow, store) -> None:
    """Item 5: the version arrows were 19x17 px; the system prompt showed the end of its text; the
    Undo button's label was cut at the sidebar's width."""
    idle.set_theme("light")  # the app's stylesheet, as at startup
    prompt = "You are a lighthouse keeper from Cornwall who answers every question briefly, kindly and in rhyme."
    conv = store.create("A very long conversation title about lighthouse keepers and their violins", prompt, {})
    q = store.append(conv.id, "user", "Q")
    store.append(conv.id, "assistant", "First answer", parent=q)
    store.append(conv.id, "assistant", "Second answer", parent=q)
    idle.sidebar.refresh()
    idle.sidebar.select(conv.id)
    qtbot.wait(50)
    pager = idle.view.cards[1].message_actions
    assert pager is not None and pager.version_label.text() == "2/2"
    for arrow in (pager.prev_button, pager.next_button):
        assert arrow.width() >= 24 and arrow.height() >= 24, arrow.size()  # WCAG 2.5.8's minimum target

    edit = idle.system_edit
    assert edit.text() == prompt and edit.cursorPosition() == 0 and edit.toolTip() == prompt  # its start shows
    assert edit.cursorRect().left() < 20
    edit.setFocus()
    edit.end(False)
    qtbot.keyClicks(edit, " Always.")
    qtbot.keyClick(edit, Qt.Key.Key_Tab)  # left for the next control: its start shows again
    assert edit.text() == prompt + " Always." and edit.cursorPosition() == 0
    assert store.get(conv.id).system_prompt == prompt + " Always."

    idle.sidebar.delete(conv.id)
    undo = idle.sidebar.undo_button
    assert undo.isVisible() and undo.text().endswith("(Ctrl+Z)") and "“A very" in undo.text() and "…" in undo.text()
    assert undo.sizeHint().width() <= undo.width(), (undo.text(), undo.sizeHint().width(), undo.width())
    assert conv.title in undo.toolTip()
    qtbot.mouseClick(undo, LEFT)
    assert idle.conv_id == conv.id and not undo.isVisible()
