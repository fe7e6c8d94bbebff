"""The main window's memory of where the user left off: each chat keeps its own unsent message (its
draft) as the user switches chats, and the app reopens on the chat that was open, with its draft.
A part of MainWindow (app/main_window.py) kept apart like WindowPlaces; the drafts themselves are
the Qt-free engine/chats/drafts.py's, in a file beside the conversation store."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtGui import QTextCursor

from app.window_parts import WindowParts
from engine.chats.drafts import NEW_CHAT, Drafts, drafts_path

SAVE_AFTER_MS = 400  # typing pauses this long before the draft is written (a switch or quit writes at once)


class WindowDrafts(WindowParts):
    """MainWindow's drafts (a mixin: it works on the window's message box, chat and store)."""

    def _init_drafts(self) -> None:
        self.drafts = Drafts.load(drafts_path(self.store.path))
        self.drafts.keep_only(c.id for c in self.store.list())  # chats deleted since are gone with theirs
        self._draft_key = NEW_CHAT  # the chat whose draft the message box holds
        self._switching = False  # the box changes for a switch of chats, not by the user
        self._box_is_edit = False  # it holds a question being edited (Edit), not the draft
        self._draft_timer = QTimer(self, singleShot=True, interval=SAVE_AFTER_MS)
        self._draft_timer.timeout.connect(self.save_drafts)
        self.input.textChanged.connect(self._on_typed)

    def reopen_last_chat(self) -> None:
        """At start: the chat open at the last quit (if it is still there), with its draft."""
        last = self.drafts.current
        if last != NEW_CHAT:
            self.open_conversation(last)
            self.sidebar.select(last)
        self._show_draft()
        if self.drafts.problem:  # a damaged drafts file: said in the chat, where it is seen
            self.notices.append(self.drafts.problem)
            self._render()

    def _on_typed(self) -> None:
        if self._switching:
            return
        if self.chat.editing is not None:  # the box holds a question being edited: the draft waits
            self._box_is_edit = True
            return
        if self._box_is_edit:
            self._box_is_edit = False
            if not self.input.toPlainText():  # the edit was sent or dropped: its draft comes back
                QTimer.singleShot(0, self, self.draft_back)
                return
        if self.drafts.set(self._draft_key, self.input.toPlainText()):
            self._draft_timer.start()

    def _leave_chat(self) -> None:
        """Before the panel changes the chat: the box already is the chat's draft, and the panel
        emptying it on the way out is not the user's doing."""
        self._switching = True

    def _entered_chat(self, changed: bool) -> None:
        """After the panel changed the chat (or refused to): the box shows that chat's draft."""
        self._switching = False
        if changed:
            self._show_draft()

    def _show_draft(self) -> None:
        self._draft_key = self.conv_id or NEW_CHAT
        self.drafts.current = self._draft_key
        self._box_is_edit = False
        text = self.drafts.get(self._draft_key)
        if self.input.toPlainText() != text:
            self._switching = True
            self.input.setPlainText(text)
            self._switching = False
            self.input.moveCursor(QTextCursor.MoveOperation.End)  # typing goes on where it stopped
        self.save_drafts()

    def _draft_sent(self, new_chat: bool) -> None:
        """A question went out (emptying the box dropped its draft): a new chat's draft is its id's now."""
        if new_chat:
            self._draft_key = self.drafts.current = self.conv_id or NEW_CHAT
        self.save_drafts()

    def draft_back(self) -> None:
        """An edit ended (sent, cancelled, or its version paged away): the draft written before it is back in the box."""
        self._box_is_edit = self._box_is_edit and self.chat.editing is not None
        if self.chat.editing is None and not self.input.toPlainText() and self.drafts.get(self._draft_key):
            self._show_draft()

    def save_drafts(self) -> None:
        self._draft_timer.stop()
        try:
            self.drafts.save()
        except OSError as exc:  # a full or read-only disk: the drafts hold for this session
            self.statusBar().showMessage(f"Unsent drafts could not be saved: {exc}", 8000)
