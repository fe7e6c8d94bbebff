"""The main window: conversations on the left; on the right a header (model switcher with its
acceleration state, Models, Settings, About), the chat as message cards (or, on first run, a
welcome pane while the default model is prepared), and the composer (system prompt, sampling preset,
message box, Send/Stop and the answer's actions); engine state, context use and the speed meter in
the status bar. All engine work happens in the worker process or, when the user picks one in the
switcher, a remote OpenAI-compatible server (WorkerBridge drives either)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QKeyEvent, QKeySequence, QShortcut, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import theme
from app.chat_view import ChatView
from app.elided_label import ElidedLabel
from app.endpoint_dialog import EndpointDialog, ModelLister, remote_error_text
from app.header import KIND_ROLE, HeaderBar
from app.model_manager import ModelManager
from app.model_status import acceleration_state, installed_weights, remote_state
from app.serve_switch import ServeSwitch
from app.settings_dialog import SettingsDialog
from app.sidebar import ConversationSidebar
from app.speed_meter import SpeedMeter
from app.train_runner import TrainRunner
from app.welcome import WelcomePane
from app.worker_bridge import WorkerBridge
from engine import protocol as p
from engine.about import about_text
from engine.chats.session import ChatSession
from engine.chats.store import ConversationStore
from engine.models.default_model import default_model_path, ensure_default_model
from engine.models.registry import ModelRegistry
from engine.remote.client import display_model
from engine.remote.endpoints import EndpointError, EndpointRegistry, api_key
from engine.remote.openai_api import RemoteError
from engine.settings import LOCAL_ENGINE, engine_remote, load_settings, remote_engine_setting, save_settings


class PromptEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter inserts a newline."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class _ModelResolver(QObject):
    """Finds (first run: installs) the default model off the GUI thread."""

    resolved = Signal(str)
    failed = Signal(str)
    progress = Signal(str)

    def run(self, repair: bool = False) -> None:
        def work() -> None:
            try:
                self.resolved.emit(str(ensure_default_model(self.progress.emit, repair=repair)))
            except Exception as exc:
                self.failed.emit(str(exc))

        threading.Thread(target=work, name="model-resolver", daemon=True).start()


PRESETS = {  # name -> (temperature, top_p)
    "Precise": (0.2, 0.9),
    "Balanced": (0.7, 0.95),
    "Creative": (1.0, 0.98),
}

ORIGINS = {"local": "your file", "hf": "downloaded", "pypi": "downloaded"}  # ModelRecord.source prefixes
# the switcher's short words for why a remote endpoint's models could not be listed (its tooltip says all)
LIST_FAILURES = {"unreachable": "unreachable", "unauthorized": "API key refused", "timeout": "not answering"}
REMOTE_KINDS = ("unreachable", "unauthorized", "timeout", "bad_response")
EMPTY_HINT = "Ask anything.\n\nEnter sends, Shift+Enter adds a line, Ctrl+N starts a new chat, Ctrl+K searches."


class MainWindow(QMainWindow):
    DEFAULT_SIZE = (1040, 700)  # a first start's size: the status bar's meter must fit in it

    def __init__(
        self, model_path: str | Path | None = None, sampling: p.Sampling | None = None, store: ConversationStore | None = None
    ) -> None:
        super().__init__()
        self.setWindowTitle("SpecEE Chat")
        self._shown_once = False
        self._status = ("", "")  # the loaded model's status line and its tooltip
        self.native_info: dict | None = None  # Ready.native of the running worker
        self._error_shown = False
        self.resize(*self.DEFAULT_SIZE)
        self.model_path = str(model_path) if model_path else None
        self.store = store or ConversationStore()
        self.chat = ChatSession(self.store, sampling or p.Sampling(), settings={"preset": "Balanced"})
        self.settings = load_settings()
        self.plan_text = ""
        self.model_loaded = False
        self.n_ctx = 0
        self.loaded: p.Loaded | None = None  # what the worker loaded, as it said it
        self.decided: p.AutoDecided | None = None  # what `auto` chose after measuring
        # remote engines: the saved endpoints, their models as last listed (None: asking now), and
        # the (endpoint, model id) answering the chat, None while the local model does
        self.endpoints = EndpointRegistry()
        self.remote_models: dict[str, list[str] | RemoteError | None] = {}
        self.remote_target: tuple[str, str] | None = None
        self.remote_tok_s = 0.0  # the remote engine's speed as measured here (the last answer's)
        # the remote engine the chat used when the app last closed: picked again once the local
        # model has loaded and its endpoint has listed its models (None: nothing to restore)
        self._restore_remote = engine_remote(self.settings.engine)
        self.lister = ModelLister(self)
        self.lister.listed.connect(self._on_listed)

        self.sidebar = ConversationSidebar(self.store)
        self.sidebar.setObjectName("sidebar")
        self.sidebar.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.sidebar.layout().setContentsMargins(10, 10, 10, 10)
        self.sidebar.new_button.setText("+  New chat")
        self.sidebar.setMinimumWidth(200)
        self.sidebar.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.sidebar.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.view = ChatView()
        self.welcome = WelcomePane()
        self.system_edit = QLineEdit()
        self.system_edit.setPlaceholderText("System prompt for this chat (optional)")
        self.system_edit.setAccessibleName("System prompt")
        self.preset = QComboBox()
        self.preset.addItems(list(PRESETS))
        self.preset.setCurrentText("Balanced")
        self.preset.setAccessibleName("Sampling preset")
        self.preset.setToolTip("How adventurous the answers are")
        self.header = HeaderBar()
        # every installed model (default, downloaded, added with `specee models add`), one click away
        self.model_switch = self.header.model_switch
        self.accel_badge = self.header.accel_badge
        self.repair_button = self._button("Repair model", "danger")
        self.repair_button.setToolTip("Fetch and verify the default model again")
        self.repair_button.setVisible(False)
        self.input = PromptEdit()
        self.input.setAccessibleName("Message")
        self.input.setPlaceholderText("Message the model (Enter sends, Shift+Enter for a new line)")
        self.input.setFixedHeight(72)
        self.send_button = self._button("Send", "primary")
        self.stop_button = self._button("Stop")
        self.stop_button.setEnabled(False)
        self.regen_button = self._button("Regenerate")
        self.edit_button = self._button("Edit last")
        self.copy_button = self._button("Copy answer")
        self.continue_button = self._button("Continue", "primary")
        self.continue_button.setToolTip("The answer stopped at the length limit: generate more of it")
        self.continue_button.setVisible(False)
        self.models_button = self._button("Models…")
        self.settings_button = self._button("Settings…")
        self.about_button = self._button("About")
        self.train_button = self._button("Train acceleration")
        self.train_button.setVisible(False)
        self.trainer: TrainRunner | None = None
        self.restart_button = self._button("Restart engine", "danger")
        self.restart_button.setVisible(False)
        self.local_button = self._button("Use local model")
        self.local_button.setVisible(False)  # after a remote engine's error: one click back
        self.serve_switch = ServeSwitch(lambda: (self.model_path, self.settings.mode))
        self.serve_switch.failed.connect(self._on_serve_failed)
        for b in (self.repair_button, self.restart_button, self.local_button, self.train_button, self.serve_switch):
            self.header.add_action(b)
        # the app's places, under the conversations (the header keeps the model and its actions)
        for b in (self.models_button, self.settings_button, self.about_button):
            self.sidebar.layout().addWidget(b)
        actions = QHBoxLayout()
        actions.setSpacing(6)
        for b in (self.continue_button, self.regen_button, self.edit_button, self.copy_button):
            actions.addWidget(b)
        actions.addStretch()
        actions.addWidget(self.system_edit, 2)
        actions.addWidget(self.preset)
        composer = QFrame()
        composer.setObjectName("composer")
        row = QHBoxLayout(composer)
        row.setContentsMargins(8, 6, 8, 6)
        row.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch()
        row.addLayout(buttons)
        bottom = QVBoxLayout()
        bottom.setContentsMargins(20, 8, 20, 12)
        bottom.setSpacing(8)
        bottom.addLayout(actions)
        bottom.addWidget(composer)
        chat_page = QWidget()
        chat_page.setObjectName("chatPane")
        chat = QVBoxLayout(chat_page)
        chat.setContentsMargins(0, 0, 0, 0)
        chat.setSpacing(0)
        chat.addWidget(self.view, 1)
        chat.addLayout(bottom)
        self.pages = QStackedWidget()
        self.pages.addWidget(chat_page)
        self.pages.addWidget(self.welcome)
        right = QWidget()
        right_col = QVBoxLayout(right)
        right_col.setContentsMargins(0, 0, 0, 0)
        right_col.setSpacing(0)
        right_col.addWidget(self.header)
        right_col.addWidget(self.pages, 1)
        splitter = QSplitter()
        splitter.setHandleWidth(1)
        splitter.addWidget(self.sidebar)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([250, 900])
        self.setCentralWidget(splitter)

        self.state_label = ElidedLabel("Starting…")  # gives way to the meter when space is short
        self.context_label = QLabel("")
        self.context_label.setAccessibleName("Context usage")
        self.meter = SpeedMeter()
        self.speed_label = self.meter.label
        self.statusBar().addWidget(self.state_label, 1)
        self.statusBar().addPermanentWidget(self.context_label)
        self.statusBar().addPermanentWidget(self.meter)

        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(50)  # while streaming: redraw at most 20 times a second
        self._render_timer.timeout.connect(self._render)

        self.bridge = WorkerBridge(self)
        self.bridge.event.connect(self.on_event)
        self.input.submitted.connect(self.send_message)
        self.send_button.clicked.connect(self.send_message)
        self.stop_button.clicked.connect(self.stop_answer)
        self.regen_button.clicked.connect(self.regenerate)
        self.edit_button.clicked.connect(self.edit_last)
        self.copy_button.clicked.connect(self.copy_answer)
        self.continue_button.clicked.connect(self.continue_answer)
        self.repair_button.clicked.connect(self.repair_default_model)
        self.model_switch.activated.connect(self._on_pick)
        self.model_switch.view().setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.model_switch.view().customContextMenuRequested.connect(self._switcher_menu)
        self.local_button.clicked.connect(self.use_local_model)
        self.restart_button.clicked.connect(self.start_engine)
        self.models_button.clicked.connect(self.open_model_manager)
        self.settings_button.clicked.connect(self.open_settings)
        self.about_button.clicked.connect(
            lambda: QMessageBox.about(
                self,
                "About SpecEE Chat",
                about_text(self.native_info) + "\n\nLocal chat with SpecEE early exit and EAGLE drafting.",
            )
        )
        self.train_button.clicked.connect(self.train_acceleration)
        self.sidebar.selected.connect(self.open_conversation)
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.deleted.connect(lambda cid: cid == self.conv_id and self.new_conversation())
        self.system_edit.editingFinished.connect(self._save_system_prompt)
        self.system_edit.textChanged.connect(lambda text: setattr(self.chat, "system_prompt", text.strip()))
        self.preset.currentTextChanged.connect(self._on_preset)
        for key, slot in (("Ctrl+N", self.new_conversation), ("Ctrl+K", self._focus_search), ("Esc", self.stop_answer)):
            QShortcut(QKeySequence(key), self, activated=slot)
        self.sidebar.refresh()
        self._set_busy(False)
        self._render()
        # Keyboard: Tab leaves the message box (a tab character is rarely what a chat wants), the
        # focused control shows a ring, and the window opens with the message box focused so the
        # first keys typed after launch land there (not on "New chat", where Space clicked it).
        self.input.setTabChangesFocus(True)
        self.set_theme(theme.current().name)
        self.input.setFocus()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            self.input.setFocus()

    def _button(self, text: str, role: str = "") -> QPushButton:
        b = QPushButton(text)
        b.setAccessibleName(text)
        if role:
            b.setObjectName(role)  # "primary" / "danger": styled by the theme
        return b

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

    @property
    def history(self) -> list[dict[str, str]]:
        """What the model sees: the system prompt, then the conversation."""
        return self.chat.history

    # -- engine lifecycle ---------------------------------------------------------------------------

    def start_engine(self) -> None:
        self.restart_button.setVisible(False)
        self.model_loaded = False
        self._set_busy(False)
        self.state_label.setText("Starting the engine…")
        self.bridge.start()
        if not self.remote_models:
            self.list_remote_models()
        if self.model_path:
            self._load(self.model_path)
        else:
            # first run (or no model chosen yet): nothing to decide, only progress to show
            self.pages.setCurrentWidget(self.welcome)
            resolver = _ModelResolver(self)
            resolver.progress.connect(self.state_label.setText)
            resolver.progress.connect(self.welcome.set_step)
            resolver.resolved.connect(lambda path: self.welcome.set_step("Loading the model"))
            resolver.resolved.connect(self._load)
            resolver.failed.connect(lambda msg: self._show_error(p.ErrorKind.MODEL_FILE, msg))
            resolver.run()

    def refresh_models(self) -> None:
        """The switcher's list: registered models whose files are there, the loaded one selected."""
        self.model_switch.blockSignals(True)
        self.model_switch.clear()
        paths = []
        default = str(default_model_path())
        for m in ModelRegistry().all():
            if m.exists and m.path not in paths:
                paths.append(m.path)
                size = f"{m.size / 1e9:.2f} GB" if m.size >= 1e9 else f"{m.size / 1e6:.0f} MB"
                weights = installed_weights(m)
                origin = "default" if m.path == default else ORIGINS.get(m.source.split(":", 1)[0], "")
                label = " · ".join(x for x in (m.id, size, weights, origin) if x)
                self.model_switch.add_entry(label, m.path, tooltip=f"{m.path}\nsource: {m.source}\n{weights}")
        if self.model_path and self.model_path not in paths:
            self.model_switch.add_entry(Path(self.model_path).stem, self.model_path, tooltip=self.model_path)
        self._add_remote_entries()
        self._select_current()
        self.model_switch.blockSignals(False)

    def _add_remote_entries(self) -> None:
        """After the local models: each endpoint's models ("gpu-box / qwen2.5-coder"), or one entry
        saying why they could not be listed (picking it asks again), then "Add remote engine…"."""
        switch = self.model_switch
        if switch.count():
            switch.insertSeparator(switch.count())
        for e in self.endpoints.all():
            listed = self.remote_models.get(e.name)
            if listed is None:
                switch.add_entry(f"{e.name} · listing models…", f"{e.name}\n", "remote", f"Asking {e.url('models')}")
            elif isinstance(listed, RemoteError):
                short = LIST_FAILURES.get(str(listed.kind), "cannot be used")
                switch.add_entry(f"{e.name} · {short} (pick to retry)", f"{e.name}\n", "remote", remote_error_text(listed))
            elif not listed:
                tip = f"{e.base_url} lists no models"
                switch.add_entry(f"{e.name} · no models (pick to retry)", f"{e.name}\n", "remote", tip)
            for model in listed if isinstance(listed, list) else []:
                tip = f"{model}\nanswered by {e.name} ({e.base_url}), an OpenAI-compatible server"
                switch.add_entry(f"{e.name} / {display_model(model)}", f"{e.name}\n{model}", "remote", tip)
        switch.add_entry("Add remote engine…", "", "add-remote", "Chat with a model on another machine or a hosted API")

    def _select_current(self) -> None:
        """The entry of the engine answering the chat (the switcher shows nothing else as chosen)."""
        target = "\n".join(self.remote_target) if self.remote_target else self.model_path
        self.model_switch.blockSignals(True)
        self.model_switch.setCurrentIndex(max(self.model_switch.findData(target), 0))
        self.model_switch.blockSignals(False)

    def _on_pick(self, i: int) -> None:
        self._restore_remote = None  # the user chose: the engine used last is not picked over it
        kind, target = self.model_switch.itemData(i, KIND_ROLE), self.model_switch.itemData(i)
        if kind == "remote":
            name, _, model = target.partition("\n")
            if model:
                self.switch_remote(name, model)
            else:
                self._select_current()
                self.list_remote_models([name])
        elif kind == "add-remote":
            self._select_current()
            self.open_endpoint_dialog()
        else:
            self._switch_to(target)

    def _switch_to(self, path: str | None) -> None:
        if path and (path != self.model_path or self.bridge.is_remote):
            self.switch_model(path)

    # -- remote engines --------------------------------------------------------------------------------

    def list_remote_models(self, names: list[str] | None = None) -> None:
        """Ask the endpoints (all, or these) for their models, off the GUI thread."""
        for e in self.endpoints.all():
            if names is None or e.name in names:
                self.remote_models[e.name] = None
                self.lister.list(e.name, e, lambda name=e.name: api_key(name))
        self.refresh_models()

    def _on_listed(self, name: str, result: list[str] | RemoteError) -> None:
        if name in self.remote_models:
            self.remote_models[name] = result
            self.refresh_models()
            self._restore_last_engine()

    def _restore_last_engine(self) -> None:
        """Pick the remote engine used last once the local model is loaded and the endpoint has
        answered; if it is gone or cannot be used, say so in the status bar and stay local."""
        if self._restore_remote is None or not self.model_loaded or self.bridge.is_remote:
            return
        name, model = self._restore_remote
        if name not in {e.name for e in self.endpoints.all()}:
            short, detail = f"{name}, the remote engine used last, is no longer set up", ""
            self._remember_engine(LOCAL_ENGINE)
        else:
            listed = self.remote_models.get(name)
            if listed is None:
                if name not in self.remote_models:
                    self.list_remote_models([name])
                return  # asked: back here when it answers
            if isinstance(listed, RemoteError):  # kept: it may answer again at the next start
                short, detail = f"{name}, the remote engine used last, cannot be used now", remote_error_text(listed)
            elif model not in listed:
                short, detail = f"{name} no longer lists {display_model(model)}, the model used last", ""
            else:
                self._restore_remote = None
                self.switch_remote(name, model)
                return
        self._restore_remote = None
        self.state_label.setText(f"{short}: chatting with the local model.")
        self.state_label.setToolTip(detail or short)
        self._error_shown = True  # auto's decision must not overwrite it

    def _remember_engine(self, engine: str) -> None:
        if self.settings.engine != engine:
            self.settings = replace(self.settings, engine=engine)
            self._save_settings()

    def _save_settings(self) -> None:
        try:
            save_settings(self.settings)
        except OSError as exc:  # a full or read-only disk: the choice holds for this session
            self.statusBar().showMessage(f"Settings could not be saved: {exc}", 8000)

    def switch_remote(self, name: str, model: str) -> None:
        """Chat with this endpoint's model: the same conversation goes on, each answer records which
        engine wrote it; the local worker stays loaded for the way back."""
        if self.request_id:
            self.stop_answer()
        try:
            endpoint = self.endpoints.get(name)
        except EndpointError as exc:  # removed meanwhile (e.g. with `specee endpoints remove`)
            self._show_error(p.ErrorKind.BAD_REQUEST, str(exc))
            self.list_remote_models()
            return
        self.model_loaded = False
        self._set_busy(False)
        self._restore_remote = None
        self._remember_engine(remote_engine_setting(name, model))
        self.remote_target, self.remote_tok_s = (name, model), 0.0
        self.bridge.use_remote(endpoint, api_key(name))
        self.local_button.setVisible(False)
        self.serve_switch.set_blocked(
            f"Serve API serves a local model; the chat now uses {name} (remote). Switch to a local model to serve it."
        )
        self._select_current()
        self.state_label.setText(f"Connecting to {name} / {display_model(model)}…")
        self.bridge.send(p.Load(model_path=model))

    def use_local_model(self) -> None:
        """Back from a remote engine to the local model (instant when the worker still has it loaded)."""
        if self.model_path:
            self.switch_model(self.model_path)

    def _leave_remote(self, replay: bool) -> bool:
        self.remote_target, self.remote_tok_s = None, 0.0
        self._remember_engine(LOCAL_ENGINE)
        self.local_button.setVisible(False)
        self.serve_switch.set_blocked("")
        return self.bridge.use_local(replay)

    def open_endpoint_dialog(self) -> EndpointDialog:
        dialog = EndpointDialog(self.endpoints, self)
        dialog.saved.connect(self._on_endpoint_saved)
        dialog.removed.connect(self._on_endpoint_removed)
        dialog.show()
        return dialog

    def _on_endpoint_saved(self, name: str, models: list[str], why: str) -> None:
        if models:
            self.remote_models[name] = models
            self.refresh_models()
        else:
            self.list_remote_models([name])
        if why:
            self.state_label.setText(f"The API key for {name} is kept for this session only: {why}")
            self._error_shown = True

    def remove_endpoint(self, name: str) -> None:
        """Remove a saved endpoint (its API key leaves the keyring too)."""
        try:
            self.endpoints.remove(name)
        except EndpointError:
            pass  # already gone
        self._on_endpoint_removed(name)

    def _on_endpoint_removed(self, name: str) -> None:
        self.remote_models.pop(name, None)
        if self.remote_target and self.remote_target[0] == name:
            self.use_local_model()
        self.refresh_models()

    def _switcher_menu(self, pos) -> None:  # type: ignore[no-untyped-def]
        view = self.model_switch.view()
        index = view.indexAt(pos)
        if index.data(KIND_ROLE) != "remote":
            return
        name = str(index.data(Qt.ItemDataRole.UserRole)).partition("\n")[0]
        menu = QMenu(view)
        menu.addAction(f"List {name}'s models again", lambda: self.list_remote_models([name]))
        menu.addAction(f"Remove {name} (and forget its API key)", lambda: self.remove_endpoint(name))
        menu.exec(view.mapToGlobal(pos))

    def repair_default_model(self) -> None:
        """The default model's file is damaged: fetch it again (verified), then load it."""
        self.repair_button.setVisible(False)
        resolver = _ModelResolver(self)
        resolver.progress.connect(self.state_label.setText)
        resolver.resolved.connect(self.switch_model)
        resolver.failed.connect(lambda msg: self._show_error("model_file", msg))
        resolver.run(repair=True)

    def _load(self, path: str) -> None:
        if self.bridge.is_remote:
            self._leave_remote(replay=False)
        self.model_path = path
        self.refresh_models()
        self.state_label.setText(f"Loading {Path(path).name}…")
        s = self.settings
        # layout "auto": the worker plans where the layers go and says why in Loaded.plan
        self.bridge.send(p.Load(path, p.Placement(n_ctx=s.n_ctx, n_threads=s.n_threads), mode=s.mode), self.bridge.local)
        self.serve_switch.restart()  # if serving: the API serves the model the window uses

    def open_model_manager(self) -> ModelManager:
        dialog = ModelManager(self)
        dialog.use_model.connect(self.switch_model)
        dialog.finished.connect(lambda _r: self.refresh_models())
        dialog.show()
        return dialog

    def open_settings(self) -> SettingsDialog:
        local = self.bridge.is_remote  # the settings are the local model's
        loaded, decided = (self.bridge.local_loaded, self.bridge.local_decided) if local else (self.loaded, self.decided)
        dialog = SettingsDialog(self.settings, loaded, decided, self)

        def apply() -> None:
            new = dialog.result_settings(self.settings)
            if new == self.settings:
                return
            old, self.settings = self.settings, new
            self._save_settings()
            if new.theme != old.theme:
                self.set_theme(new.theme)
            if replace(new, theme=old.theme) != old:  # the look alone needs no reload
                if self.bridge.is_remote:  # the local model loads with them when the chat goes back to it
                    self.bridge.local_loaded = self.bridge.local_decided = None
                elif self.model_path:
                    self.switch_model(self.model_path)

        dialog.accepted.connect(apply)
        dialog.show()
        return dialog

    def train_acceleration(self) -> None:
        """Models without shipped weights run vanilla; this trains theirs in the background."""
        if self.trainer is not None or not self.model_path:
            return
        self.trainer = TrainRunner(self.model_path, self)
        self.trainer.progress.connect(lambda line: self.state_label.setText(f"Training acceleration: {line}"))

        def done(ok: bool, message: str) -> None:
            self.trainer = None
            self.train_button.setEnabled(True)
            self.notices.append(message)
            self._render()
            if ok and self.model_path:
                self.switch_model(self.model_path)

        self.trainer.finished.connect(done)
        self.train_button.setEnabled(False)
        self.trainer.start()

    def switch_model(self, path: str) -> None:
        self._restore_remote = None
        if self.request_id:
            self.stop_answer()
        self.model_loaded = False
        self._set_busy(False)
        if self.bridge.is_remote and path == self.model_path and self.bridge.local_loaded is not None:
            self._leave_remote(replay=True)  # the worker kept it loaded: back at once
            self.refresh_models()
            return
        self._load(path)

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.request_id and self.chat.answer_msg_id:
            self.store.update_message(self.chat.answer_msg_id, self.answer, complete=False)
        self.bridge.shutdown()
        self.serve_switch.shutdown(wait=True)
        super().closeEvent(event)

    # -- conversations --------------------------------------------------------------------------------

    def _show_status(self) -> None:
        self._error_shown = False
        self.state_label.setText(self._status[0])
        self.state_label.setToolTip(self._status[1])

    # The conversation state lives in the Qt-free ChatSession (engine/chats/session.py), which the
    # CLI drives too; the window turns its changes into widgets.
    @property
    def conv_id(self) -> str | None:
        return self.chat.conv_id

    @property
    def messages(self) -> list[dict]:
        return self.chat.messages

    @messages.setter
    def messages(self, value: list[dict]) -> None:
        self.chat.messages = value

    @property
    def notices(self) -> list[str]:
        return self.chat.notices

    @property
    def request_id(self) -> str:
        return self.chat.request_id

    @property
    def answer(self) -> str:
        return self.chat.answer

    @property
    def sampling(self) -> p.Sampling:
        return self.chat.sampling

    @sampling.setter
    def sampling(self, value: p.Sampling) -> None:
        self.chat.sampling = value

    def new_conversation(self) -> None:
        if not self.chat.new():
            self.statusBar().showMessage("Stop the answer (Esc) or let it finish to start a new chat", 4000)
            return
        self.chat.settings = {"preset": self.preset.currentText()}
        self.context_label.setText("")  # the previous chat's count is not this one's
        self.continue_button.setVisible(False)
        self.system_edit.clear()
        self.sidebar.list.clearSelection()
        self.sidebar.list.setCurrentItem(None)
        self._set_busy(False)
        self._render()
        self.input.setFocus()

    def open_conversation(self, conv_id: str) -> None:
        if conv_id == self.conv_id:
            return
        if not self.chat.open(conv_id):
            # The list would show another chat highlighted while this one streams, and clicking it
            # again later would do nothing: keep the streaming chat selected and say why.
            self.sidebar.select(self.conv_id or "")
            self.statusBar().showMessage("Stop the answer (Esc) or let it finish to switch chats", 4000)
            return
        self.context_label.setText("")
        self.continue_button.setVisible(self.chat.can_continue)
        self.system_edit.setText(self.chat.system_prompt)
        preset = self.chat.settings.get("preset")
        if preset in PRESETS:
            self.preset.setCurrentText(preset)
        self._set_busy(False)
        self._render()

    def _save_system_prompt(self) -> None:
        self.chat.set_system_prompt(self.system_edit.text())

    def _on_preset(self, name: str) -> None:
        temp, top_p = PRESETS[name]
        self.sampling = replace(self.sampling, temperature=temp, top_p=top_p)
        self.chat.set_settings({"preset": name})

    def _focus_search(self) -> None:
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    # -- chat -----------------------------------------------------------------------------------------

    def send_message(self) -> None:
        if not self.model_loaded or self.request_id:
            return
        new_chat = self.conv_id is None
        if self._request(self.chat.send(self.input.toPlainText())):
            self.input.clear()
            if new_chat:
                self.sidebar.refresh(current=self.conv_id)

    def _request(self, gen: p.Generate | None) -> bool:
        """Send what the session asks for; the view follows."""
        if gen is None:
            return False
        if not self.bridge.send(gen):
            self.chat.abandon(gen)
            return False
        self.continue_button.setVisible(False)
        self.meter.reset()
        self._set_busy(True)
        self._render()
        return True

    def continue_answer(self) -> None:
        """Generate more of the last answer (cut at the length limit or interrupted), in place."""
        if self.model_loaded:
            self._request(self.chat.continue_answer())

    def stop_answer(self) -> None:
        cancel = self.chat.cancel()
        if cancel:
            self.bridge.send(cancel)

    def regenerate(self) -> None:
        if self.model_loaded:
            self._request(self.chat.regenerate())

    def edit_last(self) -> None:
        """Put the last question back into the input box; it and what followed are removed."""
        text = self.chat.edit_last()
        if text is None:
            return
        self.input.setPlainText(text)
        self.continue_button.setVisible(False)
        self._set_busy(False)
        self._render()
        self.input.setFocus()

    def copy_answer(self) -> None:
        answers = [m["content"] for m in self.messages if m["role"] == "assistant"]
        if answers:
            QApplication.clipboard().setText(answers[-1])

    def on_event(self, msg: p.Message) -> None:
        if isinstance(msg, p.Ready):
            self.native_info = msg.native  # the worker's llama.cpp build, for About
            return
        if isinstance(msg, p.AutoDecided):  # auto finished measuring in the background
            self.decided = msg
            self._show_acceleration()
            self.meter.vanilla_tok_s = msg.measured_tok_s.get("vanilla", 0.0)
            self._status = (f"{self._status[0].rsplit(' · ', 1)[0]} · {msg.mode}", msg.mode_reason)
            if not self._error_shown:
                self._show_status()
            return
        if isinstance(msg, p.Error):
            self._show_error(msg.kind, msg.message)
            return
        changed = self.chat.on_event(msg)
        if changed == "loaded":
            assert isinstance(msg, p.Loaded)
            self.model_loaded = True
            self.loaded, self.decided = msg, None
            self._show_acceleration()
            self.pages.setCurrentWidget(self.pages.widget(0))  # first run over: straight into the chat
            self.n_ctx = msg.n_ctx
            if not msg.n_ctx:  # a remote engine does not say: the local model's count is not its
                self.context_label.setText("")
            self.plan_text = msg.plan
            self.meter.vanilla_tok_s = msg.measured_tok_s.get("vanilla", 0.0)
            if msg.mode == "remote":
                self._status = (f"{msg.name} · remote · {msg.model_path}", msg.plan)
            else:
                self._status = (
                    f"{msg.name} · {msg.n_layer} layers · ctx {msg.n_ctx} · {msg.mode}",
                    msg.mode_reason or f"acceleration: {msg.mode}",
                )
            self._show_status()
            self.train_button.setVisible(msg.trainable)
            self._set_busy(False)
            self._render()
            self._restore_last_engine()
        elif changed == "token":
            if not self._render_timer.isActive():
                self._render_timer.start()
        elif changed == "stats":
            assert isinstance(msg, p.Stats)
            self.meter.update_stats(msg)
            if msg.mode == "remote" and msg.decode_tok_s > 0:
                self.remote_tok_s = msg.decode_tok_s
                self._show_acceleration()
            if self.n_ctx:
                self.context_label.setText(f"context {msg.n_ctx_used}/{self.n_ctx}")
        elif changed == "notice":
            self._render()
        elif changed == "done":
            self.continue_button.setVisible(self.chat.can_continue)
            self._show_status()  # an earlier error is over once an answer completes
            self._set_busy(False)
            self.sidebar.refresh()
            self._render()

    @staticmethod
    def _is_default_model(path: str | None) -> bool:
        return path is None or Path(path) == default_model_path()

    def _on_serve_failed(self, why: str) -> None:
        # the status bar, not the chat: a server that fails to start must not interrupt an answer
        self.state_label.setText(why.splitlines()[0])
        self.state_label.setToolTip(why)

    def _show_error(self, kind: str, message: str) -> None:
        self.chat.fail(kind, message)
        if self.chat.restored_question:
            self.input.setPlainText(self.chat.restored_question)  # nothing typed is lost
            self.chat.restored_question = ""
        self.continue_button.setVisible(self.chat.can_continue)
        self.state_label.setText(f"Error: {message.splitlines()[0]}")
        self._error_shown = True
        if kind == "worker_died":
            self.model_loaded = False
            self.restart_button.setVisible(True)
        if self.remote_target and self.model_path:
            # whatever the server's trouble, the local model is one click away
            self.local_button.setToolTip(f"Chat with {Path(self.model_path).name} on this computer again")
            self.local_button.setVisible(True)
        if self.remote_target and not self.model_loaded and kind in REMOTE_KINDS:
            self.list_remote_models([self.remote_target[0]])  # the switcher says so too
        if kind in (p.ErrorKind.MODEL_FILE, p.ErrorKind.LOAD_FAILED) and self._is_default_model(self.model_path):
            self.repair_button.setVisible(True)  # "download it again" with a button that does it
        self._set_busy(False)
        self._render()

    # -- helpers --------------------------------------------------------------------------------------

    def _render(self) -> None:
        self.view.show_conversation(self.messages, self.notices, EMPTY_HINT)

    def _show_acceleration(self) -> None:
        if self.loaded is not None and self.loaded.mode == "remote":
            badge, why = remote_state(self.loaded, self.remote_tok_s)
        else:
            badge, why = acceleration_state(self.loaded, self.decided)
        self.accel_badge.setText(badge)
        self.accel_badge.setToolTip(why)

    def _set_busy(self, busy: bool) -> None:
        self.stop_button.setEnabled(busy)
        self.send_button.setEnabled(not busy and self.model_loaded)
        idle = not busy and self.model_loaded
        has_answer = bool(self.messages) and self.messages[-1]["role"] == "assistant"
        self.regen_button.setEnabled(idle and has_answer)
        self.edit_button.setEnabled(not busy and any(m["role"] == "user" for m in self.messages))

    def transcript(self) -> str:
        return self.view.toPlainText()
