"""The Serve API's "Requests" view: what other tools asked of the API (time, client, endpoint, model,
tokens, speed, status), newest first, read from the server's request log (engine/serve/request_log.py:
a JSON-lines file the server appends to; this view polls it while shown). Prompts and answers are
never logged, only their sizes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.serve.request_log import read_new

POLL_MS = 1000
MAX_ROWS = 500  # the newest; older ones stay in the file
COLUMNS = ("Time", "Client", "Endpoint", "Model", "Prompt", "Completion", "tok/s", "Status")


def _cells(entry: dict[str, Any]) -> list[str]:
    when = entry.get("time", 0)
    status = int(entry.get("status", 0) or 0)
    finish = entry.get("finish", "")
    shown_status = f"{status} {finish}".strip() if finish and finish != "stop" else str(status)
    speed = float(entry.get("tok_s", 0) or 0)
    return [
        time.strftime("%H:%M:%S", time.localtime(when)) if when else "",
        str(entry.get("client", "")),
        str(entry.get("endpoint", "")).removeprefix("/v1/"),
        str(entry.get("model", "")),
        str(entry.get("prompt_tokens", 0)),
        str(entry.get("completion_tokens", 0)),
        f"{speed:.1f}" if speed else "",
        shown_status,
    ]


class RequestsView(QDialog):
    def __init__(self, path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Serve API: requests")
        self.resize(760, 360)
        self.path, self._offset = path, 0
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setAccessibleName("Requests to the API, newest first")
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.empty = QLabel("No requests yet: point a tool at the API's address and its requests show here.")
        self.empty.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.empty)
        layout.addWidget(self.table)
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.refresh)
        self.refresh()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh()
        self._timer.start()

    def hideEvent(self, event: QHideEvent) -> None:
        self._timer.stop()
        super().hideEvent(event)

    def refresh(self) -> None:
        """Rows for the entries the server appended since the last look (newest on top)."""
        entries, self._offset = read_new(self.path, self._offset)
        for entry in entries[-MAX_ROWS:]:
            self.table.insertRow(0)
            for col, text in enumerate(_cells(entry)):
                item = QTableWidgetItem(text)
                if col >= 4:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(0, col, item)
        while self.table.rowCount() > MAX_ROWS:
            self.table.removeRow(self.table.rowCount() - 1)
        self.empty.setVisible(self.table.rowCount() == 0)

    def row(self, i: int) -> list[str]:
        """Row i's texts (0: the newest)."""
        return [self.table.item(i, c).text() for c in range(self.table.columnCount())]  # type: ignore[union-attr]  # every cell is set
