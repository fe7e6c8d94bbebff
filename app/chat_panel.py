"""The chat pane: the conversation as message cards above the composer. It turns what the user does
into the Qt-free ChatSession's actions (engine/chats/session.py, which `specee chat` drives too),
sends what the session asks for through `send`, and redraws as the session changes."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QFileDialog, QStackedWidget, QVBoxLayout, QWidget

from app.attachment_bar import AttachmentBar
from app.chat_view import ChatView
from app.composer import Composer
from app.generation_dialog import GenerationDialog
from engine import protocol as p
from engine.chats.attachments import FILE_FILTER, AttachmentError, read_attachment
from engine.chats.generation import SAMPLING_PRESETS, Generation
from engine.chats.long_input import DraftRoom, may_be_cut
from engine.chats.session import ChatSession

EMPTY_HINT = "Ask anything.\n\nEnter sends, Shift+Enter adds a line, Ctrl+N starts a new chat, Ctrl+K searches."


class ChatPanel(QWidget):
    started = Signal(bool)  # a request went out; True: it opened a new conversation
    refused = Signal(str)  # why a chat cannot be left now (an answer streams)
    engine_wanted = Signal()  # Continue or Regenerate was asked while the engine is down: (re)start it, the answer goes on after
    reload_wanted = Signal()  # the chat asks for another context length than the local model has: load it again

    def __init__(self, chat: ChatSession, send: Callable[[p.Message], bool], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatPane")
        self.chat = chat
        self._send = send
        self.loaded = False  # a model answers: requests may go out
        # what was asked while no model answered ("continue" or "regenerate", the chat, the answer): done once one does
        self.pending: tuple = ()
        self.view = ChatView()
        self.composer = Composer()
        self.files = AttachmentBar()  # Attach file…, the next message's files, Generation…
        self.loaded_for = 0  # the chat context length (ChatSession.n_ctx) the local model was loaded for
        self.pages = QStackedWidget()  # the conversation, or the first run's welcome in its place
        self.pages.addWidget(self.view)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        col.addWidget(self.pages, 1)
        col.addWidget(self.files)
        col.addWidget(self.composer)
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(50)  # while streaming: redraw at most 20 times a second
        self._render_timer.timeout.connect(self.show_chat)
        # the message box's token count: asked of the engine once typing pauses (local engines only:
        # n_ctx 0 means a remote engine, which cannot count)
        self.n_ctx = 0
        self.draft = DraftRoom()
        self._count_timer = QTimer(self, singleShot=True, interval=250)
        self._count_timer.timeout.connect(self._ask_count)
        self._send_when_counted = QTimer(self, singleShot=True, interval=5000)  # a send waiting for its count
        self._send_when_counted.timeout.connect(lambda: self.send_message(counted=False))  # ... not forever
        self.composer.input.textChanged.connect(self._count_timer.start)
        c = self.composer
        for signal, slot in (
            (c.send_button.clicked, self.send_message), (c.input.submitted, self.send_message),
            (c.stop_button.clicked, self.stop_answer), (c.regen_button.clicked, self.regenerate),
            (c.edit_button.clicked, self.edit_last), (c.copy_button.clicked, self.copy_answer),
            (c.continue_button.clicked, self.continue_answer), (c.preset.currentTextChanged, self._on_preset),
            (c.cancel_edit_button.clicked, self.cancel_edit), (self.view.action, self._on_card_action),
            (c.system_edit.editingFinished, lambda: self.chat.set_system_prompt(c.system_edit.text())),
            (c.system_edit.textChanged, lambda text: setattr(self.chat, "system_prompt", text.strip())),
            (self.files.attach_requested, self.attach_file), (self.files.removed, self.detach_file),
            (self.files.generation_requested, self.open_generation),
        ):  # fmt: skip
            signal.connect(slot)
        for key, action in (("PgUp", "page_up"), ("PgDown", "page_down"), ("Ctrl+Home", "home"), ("Ctrl+End", "end")):
            shortcut = QShortcut(QKeySequence(key), self, context=Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(lambda action=action: self.view.scroll_by(action))  # also from the message box
        self.setAcceptDrops(True)  # files dropped on the chat are attached
        self.set_busy(False)
        self._show_generation()  # the preset box shows the chat's sampling from the start
        self.show_chat()

    # -- conversations --------------------------------------------------------------------------------

    def new_conversation(self) -> bool:
        editing = self.chat.editing is not None
        if not self.chat.new():
            self.refused.emit("Stop the answer (Esc) or let it finish to start a new chat")
            return False
        self._drop_edit_draft(editing)
        self.composer.system_edit.clear()
        self._show_generation()
        self.set_busy(False)
        self.show_chat()
        self._recount()
        self.composer.input.setFocus()
        return True

    def open_conversation(self, conv_id: str, match: str = "") -> bool:
        editing = self.chat.editing is not None
        if not self.chat.open(conv_id, match):
            self.refused.emit("Stop the answer (Esc) or let it finish to switch chats")
            return False
        self._drop_edit_draft(editing)
        self.composer.system_edit.setText(self.chat.system_prompt)
        self._show_generation()
        self.set_busy(False)
        self.show_chat()
        hit = self._best_match(match)
        if hit is None:
            self.view.scroll_to_end()  # a chat opens on its last message
        else:
            self.view.show_match(hit, match)  # ... or, opened from a search, on the message that matched
        self._recount()
        return True

    def _best_match(self, query: str) -> int | None:
        """The index of the shown message that matches query best (None: none does, or no query)."""
        store, conv_id = self.chat.store, self.chat.conv_id
        if not query.strip() or store is None or conv_id is None:
            return None
        rank = {msg_id: r for r, msg_id in enumerate(store.matches(conv_id, query))}
        shown = [(rank[m["id"]], i) for i, m in enumerate(self.chat.messages) if m.get("id") in rank]
        return min(shown)[1] if shown else None

    def _on_preset(self, name: str) -> None:
        if name in SAMPLING_PRESETS and name != self.chat.generation.preset:
            self.chat.set_generation(self.chat.generation.with_preset(name))

    # -- the chat's generation controls and files -----------------------------------------------------

    def open_generation(self) -> GenerationDialog:
        dialog = GenerationDialog(self.chat.generation, self.chat.system_prompt, parent=self)

        def apply(gen: Generation, system: str) -> None:
            try:
                self.chat.set_generation(gen)  # the protocol's limits, in words; nothing changes when refused
            except p.SettingsError as exc:
                dialog.show_error(str(exc))
                return
            self.composer.system_edit.setText(system.strip())
            self.chat.set_system_prompt(system)
            dialog.accept()
            self._show_generation()

        dialog.applied.connect(apply)
        dialog.show()
        return dialog

    def _show_generation(self) -> None:
        """The composer's preset shows the chat's (Custom when its own values are none), the model has its context."""
        box, name = self.composer.preset, self.chat.generation.preset
        box.blockSignals(True)
        if box.findText(name) < 0:
            box.addItem(name)
        box.setCurrentText(name)
        box.blockSignals(False)
        self._check_context()
        self._count()

    def load_context(self) -> int:
        """The context length a local load asks for now: this chat's own (0: the app's), remembered
        so that a chat asking for another one reloads the model."""
        self.loaded_for = self.chat.n_ctx
        return self.loaded_for

    def _check_context(self) -> None:
        if self.loaded and self.chat.engine_mode != p.Mode.REMOTE and self.chat.n_ctx != self.loaded_for:
            self.reload_wanted.emit()

    def attach_file(self, path: str = "") -> None:
        """A file for the next message (a dialog picks it when none is given): read here, counted by
        the engine; what cannot be read or does not fit says why, and the chat and the draft stay."""
        if not path:
            path, _ = QFileDialog.getOpenFileName(self, "Attach a file", "", f"{FILE_FILTER};;All files (*)")
            if not path:
                return
        try:
            self.chat.attach(read_attachment(path))
        except AttachmentError as exc:
            self.files.show_files(self.chat.attachments, str(exc), error=True)
            return
        self._count()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.attach_file(url.toLocalFile())
        event.acceptProposedAction()

    def detach_file(self, index: int) -> None:
        self.chat.detach(index)
        self._count()

    def _count(self) -> None:
        """Ask the engine whether the files fit (its TokenCount comes back through apply)."""
        ask = self.chat.count_request(self.composer.input.toPlainText()) if self.loaded else None
        if ask is not None and not self._send(ask):
            self.chat.count_id = ""
        self._show_files()

    def _show_files(self) -> None:
        problem, c = self.chat.attachment_problem, self.chat.count
        fits = f"Fits: {c.n_prompt:,} of the {c.n_budget:,} tokens this message may take" if c and c.n_ctx and not problem else ""
        self.files.show_files(self.chat.attachments, problem or (fits if self.chat.attachments else ""), bool(problem))
        self.set_busy(self.chat.streaming)  # Send waits for files that fit

    # -- the user's actions ---------------------------------------------------------------------------

    def send_message(self, counted: bool = True) -> None:
        """Send the message box; one that will not fit the context is counted first and warned about
        once (the next Send sends it). counted=False: its count never came, send it anyway."""
        if not self.loaded or self.chat.streaming:
            return
        text = self.composer.input.toPlainText()
        if counted and self.n_ctx and may_be_cut(text.strip(), self.n_ctx, self.chat.sampling.max_tokens):
            if self.draft.current(text.strip()) is None:  # pasted just now: count, then decide
                self._ask_count()
                self._send_when_counted.start()
                return
            warning = self.draft.must_confirm(text.strip())
            if warning:
                self.composer.show_count(warning, True)
                return
        self._send_when_counted.stop()
        new_chat = self.chat.conv_id is None
        if self._request(self.chat.send(text)):
            self.composer.input.clear()
            self._show_files()
            self.started.emit(new_chat)

    def _ask_count(self) -> None:
        text = self.composer.input.toPlainText().strip()
        if not text or not self.loaded or not self.n_ctx:
            self.draft.clear()
            self.composer.show_count("", False)
            return
        self._send(self.draft.ask(self.chat.history, text, self.chat.sampling.max_tokens))

    def _recount(self) -> None:
        """The chat changed (another chat, a new answer): the room left did too."""
        self.draft.clear()
        self._count_timer.start()

    def _on_count(self, msg: p.TokenCount) -> None:
        if not self.draft.on_count(msg):
            return
        self.composer.show_count(*self.draft.summary())
        if self._send_when_counted.isActive():
            self._send_when_counted.stop()
            self.send_message()

    def _request(self, gen: p.Generate | None) -> bool:
        """Send what the session asks for; the view follows."""
        if gen is None:
            return False
        if not self._send(gen):
            self.chat.abandon(gen)
            self.set_busy(False)
            self.show_chat()
            return False
        self.set_busy(True)
        self.show_chat()
        self.view.scroll_to_end()  # the question just asked, and its answer as it streams
        return True

    def continue_answer(self) -> None:
        """Generate more of the last answer (cut at the length limit, stopped or interrupted), in
        place. With no engine answering (it crashed), it is started and the answer goes on then."""
        if not self.chat.can_continue:
            return
        if not self.loaded:
            self.pending = ("continue", *self._last_answer())
            self.engine_wanted.emit()
            return
        self.pending = ()
        if self._request(self.chat.continue_answer()):
            self.started.emit(False)

    def engine_ready(self) -> None:
        """A model answers now: a Continue or Regenerate asked while none did goes on (if that answer is still shown)."""
        pending, self.pending = self.pending, ()
        if pending and pending[1:] == self._last_answer():
            if pending[0] == "continue":
                self.continue_answer()
            else:
                self.regenerate()
        self._check_context()  # the chat shown changed while the model loaded: load it with this one's
        self._count()  # the files are counted again against this model's context

    def _last_answer(self) -> tuple:
        return (self.chat.conv_id, self.chat.messages[-1].get("id")) if self.chat.messages else ()

    def regenerate(self) -> None:
        """A new version of the last answer. With no engine answering (it crashed), it is started
        and the answer is written again then."""
        if not self.chat.can_regenerate:
            return
        if not self.loaded:
            self.pending = ("regenerate", *self._last_answer())
            self.engine_wanted.emit()
            return
        self.pending = ()
        if self._request(self.chat.regenerate()):
            self.started.emit(False)

    def stop_answer(self) -> None:
        """Esc: stop the answer that streams; with none, leave an edit (nothing was changed)."""
        cancel = self.chat.cancel()
        if cancel:
            self._send(cancel)
        elif self.chat.editing is not None:
            self.cancel_edit()

    def edit_last(self) -> None:
        self.edit(None)

    def edit(self, index: int | None) -> None:
        """Put a question (None: the last) into the message box to edit; nothing changes until the
        edit is sent, which branches the chat there and keeps the current version."""
        text = self.chat.begin_edit(index)
        if text is None:
            return
        self.composer.input.setPlainText(text)
        self._count()  # its files go with the edit
        self.set_busy(False)
        self.composer.input.setFocus()

    def cancel_edit(self) -> None:
        self._drop_edit_draft(self.chat.editing is not None)
        self.chat.cancel_edit()
        self._count()
        self.set_busy(False)

    def _drop_edit_draft(self, editing: bool) -> None:
        """An edit's text stays with its chat: it does not follow into another one."""
        if editing:
            self.composer.input.clear()

    def copy_answer(self) -> None:
        answers = [m["content"] for m in self.chat.messages if m["role"] == "assistant"]
        if answers:
            QApplication.clipboard().setText(answers[-1])

    def _on_card_action(self, kind: str, index: int, step: int) -> None:
        if not 0 <= index < len(self.chat.messages):
            return
        if kind == "copy":
            QApplication.clipboard().setText(self.chat.messages[index]["content"])
        elif kind == "edit":
            self.edit(index)
        elif kind == "page":
            editing = self.chat.editing is not None
            if self.chat.show_version(index, step):
                self._drop_edit_draft(editing)
                self.set_busy(False)
                self.show_chat()

    # -- what the engine says -------------------------------------------------------------------------

    def apply(self, msg: p.Message) -> str:
        """One event into the session, the view following; returns what changed (ChatSession.on_event)."""
        if isinstance(msg, p.TokenCount):  # the message box's live count, or its files' fit (the session's)
            self._on_count(msg)
            if self.chat.on_event(msg) == "count":
                self._show_files()
            return ""
        changed = self.chat.on_event(msg)
        if isinstance(msg, p.Loaded) and changed == "loaded":
            self.n_ctx = msg.n_ctx  # 0 from a remote engine: no count
            self._recount()
        if changed in ("token", "progress") and not self._render_timer.isActive():
            self._render_timer.start()
        elif changed == "notice":
            self.show_chat()
        elif changed == "done":
            self.set_busy(False)
            self.show_chat()
            self._recount()  # the chat grew: less room for what is being written
        return changed

    def fail(self, kind: str, message: str) -> None:
        """An error: the session keeps what streamed and gives an unanswered question back to the box."""
        self.chat.fail(kind, message)
        if self.chat.restored_question:
            self.composer.input.setPlainText(self.chat.restored_question)  # nothing typed is lost
            self.chat.restored_question = ""
            self._show_files()  # nor any file sent with it
        self.pending = ()
        self.set_busy(False)
        self.show_chat()

    def show_chat(self) -> None:
        notices = [n for n in self.chat.notices if n != "[stopped]"]  # the answer's footer says it, and stays
        self.view.show_conversation(self.chat.messages, notices, EMPTY_HINT, live=self.chat.streaming)

    def set_busy(self, busy: bool) -> None:
        messages = self.chat.messages
        has_answer = bool(messages) and messages[-1]["role"] == "assistant"
        has_question = any(m["role"] == "user" for m in messages)
        editing = next((m["content"] for m in messages if m.get("id") == self.chat.editing), "") if self.chat.editing else ""
        self.composer.set_state(busy, self.loaded, has_answer, has_question, self.chat.can_continue, editing)
        if self.chat.attachment_problem:
            self.composer.send_button.setEnabled(False)
        if self.view.idle == busy:  # the cards' Edit and version pager follow
            self.view.idle = not busy
            self.show_chat()
