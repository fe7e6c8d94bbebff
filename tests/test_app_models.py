"""Models on this machine in the real window, offscreen (issue 23, items 7, 8 and 14): files copied
into the models folder and models added with `specee models add` appear without a restart; a file
damaged later is listed as damaged, with why, and repaired or removed from My models; My models
lists, loads, unloads, deletes, imports and scans; the model manager works offline. Every data dir
is the test's own; the hub is tests/hf_server.py or a closed local port, never the internet."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from app.main_window import MainWindow
from app.model_manager import ModelManager
from app.my_models import MyModels
from engine import protocol as p
from engine.chats.store import ConversationStore
from engine.models.library import import_gguf
from engine.models.registry import ModelRegistry
from engine.paths import models_dir
from tests.conftest import loaded_window
from tests.hf_server import HubServer
from tests.remote_servers import free_port

REPO = "someone/SmolLM2-135M-Instruct-GGUF"


@pytest.fixture
def idle(qtbot, isolated_data: Path, tmp_path: Path):
    """A window with its own empty data dir and no engine started."""

    def make() -> MainWindow:
        win = MainWindow(model_path=tmp_path / "none.gguf", store=ConversationStore(tmp_path / "c.db"))
        qtbot.addWidget(win)
        win.show()
        return win

    return make


def switcher_texts(win: MainWindow) -> list[str]:
    win.model_switch.showPopup()  # the user opens the list
    texts = [win.model_switch.itemText(i) for i in range(win.model_switch.count())]
    win.model_switch.hidePopup()
    return texts


def answer_delete(qtbot, dialog: MyModels, pick: str = "") -> tuple[str, str, list[str]]:
    """Delete… as the user answers it: its confirmation's (text, default button, buttons), then Enter
    (pick "") or the button named `pick`. Works whether the box blocks (exec) or not (open)."""
    seen: list[tuple[str, str, list[str]]] = []

    def boxes() -> list[QMessageBox]:
        return [b for b in dialog.findChildren(QMessageBox) if b.isVisible()]

    def answer() -> None:
        [box] = boxes()
        default = box.defaultButton()
        seen.append((box.text(), default.text() if default else "(none)", [b.text() for b in box.buttons()]))
        if not pick:
            qtbot.keyClick(box, Qt.Key.Key_Return)
        elif chosen := [b for b in box.buttons() if b.text() == pick]:
            chosen[0].click()
        else:  # no such button: the box goes (the test fails on what it saw) rather than hang in its exec()
            box.reject()

    QTimer.singleShot(0, answer)
    dialog.delete_button.click()
    qtbot.waitUntil(lambda: bool(seen) and not boxes(), timeout=5_000)
    return seen[0]


def test_a_gguf_copied_into_the_models_folder_is_found_at_start(qtbot, idle, model_path: Path) -> None:
    """Issue 23 item 7: files copied into the models folder Settings names were ignored."""
    shutil.copyfile(model_path, models_dir() / "copied-in.gguf")
    win = idle()
    qtbot.waitUntil(lambda: win.model_switch.findData(str(models_dir() / "copied-in.gguf")) >= 0, timeout=20_000)
    shutil.copyfile(model_path, models_dir() / "later.gguf")  # copied while the app runs: Scan models folder
    dialog = win.open_my_models()
    qtbot.mouseClick(dialog.scan_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Found 1 new model: later" in dialog.status.text(), timeout=20_000)
    assert dialog.row_text(str(models_dir() / "later.gguf")).startswith("later | 98 MB | llama | 8,192 tokens")
    assert any(t.startswith("later · 98 MB") for t in switcher_texts(win))
    dialog.close()


def test_a_model_added_from_the_command_line_appears_without_a_restart(qtbot, idle, model_path: Path, tmp_path: Path) -> None:
    """Issue 23 item 7: `specee models add` showed in the switcher only after a restart."""
    from engine.cli import main as cli

    win = idle()
    assert not any("from-cli" in t for t in switcher_texts(win))
    copy = tmp_path / "from-cli.gguf"
    shutil.copyfile(model_path, copy)
    assert cli(["models", "add", str(copy)]) == 0
    assert any(t.startswith("from-cli · 98 MB") for t in switcher_texts(win))  # the list, opened again


def test_a_truncated_model_says_why_and_is_repaired_from_the_hub(
    qtbot, idle, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 7: a registered file truncated later silently vanished from the switcher."""
    dest = models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shutil.copyfile(model_path, dest)
    import_gguf(dest, source=f"hf:{REPO}/{dest.name}")  # as a download registers it
    with dest.open("r+b") as fh:
        fh.truncate(40_000_000)
    win = idle()
    texts = switcher_texts(win)
    [entry] = [t for t in texts if t.startswith("SmolLM2-135M-Instruct.Q4_1")]
    assert entry == "SmolLM2-135M-Instruct.Q4_1 · truncated (pick to repair or remove)"
    i = win.model_switch.findData(str(dest))
    assert "40 MB of 98 MB present" in win.model_switch.itemData(i, Qt.ItemDataRole.ToolTipRole)
    win.model_switch.activated.emit(i)  # the user picks it: My models opens on its row
    [dialog] = win.findChildren(MyModels)
    assert win.model_path != str(dest)  # nothing loads a damaged file
    assert dialog.selected_path() == str(dest)
    assert dialog.row_text(str(dest)).endswith("| damaged: truncated: 40 MB of 98 MB present")
    assert f"Repair downloads it again from {REPO}" in dialog.status.text()
    assert dialog.repair_button.isEnabled() and dialog.delete_button.isEnabled() and not dialog.load_button.isEnabled()
    with HubServer() as hub:
        hub.add_repo(REPO, {dest.name: model_path})
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr("engine.models.download._token", lambda: None)
        dialog.repair_button.click()
        qtbot.waitUntil(lambda: dialog.status.text().startswith("Repaired"), timeout=60_000)
    assert dest.stat().st_size == model_path.stat().st_size
    assert dialog.row_text(str(dest)).endswith("| ready") and dialog.load_button.isEnabled()
    assert any(t.startswith("SmolLM2-135M-Instruct.Q4_1 · 98 MB") for t in switcher_texts(win))
    dialog.close()


