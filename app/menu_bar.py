"""The main window's menu bar (File, Chat, Model, Server, Help), built from the shortcut registry
(app/shortcuts.py): each action calls the window's own slot for it, the one its button or switch
calls, so the menu adds a way in and no behaviour of its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QMenuBar, QWidget

from app.shortcuts import MENUS, menu_entries


class MenuBar(QMenuBar):
    def __init__(self, slots: Mapping[str, Callable[[], object]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Menu bar")
        self.menus: dict[str, QMenu] = {}
        self.actions_by_name: dict[str, QAction] = {}
        for title in MENUS:
            menu = self.addMenu(f"&{title}")
            self.menus[title] = menu
            for entry in menu_entries(title):
                action = QAction(entry.label, self)
                action.setShortcuts([QKeySequence(k) for k in entry.keys])
                slot = slots[entry.name]  # KeyError: a registry entry with nothing to do
                # triggered passes `checked`: the window's slots take no arguments
                action.triggered.connect(lambda _checked=False, slot=slot: slot())
                menu.addAction(action)
                self.actions_by_name[entry.name] = action
        if unknown := set(slots) - set(self.actions_by_name):
            raise KeyError(f"no menu entry for {sorted(unknown)} in app/shortcuts.py")
