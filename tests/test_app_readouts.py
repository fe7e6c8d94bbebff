"""What the window reads out (issue 23, items 4, 5, 11, 12): the modes Settings offers, a refused
load, the speed meter, readouts that follow the engine instead of going stale, and the small things
a new user tripped over. The real window, offscreen, with the real worker where it matters."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel, QLineEdit

from app.main_window import MainWindow
from engine import protocol as p
from engine.settings import AppSettings, load_settings, save_settings
from tests.conftest import loaded_window


@contextmanager
def saved_settings(settings: AppSettings) -> Iterator[None]:
    """These settings in the test home's file while the block runs; the previous ones after."""
    before = load_settings()
    save_settings(settings)
    try:
        yield
    finally:
        save_settings(before)


@pytest.fixture
def window(qtbot, model_path: Path, tmp_path: Path) -> Iterator[MainWindow]:
    from engine.chats.store import ConversationStore

    kwargs = {"model_path": model_path, "sampling": p.Sampling.greedy(24), "store": ConversationStore(tmp_path / "c.db")}
    with saved_settings(AppSettings(mode="vanilla")), loaded_window(qtbot, **kwargs) as win:
        yield win


@pytest.fixture
def idle_window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    """The real window, its engine never started: for what it draws of the events it gets."""
    from engine.chats.store import ConversationStore

    win = MainWindow(model_path=tmp_path / "none.gguf", store=ConversationStore(tmp_path / "c.db"))
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()


def ask(qtbot, win: MainWindow, text: str) -> None:
    win.input.setPlainText(text)
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not win.request_id, timeout=60_000)


def dialog_text(dialog) -> str:
    return "\n".join(label.text() for label in dialog.findChildren(QLabel))


# -- item 4: Settings offers what the model can run; a refused load keeps the model ---------------------


def test_settings_offers_only_the_modes_the_loaded_model_can_run(qtbot, window: MainWindow) -> None:
    """draft was offered for SmolLM2, which has no paired draft model: choosing it failed the load."""
    assert window.loaded is not None
    runnable = [str(m) for m in window.loaded.acceleration.modes]
    assert "draft" not in runnable
    dialog = window.open_settings()
    offered = [dialog.mode.itemData(i) for i in range(dialog.mode.count())]
    assert offered == ["auto", *runnable] and "draft" not in offered
    assert "draft" in dialog.mode_help.text() or "draft" in dialog_text(dialog)  # ... and why not, in words
    dialog.close()


def test_a_refused_load_keeps_the_running_model_and_says_so(qtbot, window: MainWindow, copied_model: Path) -> None:
    """A load the worker refused left no model: Send stayed disabled and the header went on saying
    "plain decoding" about nothing. The running model stays, the switcher and the header say so."""
    running = window.model_path
    window.settings = replace(window.settings, mode="draft")  # e.g. chosen for another model
    window.switch_model(str(copied_model))
    qtbot.waitUntil(lambda: window.state_label.text().startswith("Error:"), timeout=60_000)
    qtbot.waitUntil(lambda: window.model_loaded, timeout=60_000)
    assert window.model_path == running and window.model_switch.currentData() == running
    assert window.loaded is not None and window.loaded.model_path == running and window.loaded.mode == "vanilla"
    assert window.send_button.isEnabled() and window.accel_badge.text().startswith("vanilla")
    assert "stays loaded" in window.state_label.toolTip() + window.state_label.text() + window.transcript()
    window.settings = replace(window.settings, mode="vanilla")
    ask(qtbot, window, "Say hi.")
    assert window.answer


# -- item 5: the meter ----------------------------------------------------------------------------------


