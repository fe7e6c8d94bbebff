"""The real window, offscreen, streaming from the real worker."""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QPushButton

from app.main_window import MainWindow
from engine import protocol as p
from engine.chats.store import ConversationStore
from engine.client import WorkerClient
from tests.conftest import loaded_window


@pytest.fixture
def window(qtbot, model_path: Path, store: ConversationStore):
    # the test's own store: on the shared one the window would reopen the chat the last test left open
    with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(32), store=store) as win:
        yield win


def ask(qtbot, win: MainWindow, text: str) -> None:
    win.input.setPlainText(text)
    qtbot.keyClick(win.input, Qt.Key.Key_Return)


def test_window_streams_the_answer_from_the_worker(qtbot, window: MainWindow, model_path: Path) -> None:
    question = "What is the capital of France? Answer in one sentence."
    with WorkerClient() as direct:
        direct.load(model_path, p.Placement())
        expected = list(direct.stream([{"role": "user", "content": question}], p.Sampling.greedy(32)))[-1].text  # type: ignore[attr-defined]
    seen_partial: list[str] = []
    window.bridge.event.connect(lambda m: isinstance(m, p.Token) and seen_partial.append(window.answer))
    ask(qtbot, window, question)
    assert window.stop_button.isEnabled() and not window.send_button.isEnabled()
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    assert window.answer == expected and "Paris" in expected
    # the first token at once, then pieces of up to 30 ms (engine.worker.session.TOKEN_EMIT_S)
    assert len(seen_partial) >= 2 and seen_partial[0] != seen_partial[-1], "text must appear piece by piece"
    transcript = window.transcript()
    assert question in transcript and window.answer.strip() in transcript
    assert "tok/s" in window.speed_label.text()
    assert window.history[-1] == {"role": "assistant", "content": window.answer}
    assert window.input.toPlainText() == ""


