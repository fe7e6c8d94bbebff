"""Model manager: the catalog, hub search, GGUF files with a "fits here" badge, downloads with
progress / pause / resume, and "Use" to chat with a downloaded model. A catalog entry's file is
known without the network, a file already on disk reads "installed" (the models folder is scanned
as the dialog opens), the Download button says what it will do, and the hub out of reach is said at
once, with what still works. Logic lives in engine.models (download, catalog, library); this is the
view, with network and file work on worker threads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import psutil
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.my_models import scan_in_background
from engine.models.catalog import CatalogEntry
from engine.models.download import (
    DownloadError,
    HubFile,
    Progress,
    download,
    list_gguf_files,
    models_dir,
    partial_path,
    search_gguf_repos,
)
from engine.models.library import file_problem, hub_catalog, on_disk
from engine.models.memory import fits
from engine.models.registry import ModelRegistry

ENTRY_ROLE = Qt.ItemDataRole.UserRole + 1  # a repository item's CatalogEntry (None: found by search)


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


class _Signals(QObject):
    progress = Signal(object)  # Progress
    finished = Signal(str)  # path
    failed = Signal(str, str)  # kind, message (a download)
    searched = Signal(object)  # list[str]: repositories
    listed = Signal(object)  # list[HubFile]
    list_failed = Signal(str, str)  # kind, message (a search or a listing: the download is not concerned)


class ModelManager(QDialog):
    use_model = Signal(str)  # a GGUF path to load

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Download models")
        self.resize(860, 540)
        self.ram = psutil.virtual_memory().total
        self.signals = _Signals()
        self.cancel = threading.Event()
        self.current: HubFile | None = None
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search the Hugging Face hub for GGUF models")
        self.search.setAccessibleName("Search models")
        self.search_button = QPushButton("Search")
        self.repos = QListWidget()
        self.repos.setAccessibleName("Models")
        self.files = QListWidget()
        self.files.setAccessibleName("Files")
        for view in (self.repos, self.files):  # long names and badges wrap instead of being cut
            view.setWordWrap(True)
            view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setAccessibleName("Download progress")
        self.download_button = QPushButton("Download")  # its text says what it will do (_update_actions)
        self.pause_button = QPushButton("Pause")
        self.use_button = QPushButton("Use this model")
        for b in (self.search_button, self.download_button, self.pause_button, self.use_button):
            b.setAccessibleName(b.text())
        self.pause_button.setEnabled(False)
        self.use_button.setEnabled(False)
        top = QHBoxLayout()
        top.addWidget(self.search, 1)
        top.addWidget(self.search_button)
        lists = QHBoxLayout()
        lists.addWidget(self.repos, 1)
        lists.addWidget(self.files, 1)
        actions = QHBoxLayout()
        actions.addWidget(self.bar, 1)
        actions.addWidget(self.download_button)
        actions.addWidget(self.pause_button)
        actions.addWidget(self.use_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(lists, 1)
        layout.addWidget(self.status)
        layout.addLayout(actions)

        self.search_button.clicked.connect(self.run_search)
        self.search.returnPressed.connect(self.run_search)
        self.repos.currentItemChanged.connect(self._repo_chosen)
        self.files.currentItemChanged.connect(lambda *_: self._update_actions())
        self.download_button.clicked.connect(self.start_download)
        self.pause_button.clicked.connect(self.cancel.set)
        self.use_button.clicked.connect(self._use)
        self.signals.progress.connect(self._on_progress)
        self.signals.finished.connect(self._on_finished)
        self.signals.failed.connect(self._on_failed)
        self.signals.listed.connect(self._on_listed)
        self.signals.searched.connect(self._on_searched)
        self.signals.list_failed.connect(lambda _kind, message: self.status.setText(message))
        self.downloaded: str | None = None
        self.downloading = False
        self.show_catalog()
        self._update_actions()
        self.scanned = False  # files copied into the models folder are found: "installed" below
        self.folder_scan = scan_in_background(self, self._on_scanned)

    def _on_scanned(self, _found: object) -> None:
        self.scanned = True
        self._refresh_files()

    def show_catalog(self) -> None:
        self.repos.clear()
        for e in hub_catalog():
            item = QListWidgetItem(self._catalog_text(e))
            item.setData(Qt.ItemDataRole.UserRole, e.repo_id)
            item.setData(ENTRY_ROLE, e)
            self.repos.addItem(item)

    def _catalog_text(self, e: CatalogEntry) -> str:
        badge = "installed" if on_disk(e.file) else "fits" if fits(e.approx_size, self.ram) else "too big"
        accel = f" · {', '.join(e.acceleration)}" if e.acceleration else ""
        return f"{e.name} — ~{_gb(e.approx_size)} · {e.licence} · {badge}{accel}"

    def run_search(self) -> None:
        query = self.search.text().strip()
        if not query:
            return self.show_catalog()
        self.status.setText(f"Searching for {query!r}…")
        self._in_thread(lambda: self.signals.searched.emit(search_gguf_repos(query)))

    def _repo_chosen(self, item: QListWidgetItem | None, _prev: QListWidgetItem | None) -> None:
        if item is None:
            return
        entry: CatalogEntry | None = item.data(ENTRY_ROLE)
        if entry is not None:  # the catalog knows its file: no network needed to show it
            self._on_listed([HubFile(entry.repo_id, entry.file, entry.approx_size, entry.sha256)])
            self.files.setCurrentRow(0)
            return
        repo = item.data(Qt.ItemDataRole.UserRole)
        self.status.setText(f"Listing {repo}…")
        self._in_thread(lambda: self.signals.listed.emit(list_gguf_files(repo)))

    def _on_searched(self, repos: list[str]) -> None:
        self.repos.clear()
        for repo in repos:
            item = QListWidgetItem(repo)
            item.setData(Qt.ItemDataRole.UserRole, repo)
            self.repos.addItem(item)
        self.status.setText(f"{len(repos)} repositories" if repos else "No GGUF repositories match.")

    def _on_listed(self, items: list[HubFile]) -> None:
        self.files.clear()
        for f in items:
            item = QListWidgetItem(self._file_text(f))
            item.setData(Qt.ItemDataRole.UserRole, f)
            self.files.addItem(item)
        self.status.setText(f"{len(items)} GGUF files" if items else "No GGUF files in this repository.")
        self._update_actions()

    def _file_text(self, f: HubFile) -> str:
        if on_disk(f.filename) is not None:
            return f"{f.filename} — {_gb(f.size)} · installed"
        damaged = on_disk(f.filename, damaged=True)
        if damaged is not None:
            return f"{f.filename} — {_gb(f.size)} · on disk but {file_problem(damaged)}: downloading replaces it"
        have = self._partial_size(f)
        if have:
            return f"{f.filename} — {_gb(f.size)} · {_gb(have)} downloaded, resumes where it stopped"
        badge = "fits on this machine" if fits(f.size, self.ram) else "needs more memory than this machine has"
        return f"{f.filename} — {_gb(f.size)} · {badge}"

    @staticmethod
    def _partial_size(f: HubFile) -> int:
        part = partial_path(models_dir() / f.filename.rsplit("/", 1)[-1])
        return part.stat().st_size if part.is_file() else 0

    def chosen_file(self) -> HubFile | None:
        item = self.files.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def _update_actions(self) -> None:
        """Download says what it would do for the chosen file; a file on disk is ready to use."""
        f = self.chosen_file()
        if self.downloading:
            return
        installed = on_disk(f.filename) if f is not None else None
        if f is None:
            text, tip = "Download", "Choose a file on the right first"
        elif installed is not None:
            text, tip = "Installed", f"{f.filename} is on this computer: {installed.path}"
        elif on_disk(f.filename, damaged=True) is not None:
            text, tip = f"Download again ({_gb(f.size)})", "The copy on disk is damaged: this replaces it"
        elif self._partial_size(f):
            text, tip = f"Resume download ({_gb(self._partial_size(f))} of {_gb(f.size)})", ""
        else:
            text, tip = f"Download ({_gb(f.size)})", f"Download {f.filename} from {f.repo_id} into {models_dir()}"
        self.download_button.setText(text)
        self.download_button.setAccessibleName(text)
        self.download_button.setToolTip(tip)
        self.download_button.setEnabled(f is not None and installed is None)
        if installed is not None:
            self.downloaded = installed.path
        self.use_button.setEnabled(installed is not None or (f is None and self.downloaded is not None))

    def start_download(self) -> None:
        f = self.chosen_file()
        if f is None:
            self.status.setText("Choose a file first.")
            return
        self.current = f
        self.cancel.clear()
        self.downloading = True
        self.download_button.setEnabled(False)
        self.pause_button.setEnabled(True)
        self.status.setText(f"Downloading {f.filename}…")

        def work() -> None:
            try:
                target = f
                if target.sha256 is None:  # a catalog file: the hub's sha256 checks what arrives
                    target = next((h for h in list_gguf_files(f.repo_id) if h.filename == f.filename), f)
                path = download(target, progress=self.signals.progress.emit, cancel=self.cancel)
                self.signals.finished.emit(str(path))
            except DownloadError as exc:
                self.signals.failed.emit(exc.kind, str(exc))

        threading.Thread(target=work, name="model-download", daemon=True).start()

    def _on_progress(self, pr: Progress) -> None:
        self.bar.setMaximum(1000)
        self.bar.setValue(int(1000 * pr.done / max(pr.total, 1)))
        eta = f"{pr.eta_s:.0f} s left" if pr.eta_s != float("inf") else ""
        self.status.setText(f"{_gb(pr.done)} of {_gb(pr.total)} · {pr.bytes_per_s / 1e6:.1f} MB/s · {eta}")

    def _on_finished(self, path: str) -> None:
        self.downloaded = path
        self.downloading = False
        self.pause_button.setEnabled(False)
        self._refresh_files()
        self.use_button.setEnabled(True)
        self.status.setText(f"Ready: {Path(path).name} (sha256 verified). It runs in vanilla mode until acceleration is trained.")

    def _on_failed(self, kind: str, message: str) -> None:
        self.downloading = False
        self.pause_button.setEnabled(False)
        self._refresh_files()
        self.status.setText(message)

    def _refresh_files(self) -> None:
        for i in range(self.repos.count()):
            entry = self.repos.item(i).data(ENTRY_ROLE)
            if entry is not None:
                self.repos.item(i).setText(self._catalog_text(entry))
        for i in range(self.files.count()):
            self.files.item(i).setText(self._file_text(self.files.item(i).data(Qt.ItemDataRole.UserRole)))
        self._update_actions()

    def _use(self) -> None:
        if self.downloaded:
            self.use_model.emit(self.downloaded)
            self.accept()

    def _in_thread(self, fn: Callable[[], None]) -> None:
        def work() -> None:
            try:
                fn()
            except DownloadError as exc:
                self.signals.list_failed.emit(exc.kind, str(exc))

        threading.Thread(target=work, daemon=True).start()

    @staticmethod
    def registered() -> list[str]:
        return [m.path for m in ModelRegistry().all() if m.exists]
