"""My models: the models installed here, one row each (size, architecture, context length,
acceleration weights, state; a damaged one in red, saying why, and the GGUF files in the models
folder that could not be added among them), with Load / Unload, Repair (a damaged download fetched
again), Delete… (after a confirmation whose default button deletes nothing: a file imported from
elsewhere is removed from the list, or deleted only where the user picks "Delete the file" with its
full path before them), Import GGUF… and Scan models folder.
A view of engine.models.library (what is installed, scanning, deleting) and of the engine choice
(which model the worker runs); file work runs off the GUI thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.composer import button
from engine import protocol as p
from engine.models.download import DownloadError, Progress, download
from engine.models.gguf_file import ModelFileError
from engine.models.library import (
    InstalledModel,
    delete_model,
    import_gguf,
    installed_models,
    remove_from_list,
    scan_models_folder,
    sentence,
    size_text,
    weights_to_delete,
)
from engine.paths import models_dir
from engine.remote.engine_choice import EngineChoice

COLUMNS = ("Model", "Size", "Architecture", "Context", "Acceleration", "State")
DAMAGED = QColor("#c0392b")  # a row that cannot be loaded reads as a problem, in either theme (as in the switcher)
# What Delete… may do, by the button the user picks in its confirmation
REMOVE, DELETE_FILE = "remove", "delete"


class Background(QObject):
    """Runs a callable on a thread; its result (or the exception it raised) comes back on the GUI
    thread, with progress reports between."""

    done = Signal(object)
    failed = Signal(object)  # the exception
    progress = Signal(object)

    def run(self, work: Callable[[], Any]) -> None:
        def go() -> None:
            try:
                result = work()
            except Exception as exc:  # reported to the view, which says it in words
                result, signal = exc, self.failed
            else:
                signal = self.done
            try:
                signal.emit(result)
            except RuntimeError:  # the view was closed and deleted meanwhile: nobody to tell
                pass

        threading.Thread(target=go, name="my-models", daemon=True).start()


def scan_in_background(parent: QObject, then: Callable[[Any], None]) -> Background:
    """The models folder scanned off the GUI thread (at start, and from My models)."""
    job = Background(parent)
    job.done.connect(then)
    job.run(scan_models_folder)
    return job


class MyModels(QDialog):
    changed = Signal()  # models were added, removed, repaired or unloaded: the switcher lists them again

    def __init__(self, choice: EngineChoice, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("My models")
        self.resize(980, 440)
        self.choice = choice
        self.models: list[InstalledModel] = []
        self.busy = False
        self.delete_box: QMessageBox | None = None  # Delete…'s confirmation while it is open
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setAccessibleName("Installed models")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.status = QLabel(f"Models folder: {models_dir()}")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bar = QProgressBar()
        self.bar.setAccessibleName("Repair progress")
        self.bar.setVisible(False)
        self.load_button, self.unload_button = button("Load", "primary"), button("Unload")
        self.repair_button, self.delete_button = button("Repair"), button("Delete…", "danger")
        self.import_button, self.scan_button = button("Import GGUF…"), button("Scan models folder")
        self.load_button.setToolTip("Chat with this model")
        self.unload_button.setToolTip("Free the memory the loaded model takes")
        self.repair_button.setToolTip("Download the damaged file again, checked against its sha256")
        self.delete_button.setToolTip("Delete the file and its acceleration weights, or remove an imported file from the list")
        self.import_button.setToolTip("Add a GGUF file from anywhere on this computer (it stays where it is)")
        self.scan_button.setToolTip(f"Add the GGUF files copied into {models_dir()}")
        row = QHBoxLayout()
        for b in (self.load_button, self.unload_button, self.repair_button, self.delete_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.import_button)
        row.addWidget(self.scan_button)
        col = QVBoxLayout(self)
        col.addWidget(self.table, 1)
        col.addWidget(self.status)
        col.addWidget(self.bar)
        col.addLayout(row)
        for signal, slot in (
            (self.table.itemSelectionChanged, self._update_buttons), (self.load_button.clicked, self.load),
            (self.unload_button.clicked, self.unload), (self.repair_button.clicked, self.repair),
            (self.delete_button.clicked, self.delete), (self.import_button.clicked, self.import_file),
            (self.scan_button.clicked, self.scan), (self.table.doubleClicked, self.load),
        ):  # fmt: skip
            signal.connect(slot)
        self.refresh()

    # -- the list ---------------------------------------------------------------------------------------

    def refresh(self, select: str = "") -> None:
        """The installed models again, `select` (a path) or the row chosen before selected."""
        select = select or self.selected_path()
        self.models = installed_models()
        self.table.setRowCount(len(self.models))
        for i, m in enumerate(self.models):
            for j, text in enumerate(self._cells(m)):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{m.path}\nsource: {m.record.source}" + (f"\n{m.why}" if m.why else ""))
                if m.state != "ok":
                    item.setForeground(DAMAGED)
                self.table.setItem(i, j, item)
        rows = [i for i, m in enumerate(self.models) if m.path == select]
        if rows:
            self.table.selectRow(rows[0])
        self._update_buttons()

    def _cells(self, m: InstalledModel) -> tuple[str, ...]:
        loaded = m.path == self.choice.local_path and self.choice.local_loaded is not None
        state = ("loaded" if loaded else "ready") if m.state == "ok" else f"{m.state}: {m.why}"
        context = f"{m.n_ctx_train:,} tokens" if m.n_ctx_train else ""
        accel = m.weights + (" (own weights)" if m.acceleration_dir else "") if m.state == "ok" else ""
        return m.record.id, size_text(m.record.size), m.architecture, context, accel, state

    def selected(self) -> InstalledModel | None:
        rows = self.table.selectionModel().selectedRows()
        return self.models[rows[0].row()] if rows and rows[0].row() < len(self.models) else None

    def selected_path(self) -> str:
        m = self.selected()
        return m.path if m else ""

    def select(self, path: str) -> None:
        self.refresh(select=path)

    def row_text(self, path: str) -> str:
        """A model's row as shown, cells joined by " | " (tests, screen readers)."""
        for i, m in enumerate(self.models):
            if m.path == path:
                return " | ".join(self.table.item(i, j).text() for j in range(len(COLUMNS)))  # type: ignore[union-attr]  # every cell is set
        return ""

    def _update_buttons(self) -> None:
        m = self.selected()
        if m is not None and m.state != "ok" and not self.busy:  # what is wrong, and the way out
            if not m.registered:
                way = "It lies in the models folder and could not be added: Delete deletes the file."
            elif m.repair:
                way = f"Repair downloads it again from {m.repair.repo_id}, checked against its sha256; Delete removes it."
            else:
                way = "It did not come from the hub: Delete removes it from the list (and the file, if any)."
            self.status.setText(f"{m.record.id} is {m.state}: {sentence(m.why)} {way}")
        loaded = m is not None and m.path == self.choice.local_path and self.choice.local_loaded is not None
        self.load_button.setEnabled(m is not None and m.state == "ok" and not loaded and not self.busy)
        self.unload_button.setEnabled(self.choice.local_loaded is not None and not self.busy)
        self.repair_button.setEnabled(m is not None and m.state != "ok" and m.repair is not None and not self.busy)
        self.delete_button.setEnabled(m is not None and not loaded and not self.busy)
        self.delete_button.setText("Delete…" if m is None or m.state != "missing" else "Remove from list…")
        self.import_button.setEnabled(not self.busy)
        self.scan_button.setEnabled(not self.busy)

    def on_engine_event(self, msg: p.Message) -> None:
        """A model loaded or unloaded: which row reads "loaded" changes."""
        if isinstance(msg, p.Loaded | p.Unloaded) and self.isVisible() and not self.busy:
            self.refresh()

    # -- what the user asks ----------------------------------------------------------------------------

    def load(self) -> None:
        m = self.selected()
        if m is not None and m.state == "ok":
            self.choice.stop_restoring()
            self.choice.use_local(m.path)
            self.status.setText(f"Loading {m.record.id}…")

    def unload(self) -> None:
        self.choice.unload_local()
        self.status.setText("Unloading the model: its memory is freed. Load one to chat again.")
        self.refresh()
        self.changed.emit()  # the switcher shows that no model is loaded

    def delete(self) -> None:
        """Delete…: a confirmation saying what goes, whose default button (Enter) deletes nothing."""
        m = self.selected()
        if m is None:
            return
        weights = weights_to_delete(m.record)
        also = f"\nIts acceleration folder {weights} is deleted with it." if weights is not None else ""
        name = f"{m.record.id} ({size_text(m.record.size)})"
        if m.state == "missing":  # nothing on disk to delete: forgetting it is the only choice
            text = f"Remove {m.record.id} from the list?\nIts file is gone ({m.path}). Its acceleration weights, if any, stay."
            choices = [("Remove from list", REMOVE)]
            default = REMOVE
        elif not m.in_models_folder:  # the user's own file, imported where it lies
            text = (
                f"{name} was imported from outside the models folder. Its file is:\n{m.path}\n\n"
                "Remove from list forgets it and leaves the file and its acceleration weights where they are.\n"
                f"Delete the file deletes {m.path} from this computer.{also}"
            )
            choices = [("Remove from list", REMOVE), ("Delete the file", DELETE_FILE)]
            default = REMOVE
        else:
            text = f"Delete {name}?\nThe file {m.path} is deleted.{also}"
            choices = [("Delete the file", DELETE_FILE)]
            default = ""  # Cancel
        box = QMessageBox(QMessageBox.Icon.Warning, "Delete model", text, QMessageBox.StandardButton.Cancel, self)
        actions: dict[QPushButton, str] = {}
        for label, action in choices:
            role = QMessageBox.ButtonRole.DestructiveRole if action == DELETE_FILE else QMessageBox.ButtonRole.AcceptRole
            actions[box.addButton(label, role)] = action
        cancel = box.button(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(next((b for b, a in actions.items() if a == default), cancel))  # type: ignore[call-overload]  # Cancel's is a QPushButton
        box.setEscapeButton(cancel)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.buttonClicked.connect(lambda b: self._delete_chosen(m, actions.get(b, "")))
        box.finished.connect(lambda _r: setattr(self, "delete_box", None))
        self.delete_box = box
        box.open()  # window-modal, and the event loop goes on: the engine's news still arrive

    def _delete_chosen(self, m: InstalledModel, action: str) -> None:
        if action == REMOVE:
            remove_from_list(m.record)
            kept = "" if m.state == "missing" else f"; its file stays at {m.path}"
            self.status.setText(f"Removed {m.record.id} from the list{kept}.")
        elif action == DELETE_FILE:
            try:
                removed = delete_model(m.record)
            except OSError as exc:
                self.status.setText(f"{m.record.id} could not be deleted: {sentence(exc.strerror or str(exc))}")
                return
            what = "" if not removed else " (its file)" if len(removed) == 1 else f" ({len(removed)} files and folders)"
            self.status.setText(f"Deleted {m.record.id}{what}.")
        else:
            return
        self.refresh()
        self.changed.emit()

    def ask_file(self) -> str:
        path, _ = QFileDialog.getOpenFileName(self, "Import GGUF", str(Path.home()), "GGUF models (*.gguf)")
        return path

    def import_file(self) -> None:
        path = self.ask_file()
        if path:
            self.status.setText(f"Checking {Path(path).name} (its header, a sample of its weights, its sha256)…")
            self._work(lambda: import_gguf(path), lambda record: self._done(f"Imported {record.id}.", record.path))

    def scan(self) -> None:
        self.status.setText(f"Scanning {models_dir()}…")
        self._work(scan_models_folder, lambda found: self._done(found.summary()))

    def repair(self) -> None:
        m = self.selected()
        source = m.repair if m else None
        if m is None or source is None:
            return
        self.bar.setVisible(True)
        self.bar.setValue(0)
        self.status.setText(f"Downloading {source.filename} from {source.repo_id} again…")
        dest = Path(m.path).parent
        self._work(
            lambda: download(source, dest, progress=self._job.progress.emit),
            lambda _path: self._done(f"Repaired {m.record.id}: downloaded again and verified.", m.path),
        )

    def _work(self, work: Callable[[], Any], then: Callable[[Any], None]) -> None:
        self.busy = True
        self._update_buttons()
        self._job = job = Background(self)
        job.done.connect(then)
        job.failed.connect(self._failed)
        job.progress.connect(self._progress)
        job.run(work)

    def _progress(self, pr: Progress) -> None:
        self.bar.setMaximum(1000)
        self.bar.setValue(int(1000 * pr.done / max(pr.total, 1)))

    def _done(self, message: str, select: str = "") -> None:
        self.busy = False
        self.bar.setVisible(False)
        self.refresh(select)
        self.status.setText(message)  # after the refresh: a damaged row selected says what it is, this goes last
        self.changed.emit()

    def _failed(self, exc: Exception) -> None:
        self.busy = False
        self.bar.setVisible(False)
        known = isinstance(exc, ModelFileError | DownloadError | OSError)
        self.refresh()
        self.status.setText(str(exc) if known else f"That did not work: {exc}")


def open_my_models(window: Any, select: str = "") -> MyModels:
    """My models over the window: the switcher lists what it changes, and its rows follow the engine."""
    dialog = MyModels(window.choice, window)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # each opening is a fresh list
    dialog.changed.connect(window.refresh_models)
    window.bridge.event.connect(dialog.on_engine_event)  # a bound slot: disconnected with the dialog
    if select:
        dialog.select(select)
    dialog.show()
    return dialog