def test_the_meter_shows_the_engines_speed_even_when_its_events_arrive_in_a_burst(qtbot, idle_window: MainWindow) -> None:
    """After a 200k-character paste the meter read "2871.8 tok/s": the window, busy drawing, got the
    engine's Stats in a burst and divided their tokens by the microseconds between them."""
    idle_window.on_event(p.Loaded(name="m", n_layer=30, n_ctx=4096, n_threads=2, mode="ngram"))
    for n in (2, 12, 40, 64):  # handled back to back, as after a long paste
        idle_window.meter.update_stats(
            p.Stats(mode="ngram", n_generated=n, decode_tok_s=41.0, recent_tok_s=42.0, ttft_ms=900, n_prompt=4000)
        )
    text = idle_window.meter.text()
    assert text.startswith("42.0 tok/s") and max(idle_window.meter.sparkline.values) == 42.0, text


def test_x_vanilla_is_shown_only_where_the_engine_compared_like_with_like(qtbot, idle_window: MainWindow) -> None:
    """Every answer read 0.28-0.8x vanilla: the window divided it by auto's idle, short-prompt vanilla
    speed. The ratio is now the engine's, for the same threads and prompt length, or none."""
    idle_window.on_event(p.Loaded(name="m", n_layer=30, n_ctx=4096, n_threads=2, mode="ngram"))
    idle_window.on_event(p.AutoDecided(mode="ngram", mode_reason="x", measured_tok_s={"vanilla": 120.0, "ngram": 130.0}))
    idle_window.meter.update_stats(p.Stats(mode="ngram", n_generated=40, decode_tok_s=35.0, recent_tok_s=34.0, n_prompt=3000))
    assert "vanilla" not in idle_window.meter.text()  # a long prompt: nothing measured alike
    assert "no vanilla speed measured in these conditions" in idle_window.meter.label.toolTip()
    idle_window.meter.update_stats(p.Stats(mode="ngram", n_generated=40, decode_tok_s=99.0, recent_tok_s=98.0, vs_vanilla=1.04))
    assert "1.04x vanilla" in idle_window.meter.text()


# -- item 11: readouts that go stale ------------------------------------------------------------------


def test_the_header_drops_the_previous_models_speed_while_another_loads(qtbot, window: MainWindow, copied_model: Path) -> None:
    window.on_event(p.AutoDecided(mode="vanilla", mode_reason="measured", measured_tok_s={"vanilla": 121.5}))
    assert "121.5 tok/s measured" in window.accel_badge.text()
    window.switch_model(str(copied_model))
    assert "121.5" not in window.accel_badge.text() and "121.5" not in window.accel_badge.toolTip()
    qtbot.waitUntil(lambda: window.model_loaded, timeout=60_000)
    assert "121.5" not in window.accel_badge.text()


def test_the_context_readout_follows_a_new_context_length(qtbot, window: MainWindow) -> None:
    """The status bar kept "/4096" after the context became 2048."""
    ask(qtbot, window, "Say hi.")
    assert window.context_label.text().endswith("/4096")
    dialog = window.open_settings()
    dialog.ctx.setValue(2048)
    dialog.accept()
    assert "/4096" not in window.context_label.text()  # the old count goes with the old context
    qtbot.waitUntil(lambda: window.model_loaded and window.loaded is not None and window.loaded.n_ctx == 2048, timeout=60_000)
    assert "/4096" not in window.context_label.text()
    ask(qtbot, window, "Say hi again.")
    assert window.context_label.text().endswith("/2048")


def test_settings_counts_threads_once_and_in_good_english(qtbot, model_path: Path, tmp_path: Path) -> None:
    """Settings said "1 threads" beside the plan's "2 threads"."""
    from engine.chats.store import ConversationStore

    kwargs = {"model_path": model_path, "store": ConversationStore(tmp_path / "c.db")}
    with saved_settings(AppSettings(mode="vanilla", n_threads=1)), loaded_window(qtbot, **kwargs) as win:
        assert win.loaded is not None and win.loaded.n_threads == 1
        dialog = win.open_settings()
        shown = dialog_text(dialog)
        assert "1 thread" in shown and "1 threads" not in shown and "2 threads" not in shown, shown
        dialog.close()


