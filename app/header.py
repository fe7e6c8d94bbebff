"""The header bar: the model switcher with the loaded model's acceleration state, and the window's
actions (Repair model, Restart engine, Use local model, Train acceleration: each shown when it
applies; the serve toggle goes in through add_action())."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QWidget

from app.composer import button
from app.elided_label import ElidedLabel
from app.engine_switcher import EngineSwitcher
from app.model_status import acceleration_state, remote_state
from engine import protocol as p
from engine.remote.engine_choice import EngineChoice


class HeaderBar(QWidget):
    def __init__(self, choice: EngineChoice, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("header")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.model_switch = EngineSwitcher(choice)
        # never widens the window: where space is short the state ends in "…", whole in its tooltip
        self.accel_badge = ElidedLabel("")
        self.accel_badge.setObjectName("accelBadge")
        self.accel_badge.setAccessibleName("Acceleration")
        self.repair_button = button("Repair model", "danger")
        self.repair_button.setToolTip("Fetch and verify the default model again")
        self.restart_button = button("Restart engine", "danger")
        self.local_button = button("Use local model")  # after a remote engine's error: one click back
        self.train_button = button("Train acceleration")
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(14, 8, 14, 8)
        self.row.setSpacing(8)
        self.row.addWidget(self.model_switch)
        self.row.addWidget(self.accel_badge, 1)
        for b in (self.repair_button, self.restart_button, self.local_button, self.train_button):
            self.add_action(b)
            b.setVisible(False)

    def add_action(self, widget: QWidget) -> None:
        """A button (or toggle) at the right end of the header."""
        self.row.addWidget(widget)

    def show_acceleration(self, loaded: p.Loaded | None, decided: p.AutoDecided | None, remote_tok_s: float = 0.0) -> None:
        """The badge: the loaded model's mode and measured speed, or a remote engine's speed measured here."""
        if loaded is not None and loaded.mode == "remote":
            badge, why = remote_state(loaded, remote_tok_s)
        else:
            badge, why = acceleration_state(loaded, decided)
        self.accel_badge.setText(badge)
        self.accel_badge.setToolTip(why)
