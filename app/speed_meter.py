"""The status-bar speed meter: the engine's recent decode tok/s, prompt speed, time to first token,
the speedup over vanilla measured in the same conditions (when the engine has such a measurement),
the acceleration's own numbers, and a sparkline of tok/s over the current answer. Every number is
the engine's, timed on its clock: events that reach a busy window in a burst change nothing."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen, QPolygonF
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

from engine import protocol as p
from engine.stats_text import accel_summary


class Sparkline(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: list[float] = []
        self.setAccessibleName("Speed over this answer")
        self.setMinimumSize(QSize(90, 18))

    def set_values(self, values: list[float]) -> None:
        self.values = values[-120:]
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        if len(self.values) < 2:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        w, h = self.width() - 2, self.height() - 2
        top = max(self.values) or 1.0
        pts = [QPointF(1 + w * i / (len(self.values) - 1), 1 + h * (1 - v / top)) for i, v in enumerate(self.values)]
        painter.setPen(QPen(QColor(self.palette().highlight().color()), 1.5))
        painter.drawPolyline(QPolygonF(pts))
        painter.end()


class SpeedMeter(QWidget):
    """Fed with every Stats event of the answer being generated (reset() at its start)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel("")
        self.label.setAccessibleName("Tokens per second")
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.sparkline = Sparkline()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label)
        row.addWidget(self.sparkline)
        self.reset()

    def reset(self) -> None:
        """A new answer (or another model): nothing measured yet."""
        self.rolling: list[float] = []
        self.sparkline.set_values([])
        self.label.setText("")
        self.label.setToolTip("")

    def update_stats(self, s: p.Stats) -> None:
        tok_s = s.recent_tok_s or s.decode_tok_s  # a remote engine's client may know only the average
        if s.n_generated > 1 and tok_s > 0:
            self.rolling.append(tok_s)
        # The status bar keeps what changes while an answer streams, and fits the default window
        # width; the prompt speed and the long wording are in the tooltip.
        parts = [f"{tok_s:.1f} tok/s"] if s.n_generated > 1 and tok_s > 0 else []
        compared = "no vanilla speed measured in these conditions"  # threads, context, prompt length
        if s.vs_vanilla > 0:
            parts.append(f"{s.vs_vanilla:.2f}x vanilla")
            compared = f"{s.vs_vanilla:.2f}x vanilla measured here with the same threads and prompt length"
        full = list(parts)
        if s.ttft_ms > 0:  # 0: no token came (Stop while the prompt was read)
            parts.append(f"first token {s.ttft_ms:.0f} ms")
            full += [f"prompt {s.prefill_tok_s:.0f} tok/s", parts[-1]]
        if s.mode not in ("vanilla", "remote"):
            full.append(compared)
        if extra := accel_summary(s.mode, s.accel, short=True):
            parts.append(extra)
            full.append(accel_summary(s.mode, s.accel))
        self.label.setText(" · ".join(parts))
        self.label.setToolTip(" · ".join(full))
        self.sparkline.set_values(self.rolling)

    def text(self) -> str:
        return self.label.text()
