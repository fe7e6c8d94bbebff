"""The status bar: the engine's state (what is loaded, why a mode was chosen, the last error) on
the left, the context use and the speed meter on the right. A loaded model's line is kept so that a
passing error or notice can give way to it again."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QStatusBar, QWidget

from app.elided_label import ElidedLabel
from app.model_status import mode_label
from app.speed_meter import SpeedMeter
from engine import protocol as p


class StatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state_label = ElidedLabel("Starting…")  # gives way to the meter when space is short
        self.context_label = QLabel("")
        self.context_label.setAccessibleName("Context usage")
        self.meter = SpeedMeter()
        self.addWidget(self.state_label, 1)
        self.addPermanentWidget(self.context_label)
        self.addPermanentWidget(self.meter)
        self.status = ("", "")  # the loaded model's line and its tooltip
        self.error_shown = False  # an error or a warning is up: auto's decision must not hide it

    def say(self, text: str, tooltip: str | None = None, error: bool = False) -> None:
        """A state line (an error or warning: kept until the model's status is shown again)."""
        self.state_label.setText(text)
        if tooltip is not None:
            self.state_label.setToolTip(tooltip)
        self.error_shown = self.error_shown or error

    def set_status(self, text: str, tooltip: str) -> None:
        """The loaded model's line, shown now."""
        self.status = (text, tooltip)
        self.show_status()

    def show_status(self) -> None:
        """The loaded model's line again: an earlier error is over."""
        self.error_shown = False
        self.state_label.setText(self.status[0])
        self.state_label.setToolTip(self.status[1])

    def clear_readouts(self) -> None:
        """Another engine or model is coming: the context count and the speeds were the last one's."""
        self.context_label.setText("")
        self.meter.reset()

    def model_loaded(self, msg: p.Loaded) -> None:
        """The loaded model's line: what runs, with what, and why (the tooltip). A model kept after a
        refused load leaves the refusal shown (its line comes back with the next answer)."""
        if msg.mode == "remote":
            self.status = (f"{msg.name} · remote · {msg.model_path}", msg.plan)
        else:
            line = f"{msg.name} · {msg.n_layer} layers · ctx {msg.n_ctx} · {mode_label(msg.mode)}"
            self.status = (line, msg.mode_reason or f"acceleration: {msg.mode}")
        if not (msg.kept and self.error_shown):
            self.show_status()

    def mode_decided(self, msg: p.AutoDecided) -> None:
        """auto finished measuring: the line names the mode it chose (shown unless an error is up)."""
        self.status = (f"{self.status[0].rsplit(' · ', 1)[0]} · {mode_label(msg.mode)}", msg.mode_reason)
        if not self.error_shown:
            self.show_status()
