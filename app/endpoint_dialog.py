"""Remote engines: add an OpenAI-compatible server (name, base URL, optional API key), test it
before saving (its models, or why it cannot be used), edit one (selecting it fills the form, never
with its key; saving under the same name updates it) and remove one (its key leaves the keyring
too). The connection test runs off the GUI thread; the engine choice lists saved endpoints' models."""

from __future__ import annotations

import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.theme import DARK, LIGHT
from engine.remote.endpoints import (
    API_KEY_ENV,
    Endpoint,
    EndpointError,
    EndpointRegistry,
    api_key,
    api_key_source,
    check_name,
    normalise_base_url,
    store_api_key,
)
from engine.remote.engine_choice import LIST_TIMEOUTS, remote_error_text
from engine.remote.openai_api import RemoteError, Timeouts, list_models

NEW_KEY_HINT = "optional; kept in the OS keyring"
# a saved engine's key is never shown: the placeholder says whether there is one (empty keeps it)
KEY_HINTS = {
    "OS keyring": "key saved in keyring (leave empty to keep it)",
    "this session": "key kept for this session (leave empty to keep it)",
    API_KEY_ENV: f"no key saved ({API_KEY_ENV} is used)",
    "": "no key",
}
TEST_TIMEOUTS = LIST_TIMEOUTS  # a test should answer quickly or say why not


class ModelLister(QObject):
    """GET {base}/models on a thread; `listed(tag, ids or RemoteError)` arrives on the GUI thread."""

    listed = Signal(object, object)

    def list(
        self, tag: object, endpoint: Endpoint, api_key: str | Callable[[], str | None] | None, timeouts: Timeouts = TEST_TIMEOUTS
    ) -> None:
        """api_key: the key, or how to look it up (the OS keyring may be slow: off the GUI thread too)."""

        def work() -> None:
            try:
                key = api_key() if callable(api_key) else api_key
                self.listed.emit(tag, [m.id for m in list_models(endpoint, key, timeouts)])
            except RemoteError as exc:
                self.listed.emit(tag, exc)

        threading.Thread(target=work, name="list-models", daemon=True).start()


