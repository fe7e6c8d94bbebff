"""The first window: a conversation view, an input box, Send/Stop, and a tokens/sec readout."""

from __future__ import annotations

import html
import threading
import uuid
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QCloseEvent, QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.worker_bridge import WorkerBridge
from engine import protocol as p
from engine.models.default_model import ensure_default_model
from engine.stats_text import accel_summary


class PromptEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter inserts a newline."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class _ModelResolver(QObject):
    """Finds (first run: installs) the default model off the GUI thread."""

    resolved = Signal(str)
    failed = Signal(str)
    progress = Signal(str)

    def run(self) -> None:
        def work() -> None:
            try:
                self.resolved.emit(str(ensure_default_model(self.progress.emit)))
            except Exception as exc:
                self.failed.emit(str(exc))

        threading.Thread(target=work, name="model-resolver", daemon=True).start()


class MainWindow(QMainWindow):
    def __init__(self, model_path: str | Path | None = None, sampling: p.Sampling | None = None) -> None:
        super().__init__()
        self.setWindowTitle("SpecEE Chat")
        self.resize(820, 640)
        self.model_path = str(model_path) if model_path else None
        self.sampling = sampling or p.Sampling()
        self.history: list[dict[str, str]] = []
        self.request_id = ""
        self.answer = ""
        self.model_loaded = False

        self.view = QTextBrowser()
        self.view.setAccessibleName("Conversation")
        self.view.setOpenExternalLinks(True)
        self.input = PromptEdit()
        self.input.setAccessibleName("Message")
        self.input.setPlaceholderText("Message the model (Enter sends, Shift+Enter for a new line)")
        self.input.setFixedHeight(80)
        self.send_button = QPushButton("Send")
        self.send_button.setAccessibleName("Send")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setAccessibleName("Stop")
        self.stop_button.setEnabled(False)
        self.restart_button = QPushButton("Restart engine")
        self.restart_button.setAccessibleName("Restart engine")
        self.restart_button.setVisible(False)

        buttons = QVBoxLayout()
        for b in (self.send_button, self.stop_button, self.restart_button):
            buttons.addWidget(b)
        buttons.addStretch()
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        row.addLayout(buttons)
        layout = QVBoxLayout()
        layout.addWidget(self.view, 1)
        layout.addLayout(row)
        central = QWidget()
        central.setLayout(layout)
        self.setCentralWidget(central)

        self.state_label = QLabel("Starting…")
        self.speed_label = QLabel("")
        self.speed_label.setAccessibleName("Tokens per second")
        self.statusBar().addWidget(self.state_label, 1)
        self.statusBar().addPermanentWidget(self.speed_label)

        self.bridge = WorkerBridge(self)
        self.bridge.event.connect(self.on_event)
        self.input.submitted.connect(self.send_message)
        self.send_button.clicked.connect(self.send_message)
        self.stop_button.clicked.connect(self.stop_answer)
        self.restart_button.clicked.connect(self.start_engine)
        self._set_busy(False)

    # -- engine lifecycle ---------------------------------------------------------------------------

    def start_engine(self) -> None:
        self.restart_button.setVisible(False)
        self.model_loaded = False
        self._set_busy(False)
        self.state_label.setText("Starting the engine…")
        self.bridge.start()
        if self.model_path:
            self._load(self.model_path)
        else:
            resolver = _ModelResolver(self)
            resolver.progress.connect(self.state_label.setText)
            resolver.resolved.connect(self._load)
            resolver.failed.connect(lambda msg: self._show_error("model", msg))
            resolver.run()

    def _load(self, path: str) -> None:
        self.model_path = path
        self.state_label.setText(f"Loading {Path(path).name}…")
        self.bridge.send(p.Load(path, p.Placement(), mode="auto"))

    def closeEvent(self, event: QCloseEvent) -> None:
        self.bridge.shutdown()
        super().closeEvent(event)

    # -- chat -----------------------------------------------------------------------------------------

    def send_message(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.request_id or not self.model_loaded:
            return
        self.history.append({"role": "user", "content": text})
        self.request_id = uuid.uuid4().hex[:12]
        if not self.bridge.send(p.Generate(self.request_id, list(self.history), self.sampling)):
            self.history.pop()  # the text stays in the input box: nothing typed is lost
            self.request_id = ""
            return
        self.input.clear()
        self._append_html(f"<p><b>You</b><br>{_html_text(text)}</p><p><b>Assistant</b><br>")
        self.answer = ""
        self._set_busy(True)

    def stop_answer(self) -> None:
        if self.request_id:
            self.bridge.send(p.Cancel(self.request_id))

    def on_event(self, msg: p.Message) -> None:
        if isinstance(msg, p.Loaded):
            self.model_loaded = True
            self.state_label.setText(f"{msg.name} · {msg.n_layer} layers · ctx {msg.n_ctx} · {msg.mode}")
            self.state_label.setToolTip(msg.mode_reason or f"acceleration: {msg.mode}")
            self._set_busy(False)
        elif isinstance(msg, p.Token) and msg.request_id == self.request_id:
            self.answer += msg.text
            cursor = self.view.textCursor()
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(msg.text)
            self.view.ensureCursorVisible()
        elif isinstance(msg, p.Stats) and msg.request_id == self.request_id:
            extra = accel_summary(msg.mode, msg.accel)
            text = f"{msg.decode_tok_s:.1f} tok/s · first token {msg.ttft_ms:.0f} ms"
            self.speed_label.setText(text + (f" · {extra}" if extra else ""))
        elif isinstance(msg, p.Notice):
            self._append_html(f"<p><i>{html.escape(msg.message)}</i></p>")
        elif isinstance(msg, p.Done) and msg.request_id == self.request_id:
            self.history.append({"role": "assistant", "content": self.answer})
            if msg.finish_reason == "cancelled":
                self._append_html(" <i>[stopped]</i>")
            self.request_id = ""
            self._set_busy(False)
        elif isinstance(msg, p.Error):
            self._show_error(msg.kind, msg.message)

    def _show_error(self, kind: str, message: str) -> None:
        if self.request_id:
            # The failed question goes back into the input box so nothing typed is lost.
            if self.history and self.history[-1]["role"] == "user":
                self.input.setPlainText(self.history.pop()["content"])
            self.request_id = ""
        self._append_html(f"<p style='color:#b00020'><b>Error ({html.escape(kind)}):</b> {_html_text(message)}</p>")
        self.state_label.setText(f"Error: {message.splitlines()[0]}")
        if kind == "worker_died":
            self.model_loaded = False
            self.restart_button.setVisible(True)
        self._set_busy(False)

    # -- helpers --------------------------------------------------------------------------------------

    def _append_html(self, fragment: str) -> None:
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertHtml(fragment)
        self.view.ensureCursorVisible()

    def _set_busy(self, busy: bool) -> None:
        self.stop_button.setEnabled(busy)
        self.send_button.setEnabled(not busy and self.model_loaded)

    def transcript(self) -> str:
        return self.view.toPlainText()


def _html_text(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")
