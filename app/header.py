"""The header bar: the model switcher with the loaded model's acceleration state, and the window's
actions. Extra entries (e.g. a remote endpoint in the switcher, a serve toggle) go in through
add_action() and ModelSwitcher.add_entry(), so they need no change to the layout."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSizePolicy, QWidget

# Item data roles of the switcher: the path (or endpoint) to load, and what kind of entry it is.
KIND_ROLE = Qt.ItemDataRole.UserRole + 1


class ModelSwitcher(QComboBox):
    """Every installed model (default, downloaded, added with `specee models add`), one click away;
    each item's data is what to load (a path), its KIND_ROLE says which kind of entry it is."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Model")
        self.setToolTip("The model to chat with (Models… downloads more)")
        self.setMinimumWidth(300)

    def add_entry(self, text: str, target: str, kind: str = "local", tooltip: str = "") -> None:
        self.addItem(text, target)
        self.setItemData(self.count() - 1, kind, KIND_ROLE)
        if tooltip:
            self.setItemData(self.count() - 1, tooltip, Qt.ItemDataRole.ToolTipRole)
        # wide enough for the longest entry (up to a limit), whichever is selected
        longest = max(self.fontMetrics().horizontalAdvance(self.itemText(i)) for i in range(self.count()))
        self.setMinimumWidth(min(max(300, longest + 72), 520))  # + arrow and padding


class HeaderBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("header")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.model_switch = ModelSwitcher()
        self.accel_badge = QLabel("")
        self.accel_badge.setObjectName("accelBadge")
        self.accel_badge.setAccessibleName("Acceleration")
        # never widens the window: a long state is clipped here and whole in the tooltip / Settings
        self.accel_badge.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(14, 8, 14, 8)
        self.row.setSpacing(8)
        self.row.addWidget(self.model_switch)
        self.row.addWidget(self.accel_badge, 1)

    def add_action(self, widget: QWidget) -> None:
        """A button (or toggle) at the right end of the header."""
        self.row.addWidget(widget)
