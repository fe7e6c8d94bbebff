"""Remote engines in the window (issue 15): the real offscreen window with the real local worker,
and a real llama-server (tests/remote_servers.py) as the remote engine, added through the dialog;
small real HTTP servers for failures. No test touches the user's keyring (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.engine_switcher import KIND_ROLE
from app.main_window import MainWindow
from engine import protocol as p
from engine.chats.render import message_footer, remote_engine
from engine.chats.store import ConversationStore
from engine.remote.endpoints import Endpoint, EndpointRegistry
from tests.conftest import loaded_window
from tests.remote_servers import MemoryKeyring, free_port, piece, scripted_server

SERVER_TIMEOUT = pytest.mark.timeout(1800)  # llama-server's first build on a machine takes minutes


@pytest.fixture
def remote_window(qtbot, model_path: Path, isolated_data: Path, tmp_path: Path):
    """The window with the local model loaded, its own data dir (endpoints.json) and chats."""
    store = ConversationStore(tmp_path / "c.db")
    with loaded_window(qtbot, model_path=model_path, sampling=p.Sampling.greedy(24), store=store) as win:
        yield win


def entries(win: MainWindow, kind: str) -> list[tuple[int, str]]:
    s = win.model_switch
    return [(i, s.itemText(i)) for i in range(s.count()) if s.itemData(i, KIND_ROLE) == kind]


def pick(win: MainWindow, text_start: str) -> None:
    i = next(i for i in range(win.model_switch.count()) if win.model_switch.itemText(i).startswith(text_start))
    win.model_switch.setCurrentIndex(i)
    win.model_switch.activated.emit(i)


def ask_and_wait(qtbot, win: MainWindow, text: str) -> None:
    win.input.setPlainText(text)
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    assert win.request_id
    qtbot.waitUntil(lambda: not win.request_id, timeout=120_000)


def test_remote_engine_labels_render_in_the_footer() -> None:
    assert remote_engine("remote:gpu-box/Qwen/Qwen2.5-7B") == "gpu-box / Qwen/Qwen2.5-7B"
    assert remote_engine("local:SmolLM2 (vanilla)") == "" == remote_engine("")
    answer = {
        "role": "assistant",
        "content": "x",
        "engine": "remote:gpu-box/qwen",
        "stats": {"decode_tok_s": 12.5, "n_generated": 7},
    }
    assert message_footer(answer) == ["12.5 tok/s · 7 tokens · via gpu-box / qwen"]
    assert message_footer({**answer, "stats": {}, "interrupted": True}) == [
        "via gpu-box / qwen",
        "[interrupted: Continue or Regenerate]",
    ]
    local = {
        "role": "assistant",
        "content": "x",
        "engine": "local:m (eagle)",
        "stats": {"decode_tok_s": 9.0, "n_generated": 3, "mode": "eagle"},
    }
    assert message_footer(local) == ["9.0 tok/s · 3 tokens · m · eagle"]  # which local model wrote it, too


@SERVER_TIMEOUT
def test_add_a_remote_engine_chat_with_it_then_back_to_local(
    qtbot, remote_window: MainWindow, llama_server: str, memory_keyring: MemoryKeyring, isolated_data: Path
) -> None:
    win = remote_window
    local_name = win.loaded.name if win.loaded else ""
    assert entries(win, "add-remote") == [(win.model_switch.count() - 1, "Add remote engine…")]
    dialog = win.open_endpoint_dialog()
    dialog.name.setText("gpu-box")
    dialog.url.setText(llama_server)
    dialog.key.setText("sk-llama-ignores-it")
    qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
    assert "Asking" in dialog.test_result.text() and not dialog.test_button.isEnabled()  # the GUI thread is free
    qtbot.waitUntil(lambda: "Connected" in dialog.test_result.text(), timeout=30_000)
    dialog.buttons.button(dialog.buttons.StandardButton.Save).click()
    assert not dialog.isVisible()
    assert memory_keyring.passwords == {("specee-chat", "gpu-box"): "sk-llama-ignores-it"}
    assert "sk-llama" not in (isolated_data / "endpoints.json").read_text()
    remote = entries(win, "remote")
    assert len(remote) == 1 and remote[0][1].startswith("gpu-box / ") and remote[0][1].endswith(".gguf"), remote
    assert remote[0][0] < entries(win, "add-remote")[0][0] and entries(win, "local")[0][0] < remote[0][0]

    pick(win, "gpu-box / ")
    qtbot.waitUntil(lambda: win.model_loaded, timeout=30_000)
    assert win.bridge.is_remote and win.accel_badge.text() == "remote"
    assert not win.serve_switch.toggle.isEnabled() and "remote" in win.serve_switch.toggle.toolTip()
    assert win.model_switch.currentText().startswith("gpu-box / ")
    ask_and_wait(qtbot, win, "What is the capital of France?")
    answer = win.messages[-1]
    assert answer["role"] == "assistant" and answer["content"].strip() and not answer.get("interrupted")
    assert answer["engine"].startswith("remote:gpu-box/")
    card = [c for c in win.view.cards if c.role == "assistant"][-1]
    assert any(line.endswith(f"via {remote_engine(answer['engine'])}") for line in card.footer_lines), card.footer_lines
    assert win.accel_badge.text().startswith("remote · ") and win.accel_badge.text().endswith("tok/s measured here")
    assert "tok/s" in win.meter.text()
    stored = win.store.get(win.conv_id).messages
    assert stored[-1].engine == answer["engine"] and stored[-1].complete

    pick(win, entries(win, "local")[0][1])  # back: the worker kept its model loaded, so at once
    assert win.model_loaded and not win.bridge.is_remote and win.loaded and win.loaded.name == local_name
    assert win.serve_switch.toggle.isEnabled()
    ask_and_wait(qtbot, win, "And of Italy?")
    stored = win.store.get(win.conv_id).messages
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1].engine.startswith("remote:gpu-box/") and stored[3].engine.startswith(f"local:{local_name} (")
    local_card = [c for c in win.view.cards if c.role == "assistant"][-1]
    assert local_card.footer_lines and not any("via" in line for line in local_card.footer_lines)

    win.remove_endpoint("gpu-box")  # its key goes too
    assert memory_keyring.passwords == {} and entries(win, "remote") == []


def test_an_unreachable_engine_gives_the_question_back_and_offers_the_local_model(qtbot, remote_window: MainWindow) -> None:
    win = remote_window
    registry = EndpointRegistry()
    registry.add(Endpoint("dead", f"http://127.0.0.1:{free_port()}"))
    with scripted_server(lambda write, over: write(piece("hi", "stop"))) as url:
        registry.add(Endpoint("flaky", url))
        win.list_remote_models()
        qtbot.waitUntil(lambda: any(t.startswith("flaky / stub-model") for _, t in entries(win, "remote")), timeout=15_000)
        qtbot.waitUntil(lambda: any(t == "dead · unreachable (pick to retry)" for _, t in entries(win, "remote")), timeout=15_000)
        i = next(i for i, t in entries(win, "remote") if t.startswith("dead"))
        assert "cannot connect" in win.model_switch.itemData(i, Qt.ItemDataRole.ToolTipRole)
        pick(win, "flaky / stub-model")
        qtbot.waitUntil(lambda: win.model_loaded, timeout=15_000)
    # the server is gone now: its port is closed
    win.input.setPlainText("Are you still there?")
    qtbot.keyClick(win.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not win.request_id, timeout=30_000)
    assert win.input.toPlainText() == "Are you still there?" and win.messages == []
    assert "The server cannot be reached" in win.transcript() and "unreachable" not in win.transcript()
    assert win.local_button.isVisible()
    qtbot.mouseClick(win.local_button, Qt.MouseButton.LeftButton)
    assert win.model_loaded and not win.bridge.is_remote and not win.local_button.isVisible()
    assert win.model_switch.currentData() == win.model_path


@SERVER_TIMEOUT
def test_the_connection_test_says_when_the_key_is_refused(qtbot, llama_server_with_key: str, isolated_data: Path) -> None:
    from app.endpoint_dialog import EndpointDialog

    dialog = EndpointDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.name.setText("keyed")
    dialog.url.setText(llama_server_with_key)
    dialog.key.setText("the-wrong-key")
    qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.test_button.isEnabled(), timeout=30_000)
    text = dialog.test_result.text()
    assert text.startswith("The server refused the API key:") and "HTTP 401" in text and "the-wrong-key" not in text
    dialog.url.setText("localhost:8080")  # no scheme: said before anything is contacted
    qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
    assert "http://" in dialog.test_result.text() and dialog.test_button.isEnabled()
    dialog.url.setText(llama_server_with_key)
    dialog.key.setText("the-right-key")
    qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Connected" in dialog.test_result.text(), timeout=30_000)
    dialog.buttons.button(dialog.buttons.StandardButton.Save).click()  # no keyring here: said plainly
    assert dialog.isVisible() and "kept for this session only" in dialog.test_result.text()
    assert EndpointRegistry().get("keyed").base_url == llama_server_with_key + "/v1"


def test_the_bridge_runs_the_engine_choice_on_the_gui_thread(qtbot, isolated_data: Path) -> None:
    """What a client's thread reports reaches the engine choice on the GUI thread, and what the choice
    tells comes out as the bridge's signals there (the choice itself: tests/test_engine_choice.py)."""
    import threading

    from app.worker_bridge import WorkerBridge
    from engine.remote.engine_choice import ListChanged

    bridge = WorkerBridge(lambda path: p.Load(path), "local", None)
    seen: list[tuple[p.Message, threading.Thread]] = []
    bridge.event.connect(lambda msg: seen.append((msg, threading.current_thread())))
    changes: list[object] = []
    bridge.changed.connect(changes.append)
    local = p.Loaded(name="local-model", mode=p.Mode.AUTO)
    reader = threading.Thread(target=bridge.choice.local._dispatch, args=(local,))  # as the worker's reader does
    reader.start()
    reader.join()
    assert seen == [] and bridge.local_loaded is None  # queued for the GUI thread
    qtbot.waitUntil(lambda: bool(seen), timeout=5_000)
    assert seen == [(local, threading.main_thread())] and bridge.local_loaded is local and not bridge.is_remote
    bridge.choice.list_remote_models()  # no endpoint saved: the switcher is told all the same
    assert changes == [ListChanged()]
    bridge.shutdown()


