"""What the app's user waits for in a long chat, per mode (issue 45): the real window (offscreen) and
worker on the default model, a ~N-token chat; the time from the click (Send, Regenerate, Continue)
to the answer's first token in the window, for the first turn (cold), Regenerate, Continue, the next
turn, the next turn after the app was closed and opened again, and from Esc to the window being idle
again while a long paste is read. A pause between clicks lets the worker's idle time run (auto's
measurement). Each mode starts with an empty cache folder and its mode in the app's settings.

    QT_QPA_PLATFORM=offscreen .venv/bin/python -m tests.measure_app_turns [--modes auto,vanilla] [--tokens 3000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

FILLER = "Here is one more paragraph of the notes we keep going over, about lighthouses, tides and ships. "
# the paste Esc stops: another text, so no kept cache of the chat above holds any of it
PASTE = "Another page from the garden diary: what was sown, what came up, and what the frost took this week. "


def _wait(app, until: Callable[[], bool], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise TimeoutError("the window did not get there in time")
        app.processEvents()
        time.sleep(0.002)


def _pause(app, seconds: float) -> None:
    end = time.monotonic() + seconds
    _wait(app, lambda: time.monotonic() >= end)


def run_mode(model: Path, mode: str, n_tokens: int, pause_s: float) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix=f"specee-app-turns-{mode}-"))
    os.environ["SPECEE_CACHE_DIR"] = str(home / "cache")
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from engine import protocol as p
    from engine.chats.store import ConversationStore
    from engine.settings import load_settings, save_settings

    app = QApplication.instance() or QApplication([])
    settings = load_settings()
    settings.mode = mode
    save_settings(settings)
    store = ConversationStore(home / "chats.db")
    out: dict[str, float] = {}
    first_token: list[float] = []

    def opened() -> MainWindow:
        win = MainWindow(model_path=model, sampling=p.Sampling.greedy(16), store=store)
        # the first token, or the end of an answer that has none (Continue may end at once)
        win.bridge.event.connect(
            lambda m: isinstance(m, p.Token | p.Done) and not first_token and first_token.append(time.perf_counter())
        )
        win.show()
        win.start_engine()
        _wait(app, lambda: win.model_loaded)
        return win

    def timed(win: MainWindow, act: Callable[[], None]) -> float:
        first_token.clear()
        t0 = time.perf_counter()
        act()
        _wait(app, lambda: bool(first_token))
        _wait(app, lambda: not win.request_id)
        return first_token[0] - t0

    def send(win: MainWindow, text: str) -> None:
        win.input.setPlainText(text)
        QTest.keyClick(win.input, Qt.Key.Key_Return)

    win = opened()
    chat = FILLER * max(1, n_tokens // 20) + f"({mode}) Summarise the notes in one line."
    out["first turn (cold)"] = timed(win, lambda: send(win, chat))
    _pause(app, pause_s)
    out["Regenerate"] = timed(win, win.panel.regenerate)
    _pause(app, pause_s)
    # Continue only where the answer was cut at the length limit (an answer that ended offers none)
    out["Continue"] = timed(win, win.panel.continue_answer) if win.chat.can_continue else float("nan")
    _pause(app, pause_s)
    out["next turn"] = timed(win, lambda: send(win, "And the tides?"))
    conv_id = win.conv_id
    win.close()
    win = opened()
    win.sidebar.select(conv_id)
    out["next turn after reopening the app"] = timed(win, lambda: send(win, "And the ships?"))
    win.new_conversation()
    send(win, PASTE * max(1, n_tokens // 20) + f"({mode}) What is this about?")

    def footer() -> list[str]:  # the live answer's card's (none before the view made it)
        cards = win.view.cards
        return cards[len(win.messages) - 1].footer_lines if 0 < len(win.messages) <= len(cards) else []

    _wait(app, lambda: any(line.startswith("Reading the prompt") for line in footer()))
    t0 = time.perf_counter()
    QTest.keyClick(win.input, Qt.Key.Key_Escape)
    _wait(app, lambda: not win.request_id)
    out["Esc while a long paste is read -> idle"] = time.perf_counter() - t0
    win.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="auto,vanilla,ngram,eagle,specee")
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--pause", type=float, default=5.0)
    args = ap.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from engine.models.default_model import ensure_default_model

    model = ensure_default_model()
    os.environ["SPECEE_DATA_DIR"] = tempfile.mkdtemp(prefix="specee-app-turns-data-")  # never the user's chats or settings
    results = {}
    for mode in args.modes.split(","):
        results[mode] = run_mode(model, mode, args.tokens, args.pause)
        print(mode, {row: round(s, 2) for row, s in results[mode].items()}, flush=True)
    print(f"seconds, in the window (~{args.tokens}-token chat, the default model)")
    print(f"{'':42}" + "".join(f"{m:>10}" for m in results))
    for row in next(iter(results.values())):
        print(f"{row:42}" + "".join(f"{results[m][row]:10.2f}" for m in results))


if __name__ == "__main__":
    main()
