"""The header's Serve switch: our OpenAI-compatible API (`specee serve`) for other tools on this
machine, with the model and mode the window uses, and its address shown once it answers.

The server is its own process with its own engine (engine/serve/launcher.py): a tool's requests
never queue behind the chat's answers, and a crash there never touches the chat. It binds
127.0.0.1 only; serving the network is a deliberate command-line act (`specee serve --allow-remote`)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from app.serve_requests import RequestsView
from engine.serve.launcher import ServerError, ServerProcess, free_port
from engine.serve.request_log import log_path

PREFERRED_PORT = 8080  # llama-server's and most tools' default; a free one when it is taken


def _port_free(port: int) -> bool:
    with socket.socket() as s, contextlib.suppress(OSError):
        s.bind(("127.0.0.1", port))
        return True
    return False


COPIED_MS = 1500  # how long "Copied" stands in for the address
SERVE_TIP = "Let other tools on this computer use this model through an OpenAI-compatible API"


class ServeSwitch(QWidget):
    """A toggle plus the address (click: copied). target() gives (model path, mode) to serve."""

    failed = Signal(str)  # why the server could not start (the window shows it)
    _started = Signal(object, str)  # (server, url), from the starting thread
    _not_started = Signal(object, str)

    def __init__(self, target: Callable[[], tuple[str | None, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._target = target
        self.server: ServerProcess | None = None
        self.url = ""
        self.toggle = QPushButton("Serve API")
        self.toggle.setCheckable(True)
        self.toggle.setAccessibleName("Serve an OpenAI-compatible API")
        self.toggle.setToolTip(SERVE_TIP)
        self.blocked = ""  # why it cannot be switched on now (a remote engine answers the chat)
        self.address = QPushButton("")
        self.address.setObjectName("serveAddress")
        self.address.setFlat(True)
        self.address.setVisible(False)
        self.address.setToolTip("Copy the API's base URL")
        self.address.setAccessibleName("API address (click to copy)")
        self.requests_button = QPushButton("Requests")
        self.requests_button.setFlat(True)
        self.requests_button.setVisible(False)
        self.requests_button.setToolTip("What other tools asked of the API: tokens, speed, status")
        self.requests_view: RequestsView | None = None  # made when first opened
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(4)
        row.addWidget(self.toggle)
        row.addWidget(self.address)
        row.addWidget(self.requests_button)
        self.toggle.toggled.connect(self._on_toggled)
        self.address.clicked.connect(self.copy_address)
        self.requests_button.clicked.connect(self.show_requests)
        self._started.connect(self._on_started)
        self._not_started.connect(self._on_not_started)

    def copy_address(self) -> None:
        """The base URL to the clipboard, and "Copied" in its place for a moment: the click did something."""
        url = self.base_url
        QGuiApplication.clipboard().setText(url)
        self.address.setMinimumWidth(self.address.width())  # the header does not jump
        self.address.setText("Copied")
        QTimer.singleShot(COPIED_MS, self.address, self._show_address)  # the button as context: a closed window cancels it

    def show_requests(self) -> RequestsView:
        """The Requests view (the server's request log), shown and raised."""
        if self.requests_view is None:
            self.requests_view = RequestsView(log_path(), self)
        self.requests_view.show()
        self.requests_view.raise_()
        return self.requests_view

    def _show_address(self) -> None:
        if self.address.text() == "Copied":
            self.address.setText(self.base_url)

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as base_url ("" while off)."""
        return f"{self.url}/v1" if self.url else ""

    @property
    def serving(self) -> bool:
        return bool(self.url) and self.server is not None and self.server.alive

    def _on_toggled(self, on: bool) -> None:
        if on and self.blocked:
            self._reset()
        elif on and self.server is None:
            self._start()
        elif not on:
            self.shutdown()

    def _start(self) -> None:
        model, mode = self._target()
        if not model:
            self.toggle.setChecked(False)
            self.failed.emit("There is no local model to serve yet: load one first.")
            return
        port = PREFERRED_PORT if _port_free(PREFERRED_PORT) else free_port()
        server = ServerProcess(model=model, mode=mode, port=port)
        self.server = server
        self.toggle.setText("Starting…")
        self.toggle.setEnabled(False)

        def work() -> None:
            try:
                self._started.emit(server, server.start())
            except (ServerError, OSError) as exc:
                self._not_started.emit(server, str(exc))

        threading.Thread(target=work, name="serve-start", daemon=True).start()

    def _on_started(self, server: ServerProcess, url: str) -> None:
        if server is not self.server:  # switched off (or restarted) while it started
            server.stop()
            return
        self.url = url
        self.toggle.setEnabled(True)
        self.toggle.setText("Serving")
        self.address.setText(self.base_url)
        self.address.setVisible(True)
        self.requests_button.setVisible(True)
        self.toggle.setToolTip(f"Serving {server.model} ({server.mode}) at {self.base_url}. Click to stop.")

    def _on_not_started(self, server: ServerProcess, why: str) -> None:
        if server is self.server:
            self.server = None
            self._reset()
            self.failed.emit(f"The API server could not start: {why}")

    def set_blocked(self, why: str) -> None:
        """why: the switch cannot be turned on now (shown as its tooltip); "" lifts that. A server
        already running keeps serving the local model and can still be stopped."""
        self.blocked = why
        if not self.server:
            self.toggle.setEnabled(not why)
            self.toggle.setToolTip(why or SERVE_TIP)

    def restart(self) -> None:
        """Serve the window's current model (after a switch), if serving."""
        if self.server is not None:
            self.shutdown()
            self.toggle.setChecked(True)

    def shutdown(self, wait: bool = False) -> None:
        """Stop serving; wait: before returning (the window closing), else in the background."""
        server, self.server = self.server, None
        if server is not None:
            if wait:
                server.stop()
            else:
                threading.Thread(target=server.stop, name="serve-stop", daemon=True).start()
        self._reset()

    def _reset(self) -> None:
        self.url = ""
        self.address.setVisible(False)
        self.requests_button.setVisible(False)
        self.toggle.setEnabled(not self.blocked)
        self.toggle.setToolTip(self.blocked or SERVE_TIP)
        self.toggle.setText("Serve API")
        self.toggle.blockSignals(True)
        self.toggle.setChecked(False)
        self.toggle.blockSignals(False)
