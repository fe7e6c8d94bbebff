"""The conversation list's inline rename box: the whole row's height, never less than the box needs.
Qt's default puts the editor in the row's text area, inside the theme's padding, which clipped the
box's frame and the bottom of its text."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem, QWidget


class RenameDelegate(QStyledItemDelegate):
    def updateEditorGeometry(
        self, editor: QWidget, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        row = option.rect
        height = max(row.height(), editor.sizeHint().height())
        editor.setGeometry(row.x(), row.center().y() - height // 2, row.width(), height)