def test_editing_a_saved_engine_fills_the_form_but_never_its_key(
    qtbot, memory_keyring: MemoryKeyring, isolated_data: Path
) -> None:
    from app.endpoint_dialog import EndpointDialog
    from engine.remote.endpoints import store_api_key

    registry = EndpointRegistry()
    registry.add(Endpoint("keyed", "http://127.0.0.1:8080/v1", model="chosen-model"))
    registry.add(Endpoint("open", "http://127.0.0.1:8081/v1"))
    assert store_api_key("keyed", "sk-old") == ""
    dialog = EndpointDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    rows = {dialog.saved_list.item(i).data(Qt.ItemDataRole.UserRole): i for i in range(dialog.saved_list.count())}
    dialog.saved_list.setCurrentRow(rows["keyed"])
    assert (dialog.name.text(), dialog.url.text(), dialog.key.text()) == ("keyed", "http://127.0.0.1:8080/v1", "")
    assert dialog.key.placeholderText().startswith("key saved in keyring") and "Edit keyed" in dialog.form_title.text()
    assert dialog.remove_button.isEnabled()
    dialog.saved_list.setCurrentRow(rows["open"])
    assert (dialog.name.text(), dialog.key.placeholderText()) == ("open", "no key")

    saved: list[str] = []
    dialog.saved.connect(lambda name, _models, _why: saved.append(name))
    dialog.saved_list.setCurrentRow(rows["keyed"])
    dialog.url.setText("http://10.0.0.2:9000/v1")  # a new address; the key field left empty keeps the key
    dialog.buttons.button(dialog.buttons.StandardButton.Save).click()
    assert saved == ["keyed"] and not dialog.isVisible()
    assert EndpointRegistry().get("keyed") == Endpoint(
        "keyed", "http://10.0.0.2:9000/v1", "chosen-model", EndpointRegistry().get("keyed").added
    )
    assert memory_keyring.passwords == {("specee-chat", "keyed"): "sk-old"}
    assert [e.name for e in EndpointRegistry().all()] == ["open", "keyed"]  # updated, not added twice

    dialog.show()
    rows = {dialog.saved_list.item(i).data(Qt.ItemDataRole.UserRole): i for i in range(dialog.saved_list.count())}
    dialog.saved_list.setCurrentRow(rows["keyed"])
    assert dialog.url.text() == "http://10.0.0.2:9000/v1" and dialog.key.text() == ""
    dialog.key.setText("sk-new")  # a typed key replaces the stored one
    dialog.buttons.button(dialog.buttons.StandardButton.Save).click()
    assert memory_keyring.passwords == {("specee-chat", "keyed"): "sk-new"}
    assert dialog.key.placeholderText() == "optional; kept in the OS keyring" and dialog.name.text() == ""


