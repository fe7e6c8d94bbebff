"""What goes wrong with a line or a setting: the protocol's exceptions."""

from __future__ import annotations

from engine.protocol.version import PROTOCOL_VERSION


class ProtocolError(ValueError):
    """A line that is not a valid message."""


class VersionMismatch(ProtocolError):
    """The peer speaks another protocol version: the app and the engine come from different installs."""

    def __init__(self, theirs: object, what: str) -> None:
        super().__init__(
            f"{what} speaks protocol version {theirs}, this side speaks {PROTOCOL_VERSION}: the app and its "
            "engine come from different installs. Reinstall the app (or restart it after an update)."
        )
        self.theirs = theirs


class SettingsError(ValueError):
    """Settings outside what the engine accepts; the message says which and why."""
