"""A one-line label that gives way: when space is short it shows as much as fits, ending in "…",
and its tooltip holds the whole text. The status bar's engine state uses it so that the speed
meter beside it is never the one cut."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QHelpEvent, QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QToolTip, QWidget


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def minimumSizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("Xxxxxxxx…"), super().minimumSizeHint().height())

    def shown_text(self) -> str:
        """What fits in the label's width now."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().windowText().color())
        painter.drawText(self.contentsRect(), int(self.alignment()), self.shown_text())
        painter.end()

    def event(self, e: QEvent) -> bool:
        if e.type() == QEvent.Type.ToolTip and isinstance(e, QHelpEvent) and self.shown_text() != self.text():
            # cut short: the whole text first, then whatever the tooltip says (e.g. why this mode)
            QToolTip.showText(e.globalPos(), "\n".join(filter(None, [self.text(), self.toolTip()])), self)
            return True
        return super().event(e)
