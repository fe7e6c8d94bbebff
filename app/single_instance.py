"""One SpecEE Chat window per user and data dir: a second launch brings the running window to the
front and exits (it used to start a second app silently, both writing the same conversations)."""

from __future__ import annotations

import getpass
import hashlib
from collections.abc import Callable

from PySide6.QtNetwork import QLocalServer, QLocalSocket

from engine.paths import data_dir


def instance_key() -> str:
    where = f"{getpass.getuser()}|{data_dir().resolve()}"
    return "specee-chat-" + hashlib.sha256(where.encode()).hexdigest()[:16]


class SingleInstance:
    def __init__(self, key: str | None = None) -> None:
        self.key = key or instance_key()
        self.server: QLocalServer | None = None

    def signal_running(self) -> bool:
        """True when another instance is listening; it has been asked to show its window."""
        sock = QLocalSocket()
        sock.connectToServer(self.key)
        if not sock.waitForConnected(500):
            return False
        sock.write(b"activate\n")
        sock.flush()
        sock.waitForBytesWritten(500)
        sock.disconnectFromServer()
        return True

    def listen(self, on_activate: Callable[[], None]) -> None:
        QLocalServer.removeServer(self.key)  # a socket left behind by a crashed instance
        self.server = QLocalServer()
        self.server.listen(self.key)

        def accept() -> None:
            assert self.server is not None
            conn = self.server.nextPendingConnection()
            if conn is not None:
                conn.disconnected.connect(conn.deleteLater)
            on_activate()

        self.server.newConnection.connect(accept)