# -- item 12: small things ------------------------------------------------------------------------------


def test_the_status_bar_names_the_model_as_the_switcher_does(qtbot, window: MainWindow) -> None:
    state = window.state_label.text()
    assert state.startswith("SmolLM2-135M-Instruct.Q4_1 ·") and "Smollm2 135M 8k" not in state
    assert window.model_switch.currentText().startswith("SmolLM2-135M-Instruct.Q4_1")


def test_copy_answer_applies_only_when_there_is_an_answer(qtbot, window: MainWindow) -> None:
    assert not window.copy_button.isEnabled()  # an empty chat
    ask(qtbot, window, "Say hi.")
    assert window.copy_button.isEnabled()
    window.new_conversation()
    assert not window.copy_button.isEnabled()


def test_the_serve_address_says_it_was_copied(qtbot, idle_window: MainWindow) -> None:
    switch = idle_window.serve_switch
    switch.url = "http://127.0.0.1:8089"  # as if serving there
    switch.address.setText(switch.base_url)
    switch.address.setVisible(True)
    switch.address.click()
    assert QApplication.clipboard().text() == switch.base_url
    assert switch.address.text() == "Copied" or "Copied" in idle_window.state_label.text()
    qtbot.waitUntil(lambda: switch.address.text() == switch.base_url, timeout=5_000)  # then the address again


def test_the_window_size_is_remembered(qtbot, tmp_path: Path, isolated_data: Path) -> None:
    from engine.chats.store import ConversationStore

    def open_window() -> MainWindow:
        win = MainWindow(model_path=tmp_path / "none.gguf", store=ConversationStore(tmp_path / "c.db"))
        qtbot.addWidget(win)
        win.show()
        return win

    first = open_window()
    assert (first.width(), first.height()) == MainWindow.DEFAULT_SIZE
    first.resize(1180, 760)
    first.close()
    again = open_window()
    assert (again.width(), again.height()) == (1180, 760)
    again.close()


def test_nothing_in_the_header_or_status_bar_is_cut_at_the_default_size(qtbot, window: MainWindow) -> None:
    """At 1040x700 the header read "plain decoding · au" and the switcher's entries were cut."""
    window.resize(*MainWindow.DEFAULT_SIZE)
    window.on_event(p.AutoDecided(mode="vanilla", mode_reason="auto: measured", measured_tok_s={"vanilla": 121.5}))
    qtbot.wait(50)  # one layout pass
    badge = window.accel_badge
    text = badge.text()
    fits = badge.fontMetrics().horizontalAdvance(text) <= badge.contentsRect().width()
    assert fits or (badge.shown_text().endswith("…") and text in badge.toolTip() + text), text
    switch = window.model_switch
    longest = max(switch.fontMetrics().horizontalAdvance(switch.itemText(i)) for i in range(switch.count()))
    assert switch.view().minimumWidth() >= longest  # open, every entry is whole
    shown = switch.shown_text()  # closed: whole, or ending in "…" and whole in the tooltip
    assert shown == switch.currentText() or (shown.endswith("…") and switch.currentText() in switch.toolTip())
    state = window.state_label
    assert state.shown_text() == state.text() or state.toolTip()


def test_the_inline_rename_box_is_not_clipped(qtbot, idle_window: MainWindow) -> None:
    conv = idle_window.store.create("A chat to rename")
    idle_window.sidebar.refresh(current=conv.id)
    item = idle_window.sidebar.list.currentItem()
    idle_window.sidebar.list.editItem(item)
    qtbot.waitUntil(lambda: bool(idle_window.sidebar.list.viewport().findChildren(QLineEdit)), timeout=2_000)
    (editor,) = idle_window.sidebar.list.viewport().findChildren(QLineEdit)
    assert editor.height() >= editor.sizeHint().height(), (editor.height(), editor.sizeHint().height())
