"""The conversation list: new, rename (double-click or F2), delete (Del, with undo), full-text search,
export (Markdown, JSON) and import (JSON)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.search_snippet import MARK, SNIPPET_ROLE, SearchResultDelegate, snippet_text
from engine.atomic import write_text_atomic
from engine.chats.store import ConversationStore, StoreError


class ConversationSidebar(QWidget):
    selected = Signal(str)  # conversation id
    chosen = Signal(str)  # ... opened with Enter (from the search box or the list): the user goes on typing
    new_requested = Signal()
    deleted = Signal(str)

    def __init__(self, store: ConversationStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats (Ctrl+K)")
        self.search.setAccessibleName("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setAccessibleName("Conversations")
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.new_button = QPushButton("+  New chat")
        self.new_button.setAccessibleName("New chat")
        self.import_button = QPushButton("Import…")
        self.import_button.setAccessibleName("Import conversation")
        # Delete takes effect at once and can be undone until the next delete or app start.
        self.undo_button = QPushButton()
        self.undo_button.setAccessibleName("Undo delete")
        self.undo_button.setVisible(False)
        self.undo_button.clicked.connect(self.undo_delete)
        self.undo_button.installEventFilter(self)  # its label is fitted to its width
        self._trashed: str | None = None
        self._trashed_title = ""
        # the window's left column: its own background (the theme's #sidebar), long titles elided
        self.setObjectName("sidebar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setMinimumWidth(200)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        # the rename box is never clipped; a search result shows the words that matched under its title
        self.list.setItemDelegate(SearchResultDelegate(self.list))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 10, 10, 10)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.undo_button)
        layout.addWidget(self.import_button)
        self.new_button.clicked.connect(self.new_requested)
        self.import_button.clicked.connect(lambda: self.import_file())
        self.search.textChanged.connect(lambda _t: self.refresh())
        self.list.currentItemChanged.connect(self._on_current)
        self.list.itemChanged.connect(self._on_renamed)
        self.list.customContextMenuRequested.connect(self._menu)
        self._filling = False
        self.search.installEventFilter(self)  # Down goes to the results, Enter opens one
        self.list.installEventFilter(self)

    def add_place(self, widget: QWidget) -> None:
        """A button to one of the app's places (Models, Settings, About), under the conversations."""
        self.layout().addWidget(widget)  # type: ignore[union-attr]  # the sidebar's own, set in __init__

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def refresh(self, current: str | None = None) -> None:
        current = current or self.current_id()
        query = self.search.text().strip()
        convs = self.store.list()
        snippets: dict[str, str] = {}  # a result's best match, a few words around it
        if query:
            for conv_id, snippet in self.store.search(query, MARK):
                snippets.setdefault(conv_id, snippet)
            by_id = {c.id: c for c in convs}
            convs = [by_id[i] for i in snippets if i in by_id] + [
                c for c in convs if query.lower() in c.title.lower() and c.id not in snippets
            ]
        self._filling = True
        self.list.clear()
        for c in convs:
            item = QListWidgetItem(c.title)
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            if snippet := snippets.get(c.id, ""):
                item.setData(SNIPPET_ROLE, snippet)
                item.setToolTip(snippet_text(snippet))
                item.setData(Qt.ItemDataRole.AccessibleDescriptionRole, snippet_text(snippet))
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if c.id == current:
                self.list.setCurrentItem(item)
        self._filling = False

    def current_id(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def select(self, conv_id: str) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == conv_id:
                self.list.setCurrentRow(i)
                return

    def keyPressEvent(self, event: QKeyEvent) -> None:
        item = self.list.currentItem()
        if item and event.key() == Qt.Key.Key_Delete:
            self.delete(item.data(Qt.ItemDataRole.UserRole))
        elif event.matches(QKeySequence.StandardKey.Undo) and self._trashed:
            self.undo_delete()
        elif item and event.key() == Qt.Key.Key_F2:
            self.list.editItem(item)
        else:
            super().keyPressEvent(event)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.undo_button and event.type() == QEvent.Type.Resize:
            self._fit_undo()
            return False
        editing = self.list.state() == QListWidget.State.EditingState  # Enter ends a rename there
        if event.type() != QEvent.Type.KeyPress or not isinstance(event, QKeyEvent) or editing:
            return False
        key = event.key()
        if watched is self.search and key == Qt.Key.Key_Down and self.list.count():
            self.list.setFocus()
            if self.list.currentRow() < 0:
                self.list.setCurrentRow(0)
            return True
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.list.count() and watched in (self.search, self.list):
            if self.list.currentRow() < 0:
                self.list.setCurrentRow(0)  # opens it
            conv_id = self.current_id()
            if conv_id:
                self.selected.emit(conv_id)  # (the window ignores the chat already open)
                self.chosen.emit(conv_id)
            return True
        return False

    def export(self, conv_id: str, kind: str, path: str | None = None) -> None:
        title = self.store.get(conv_id).title
        if path is None:
            name = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in title).strip() or "chat"
            path, _ = QFileDialog.getSaveFileName(self, "Export conversation", f"{name}.{kind}")
            if not path:
                return
        text = self.store.export_markdown(conv_id) if kind == "md" else self.store.export_json(conv_id)
        write_text_atomic(Path(path), text)

    def import_file(self, path: str | None = None) -> str | None:
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "Import conversation", "", "JSON (*.json)")
            if not path:
                return None
        try:
            conv = self.store.import_json(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, StoreError) as exc:
            QMessageBox.warning(self, "Import failed", str(exc))
            return None
        self.refresh(current=conv.id)
        self.selected.emit(conv.id)
        return conv.id

    def delete(self, conv_id: str) -> None:
        title = self.store.get(conv_id).title
        self.store.trash(conv_id)
        self._trashed, self._trashed_title = conv_id, title
        self.undo_button.setToolTip(f"Undo delete of “{title}” (Ctrl+Z)")
        self.undo_button.setVisible(True)
        self._fit_undo()
        self.deleted.emit(conv_id)
        self.refresh()

    def _fit_undo(self) -> None:
        """The Undo button's label at its width: the deleted chat's title shortened with "…" (whole
        in the tooltip), or "Undo delete" where even a short one does not fit; "(Ctrl+Z)" always shows."""
        b = self.undo_button
        fm = b.fontMetrics()
        b.setText("Undo delete (Ctrl+Z)")
        padding = b.sizeHint().width() - fm.horizontalAdvance(b.text())  # the style's, around the text
        room = b.width() - padding - fm.horizontalAdvance("Restore “” (Ctrl+Z)") - 2
        if room >= fm.horizontalAdvance("Xxxx…"):  # "Restore": "Undo delete of" left a sidebar's width no room
            b.setText(f"Restore “{fm.elidedText(self._trashed_title, Qt.TextElideMode.ElideRight, room)}” (Ctrl+Z)")

    def undo_delete(self) -> str | None:
        conv_id, self._trashed = self._trashed, None
        self.undo_button.setVisible(False)
        if conv_id is None:
            return None
        self.store.restore(conv_id)
        self.refresh(current=conv_id)
        self.selected.emit(conv_id)
        return conv_id

    def _on_current(self, item: QListWidgetItem | None, _prev: QListWidgetItem | None) -> None:
        if item is not None and not self._filling:
            self.selected.emit(item.data(Qt.ItemDataRole.UserRole))

    def _on_renamed(self, item: QListWidgetItem) -> None:
        if not self._filling:
            self.store.rename(item.data(Qt.ItemDataRole.UserRole), item.text())

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        menu = QMenu(self)
        conv_id = item.data(Qt.ItemDataRole.UserRole)
        menu.addAction("Rename", lambda: self.list.editItem(item))
        menu.addAction("Export as Markdown…", lambda: self.export(conv_id, "md"))
        menu.addAction("Export as JSON…", lambda: self.export(conv_id, "json"))
        menu.addAction("Delete", lambda: self.delete(conv_id))
        menu.exec(self.list.mapToGlobal(pos))
