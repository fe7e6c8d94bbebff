"""The main window's places: the dialogs it opens from the sidebar, the header and the menu bar (remote
engines, About, the model manager, My models, Settings, training acceleration, the shortcuts help) and
what their answers do to the window. A part of MainWindow (app/main_window.py), kept apart so that no app/ file grows past
~400 lines; it draws and sends intent like the rest of the window."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import QMessageBox

from app.endpoint_dialog import EndpointDialog
from app.menu_bar import MenuBar
from app.model_manager import ModelManager
from app.model_resolver import ModelResolver
from app.my_models import MyModels, open_my_models
from app.settings_dialog import SettingsDialog
from app.shortcuts_help import ShortcutsHelp
from app.train_runner import TrainRunner
from app.window_parts import WindowParts
from engine.about import about_text
from engine.settings import save_settings

ABOUT = "Local chat with SpecEE early exit and EAGLE drafting."


class WindowPlaces(WindowParts):
    """MainWindow's dialogs (a mixin: it works on the window's own widgets and state, as WindowParts declares them)."""

    def open_endpoint_dialog(self) -> EndpointDialog:
        dialog = EndpointDialog(self.choice.endpoints, self)
        dialog.saved.connect(self._on_endpoint_saved)
        dialog.removed.connect(self.choice.endpoint_removed)
        dialog.show()
        return dialog

    def _on_endpoint_saved(self, name: str, models: list[str], why: str) -> None:
        self.choice.endpoint_saved(name, models)
        if why:
            self.status.say(f"The API key for {name} is kept for this session only: {why}", error=True)

    def _make_menu_bar(self) -> MenuBar:
        """Every menu entry is a slot the window's buttons, switches or keys already use."""
        menu = MenuBar(
            {
                "new_chat": self.new_conversation, "import_chat": self.sidebar.import_button.click,
                "settings": self.open_settings, "quit": self.close, "search": self.sidebar.focus_search,
                "generation": self.panel.open_generation, "attach": self.panel.attach_file, "stop": self.stop_answer,
                "undo_delete": self.sidebar.undo_delete, "switch_model": self.open_model_switcher,
                "my_models": self.open_my_models, "download_models": self.open_model_manager, "serve": self.toggle_serving,
                "copy_api_address": self.serve_switch.copy_address, "shortcuts": self.open_shortcuts_help,
                "about": self._about,
            }
        )  # fmt: skip
        serve, copy = menu.actions_by_name["serve"], menu.actions_by_name["copy_api_address"]
        serve.setCheckable(True)

        def server_state() -> None:  # the switch's state, as the menu opens
            serve.setChecked(self.serve_switch.toggle.isChecked())
            copy.setEnabled(self.serve_switch.serving)

        menu.menus["Server"].aboutToShow.connect(server_state)
        return menu

    def open_shortcuts_help(self) -> ShortcutsHelp:
        if self.shortcuts_help is None:  # one, raised again when asked again
            self.shortcuts_help = ShortcutsHelp(self)
        self.shortcuts_help.show()
        self.shortcuts_help.raise_()
        self.shortcuts_help.activateWindow()
        return self.shortcuts_help

    def open_model_switcher(self) -> None:
        """The header's model switcher, opened (Ctrl+L): arrows and Enter pick a model."""
        self.model_switch.setFocus()
        self.model_switch.showPopup()

    def toggle_serving(self) -> None:
        """The Serve API switch, as if clicked; when it cannot be switched now, why."""
        toggle = self.serve_switch.toggle
        if toggle.isEnabled():
            toggle.click()
        else:  # a remote engine answers the chat, or the server is starting
            self.status.say(toggle.toolTip() if self.serve_switch.blocked else "The API server is starting…")

    def _about(self) -> None:
        QMessageBox.about(self, "About SpecEE Chat", about_text(self.native_info) + "\n\n" + ABOUT)

    def repair_default_model(self) -> None:
        """The default model's file is damaged: fetch it again (verified), then load it."""
        self.repair_button.setVisible(False)
        resolver = ModelResolver(self)
        resolver.progress.connect(self.state_label.setText)
        resolver.resolved.connect(self.switch_model)
        resolver.failed.connect(lambda msg: self._show_error("model_file", msg))
        resolver.run(repair=True)

    def open_model_manager(self) -> ModelManager:
        dialog = ModelManager(self)
        dialog.use_model.connect(self.switch_model)
        dialog.finished.connect(lambda _r: self.refresh_models())
        dialog.show()
        return dialog

    def open_my_models(self, select: str = "") -> MyModels:
        return open_my_models(self, select)

    def open_settings(self) -> SettingsDialog:
        local = self.choice.is_remote  # the settings are the local model's
        loaded, decided = (self.choice.local_loaded, self.choice.local_decided) if local else (self.loaded, self.decided)
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
                if self.choice.is_remote:  # the local model loads with them when the chat goes back to it
                    self.choice.drop_local_model()
                elif self.model_path:
                    self.switch_model(self.model_path)

        dialog.accepted.connect(apply)
        dialog.show()
        return dialog

    def _save_settings(self) -> None:
        try:
            save_settings(self.settings)
        except OSError as exc:  # a full or read-only disk: the choice holds for this session
            self.statusBar().showMessage(f"Settings could not be saved: {exc}", 8000)

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
