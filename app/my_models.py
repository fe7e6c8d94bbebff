"""My models: the models installed here, one row each (size, architecture, context length,
acceleration weights, state), with Load / Unload, Repair (a damaged download fetched again),
Delete… (with its acceleration folder, after a confirmation), Import GGUF… and Scan models folder.
A view of engine.models.library (what is installed, scanning, deleting) and of the engine choice
(which model the worker runs); file work runs off the GUI thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
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
    scan_models_folder,
    size_text,
    weights_to_delete,
)
from engine.paths import models_dir
from engine.remote.engine_choice import EngineChoice

COLUMNS = ("Model", "Size", "Architecture", "Context", "Acceleration", "State")


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
    changed = Signal()  # models were added, removed or repaired: the switcher lists them again

    def __init__(self, choice: EngineChoice, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("My models")
        self.resize(980, 440)
        self.choice = choice
        self.models: list[InstalledModel] = []
        self.busy = False
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
        self.delete_button.setToolTip("Delete the file and its acceleration weights")
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
                return " | ".join(self.table.item(i, j).text() for j in range(len(COLUMNS)))
        return ""

    def _update_buttons(self) -> None:
        m = self.selected()
        if m is not None and m.state != "ok" and not self.busy:  # what is wrong, and the way out
            way = (
                f"Repair downloads it again from {m.repair.repo_id}, checked against its sha256; Delete removes it."
                if m.repair else "It did not come from the hub: Delete removes it from the list (and the file, if any)."
            )  # fmt: skip
            self.status.setText(f"{m.record.id} is {m.state}: {m.why}. {way}")
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

    def confirm(self, text: str) -> bool:
        answer = QMessageBox.question(self, "Delete model", text)
        return answer == QMessageBox.StandardButton.Yes

    def delete(self) -> None:
        m = self.selected()
        if m is None:
            return
        what = [f"Delete {m.record.id} ({size_text(m.record.size)})?", f"The file {m.path} is deleted."]
        if m.state == "missing":
            what = [f"Remove {m.record.id} from the list?", f"Its file is gone ({m.path})."]
        weights = weights_to_delete(m.record)
        if weights is not None:
            what.append(f"Its acceleration folder {weights} is deleted too.")
        if not self.confirm("\n".join(what)):
            return
        try:
            removed = delete_model(m.record)
        except OSError as exc:
            self.status.setText(f"{m.record.id} could not be deleted: {exc.strerror or exc}.")
            return
        self.status.setText(f"Deleted {m.record.id}" + (f" ({len(removed)} files and folders)." if removed else "."))
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
        self.status.setText(message)
        self.refresh(select)
        self.changed.emit()

    def _failed(self, exc: Exception) -> None:
        self.busy = False
        self.bar.setVisible(False)
        known = isinstance(exc, ModelFileError | DownloadError | OSError)
        self.status.setText(str(exc) if known else f"That did not work: {exc}")
        self.refresh()


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