def test_the_engine_used_last_is_picked_again_at_the_next_start(
    qtbot, model_path: Path, isolated_data: Path, tmp_path: Path
) -> None:
    from engine.settings import load_settings

    def start() -> MainWindow:
        win = MainWindow(model_path=model_path, sampling=p.Sampling.greedy(8), store=ConversationStore(tmp_path / "c.db"))
        qtbot.addWidget(win)
        win.show()
        win.start_engine()
        return win

    registry = EndpointRegistry()
    with scripted_server(lambda write, over: write(piece("hi", "stop"))) as url:
        registry.add(Endpoint("box", url))
        win = start()
        qtbot.waitUntil(lambda: win.model_loaded, timeout=60_000)
        assert load_settings().engine == "local" and not win.bridge.is_remote
        qtbot.waitUntil(lambda: any(t.startswith("box / stub-model") for _, t in entries(win, "remote")), timeout=15_000)
        pick(win, "box / stub-model")
        qtbot.waitUntil(lambda: win.model_loaded, timeout=15_000)
        assert load_settings().engine == "remote:box/stub-model"
        win.close()

        again = start()  # the local model loads first, then the remote engine is picked again
        qtbot.waitUntil(lambda: again.bridge.is_remote and again.model_loaded, timeout=60_000)
        assert again.bridge.local_loaded is not None and again.remote_target == ("box", "stub-model")
        assert again.model_switch.currentText().startswith("box / stub-model") and again.accel_badge.text() == "remote"
        pick(again, entries(again, "local")[0][1])  # back to local: remembered too
        assert not again.bridge.is_remote and load_settings().engine == "local"
        pick(again, "box / stub-model")
        qtbot.waitUntil(lambda: again.model_loaded and again.bridge.is_remote, timeout=15_000)
        again.close()
    # the server is gone now: the next start stays local and says why, with no error in the chat
    unreachable = start()
    qtbot.waitUntil(lambda: "cannot be used now" in unreachable.state_label.text(), timeout=60_000)
    assert unreachable.model_loaded and not unreachable.bridge.is_remote and unreachable.notices == []
    assert unreachable.state_label.text().startswith("box, ") and "local model" in unreachable.state_label.text()
    assert "cannot be reached" in unreachable.state_label.toolTip()
    assert unreachable.model_switch.currentData() == str(model_path) and unreachable.messages == []
    assert load_settings().engine == "remote:box/stub-model"  # it may answer again next time
    unreachable.close()

    EndpointRegistry().remove("box")
    gone = start()
    qtbot.waitUntil(lambda: "no longer set up" in gone.state_label.text(), timeout=60_000)
    assert gone.model_loaded and not gone.bridge.is_remote and gone.messages == gone.notices == []
    assert load_settings().engine == "local"
    gone.close()
