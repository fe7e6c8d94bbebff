"""Settings: the acceleration mode, threads and context length, each explained; and, in plain words,
what the engine runs now and why (the worker's Loaded.plan, mode_reason and measured speeds)."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.model_status import MEASURED, PREDICTED, mode_label, speeds_text
from engine import kept_caches
from engine import protocol as p
from engine.hardware import physical_cores
from engine.models.download import models_dir
from engine.settings import KV_DISK_GB_MAX, MODES, N_CTX_MAX, N_CTX_MIN, N_THREADS_MAX, THEMES, AppSettings

THEME_NAMES = {"system": "System", "light": "Light", "dark": "Dark"}

MODE_HELP = {
    "auto": "Starts at once in plain decoding, measures every mode this model can run on this machine "
    "while you read, and switches to the fastest (if it beats plain decoding by 3%).",
    "vanilla": "One full forward pass per token: the reference speed and output.",
    "eagle": "A small trained head drafts several tokens, the model checks them in one pass; output is "
    "identical to plain decoding. Needs EAGLE weights for this model.",
    "specee": "Stops each token's forward pass early once the next token is settled; fastest where it "
    "pays, output may differ slightly. Needs EAGLE + SpecEE weights for this model.",
    "ngram": "Drafts from what came earlier in the chat (no weights needed); identical output. Pays when "
    "answers repeat or quote text.",
    "draft": "A smaller installed model with the same tokenizer drafts; identical output.",
    "combined": "ngram's drafts where they pay, SpecEE's early exits on the other tokens; drafted text is "
    "checked in full, the rest may differ slightly. Needs EAGLE + SpecEE weights for this model.",
}


def _section(title: str) -> QLabel:
    label = QLabel(title)
    label.setStyleSheet("font-weight: 600; font-size: 14px; margin-top: 8px;")
    return label


def _para(text: str) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def threads_text(n: int) -> str:
    return "1 thread" if n == 1 else f"{n} threads"


def why_not(mode: str, a: p.Acceleration) -> str:
    """Why the loaded model cannot run `mode` here, from the worker's flags (never its reason texts)."""
    if mode == "draft":
        return "no smaller installed model shares its tokenizer"
    if not a.architecture_supported:
        return f"its architecture has no {mode} support"
    if not a.eagle_head:
        return "no EAGLE head is installed for it"
    return "no SpecEE exit predictors are installed for it" if not a.exit_predictors else "not where its layers are placed"


def offered_modes(loaded: p.Loaded | None) -> tuple[list[str], str]:
    """The modes Settings offers (auto, then what the loaded model can run here) and, in words, why
    the others are not; every mode when no model is loaded."""
    if loaded is None or not loaded.acceleration.modes:
        return list(MODES), ""
    runnable = [str(m) for m in loaded.acceleration.modes]
    missing = [m for m in MODES if m not in ("auto", *runnable)]
    why = "; ".join(f"{m}: {why_not(m, loaded.acceleration)}" for m in missing)
    return ["auto", *runnable], f"Not available for {loaded.name or 'this model'}: {why}." if why else ""


def engine_summary(loaded: p.Loaded | None, decided: p.AutoDecided | None) -> list[str]:
    """Plain-words paragraphs about what the worker loaded and decided."""
    if loaded is None:
        return ["No model is loaded yet. The engine explains its plan here once it has loaded one."]
    mode = decided.mode if decided else loaded.mode
    reason = (decided.mode_reason if decided else loaded.mode_reason) or ""
    out = [
        f"Running {loaded.name or 'the model'} ({loaded.n_layer} layers) with {mode_label(mode)}, "
        f"{threads_text(loaded.n_threads)} and a context of {loaded.n_ctx} tokens"
        + (f" (trained for {loaded.n_ctx_train})." if loaded.n_ctx_train else ".")
    ]
    if reason:
        out.append(f"Why this mode: {reason}")
    speeds = {**loaded.measured_tok_s, **(decided.measured_tok_s if decided else {})}
    if speeds:
        out.append(f"Speeds: {speeds_text(speeds, MEASURED)}.")
    elif loaded.predicted_tok_s:
        out.append(f"Speeds: {speeds_text(loaded.predicted_tok_s, PREDICTED)} (by the placement plan, not measured yet).")
    if loaded.plan:
        out.append(f"Placement: {loaded.plan}")
    if loaded.trainable:
        out.append("No acceleration weights are installed for this model: the training-free modes work now, "
                   "and Train acceleration (in the header) trains EAGLE weights for it.")  # fmt: skip
    if loaded.chat_format_note:
        out.append(loaded.chat_format_note)
    return out


