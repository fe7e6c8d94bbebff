"""Model manager: the catalog, hub search, GGUF files with a "fits here" badge, downloads with
progress / pause / resume, and "Use" to chat with a downloaded model. Logic lives in
engine.models (download, catalog); this is the view, with downloads on a worker thread."""

from __future__ import annotations

import threading
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
)

from engine.models.catalog import load_catalog
from engine.models.download import DownloadError, HubFile, Progress, download, list_gguf_files, search_gguf_repos
from engine.models.memory import fits
from engine.models.registry import ModelRegistry


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


class _Signals(QObject):
    progress = Signal(object)  # Progress
    finished = Signal(str)  # path
    failed = Signal(str, str)  # kind, message
    listed = Signal(object)  # list[HubFile] | list[str]


class ModelManager(QDialog):
    use_model = Signal(str)  # a GGUF path to load

    def __init__(self, parent=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(720, 520)
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
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setAccessibleName("Download progress")
        self.download_button = QPushButton("Download")
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
        self.download_button.clicked.connect(self.start_download)
        self.pause_button.clicked.connect(self.cancel.set)
        self.use_button.clicked.connect(self._use)
        self.signals.progress.connect(self._on_progress)
        self.signals.finished.connect(self._on_finished)
        self.signals.failed.connect(self._on_failed)
        self.signals.listed.connect(self._on_listed)
        self.downloaded: str | None = None
        self.show_catalog()

    def show_catalog(self) -> None:
        self.repos.clear()
        for e in load_catalog():
            if e.repo_id == "embedded":
                continue
            badge = "fits" if fits(e.approx_size, self.ram) else "too big"
            accel = f" · {', '.join(e.acceleration)}" if e.acceleration else ""
            item = QListWidgetItem(f"{e.name} — ~{_gb(e.approx_size)} · {e.licence} · {badge}{accel}")
            item.setData(Qt.ItemDataRole.UserRole, e.repo_id)
            self.repos.addItem(item)

    def run_search(self) -> None:
        query = self.search.text().strip()
        if not query:
            return self.show_catalog()
        self.status.setText(f"Searching for {query!r}…")
        self._in_thread(lambda: self.signals.listed.emit(search_gguf_repos(query)))

    def _repo_chosen(self, item: QListWidgetItem | None, _prev) -> None:  # type: ignore[no-untyped-def]
        if item is None:
            return
        repo = item.data(Qt.ItemDataRole.UserRole)
        self.status.setText(f"Listing {repo}…")
        self._in_thread(lambda: self.signals.listed.emit(list_gguf_files(repo)))

    def _on_listed(self, items: list) -> None:  # type: ignore[type-arg]
        if (items and isinstance(items[0], HubFile)) or (not items and self.sender() is None):
            pass
        if items and isinstance(items[0], str):
            self.repos.clear()
            for repo in items:
                item = QListWidgetItem(repo)
                item.setData(Qt.ItemDataRole.UserRole, repo)
                self.repos.addItem(item)
            self.status.setText(f"{len(items)} repositories")
            return
        self.files.clear()
        for f in items:
            badge = "fits on this machine" if fits(f.size, self.ram) else "needs more memory than this machine has"
            item = QListWidgetItem(f"{f.filename} — {_gb(f.size)} · {badge}")
            item.setData(Qt.ItemDataRole.UserRole, f)
            self.files.addItem(item)
        self.status.setText(f"{len(items)} GGUF files" if items else "No GGUF files in this repository.")

    def start_download(self) -> None:
        item = self.files.currentItem()
        if item is None:
            self.status.setText("Choose a file first.")
            return
        f: HubFile = item.data(Qt.ItemDataRole.UserRole)
        self.current = f
        self.cancel.clear()
        self.download_button.setEnabled(False)
        self.pause_button.setEnabled(True)
        self.status.setText(f"Downloading {f.filename}…")

        def work() -> None:
            try:
                path = download(f, progress=self.signals.progress.emit, cancel=self.cancel)
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
        self.download_button.setEnabled(True)
        self.pause_button.setEnabled(False)
        self.use_button.setEnabled(True)
        self.status.setText(f"Ready: {Path(path).name} (sha256 verified). It runs in vanilla mode until acceleration is trained.")

    def _on_failed(self, kind: str, message: str) -> None:
        self.download_button.setEnabled(True)
        self.pause_button.setEnabled(False)
        self.download_button.setText("Resume" if kind in ("cancelled", "network") else "Download")
        self.status.setText(message)

    def _use(self) -> None:
        if self.downloaded:
            self.use_model.emit(self.downloaded)
            self.accept()

    def _in_thread(self, fn) -> None:  # type: ignore[no-untyped-def]
        def work() -> None:
            try:
                fn()
            except DownloadError as exc:
                self.signals.failed.emit(exc.kind, str(exc))

        threading.Thread(target=work, daemon=True).start()

    @staticmethod
    def registered() -> list[str]:
        return [m.path for m in ModelRegistry().all() if m.exists]
