"""The shortcuts help (F1 or Ctrl+/): every shortcut of the window, grouped by its menu and then by
where the keys work, written from the one registry the menu bar binds them from (app/shortcuts.py)."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QHeaderView, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from app.shortcuts import MENUS, SHORTCUTS, WHERE, Shortcut


def key_text(entry: Shortcut) -> str:
    """The keys as this platform writes them ("Ctrl+N", on macOS "⌘N")."""
    return ", ".join(QKeySequence(k).toString(QKeySequence.SequenceFormat.NativeText) for k in entry.keys)


class ShortcutsHelp(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.tree = QTreeWidget()
        self.tree.setAccessibleName("Keyboard shortcuts")
        self.tree.setColumnCount(2)
        self.tree.setHeaderLabels(["Keys", "What they do"])
        self.tree.setRootIsDecorated(False)
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        for group, entries in [(m, [s for s in SHORTCUTS if s.menu == m]) for m in MENUS] + [
            (w, [s for s in SHORTCUTS if s.where == w]) for w in WHERE
        ]:
            entries = [s for s in entries if s.keys]  # a menu entry with no key is no shortcut
            if not entries:
                continue
            head = QTreeWidgetItem(self.tree, [group if group in WHERE else f"{group} menu"])
            head.setFirstColumnSpanned(True)
            font = head.font(0)
            font.setBold(True)
            head.setFont(0, font)
            for s in entries:
                QTreeWidgetItem(head, [key_text(s), s.label.replace("…", "")])
        self.tree.expandAll()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        col = QVBoxLayout(self)
        col.addWidget(self.tree)
        col.addWidget(buttons)
        self.resize(520, 620)

    def listed(self) -> list[tuple[str, str]]:
        """(keys, what they do) of every row, as shown."""
        rows = []
        for i in range(self.tree.topLevelItemCount()):
            head = self.tree.topLevelItem(i)
            rows += [(head.child(j).text(0), head.child(j).text(1)) for j in range(head.childCount())]  # type: ignore[union-attr]  # i, j < the counts
        return rows
