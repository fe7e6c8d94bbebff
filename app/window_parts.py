"""What the main window's parts share: the widgets and state MainWindow (app/main_window.py) builds,
and the window's own actions its parts call. WindowPlaces (the dialogs) and WindowDrafts (the unsent
messages) subclass this instead of importing MainWindow, so app/ has no import cycle and the type
checker sees every name a part uses. Declarations only: MainWindow assigns and defines them all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtWidgets import QMainWindow, QPushButton

from app.chat_panel import ChatPanel
from app.composer import PromptEdit
from app.elided_label import ElidedLabel
from app.engine_switcher import EngineSwitcher
from app.serve_switch import ServeSwitch
from app.shortcuts_help import ShortcutsHelp
from app.sidebar import ConversationSidebar
from app.status_bar import StatusBar
from app.train_runner import TrainRunner
from engine import protocol as p
from engine.chats.session import ChatSession
from engine.chats.store import ConversationStore
from engine.remote.engine_choice import EngineChoice
from engine.settings import AppSettings


class WindowParts(QMainWindow):
    # the chat and its settings
    store: ConversationStore
    chat: ChatSession
    settings: AppSettings
    choice: EngineChoice  # which engine answers
    native_info: dict[str, Any] | None  # Ready.native of the running worker
    loaded: p.Loaded | None
    decided: p.AutoDecided | None
    trainer: TrainRunner | None
    shortcuts_help: ShortcutsHelp | None
    # widgets
    sidebar: ConversationSidebar
    panel: ChatPanel
    input: PromptEdit
    status: StatusBar
    state_label: ElidedLabel
    serve_switch: ServeSwitch
    model_switch: EngineSwitcher
    repair_button: QPushButton
    train_button: QPushButton
    # the window's actions
    new_conversation: Callable[[], None]
    open_conversation: Callable[[str], None]
    stop_answer: Callable[[], None]
    switch_model: Callable[[str], None]
    refresh_models: Callable[[], None]
    set_theme: Callable[[str], None]
    _show_error: Callable[[str, str], None]
    _render: Callable[[], None]

    @property
    def model_path(self) -> str | None:
        """The local model (the last one asked of the worker)."""
        return self.choice.local_path

    @model_path.setter
    def model_path(self, path: str | None) -> None:
        self.choice.local_path = path

    @property
    def conv_id(self) -> str | None:
        return self.chat.conv_id

    @property
    def notices(self) -> list[str]:
        return self.chat.notices