class EndpointDialog(QDialog):
    """saved(name, models listed by the test or [], why the key is kept for this session only or "")."""

    saved = Signal(str, list, str)
    removed = Signal(str)

    def __init__(self, registry: EndpointRegistry | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Remote engines")
        self.registry = registry or EndpointRegistry()
        self.models: list[str] = []  # what the last successful test listed
        self._tested = ""  # the (url, key) the models belong to
        self._test_seq = 0
        self.lister = ModelLister(self)
        self.lister.listed.connect(self._on_tested)

        self.saved_list = QListWidget()
        self.saved_list.setAccessibleName("Saved remote engines")
        self.saved_list.setMaximumHeight(110)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip("Remove the selected engine and forget its API key")
        self.remove_button.setEnabled(False)
        self.name = QLineEdit()
        self.name.setPlaceholderText("gpu-box")
        self.name.setAccessibleName("Name")
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://192.168.1.20:8080/v1")
        self.url.setAccessibleName("Base URL")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText(NEW_KEY_HINT)
        self.key.setAccessibleName("API key")
        self.test_button = QPushButton("Test connection")
        self.test_result = QLabel("llama-server, vLLM, Ollama, LM Studio, `specee serve` or a hosted OpenAI-compatible API.")
        self.test_result.setWordWrap(True)
        self.test_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.test_result.setAccessibleName("Connection test result")
        self.test_result.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.test_result.setMinimumHeight(self.fontMetrics().lineSpacing() * 5)  # a long error, wrapped
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Close)

        saved_row = QHBoxLayout()
        saved_row.addWidget(self.saved_list, 1)
        saved_row.addWidget(self.remove_button, 0, Qt.AlignmentFlag.AlignTop)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Base URL", self.url)
        form.addRow("API key", self.key)
        test_row = QHBoxLayout()
        test_row.addWidget(self.test_button)
        test_row.addStretch()
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Saved"))
        layout.addLayout(saved_row)
        self.form_title = QLabel("Add an OpenAI-compatible server")
        layout.addWidget(self.form_title)
        layout.addLayout(form)
        layout.addLayout(test_row)
        layout.addWidget(self.test_result, 1)
        layout.addWidget(self.buttons)
        self.resize(560, 420)

        self.test_button.clicked.connect(self.test_connection)
        self.buttons.button(QDialogButtonBox.StandardButton.Save).clicked.connect(self.save)
        self.buttons.rejected.connect(self.reject)
        self.remove_button.clicked.connect(self.remove_selected)
        self.saved_list.currentItemChanged.connect(self._on_selected)
        self._fill_saved()

    def _fill_saved(self) -> None:
        self.saved_list.clear()
        for e in self.registry.all():
            item = QListWidgetItem(f"{e.name}  ·  {e.base_url}")
            item.setData(Qt.ItemDataRole.UserRole, e.name)
            self.saved_list.addItem(item)
        if not self.saved_list.count():
            self.saved_list.addItem("none yet")
            self.saved_list.item(0).setFlags(Qt.ItemFlag.NoItemFlags)
        self.remove_button.setEnabled(False)

    def _on_selected(self, item: QListWidgetItem | None, _old: QListWidgetItem | None = None) -> None:
        """A saved engine fills the form to edit it (its key never: the placeholder says if one is saved)."""
        name = item.data(Qt.ItemDataRole.UserRole) if item else None
        self.remove_button.setEnabled(bool(name))
        if not name:
            return
        try:
            endpoint = self.registry.get(name)
        except EndpointError as exc:  # removed meanwhile (`specee endpoints remove`)
            self._say(str(exc), error=True)
            return
        self.name.setText(endpoint.name)
        self.url.setText(endpoint.base_url)
        self.key.clear()
        self.key.setPlaceholderText(KEY_HINTS.get(api_key_source(name)[1], "no key"))
        self.form_title.setText(f"Edit {name} (save under another name to add a new engine)")
        self.models, self._tested = [], ""

    def _saved_names(self) -> set[str]:
        return {e.name for e in self.registry.all()}

    def _endpoint(self) -> Endpoint | None:
        """The form as an endpoint, or None with the reason shown."""
        try:
            name = check_name(self.name.text().strip() or "test")
            return Endpoint(name, normalise_base_url(self.url.text()))
        except EndpointError as exc:
            self._say(str(exc), error=True)
            return None

    def _say(self, text: str, error: bool = False) -> None:
        self.test_result.setText(text)
        dark = self.palette().window().color().lightness() < 128
        self.test_result.setStyleSheet(f"color: {(DARK if dark else LIGHT).danger}" if error else "")

    def test_connection(self) -> None:
        endpoint = self._endpoint()
        if endpoint is None:
            return
        self._test_seq += 1
        self.test_button.setEnabled(False)
        self._say(f"Asking {endpoint.url('models')} for its models…")
        typed = self.key.text().strip()
        # editing a saved engine with the key field empty: test with its stored key
        key = typed or ((lambda: api_key(endpoint.name)) if endpoint.name in self._saved_names() else None)
        self.lister.list((self._test_seq, endpoint.base_url, typed), endpoint, key)

    def _on_tested(self, tag: tuple[int, str, str], result: list[str] | RemoteError) -> None:
        seq, url, key = tag
        if seq != self._test_seq:
            return  # an earlier test (the form changed since)
        self.test_button.setEnabled(True)
        if isinstance(result, RemoteError):
            self.models, self._tested = [], ""
            self._say(remote_error_text(result), error=True)
            return
        self.models, self._tested = result, f"{url}\n{key}"
        if result:
            shown = ", ".join(result[:8]) + (f" and {len(result) - 8} more" if len(result) > 8 else "")
            self._say(f"Connected. Models: {shown}")
        else:
            self._say("Connected, but the server lists no models yet: load one there first.", error=True)

    def save(self) -> None:
        if not self.name.text().strip():
            self._say("Give the engine a name (for example gpu-box): it is how the model switcher shows it.", error=True)
            return
        endpoint = self._endpoint()
        if endpoint is None:
            return
        key = self.key.text().strip()
        previous = next((e for e in self.registry.all() if e.name == endpoint.name), None)
        if previous is not None:
            endpoint.model = previous.model  # an edit keeps the chosen model
        try:
            endpoint = self.registry.add(endpoint)
        except EndpointError as exc:
            self._say(str(exc), error=True)
            return
        why = store_api_key(endpoint.name, key) if key else ""  # empty: a saved key is kept
        models = self.models if self._tested == f"{endpoint.base_url}\n{key}" else []
        self.saved.emit(endpoint.name, models, why)
        self._fill_saved()
        self.name.clear()
        self.url.clear()
        self.key.clear()
        self.key.setPlaceholderText(NEW_KEY_HINT)
        self.form_title.setText("Add an OpenAI-compatible server")
        self.models, self._tested = [], ""
        kept = f" Its API key is kept for this session only: {why}." if why else ""
        verb = "Updated" if previous is not None else "Saved"
        self._say(f"{verb} {endpoint.name}: pick its models in the model switcher.{kept}", error=bool(why))
        if not why:
            self.accept()

    def remove_selected(self) -> None:
        item = self.saved_list.currentItem()
        name = item.data(Qt.ItemDataRole.UserRole) if item else None
        if not name:
            return
        try:
            self.registry.remove(name)  # forgets its key too
        except EndpointError as exc:
            self._say(str(exc), error=True)
            return
        self._fill_saved()
        self._say(f"Removed {name} and forgot its API key.")
        self.removed.emit(name)