def test_shift_enter_inserts_a_newline_instead_of_sending(qtbot, window: MainWindow) -> None:
    window.input.setPlainText("line one")
    qtbot.keyClick(window.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert not window.request_id
    assert "\n" in window.input.toPlainText()


def test_killed_worker_keeps_the_partial_answer_and_continues_after_restart(qtbot, window: MainWindow) -> None:
    """kill -9 mid-answer used to discard what had streamed and move the question back into the
    input box, and the error stayed in the transcript after the restart."""
    window.sampling = p.Sampling.greedy(400)
    ask(qtbot, window, "Tell me a long story about a dragon.")
    qtbot.waitUntil(lambda: len(window.answer) > 20, timeout=60_000)
    os.kill(window.bridge.client.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: window.restart_button.isVisible(), timeout=30_000)
    partial = window.messages[-1]["content"]
    text = window.transcript()
    assert partial and partial[:20] in text and "[interrupted" in text
    assert "The engine stopped unexpectedly" in text and "worker_died" not in text  # no raw error kinds
    assert window.input.toPlainText() == ""  # the question stays in the conversation
    assert window.store.get(window.conv_id).messages[-1].content == partial
    assert not window.send_button.isEnabled() and window.continue_button.isVisible()
    qtbot.mouseClick(window.restart_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.model_loaded, timeout=60_000)
    assert "stopped unexpectedly" not in window.transcript()  # the error is over
    window.sampling = p.Sampling.greedy(8)
    qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    assert window.answer.startswith(partial) and len(window.answer) > len(partial)
    assert "[interrupted" not in window.transcript()
    assert window.store.get(window.conv_id).messages[-1].complete


def test_a_worker_dying_before_any_answer_puts_the_question_back(qtbot, window: MainWindow) -> None:
    window.sampling = p.Sampling.greedy(400)
    window.input.setPlainText("Tell me about dragons.")
    window.send_message()
    os.kill(window.bridge.client.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: window.restart_button.isVisible(), timeout=30_000)
    if not window.messages:  # nothing had streamed: nothing typed is lost, nothing is sent twice
        assert window.input.toPlainText() == "Tell me about dragons."
    qtbot.mouseClick(window.restart_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.model_loaded, timeout=60_000)


APP_SESSION = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.main_window import MainWindow
from engine import protocol as p

app = QApplication(sys.argv)
w = MainWindow(model_path=sys.argv[1], sampling=p.Sampling.greedy(48))
w.show()
w.start_engine()

def ask():
    if not w.model_loaded:
        return QTimer.singleShot(100, ask)
    w.input.setPlainText("Name three colours.")
    w.send_message()
    QTimer.singleShot(100, finish)

def finish():
    if w.request_id:
        return QTimer.singleShot(100, finish)
    print("ANSWER:", w.answer.replace("\\n", " "))
    w.close()
    app.quit()

QTimer.singleShot(0, ask)
sys.exit(app.exec())
"""


def test_app_exits_cleanly_after_streaming(model_path: Path, tmp_path: Path) -> None:
    """A whole app session in its own interpreter: stream an answer, close, exit 0 with no fatal
    error at interpreter shutdown (PySide6 6.12.0's emit corrupted refcounts and crashed here)."""
    import subprocess
    import sys

    script = tmp_path / "session.py"
    script.write_text(APP_SESSION)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    result = subprocess.run([sys.executable, str(script), str(model_path)], capture_output=True, text=True, timeout=120, env=env)
    assert "Fatal Python error" not in result.stderr
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ANSWER:" in result.stdout and len(result.stdout.split("ANSWER:")[1].strip()) > 5


def test_keys_typed_right_after_launch_reach_the_message_box(qtbot, model_path: Path, tmp_path: Path) -> None:
    """Focus starts in the message box (it started on "New chat", where Space clicked it); Tab
    moves on instead of typing a tab; the focused control has a visible ring."""
    from PySide6.QtWidgets import QApplication

    # its own store: the draft it leaves would come back in the next window on the shared one
    win = MainWindow(model_path=model_path, sampling=p.Sampling.greedy(8), store=ConversationStore(tmp_path / "c.db"))
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is not None, timeout=5_000)
    assert QApplication.focusWidget() is win.input
    qtbot.keyClicks(QApplication.focusWidget(), "hello there")
    assert win.input.toPlainText() == "hello there" and win.conv_id is None
    qtbot.keyClick(win.input, Qt.Key.Key_Tab)
    assert "\t" not in win.input.toPlainText() and QApplication.focusWidget() is not win.input
    assert ":focus" in win.styleSheet() and "palette(highlight)" in win.styleSheet()
    win.close()


def test_status_context_and_actions_never_go_stale(qtbot, window: MainWindow) -> None:
    """An error's status went on showing after later answers succeeded; a new chat showed the
    previous chat's context count; Regenerate and Edit last were enabled in an empty chat."""
    assert not window.regen_button.isEnabled() and not window.edit_button.isEnabled()  # empty chat
    loaded_status = window.state_label.text()
    window.on_event(p.Error(kind="bad_request", message="something went wrong"))
    assert window.state_label.text().startswith("Error:")
    window.sampling = p.Sampling.greedy(8)
    ask(qtbot, window, "Say hi.")
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    assert window.state_label.text() == loaded_status
    assert window.context_label.text().startswith("context ")
    assert window.regen_button.isEnabled() and window.edit_button.isEnabled()
    window.new_conversation()
    assert window.context_label.text() == ""
    assert not window.regen_button.isEnabled() and not window.edit_button.isEnabled()


def test_clicking_another_chat_while_streaming_keeps_the_selection_honest(qtbot, window: MainWindow) -> None:
    """The clicked chat was highlighted without opening, and clicking it later did nothing."""
    window.sampling = p.Sampling.greedy(6)
    ask(qtbot, window, "First chat.")
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    first = window.conv_id
    window.new_conversation()
    window.sampling = p.Sampling.greedy(300)
    ask(qtbot, window, "Tell me a long story about a lighthouse.")
    streaming = window.conv_id
    qtbot.waitUntil(lambda: len(window.answer) > 0, timeout=60_000)
    window.sidebar.select(first)  # the user clicks the other chat mid-answer
    assert window.conv_id == streaming and window.sidebar.current_id() == streaming
    window.stop_answer()
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    window.sidebar.select(first)  # and clicking it afterwards opens it
    assert window.conv_id == first and window.messages[0]["content"] == "First chat."


def test_redrawing_keeps_the_readers_scroll_position(qtbot, model_path: Path, store: ConversationStore) -> None:
    """The view jumped to the top when an answer ended, if the reader had scrolled up."""
    win = MainWindow(model_path=model_path, store=store)
    qtbot.addWidget(win)
    win.show()
    win.messages = [{"role": "assistant", "content": "\n\n".join(f"Paragraph {i}." for i in range(200)), "stats": {}}]
    win._render()
    bar = win.view.verticalScrollBar()
    assert bar.maximum() > 100
    bar.setValue(bar.maximum() // 2)
    win._render()  # e.g. the answer ends
    assert abs(bar.value() - bar.maximum() // 2) <= 4
    bar.setValue(bar.maximum())
    win.messages[0]["content"] += "\n\nOne more."
    win._render()  # following the end of a streaming answer
    assert bar.value() == bar.maximum()
    win.close()


def test_an_answer_cut_at_the_length_limit_says_so_and_continues(qtbot, window: MainWindow) -> None:
    """Answers stopped at max_tokens mid-sentence with no word about it."""
    window.sampling = p.Sampling.greedy(12)
    ask(qtbot, window, "Write a long story about a lighthouse keeper and the sea.")
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    first = window.answer
    assert window.continue_button.isVisible() and "12-token limit" in window.transcript()
    qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.request_id, timeout=60_000)
    assert window.answer.startswith(first) and len(window.answer) > len(first)
    assert [m["role"] for m in window.messages] == ["user", "assistant"]  # one answer, grown
    stored = window.store.get(window.conv_id).messages
    assert stored[-1].content == window.answer and stored[-1].complete


def test_every_installed_model_is_in_the_switcher_and_loads(qtbot, window: MainWindow, tmp_path: Path) -> None:
    """A model added with `specee models add` could not be picked in the app."""
    import shutil

    from engine.cli import main as cli

    copy = tmp_path / "my-own-model.gguf"
    shutil.copyfile(window.model_path, copy)
    assert cli(["models", "add", str(copy)]) == 0
    window.refresh_models()
    i = window.model_switch.findData(str(copy))
    assert i >= 0 and "my-own-model" in window.model_switch.itemText(i)
    assert window.model_switch.currentData() == window.model_path
    window.model_switch.activated.emit(i)  # the user picks it
    qtbot.waitUntil(lambda: window.model_loaded and window.model_path == str(copy), timeout=60_000)
    assert "my-own-model" in window.model_switch.currentText()
    assert cli(["models", "remove", "my-own-model"]) == 0


def test_a_damaged_default_model_offers_repair(qtbot, window: MainWindow) -> None:
    from engine.models.default_model import default_model_path

    window.model_path = str(default_model_path())
    window.on_event(p.Error(kind="model_file", message="x.gguf has a corrupt GGUF header. Download it again."))
    assert window.repair_button.isVisible() and "cannot be used" in window.transcript()


def test_about_shows_the_workers_native_build(qtbot, window: MainWindow) -> None:
    """The window never loads llama.cpp itself (tests/test_contracts.py); About shows the build the
    worker reported when it started."""
    from engine.about import about_text

    assert window.native_info and window.native_info.get("build_key")
    assert window.native_info["build_key"] in about_text(window.native_info)


def test_a_second_launch_brings_the_running_window_forward_and_exits(qtbot) -> None:
    """A second app instance used to start silently, both writing the same conversations."""
    from app.main import main
    from app.single_instance import SingleInstance

    running = SingleInstance()
    activated: list[bool] = []
    running.listen(lambda: activated.append(True))
    try:
        assert main(["specee-chat"]) == 0  # returns at once: no second window, no second engine
        qtbot.waitUntil(lambda: bool(activated), timeout=5_000)
    finally:
        assert running.server is not None
        running.server.close()
    assert not SingleInstance().signal_running()  # nobody listens now


# -- the redesigned window: cards, code blocks, header, settings, first run, themes ----------------

CODE_ANSWER = "Here:\n\n```python\ndef is_prime(n):\n    return n > 1 and all(n % i for i in range(2, n))\n```\n\nDone."


@pytest.fixture
def idle_window(qtbot, tmp_path: Path):
    """The real window with no engine started: for what it shows, not what the worker does."""
    from engine.chats.store import ConversationStore

    win = MainWindow(model_path=tmp_path / "none.gguf", store=ConversationStore(tmp_path / "c.db"))
    qtbot.addWidget(win)
    win.resize(1000, 700)
    win.show()
    yield win
    win.set_theme("light")
    win.close()


def test_code_blocks_have_a_copy_button_that_copies_exactly_the_code(qtbot, idle_window: MainWindow) -> None:
    from PySide6.QtWidgets import QApplication

    idle_window.messages = [{"role": "user", "content": "prime?"}, {"role": "assistant", "content": CODE_ANSWER}]
    idle_window._render()
    blocks = idle_window.view.code_blocks()
    assert len(blocks) == 1 and blocks[0].copy_button.isVisible()
    QApplication.clipboard().setText("something else")
    qtbot.mouseClick(blocks[0].copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == "def is_prime(n):\n    return n > 1 and all(n % i for i in range(2, n))\n"
    assert blocks[0].copy_button.text() == "Copied"
    html = blocks[0].text.text()
    assert '<span style="color' in html and ">def</span>" in html  # highlighted by pygments
    assert "Here:" in idle_window.transcript() and "Done." in idle_window.transcript()


def test_cards_show_who_said_what_and_stream_in_place(qtbot, idle_window: MainWindow) -> None:
    idle_window.messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    idle_window._render()
    cards = idle_window.view.cards
    assert [c.objectName() for c in cards] == ["card_user", "card_assistant"]
    assert [c.role_label.text() for c in cards] == ["You", "Assistant"]

    def fill(card) -> QColor:
        return card.grab().toImage().pixelColor(card.width() // 2, 3)

    assert fill(cards[0]) != fill(cards[1])  # the roles look different, not only read different
    text_label = cards[1].widgets[0]
    idle_window.messages[1]["content"] = "Hello there, a longer streamed answer"
    idle_window._render()
    # the streamed answer updates its own card in place: same cards, same text widget, new text
    assert idle_window.view.cards == cards and cards[1].widgets[0] is text_label
    assert "longer streamed answer" in text_label.text()  # type: ignore[attr-defined]
    assert cards[0].width() <= 820 + 1  # a comfortable reading width, also in a wide window


def test_switching_between_light_and_dark(qtbot, idle_window: MainWindow) -> None:
    from app import theme

    idle_window.messages = [{"role": "assistant", "content": CODE_ANSWER}]
    idle_window._render()
    block = idle_window.view.code_blocks()[0]
    light_code, light_bg = block.text.text(), idle_window.view.cards[0].grab().toImage().pixelColor(40, 4)
    idle_window.set_theme("dark")
    assert theme.current() is theme.DARK and theme.DARK.window in idle_window.styleSheet()
    assert "palette(highlight)" in idle_window.styleSheet()  # the focus ring is kept
    assert block.text.text() != light_code  # code colours follow the theme
    dark_bg = idle_window.view.cards[0].grab().toImage().pixelColor(40, 4)
    assert dark_bg.lightness() < light_bg.lightness()
    idle_window.set_theme("light")
    assert theme.current() is theme.LIGHT and block.text.text() == light_code


def test_the_theme_chosen_in_settings_applies_at_once_and_is_read_back(
    qtbot, isolated_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app import theme
    from engine.chats.store import ConversationStore
    from engine.settings import load_settings

    def open_window() -> MainWindow:
        win = MainWindow(model_path=tmp_path / "none.gguf", store=ConversationStore(tmp_path / "c.db"))
        qtbot.addWidget(win)
        win.show()
        return win

    win = open_window()
    try:
        win.set_theme("light")
        assert win.settings.theme == "system"
        dialog = win.open_settings()
        assert [dialog.theme.itemText(i) for i in range(dialog.theme.count())] == ["System", "Light", "Dark"]
        assert dialog.theme.currentText() == "System"
        dialog.theme.setCurrentIndex(dialog.theme.findText("Dark"))
        dialog.accept()
        assert theme.current() is theme.DARK and theme.DARK.window in win.styleSheet()
        assert load_settings().theme == "dark" and win.settings.theme == "dark"
        assert "Loading" not in win.state_label.text()  # the look alone reloads no model
        again = open_window()
        assert again.settings.theme == "dark" and again.open_settings().theme.currentText() == "Dark"
        again.close()
        # at startup (app/main.py) the saved choice is applied, unless SPECEE_THEME forces one
        monkeypatch.delenv("SPECEE_THEME", raising=False)
        assert theme.startup_theme("dark") == "dark" and theme.startup_theme("light") == "light"
        monkeypatch.setenv("SPECEE_THEME", "light")
        assert theme.startup_theme("dark") == "light" and theme.startup_theme("system") == "light"
    finally:
        win.set_theme("light")
        win.close()


def test_header_and_settings_explain_what_the_engine_runs(qtbot, idle_window: MainWindow) -> None:
    from PySide6.QtWidgets import QLabel

    loaded = p.Loaded(
        name="SmolLM2", n_layer=30, n_ctx=4096, n_threads=2, mode="vanilla", mode_reason="measuring the modes",
        measured_tok_s={"vanilla": 40.0}, plan="all 30 layers on the CPU: no GPU found; predicted 41 tok/s",
    )  # fmt: skip
    idle_window.on_event(loaded)
    assert idle_window.accel_badge.text() == "vanilla · 40.0 tok/s measured here"
    speeds = {"vanilla": 40.0, "ngram": 44.0}
    idle_window.on_event(p.AutoDecided(mode="ngram", mode_reason="ngram 1.10x vanilla here", measured_tok_s=speeds))
    assert idle_window.accel_badge.text() == "ngram · 44.0 tok/s measured here"
    assert idle_window.accel_badge.toolTip() == "ngram 1.10x vanilla here"
    assert idle_window.state_label.text().endswith(" · ngram")  # the status bar names the mode alike
    dialog = idle_window.open_settings()
    shown = "\n".join(lbl.text() for lbl in dialog.findChildren(QLabel))
    assert "Placement: all 30 layers on the CPU: no GPU found" in shown
    assert "Why this mode: ngram 1.10x vanilla here" in shown and "Running SmolLM2 (30 layers) with ngram," in shown
    assert "vanilla 40.0 tok/s measured here, ngram 44.0 tok/s measured here (1.10x)" in shown
    assert dialog.mode.findText("ngram") >= 0  # Settings offers the modes by the same names
    assert "4096 tokens" in shown and "2 threads" in shown
    dialog.mode.setCurrentText("eagle")
    assert "Needs EAGLE weights" in dialog.mode_help.text()  # each choice explained
    dialog.close()


def test_predicted_speeds_are_told_apart_from_measured_ones() -> None:
    """Issue 45: the planner's predicted speeds (93, 15 tok/s) sat beside measured ones (12, 2.2)
    with nothing saying which was which; and the header named modes unlike Settings and the status bar."""
    from app.settings_dialog import engine_summary

    loaded = p.Loaded(
        name="M", n_layer=30, n_ctx=4096, n_threads=2, mode="vanilla", predicted_tok_s={"vanilla": 93.0, "specee": 15.0}
    )
    [predicted] = [line for line in engine_summary(loaded, None) if "tok/s" in line]
    assert (
        predicted
        == "Speeds: vanilla 93.0 tok/s predicted, specee 15.0 tok/s predicted (0.16x) (by the placement plan, not measured yet)."
    )
    decided = p.AutoDecided(mode="vanilla", measured_tok_s={"vanilla": 12.0, "specee": 2.2})
    [measured] = [line for line in engine_summary(loaded, decided) if "tok/s" in line]
    assert measured == "Speeds: vanilla 12.0 tok/s measured here, specee 2.2 tok/s measured here (0.18x)."


def test_settings_show_the_saved_conversations_and_clear_them(qtbot, idle_window: MainWindow) -> None:
    from engine import kept_caches

    kept_caches.clear()  # what earlier tests' workers kept
    folder = kept_caches.kv_states_root() / "a-model"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("a.kv", "b.kv"):
        (folder / name).write_bytes(b"x" * 3 * 1024 * 1024)
    dialog = idle_window.open_settings()
    assert dialog.kv_usage.text() == "6 MB in 2 saved conversations" and dialog.kv_clear.isEnabled()
    dialog.kv_clear.click()
    assert kept_caches.disk_usage().n_files == 0 and dialog.kv_usage.text() == "none saved yet"
    assert not dialog.kv_clear.isEnabled()
    dialog.kv_disk.setValue(0)  # memory only: the next load's intent says so
    idle_window.settings = dialog.result_settings(idle_window.settings)
    dialog.close()
    assert idle_window._load_intent("m.gguf").kv_disk_budget == 0
    idle_window.settings = replace(idle_window.settings, kv_disk_gb=2)
    assert idle_window._load_intent("m.gguf").kv_disk_budget == 2 * 1024**3


def test_first_run_shows_a_welcome_pane_then_the_chat(
    qtbot, smollm2_wheel: Path, isolated_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real first run (no model installed yet): a welcome pane with progress and no choices, then
    the chat; the message box stays below it, so keys typed meanwhile are kept."""
    from PySide6.QtWidgets import QApplication

    from engine.models.default_model import default_model_path

    monkeypatch.setenv("SPECEE_DEFAULT_MODEL_WHEEL", str(smollm2_wheel))  # the "download"
    model_path = default_model_path()
    assert not model_path.exists()
    win = MainWindow(sampling=p.Sampling.greedy(8))
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    win.start_engine()
    assert win.pages.currentWidget() is win.welcome and win.welcome.bar.isVisible()
    assert not [w for w in win.welcome.findChildren(QPushButton) if w.isVisible()]  # nothing to decide
    assert win.input.isVisible()  # where the keys go
    qtbot.waitUntil(lambda: QApplication.focusWidget() is win.input, timeout=5_000)
    qtbot.keyClicks(QApplication.focusWidget(), "my first question")
    qtbot.waitUntil(lambda: win.model_loaded, timeout=120_000)
    assert win.pages.currentWidget() is not win.welcome and win.view.isVisible()
    assert win.input.toPlainText() == "my first question"
    assert win.model_switch.currentData() == str(model_path) and "default" in win.model_switch.currentText()
    win.close()


def test_errors_and_notices_get_their_own_cards(qtbot, idle_window: MainWindow) -> None:
    """An error reads as an error (its own outlined card, title in bold, no stray Markdown marks)."""
    idle_window.messages = [{"role": "user", "content": "Hi"}]
    idle_window.on_event(p.Error(kind="bad_request", message="The request was not understood."))
    card = idle_window.view.cards[-1]
    assert card.objectName() == "card_error" and not card.role_label.isVisible()
    shown = idle_window.transcript()
    assert "The request was not understood." in shown and "**" not in shown
    idle_window.chat.notices = ["The answer stopped at the 8-token limit. Continue writes more of it."]
    idle_window._render()
    assert idle_window.view.cards[-1].objectName() == "card_notice" and "8-token limit" in idle_window.transcript()


def test_the_header_reads_the_workers_flags_never_its_reason_text() -> None:
    """Measuring, the runnable modes and the installed weights come from Loaded's flags and the
    registry's hash: nothing is parsed from mode_reason, and the window never hashes a model file."""
    from app.model_status import acceleration_state
    from engine.models.acceleration import installed_weights
    from engine.models.registry import ModelRecord

    flags = p.Acceleration(architecture_supported=True, eagle_head=True, modes=["vanilla", "ngram", "eagle"])  # type: ignore[list-item]
    loaded = p.Loaded(mode="vanilla", mode_reason="whatever the worker says", measuring=True, acceleration=flags)
    badge, why = acceleration_state(loaded)
    assert badge == "vanilla · auto: measuring"
    assert why.startswith("whatever the worker says")
    assert "vanilla (plain decoding), ngram (n-gram drafting), eagle (EAGLE drafting)" in why
    assert "measuring" not in acceleration_state(replace(loaded, measuring=False))[0]
    decided = p.AutoDecided(mode="ngram", mode_reason="ngram 1.10x", measured_tok_s={"vanilla": 40.0, "ngram": 44.0})
    assert acceleration_state(loaded, decided)[0] == "ngram · 44.0 tok/s measured here"
    missing = ModelRecord(id="x", path="/nonexistent/x.gguf", sha256="0" * 64, size=1, source="file")
    assert installed_weights(missing) == "training-free modes"  # looked up by hash: the absent file is never read


def test_the_serve_switch_serves_the_windows_model_and_shows_its_address(qtbot, window: MainWindow) -> None:
    """Serve API: an OpenAI-compatible server with the model the window uses, on 127.0.0.1, its
    address shown (click: copied); switched off, the server is gone."""
    import json
    import urllib.request

    from PySide6.QtGui import QGuiApplication

    switch = window.serve_switch
    assert switch.isVisible() and not switch.address.isVisible()
    switch.toggle.click()
    qtbot.waitUntil(lambda: switch.serving, timeout=120_000)
    base = switch.base_url
    assert base.startswith("http://127.0.0.1:") and base.endswith("/v1") and switch.address.text() == base
    with urllib.request.urlopen(f"{base}/models", timeout=30) as r:
        models = json.load(r)["data"]
    assert [m["id"] for m in models] == [Path(window.model_path).stem]
    switch.address.click()
    assert QGuiApplication.clipboard().text() == base
    server = switch.server
    assert server is not None
    switch.toggle.click()
    assert not switch.serving and not switch.address.isVisible() and switch.toggle.text() == "Serve API"
    qtbot.waitUntil(lambda: not server.alive, timeout=30_000)


def test_the_meter_shows_the_speedup_over_vanilla_and_fits_the_window(qtbot, idle_window: MainWindow) -> None:
    """Issue 14 item 8: the SpecEE numbers were cut at the default width and "x vanilla" never
    appeared (an explicit mode had no vanilla speed to compare with; the worker now measures one)."""
    idle_window.set_theme("light")  # the app's stylesheet and font, as at startup
    idle_window.on_event(p.Loaded(name="SmolLM2", n_layer=30, n_ctx=4096, n_threads=2, mode="specee", measuring=True))
    idle_window.on_event(
        p.AutoDecided(mode="specee", mode_reason="vanilla measured here: 60.0 tok/s", measured_tok_s={"vanilla": 60.0})
    )
    accel = {"steps": 10, "exit_rate": 0.075, "mean_layers": 29.9, "n_layer": 30, "cand_hit_rate": 0.773}
    idle_window.context_label.setText("context 1306/4096")
    idle_window.meter.update_stats(
        p.Stats(mode="specee", decode_tok_s=65.0, vs_vanilla=1.08, prefill_tok_s=400, ttft_ms=1200, n_generated=10, accel=accel)
    )
    qtbot.wait(50)
    label = idle_window.meter.label
    assert "1.08x vanilla" in label.text() and "exits 8% · 29.9/30 layers · hit 77%" in label.text()
    assert label.width() >= label.sizeHint().width(), "the meter is cut"
    state = idle_window.state_label  # the engine state gives way instead, ending in "…"
    assert state.text().startswith("SmolLM2") and state.shown_text().endswith(("…", state.text()))
    assert idle_window.width() <= MainWindow.DEFAULT_SIZE[0]  # at the window's default width, or narrower
    assert "prompt 400 tok/s" in label.toolTip() and "candidates hit 77%" in label.toolTip()
    idle_window.meter.update_stats(p.Stats(mode="remote", decode_tok_s=30.0, n_generated=12))
    assert "vanilla" not in label.text()  # a remote engine is not compared with the local vanilla