def test_a_missing_file_is_listed_and_removed_after_confirmation(qtbot, idle, model_path: Path, tmp_path: Path) -> None:
    gone = tmp_path / "gone.gguf"
    shutil.copyfile(model_path, gone)
    record = import_gguf(gone)
    gone.unlink()
    win = idle()
    assert "gone · file missing (pick to repair or remove)" in switcher_texts(win)
    dialog = win.open_my_models(record.path)
    assert "missing: the file is gone" in dialog.row_text(record.path) and not dialog.repair_button.isEnabled()
    assert dialog.delete_button.text() == "Remove from list…"
    text, _, _ = answer_delete(qtbot, dialog, "Cancel")  # the user says No: nothing happens
    assert ModelRegistry().get(record.id) is not None and "Remove gone from the list?" in text
    answer_delete(qtbot, dialog, "Remove from list")
    assert ModelRegistry().get(record.id) is None and dialog.row_text(record.path) == ""
    assert not any(t.startswith("gone") for t in switcher_texts(win))
    dialog.close()


def test_my_models_loads_unloads_imports_and_deletes(
    qtbot, isolated_data: Path, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 14: a list of installed models with size, architecture, context length and
    acceleration weights; Load / Unload through the real worker; Delete (with its acceleration
    folder) after a confirmation; Import GGUF…"""
    import json

    from engine.models.acceleration import user_weights_dir

    monkeypatch.setenv("SPECEE_TEST_SHIPPED_ACCEL_DIR", str(tmp_path / "no-shipped-weights"))
    first = models_dir() / "first.gguf"
    shutil.copyfile(model_path, first)
    import_gguf(first)
    with loaded_window(qtbot, model_path=first, sampling=p.Sampling.greedy(8)) as win:
        dialog = win.open_my_models(str(first))
        assert dialog.row_text(str(first)) == "first | 98 MB | llama | 8,192 tokens | training-free modes | loaded"
        assert not dialog.load_button.isEnabled() and not dialog.delete_button.isEnabled()  # in use
        dialog.unload_button.click()
        qtbot.waitUntil(lambda: not win.model_loaded and dialog.row_text(str(first)).endswith("| ready"), timeout=30_000)
        assert "No model loaded" in win.state_label.text() and not win.send_button.isEnabled()
        assert win.accel_badge.text() == ""  # the unloaded model's mode and speed are not shown
        assert not dialog.unload_button.isEnabled() and dialog.load_button.isEnabled()
        # issue 45: the switcher showed the unloaded model as if it still answered
        assert win.model_switch.currentIndex() == -1 and win.model_switch.shown_text() == "No model loaded"
        assert win.model_switch.toolTip().startswith("No model loaded")
        win.model_switch.activated.emit(win.model_switch.findData(str(first)))  # the user picks it again: it loads
        qtbot.waitUntil(lambda: win.model_loaded and dialog.row_text(str(first)).endswith("| loaded"), timeout=60_000)
        assert win.model_switch.currentText().startswith("first · 98 MB")
        dialog.unload_button.click()
        qtbot.waitUntil(lambda: not win.model_loaded, timeout=30_000)
        # Import GGUF…: a file elsewhere, registered where it lies
        elsewhere = tmp_path / "elsewhere" / "second.gguf"
        elsewhere.parent.mkdir()
        shutil.copyfile(model_path, elsewhere)
        dialog.ask_file = lambda: str(elsewhere)
        dialog.import_button.click()
        qtbot.waitUntil(lambda: dialog.status.text() == "Imported second.", timeout=30_000)
        assert dialog.selected_path() == str(elsewhere)
        record = ModelRegistry().get("second")
        assert record is not None and any(t.startswith("second · 98 MB") for t in switcher_texts(win))
        weights = user_weights_dir() / "second"
        weights.mkdir(parents=True)
        (weights / "manifest.json").write_text(json.dumps({"target_sha256": record.sha256, "eagle": {"file": "h.gguf"}}))
        dialog.refresh()
        assert "EAGLE" in dialog.row_text(str(elsewhere)) and "(own weights)" in dialog.row_text(str(elsewhere))
        dialog.load_button.click()  # Load
        qtbot.waitUntil(lambda: win.model_loaded and win.model_path == str(elsewhere), timeout=60_000)
        qtbot.waitUntil(lambda: dialog.row_text(str(elsewhere)).endswith("| loaded"), timeout=5_000)
        dialog.select(str(first))
        text, _, _ = answer_delete(qtbot, dialog, "Delete the file")  # a copy of the same file: its weights stay
        assert "Delete first (98 MB)?" in text and str(first) in text and "acceleration" not in text
        assert weights.is_dir()
        assert not first.exists() and ModelRegistry().get("first") is None and dialog.row_text(str(first)) == ""
        assert not any(t.startswith("first") for t in switcher_texts(win))
        dialog.select(str(elsewhere))
        assert not dialog.delete_button.isEnabled()  # the loaded model: unload or switch first
        dialog.unload_button.click()
        qtbot.waitUntil(lambda: dialog.delete_button.isEnabled(), timeout=30_000)
        text, _, _ = answer_delete(qtbot, dialog, "Delete the file")  # imported from elsewhere: the user says so
        assert str(elsewhere) in text and "acceleration folder" in text
        assert not weights.exists() and not elsewhere.exists()
        dialog.close()


def test_delete_never_defaults_to_deleting_and_an_imported_file_is_removed_from_the_list(
    qtbot, idle, model_path: Path, tmp_path: Path
) -> None:
    """Issue 45 item 1: Delete… deleted an imported file wherever it lay, and Yes was the default
    button. A file imported from elsewhere: "Remove from list" (the default) apart from "Delete the
    file", its full path named; a file in the models folder: Cancel is the default."""
    elsewhere = tmp_path / "my files" / "mine.gguf"
    elsewhere.parent.mkdir()
    shutil.copyfile(model_path, elsewhere)
    record = import_gguf(elsewhere)
    inside = models_dir() / "inside.gguf"
    shutil.copyfile(model_path, inside)
    import_gguf(inside)
    win = idle()
    dialog = win.open_my_models(record.path)
    text, default, buttons = answer_delete(qtbot, dialog)  # Enter: the default button
    assert default == "Remove from list" and "Delete the file" in buttons and "Cancel" in buttons
    assert f"\n{elsewhere}\n" in text and "outside the models folder" in text
    assert elsewhere.is_file() and ModelRegistry().get(record.id) is None  # forgotten, the file kept
    assert dialog.row_text(record.path) == "" and f"its file stays at {elsewhere}" in dialog.status.text()
    assert not any(t.startswith("mine") for t in switcher_texts(win))
    record = import_gguf(elsewhere)
    dialog.select(record.path)
    text, _, _ = answer_delete(qtbot, dialog, "Delete the file")  # the user picks it, its path before them
    assert not elsewhere.exists() and ModelRegistry().get(record.id) is None
    dialog.select(str(inside))
    text, default, buttons = answer_delete(qtbot, dialog)  # Enter deletes nothing
    assert default == "Cancel" and "Delete the file" in buttons and str(inside) in text
    assert inside.is_file() and ModelRegistry().get("inside") is not None
    answer_delete(qtbot, dialog, "Delete the file")
    assert not inside.exists() and ModelRegistry().get("inside") is None and dialog.row_text(str(inside)) == ""
    dialog.close()


def test_a_truncated_gguf_in_the_models_folder_is_listed_in_red_at_start_and_deleted(qtbot, idle, model_path: Path) -> None:
    """Issue 45 item 2: a truncated GGUF in the models folder was invisible at start, only Scan
    models folder mentioned it ("…download it again..", two periods) and it could not be deleted."""
    half = models_dir() / "half.gguf"
    with model_path.open("rb") as src, half.open("wb") as dst:
        dst.write(src.read(40_000_000))
    win = idle()
    dialog = win.open_my_models(str(half))
    row = dialog.row_text(str(half))
    assert row.startswith("half | 40 MB |") and "| damaged: half.gguf is truncated: 40.0 MB present of" in row
    [i] = [i for i, m in enumerate(dialog.models) if m.path == str(half)]
    assert all(dialog.table.item(i, j).foreground().color().name() == "#c0392b" for j in range(dialog.table.columnCount()))
    assert dialog.selected_path() == str(half) and "download it again. It lies in the models folder" in dialog.status.text()
    assert ".." not in dialog.status.text()
    assert dialog.delete_button.isEnabled() and not dialog.load_button.isEnabled() and not dialog.repair_button.isEnabled()
    dialog.scan_button.click()
    qtbot.waitUntil(lambda: dialog.status.text().startswith("Found 0 new models"), timeout=20_000)
    assert "skipped half.gguf: half.gguf is truncated" in dialog.status.text()
    assert dialog.status.text().endswith("download it again.") and ".." not in dialog.status.text()
    dialog.select(str(half))
    _, default, _ = answer_delete(qtbot, dialog, "Delete the file")
    assert default == "Cancel"
    assert not half.exists() and dialog.row_text(str(half)) == "" and dialog.status.text() == "Deleted half (its file)."
    dialog.close()


# -- the model manager offline ---------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, isolated_data: Path) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nobody listens there
    monkeypatch.setattr("engine.models.download._token", lambda: None)


def test_the_model_manager_offline_shows_the_catalog_and_what_is_installed(qtbot, offline, model_path: Path) -> None:
    """Issue 23 item 8: offline, a catalog entry showed no files, the button read "Resume", clicking
    it said "Choose a file first", a file on disk was not recognised, and search failed after 15-45 s
    with a raw "[Errno -2]"."""
    name = "smollm2-360m-instruct-q8_0.gguf"
    shutil.copyfile(model_path, models_dir() / name)  # already on disk, never registered
    damaged = models_dir() / "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    shutil.copyfile(model_path, damaged)
    import_gguf(damaged)
    with damaged.open("r+b") as fh:
        fh.truncate(10_000_000)
    dialog = ModelManager()
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.download_button.text() == "Download" and not dialog.download_button.isEnabled()
    rows = {dialog.repos.item(i).text().split(" — ")[0]: i for i in range(dialog.repos.count())}
    dialog.repos.setCurrentRow(rows["SmolLM2 1.7B Instruct (Q4_K_M)"])
    assert dialog.files.count() == 1  # from the catalog, at once, without the network
    assert dialog.files.item(0).text().startswith("smollm2-1.7b-instruct-q4_k_m.gguf — 1.06 GB")
    assert dialog.download_button.text() == "Download (1.06 GB)" and dialog.download_button.isEnabled()
    dialog.repos.setCurrentRow(rows["SmolLM2 360M Instruct (Q8_0)"])
    qtbot.waitUntil(lambda: dialog.download_button.text() == "Installed", timeout=20_000)
    assert (
        "installed" in dialog.files.item(0).text()
        and "installed" in dialog.repos.item(rows["SmolLM2 360M Instruct (Q8_0)"]).text()
    )
    assert dialog.use_button.isEnabled() and dialog.downloaded == str(models_dir() / name)
    dialog.repos.setCurrentRow(rows["Qwen2.5 0.5B Instruct (Q4_K_M)"])
    assert "on disk but truncated: 10 MB of 98 MB present" in dialog.files.item(0).text()
    assert dialog.download_button.text() == "Download again (0.49 GB)" and not dialog.use_button.isEnabled()
    dialog.repos.setCurrentRow(rows["SmolLM2 360M Instruct (Q8_0)"])
    used: list[str] = []
    dialog.use_model.connect(used.append)
    dialog.use_button.click()
    assert used == [str(models_dir() / name)]
    dialog.show()
    dialog.search.setText("qwen")
    t0 = time.monotonic()
    dialog.run_search()
    qtbot.waitUntil(lambda: "offline" in dialog.status.text(), timeout=5_000)
    assert time.monotonic() - t0 < 3
    shown = dialog.status.text()
    assert "Errno" not in shown and "Import GGUF" in shown and "installed models" in shown
    assert not dialog.download_button.text().startswith("Resume")
    QApplication.processEvents()


def test_a_catalog_file_downloads_verified_by_the_hubs_hash(
    qtbot, isolated_data: Path, model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog's file (shown without the network) downloads with the sha256 the hub lists, then
    reads "Installed" and can be used."""
    name = "smollm2-360m-instruct-q8_0.gguf"
    with HubServer() as hub:
        hub.add_repo("HuggingFaceTB/SmolLM2-360M-Instruct-GGUF", {name: model_path})
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr("engine.models.download._token", lambda: None)
        dialog = ModelManager()
        qtbot.addWidget(dialog)
        rows = {dialog.repos.item(i).text().split(" — ")[0]: i for i in range(dialog.repos.count())}
        dialog.repos.setCurrentRow(rows["SmolLM2 360M Instruct (Q8_0)"])
        assert dialog.download_button.text() == "Download (0.39 GB)"
        dialog.download_button.click()
        qtbot.waitUntil(lambda: dialog.download_button.text() == "Installed", timeout=60_000)
    assert "sha256 verified" in dialog.status.text() and dialog.use_button.isEnabled()
    record = ModelRegistry().get(Path(name).stem)
    assert record is not None and record.sha256 == hub.repos["HuggingFaceTB/SmolLM2-360M-Instruct-GGUF"].sha[name]
    assert "installed" in dialog.repos.item(rows["SmolLM2 360M Instruct (Q8_0)"]).text()
