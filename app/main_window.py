"""The main window: a menu bar over it all (app/menu_bar.py, every shortcut in app/shortcuts.py);
conversations on the left; on the right the header (engine switcher with its acceleration state, Models,
Settings, About), the chat as message cards (or, on first run, a welcome pane while the default model is prepared) and the
composer; the engine's state, context use and the speed meter in the status bar. It draws and sends intent: which engine
answers (the local worker or a remote endpoint) is the engine choice's (engine/remote/engine_choice.py, behind WorkerBridge)
and a chat's state is ChatSession's (engine/chats/session.py), both Qt-free and shared with `specee chat`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtGui import QCloseEvent, QShowEvent
from PySide6.QtWidgets import QApplication, QSplitter, QVBoxLayout, QWidget

from app import theme
from app.chat_panel import ChatPanel
from app.composer import button
from app.header import HeaderBar
from app.model_resolver import ModelResolver
from app.my_models import scan_in_background
from app.serve_switch import ServeSwitch
from app.shortcuts_help import ShortcutsHelp
from app.sidebar import ConversationSidebar
from app.status_bar import StatusBar
from app.train_runner import TrainRunner
from app.welcome import WelcomePane
from app.window_drafts import WindowDrafts
from app.window_places import WindowPlaces
from app.worker_bridge import WorkerBridge
from engine import protocol as p
from engine.chats.session import ChatSession
from engine.chats.store import ConversationStore
from engine.models.default_model import default_model_path, installed_default_model
from engine.remote import engine_choice as ec
from engine.remote.client import display_model
from engine.settings import load_settings


class MainWindow(WindowPlaces, WindowDrafts):
    DEFAULT_SIZE = (1040, 700)  # a first start's size: the status bar's meter must fit in it

    def __init__(
        self, model_path: str | Path | None = None, sampling: p.Sampling | None = None, store: ConversationStore | None = None
    ) -> None:
        super().__init__()
        self.setWindowTitle("SpecEE Chat")
        self._shown_once = False
        self.native_info: dict | None = None  # Ready.native of the running worker
        self.store = store or ConversationStore()
        self.chat = ChatSession(self.store, sampling, settings={"preset": "Balanced"})  # type: ignore[arg-type]  # None: ChatSession's default (no length cap)
        self.settings = load_settings()
        self.resize(*(self.settings.window or self.DEFAULT_SIZE))  # the size it had when last closed
        self.n_ctx = 0
        self.loaded: p.Loaded | None = None  # what the engine in use loaded, as it said it
        self.decided: p.AutoDecided | None = None  # what `auto` chose after measuring
        self.remote_tok_s = 0.0  # the remote engine's speed as measured here (the last answer's)
        self.trainer: TrainRunner | None = None
        # the engine used last is picked again once the local model has loaded (settings.engine)
        self.bridge = WorkerBridge(self._load_intent, self.settings.engine, str(model_path) if model_path else None, self)
        self.choice = self.bridge.choice

        self.sidebar = ConversationSidebar(self.store)
        self.panel = ChatPanel(self.chat, self.bridge.send)
        self.view, self.composer, self.welcome = self.panel.view, self.panel.composer, WelcomePane()
        c = self.composer
        self.input, self.system_edit, self.preset = c.input, c.system_edit, c.preset
        self.send_button, self.stop_button, self.continue_button = c.send_button, c.stop_button, c.continue_button
        self.regen_button, self.edit_button, self.copy_button = c.regen_button, c.edit_button, c.copy_button
        self.header = h = HeaderBar(self.choice)  # every installed model and each endpoint's, one click away
        self.model_switch, self.accel_badge, self.train_button = h.model_switch, h.accel_badge, h.train_button
        self.repair_button, self.restart_button, self.local_button = h.repair_button, h.restart_button, h.local_button
        self.serve_switch = ServeSwitch(lambda: (self.model_path, self.settings.mode))
        self.header.add_action(self.serve_switch)
        places = ("My models…", "Download models…", "Settings…", "About")
        self.my_models_button, self.models_button, self.settings_button, self.about_button = (button(t) for t in places)
        for b in (self.my_models_button, self.models_button, self.settings_button, self.about_button):
            self.sidebar.add_place(b)
        self.pages = self.panel.pages  # a first run's welcome takes the conversation's place, above the message box
        self.pages.addWidget(self.welcome)
        right = QWidget()
        right_col = QVBoxLayout(right)
        right_col.setContentsMargins(0, 0, 0, 0)
        right_col.setSpacing(0)
        right_col.addWidget(self.header)
        right_col.addWidget(self.panel, 1)
        splitter = QSplitter()
        splitter.setHandleWidth(1)
        splitter.addWidget(self.sidebar)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([250, 900])
        self.setCentralWidget(splitter)
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self.state_label, self.context_label, self.meter = self.status.state_label, self.status.context_label, self.status.meter
        self.speed_label = self.meter.label

        self.bridge.event.connect(self.on_event)
        self.bridge.changed.connect(self._on_choice)
        for signal, slot in (
            (self.repair_button.clicked, self.repair_default_model), (self.restart_button.clicked, self.start_engine),
            (self.local_button.clicked, lambda: self.model_path and self.switch_model(self.model_path)),
            (self.panel.reload_wanted, lambda: self.model_path and self.switch_model(self.model_path)),
            (self.models_button.clicked, self.open_model_manager), (self.settings_button.clicked, self.open_settings),
            (self.my_models_button.clicked, self.open_my_models), (self.model_switch.manage, self.open_my_models),
            (self.about_button.clicked, self._about), (self.train_button.clicked, self.train_acceleration),
            (self.sidebar.selected, self.open_conversation), (self.sidebar.new_requested, self.new_conversation),
            (self.model_switch.add_remote, self.open_endpoint_dialog), (self.serve_switch.failed, self._on_serve_failed),
            (self.panel.started, self._on_started), (self.panel.refused, lambda why: self.statusBar().showMessage(why, 4000)),
            (self.panel.engine_wanted, self._continue_needs_engine), (c.cancel_edit_button.clicked, self.draft_back),
        ):  # fmt: skip
            signal.connect(slot)
        self.sidebar.deleted.connect(lambda cid: cid == self.conv_id and self.new_conversation())
        self.sidebar.chosen.connect(lambda: self.input.setFocus())  # Enter on a chat: ready for the next question
        # the window's places and its shortcuts (Ctrl+Z: the Undo button's promise, from anywhere), from one registry
        self.shortcuts_help: ShortcutsHelp | None = None
        self.setMenuBar(self._make_menu_bar())
        self.sidebar.refresh()
        self._init_drafts()
        self.reopen_last_chat()  # where the last session left off: its chat and the unsent message
        self.folder_scan = scan_in_background(self, lambda found: found.added and self.refresh_models())  # files copied in
        self.set_theme(theme.current().name)
        # the first keys typed after launch land in the message box (not on "New chat", where Space clicked it)
        self.input.setFocus()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            self.input.setFocus()

    def set_theme(self, name: str) -> None:
        """Light, dark or system (the OS's scheme): the palette (application-wide), this window's
        stylesheet, code colours."""
        name = theme.resolve(name)
        app = QApplication.instance()
        if isinstance(app, QApplication) and app.property("specee_theme") != name:
            theme.apply_theme(app, name)
        self.colors = theme.DARK if name == "dark" else theme.LIGHT
        self.setStyleSheet(theme.stylesheet(self.colors))
        self.view.set_dark(name == "dark")

    # -- which engine answers: the engine choice decides, the window follows ---------------------------

    # (endpoint, model id) while a remote engine answers (the local model is WindowParts.model_path)
    remote_target = property(lambda self: self.choice.remote_target)

    def _load_intent(self, path: str) -> p.Load:
        s = self.settings  # layout "auto": the worker plans where the layers go and says why in Loaded.plan
        placement = p.Placement(n_ctx=self.panel.load_context() or s.n_ctx, n_threads=s.n_threads)
        return p.Load(path, placement, mode=p.Mode(s.mode), kv_disk_budget=s.kv_disk_gb * 1024**3)  # a mode AppSettings checked

    def start_engine(self) -> None:
        if self.restart_button.hasFocus():  # the message box takes it: Qt gave it to the next
            self.input.setFocus()  # button in the header (Serve API, where Space would start the server)
        self.restart_button.setVisible(False)
        self.model_loaded = False
        self.panel.set_busy(False)
        self.state_label.setText("Starting the engine…")
        self.choice.start()
        # no model named: the installed default model, loaded at once (no welcome on later starts)
        path = self.model_path or installed_default_model()
        if path:
            self.choice.load(str(path))
            return
        # a real first run (the default model is not installed yet): nothing to decide, only progress to show
        self.pages.setCurrentWidget(self.welcome)
        resolver = ModelResolver(self)
        resolver.progress.connect(self.state_label.setText)
        resolver.progress.connect(self.welcome.set_step)
        resolver.resolved.connect(lambda path: self.welcome.set_step("Loading the model"))
        resolver.resolved.connect(self.choice.load)
        resolver.failed.connect(lambda msg: self._show_error(p.ErrorKind.MODEL_FILE, msg))
        resolver.run()

    def refresh_models(self) -> None:
        self.model_switch.refresh()

    def switch_model(self, path: str) -> None:
        """Chat with this local model (back at once from a remote engine when the worker kept it)."""
        self.choice.use_local(path)

    def list_remote_models(self, names: list[str] | None = None) -> None:
        self.choice.list_remote_models(names)

    def remove_endpoint(self, name: str) -> None:
        self.choice.remove_endpoint(name)  # its API key leaves the keyring too

    def _on_choice(self, ev: ec.ChoiceEvent) -> None:
        if isinstance(ev, ec.Leaving):
            self.stop_answer()  # its Cancel still reaches the engine that streams it
        elif isinstance(ev, ec.Switched | ec.Loading):
            self.model_loaded, self.remote_tok_s = False, 0.0
            self.panel.set_busy(False)
            self.refresh_models()
            self.loaded = self.decided = None  # nothing said of the engine going holds for the next
            self.header.show_acceleration(None, None)
            self.status.clear_readouts()
            if isinstance(ev, ec.Loading):
                self.state_label.setText(f"Loading {Path(ev.path).name}…")
                self.serve_switch.restart()  # if serving: the API serves the model the window uses
                return
            self.local_button.setVisible(False)
            name, model = ev.remote or ("", "")
            self.serve_switch.set_blocked(
                f"Serve API serves a local model; the chat now uses {name} (remote). Switch to a local model to serve it."
                if ev.remote else ""
            )  # fmt: skip
            if ev.remote:
                self.state_label.setText(f"Connecting to {name} / {display_model(model)}…")
        elif isinstance(ev, ec.ListChanged):
            self.refresh_models()
        elif isinstance(ev, ec.RestoreSkipped):
            self.status.say(f"{ev.short}: chatting with the local model.", ev.detail or ev.short, error=True)
        elif isinstance(ev, ec.Remember) and self.settings.engine != ev.engine:
            self.settings = replace(self.settings, engine=ev.engine)
            self._save_settings()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.request_id and self.chat.answer_msg_id:
            self.store.update_message(self.chat.answer_msg_id, self.answer, complete=False)
        self.save_drafts()
        self.bridge.shutdown()
        self.serve_switch.shutdown(wait=True)
        if self.settings.window != (size := [self.width(), self.height()]) and not self.isMaximized():
            self.settings = replace(self.settings, window=size)
            self._save_settings()
        super().closeEvent(event)

    # -- conversations: their state is the Qt-free ChatSession's, the chat pane draws it ---------------

    # (conv_id and notices: WindowParts')
    request_id = property(lambda self: self.chat.request_id)
    answer = property(lambda self: self.chat.answer)
    history = property(lambda self: self.chat.history, doc="What the model sees: the system prompt, then the chat.")
    messages = property(lambda self: self.chat.messages, lambda self, value: setattr(self.chat, "messages", value))
    sampling = property(lambda self: self.chat.sampling, lambda self, value: self.chat.use_sampling(value))
    model_loaded = property(lambda self: self.panel.loaded, lambda self, value: setattr(self.panel, "loaded", value))

    def new_conversation(self) -> None:
        self._leave_chat()
        changed = self.panel.new_conversation()
        self._entered_chat(changed)  # the new chat's own draft
        if changed:
            self.context_label.setText("")  # the previous chat's count is not this one's
            self.sidebar.list.clearSelection()
            self.sidebar.list.setCurrentItem(None)  # type: ignore[call-overload]  # Qt takes None: no current item

    def open_conversation(self, conv_id: str) -> None:
        if conv_id == self.conv_id:
            return
        self._leave_chat()
        changed = self.panel.open_conversation(conv_id, self.sidebar.search.text())  # a search hit's branch shows
        self._entered_chat(changed)  # that chat's own draft
        if changed:
            self.context_label.setText("")
        else:  # keep the streaming chat selected: another one highlighted would be a lie
            self.sidebar.select(self.conv_id or "")

    def _on_started(self, new_chat: bool) -> None:
        self.meter.reset()
        self._draft_sent(new_chat)
        if new_chat:
            self.sidebar.refresh(current=self.conv_id)

    def send_message(self) -> None:
        self.panel.send_message()

    def stop_answer(self) -> None:
        self.panel.stop_answer()  # with no answer streaming: leaves an edit
        self.draft_back()

    # -- what the engine in use says ------------------------------------------------------------------

    def on_event(self, msg: p.Message) -> None:
        if isinstance(msg, p.Ready):
            self.native_info = msg.native  # the worker's llama.cpp build, for About
        elif isinstance(msg, p.AutoDecided):  # auto finished measuring in the background (or waits)
            self.decided = msg
            self.header.show_acceleration(self.loaded, self.decided, self.remote_tok_s)
            self.status.mode_decided(msg)
        elif isinstance(msg, p.Error):
            self._show_error(msg.kind, msg.message)
        elif isinstance(msg, p.Unloaded):  # My models' Unload: the memory is free, nothing answers
            self.model_loaded, self.loaded, self.decided = False, None, None
            self.header.show_acceleration(None, None)
            self.panel.set_busy(False)
            self.status.set_status("No model loaded: pick one in the switcher or in My models", "")
        else:
            # the chat's own events: its session matches them (a model kept after a refused load is no news to it)
            changed = "loaded" if isinstance(msg, p.Loaded) and msg.kept else self.panel.apply(msg)
            if isinstance(msg, p.Loaded) and changed == "loaded":
                self._on_loaded(msg)
            elif isinstance(msg, p.Stats) and changed == "stats":
                self.meter.update_stats(msg)
                if msg.mode == "remote" and msg.decode_tok_s > 0:
                    self.remote_tok_s = msg.decode_tok_s
                    self.header.show_acceleration(self.loaded, self.decided, self.remote_tok_s)
                if self.n_ctx:
                    self.context_label.setText(f"context {msg.n_ctx_used}/{self.n_ctx}")
            elif changed == "done":
                self.status.show_status()  # an earlier error is over once an answer completes
                self.sidebar.refresh()

    def _on_loaded(self, msg: p.Loaded) -> None:
        self.model_loaded = True
        self.loaded, self.decided = msg, None
        self.header.show_acceleration(self.loaded, self.decided, self.remote_tok_s)
        self.model_switch.select_current()  # a refused load's model is not the one running
        self.pages.setCurrentWidget(self.view)  # first run over: straight into the chat
        if msg.n_ctx != self.n_ctx:  # the count was of another context (a remote engine's is unknown)
            self.context_label.setText("")
        self.n_ctx = msg.n_ctx
        self.status.model_loaded(msg)
        self.train_button.setVisible(msg.trainable)
        self.panel.set_busy(False)
        self._render()
        self.panel.engine_ready()  # a Continue asked while the engine was down goes on now

    def _continue_needs_engine(self) -> None:
        """Continue or Regenerate after the engine stopped: restart it (the answer goes on once the model is back)."""
        if self.restart_button.isVisible():
            self.start_engine()
            self.status.say("Restarting the engine for the answer…")
        else:
            self.status.say("The answer goes on once the model has loaded…")

    def _on_serve_failed(self, why: str) -> None:
        # the status bar, not the chat: a server that fails to start must not interrupt an answer
        self.status.say(why.splitlines()[0], why)

    def _show_error(self, kind: str, message: str) -> None:
        self.status.say(f"Error: {message.splitlines()[0]}", error=True)
        if kind == "worker_died":
            self.model_loaded = False
            self.restart_button.setVisible(True)
        if self.remote_target and self.model_path:
            # whatever the server's trouble, the local model is one click away
            self.local_button.setToolTip(f"Chat with {Path(self.model_path).name} on this computer again")
            self.local_button.setVisible(True)
        default = self.model_path is None or Path(self.model_path) == default_model_path()
        if kind in (p.ErrorKind.MODEL_FILE, p.ErrorKind.LOAD_FAILED) and default:
            self.repair_button.setVisible(True)  # "download it again" with a button that does it
        self.pages.setCurrentWidget(self.view)  # a first run that failed: its error card, not "Getting ready…"
        self.panel.fail(kind, message)

    def _render(self) -> None:
        self.panel.show_chat()

    def transcript(self) -> str:
        return self.view.toPlainText()
