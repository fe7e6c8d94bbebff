"""A long paste in the window (issue 45, item 1): while the prompt is read the answer's card says how
far ("Reading the prompt: 512 of 1,305 tokens") instead of a bare "…", and Esc (as Stop) ends the
reading there and then, not when the first token would have come. The real window, offscreen, with
the real worker and default model."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from engine import protocol as p
from engine.chats.store import ConversationStore
from tests.conftest import loaded_window

PASTE = "Summarise this list in one line:\n" + " ".join(
    f"Item {i}: the ferry from harbour {i % 9} left at {i % 12 + 1} o'clock with {i * 3} passengers." for i in range(70)
)


def test_a_long_paste_shows_its_reading_and_esc_stops_it_mid_batch(qtbot, model_path: Path, store: ConversationStore) -> None:
    with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(16), store=store) as win:
        tokens: list[p.Token] = []
        win.bridge.event.connect(lambda m: isinstance(m, p.Token) and tokens.append(m))
        win.input.setPlainText(PASTE)
        qtbot.keyClick(win.input, Qt.Key.Key_Return)

        def footer() -> list[str]:  # the live answer's card's (none before the view made it)
            cards = win.view.cards
            return cards[len(win.messages) - 1].footer_lines if 0 < len(win.messages) <= len(cards) else []

        qtbot.waitUntil(lambda: any(line.startswith("Reading the prompt: 512 of ") for line in footer()), timeout=60_000)
        win.input.setFocus()
        qtbot.keyClick(win.input, Qt.Key.Key_Escape)
        qtbot.waitUntil(lambda: not win.request_id, timeout=60_000)
        assert not tokens, "the prompt was read to its end before Stop took effect"
        assert "[stopped: Continue writes more]" in footer()
        assert not any("Reading" in line for line in footer())
        assert "first token" not in win.meter.text()  # none came: the meter claimed the time to the Stop
        assert not win.stop_button.isEnabled()
