"""The model switcher in the header: every installed model (default, downloaded, added with `specee
models add`, found in the models folder; read again each time the list opens; a damaged one says so
and opens My models), then each remote endpoint's models, then "Add remote engine…". A view of the engine
choice (engine/remote/engine_choice.py): it draws the choice's entries, hands the user's pick to it,
and offers a context menu on an endpoint's entry (list its models again, remove it)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QColor, QPaintEvent
from PySide6.QtWidgets import QComboBox, QMenu, QStyle, QStyleOptionComboBox, QStylePainter, QWidget

from engine.remote.engine_choice import EngineChoice

TIP = "The model to chat with (Download models… gets more, My models… manages them)"
NOTHING_LOADED = "No model loaded"  # after My models' Unload, until a model is picked
CLOSED_MAX = 360  # at the window's default size the header's mode text fits beside it
# Item data roles: the entry's target (Qt.UserRole: a path, "<endpoint>\n<model id>"), and its kind.
KIND_ROLE = Qt.ItemDataRole.UserRole + 1


class EngineSwitcher(QComboBox):
    add_remote = Signal()  # "Add remote engine…" was picked
    manage = Signal(str)  # a damaged model was picked: My models, to repair or remove it (its path)

    def __init__(self, choice: EngineChoice, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.choice = choice
        self.setAccessibleName("Model")
        self.setToolTip(TIP)
        self.setPlaceholderText(NOTHING_LOADED)  # shown while no entry is current (select_current)
        # closed, it leaves the header room for the mode and its speed (a long entry ends in "…" and
        # is whole in the tooltip); open, every entry is whole
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)  # as entries come and go
        self.setMinimumWidth(240)
        self.setMaximumWidth(CLOSED_MAX)
        self.activated.connect(self._picked)
        self.view().setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view().customContextMenuRequested.connect(self._menu)

    def add_entry(self, text: str, target: str, kind: str = "local", tooltip: str = "") -> None:
        self.addItem(text, target)
        self.setItemData(self.count() - 1, kind, KIND_ROLE)
        if tooltip:
            self.setItemData(self.count() - 1, tooltip, Qt.ItemDataRole.ToolTipRole)
        if kind == "damaged":  # reads as a problem, in either theme
            self.setItemData(self.count() - 1, QColor("#c0392b"), Qt.ItemDataRole.ForegroundRole)
        # wide enough for the longest entry (up to a limit), whichever is selected
        longest = max(self.fontMetrics().horizontalAdvance(self.itemText(i)) for i in range(self.count()))
        self.view().setMinimumWidth(longest + 48)  # + the popup's padding and scroll bar

    def shown_text(self) -> str:
        """The entry as the closed switcher shows it: whole, or ending in "…" (whole in the tooltip)."""
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        cc, field = QStyle.ComplexControl.CC_ComboBox, QStyle.SubControl.SC_ComboBoxEditField
        width = self.style().subControlRect(cc, opt, field, self).width()
        text = self.currentText() if self.currentIndex() >= 0 else self.placeholderText()
        return self.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, width)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        opt.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)

    def showPopup(self) -> None:
        """The registry read again as the list opens: models added meanwhile (`specee models add`, a
        download, a scan) are there, a file damaged meanwhile says so."""
        self.refresh()
        super().showPopup()

    def refresh(self) -> None:
        """The choice's entries again, the engine answering selected (no pick meanwhile)."""
        self.blockSignals(True)
        self.clear()
        for e in self.choice.entries():
            if e.kind == "separator":
                self.insertSeparator(self.count())
            else:
                self.add_entry(e.label, e.target, e.kind, e.tooltip)
        self.blockSignals(False)
        self.select_current()

    def select_current(self) -> None:
        """The entry of the engine answering the chat (the switcher shows nothing else as chosen);
        none after the model was unloaded: "No model loaded"."""
        self.blockSignals(True)
        if self.choice.unloaded and not self.choice.is_remote:
            self.setCurrentIndex(-1)
            self.setToolTip(f"{NOTHING_LOADED}: pick a model to load it\n{TIP}")
        else:
            self.setCurrentIndex(max(self.findData(self.choice.current_target()), 0))
            self.setToolTip(f"{self.currentText()}\n{TIP}" if self.currentText() else TIP)
        self.blockSignals(False)

    def _picked(self, i: int) -> None:
        kind, target = self.itemData(i, KIND_ROLE), str(self.itemData(i) or "")
        self.choice.stop_restoring()  # the user chose: the engine used last is not picked over it
        name, _, model = target.partition("\n")
        if kind == "remote" and model:
            self.choice.use_remote(name, model)
            return
        self.select_current()
        if kind == "remote":
            self.choice.list_remote_models([name])  # it could not list its models: ask again
        elif kind == "add-remote":
            self.add_remote.emit()
        elif kind == "damaged":
            self.manage.emit(target)
        elif target and (target != self.choice.local_path or self.choice.is_remote or self.choice.unloaded):
            self.choice.use_local(target)

    def _menu(self, pos: QPoint) -> None:
        view = self.view()
        index = view.indexAt(pos)
        if index.data(KIND_ROLE) != "remote":
            return
        name = str(index.data(Qt.ItemDataRole.UserRole)).partition("\n")[0]
        menu = QMenu(view)
        menu.addAction(f"List {name}'s models again", lambda: self.choice.list_remote_models([name]))
        menu.addAction(f"Remove {name} (and forget its API key)", lambda: self.choice.remove_endpoint(name))
        menu.exec(view.mapToGlobal(pos))