class SettingsDialog(QDialog):
    def __init__(
        self,
        settings: AppSettings,
        loaded: p.Loaded | None = None,
        decided: p.AutoDecided | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.resize(620, 640)
        self.mode = QComboBox()
        modes, self.not_offered = offered_modes(loaded)
        for m in modes:
            self.mode.addItem(m, m)
        # the mode asked for, where the model runs it (else what runs now)
        running = str(decided.mode if decided else loaded.mode) if loaded else "auto"
        self.mode.setCurrentText(settings.mode if settings.mode in modes else running if running in modes else "auto")
        self.mode.setAccessibleName("Acceleration mode")
        self.mode_help = _para("")
        self.mode_help.setObjectName("hint")
        self.mode.currentTextChanged.connect(lambda m: self.mode_help.setText(MODE_HELP.get(m, "")))
        self.mode_help.setText(MODE_HELP.get(self.mode.currentText(), ""))
        self.threads = QSpinBox()
        self.threads.setRange(0, N_THREADS_MAX)
        # the count the engine runs with (its Loaded), else this machine's cores: one number throughout
        cores = loaded.n_threads if loaded and not settings.n_threads else physical_cores()
        self.threads.setSpecialValueText(f"automatic ({threads_text(cores)})")
        self.threads.setValue(settings.n_threads)
        self.threads.setAccessibleName("Threads")
        self.ctx = QSpinBox()
        self.ctx.setRange(N_CTX_MIN, N_CTX_MAX)
        self.ctx.setSingleStep(1024)
        self.ctx.setValue(settings.n_ctx)
        self.ctx.setAccessibleName("Context length")
        self.kv_disk = QSpinBox()
        self.kv_disk.setRange(0, KV_DISK_GB_MAX)
        self.kv_disk.setSuffix(" GB")
        self.kv_disk.setSpecialValueText("none (memory only)")
        self.kv_disk.setValue(settings.kv_disk_gb)
        self.kv_disk.setAccessibleName("Disk for saved conversations")
        self.kv_usage = QLabel()
        self.kv_clear = QPushButton("Clear saved conversations")
        self.kv_clear.setToolTip("Delete the saved caches on disk; each chat then reads its history again once")
        self.kv_clear.clicked.connect(self.clear_kept_caches)
        self.show_kept_caches()
        self.theme = QComboBox()
        for t in THEMES:
            self.theme.addItem(THEME_NAMES[t], t)
        self.theme.setCurrentIndex(max(self.theme.findData(settings.theme), 0))
        self.theme.setAccessibleName("Theme")
        self.theme.setToolTip("System follows your computer's light or dark setting")

        page = QWidget()
        col = QVBoxLayout(page)
        col.setContentsMargins(20, 12, 20, 12)
        col.addWidget(_section("What the engine runs now"))
        self.engine_labels = [_para(text) for text in engine_summary(loaded, decided)]
        for label in self.engine_labels:
            col.addWidget(label)
        line = QFrame()
        line.setFrameShape(QFrame.Shape.HLine)
        col.addWidget(line)
        col.addWidget(_section("Acceleration"))
        form = QFormLayout()
        form.addRow("Mode", self.mode)
        col.addLayout(form)
        col.addWidget(self.mode_help)
        if self.not_offered:
            col.addWidget(_para(self.not_offered))
        col.addWidget(_section("Speed and memory"))
        form2 = QFormLayout()
        form2.addRow("Threads", self.threads)
        form2.addRow("Context length (tokens)", self.ctx)
        col.addLayout(form2)
        col.addWidget(
            _para(
                "Threads: automatic uses the cores other programs leave free, checked twice a second. "
                "Context: how much of the chat the model sees at once; longer costs memory, and the oldest "
                "turns are dropped (with a notice) when a chat outgrows it."
            )
        )
        col.addWidget(_section("Saved conversations"))
        form4 = QFormLayout()
        form4.addRow("Disk to use", self.kv_disk)
        used = QHBoxLayout()
        used.addWidget(self.kv_usage, 1)
        used.addWidget(self.kv_clear)
        form4.addRow("Saved now", used)
        col.addLayout(form4)
        col.addWidget(
            _para(
                "Going back to a chat, editing or regenerating its last message, switching models and back, or "
                "restarting the app reads only what is new: the model's cache of each recent chat is kept in "
                "memory and, when it leaves memory, on disk (oldest out first). Plain and ngram decoding, "
                f"on the CPU. Where: {kept_caches.kv_states_root()}"
            )
        )
        col.addWidget(_section("Appearance"))
        form3 = QFormLayout()
        form3.addRow("Theme", self.theme)
        col.addLayout(form3)
        col.addWidget(_section("Where things are"))
        col.addWidget(_para(f"Models: {models_dir()}"))
        col.addStretch()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(page)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Apply and reload")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        outer = QVBoxLayout(self)
        outer.addWidget(scroll, 1)
        outer.addWidget(buttons)

    def show_kept_caches(self) -> None:
        usage = kept_caches.disk_usage()
        self.kv_usage.setText(usage.text())
        self.kv_clear.setEnabled(usage.n_files > 0)

    def clear_kept_caches(self) -> None:
        kept_caches.clear()
        self.show_kept_caches()

    def result_settings(self, base: AppSettings) -> AppSettings:
        mode, theme = self.mode.currentText(), self.theme.currentData()
        return replace(
            base, mode=mode, n_threads=self.threads.value(), n_ctx=self.ctx.value(), theme=theme,
            kv_disk_gb=self.kv_disk.value(),
        )  # fmt: skip
