"""Screenshots for the README and the user guide (docs/user-guide.md): the first-run pane, the main
window (light and dark) with a streamed answer and the speed meter, the model switcher open, the
settings page explaining the plan, and the model manager mid-download from a local hub server serving
the real model, and the switcher with a
remote engine (a real llama-server on 127.0.0.1 that has just answered); with --versions-only, the
message actions (versions, a stopped answer, a question being edited); with --files-only, a chat with
a PDF and a file waiting to go, and the chat's Generation dialog.

    QT_QPA_PLATFORM=offscreen .venv/bin/python -m tests.make_screenshots [--out docs/screenshots]
        [--remote-only|--versions-only|--files-only]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import platformdirs

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--theme", choices=["light", "dark"], required=False)
    ap.add_argument("--remote-only", action="store_true", help="only model-switcher-remote-light.png")
    ap.add_argument("--versions-only", action="store_true", help="only message-versions-light.png")
    ap.add_argument("--files-only", action="store_true", help="only chat-with-file-light.png and generation-light.png")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"  # never the user's keyring
    if args.remote_only:
        os.environ["SPECEE_THEME"] = "light"
        return remote_switcher(out)
    if args.versions_only:
        os.environ["SPECEE_THEME"] = "light"
        return message_versions(out)
    if args.files_only:
        os.environ["SPECEE_THEME"] = "light"
        return chat_with_files(out)
    if args.theme is None:  # one process per theme: a palette is per application
        import subprocess

        for theme in ("light", "dark"):
            env = {**os.environ, "SPECEE_THEME": theme, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen")}
            subprocess.run(
                [sys.executable, "-m", "tests.make_screenshots", "--out", str(out), "--theme", theme],
                check=True,
                env=env,
                cwd=ROOT,
            )
        return 0

    tmp = scratch("specee-shots-")
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.theme import apply_theme
    from engine import protocol as p
    from engine.chats.store import ConversationStore
    from engine.cli import main as cli
    from engine.models.default_model import default_model_path, ensure_default_model

    model = ensure_default_model()  # the user's copy, fetched once
    # The screenshots' own data dir, never the user's: the default model linked in unregistered (so
    # the first-run pane checks it, as on a first start) and a copy added as `specee models add` would.
    os.environ["SPECEE_DATA_DIR"] = str(tmp / "data")
    default_model_path().parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model, default_model_path())
    shutil.copyfile(model, tmp / "my-notes-model.gguf")
    cli(["models", "add", str(tmp / "my-notes-model.gguf")])
    app = QApplication(sys.argv)
    app.setEffectEnabled(Qt.UIEffect.UI_AnimateCombo, False)  # the open switcher is grabbed at once
    apply_theme(app)
    store = ConversationStore(tmp / "chats.db")
    for title in ("Bread history", "Bike maintenance", "Haiku about rain"):
        c = store.create(title)
        store.append(c.id, "user", title)
    w = MainWindow(sampling=p.Sampling.greedy(160), store=store)  # as on first run: no model chosen
    w.resize(1180, 760)
    w.show()
    w.start_engine()
    QTimer.singleShot(300, lambda: w.grab().save(str(out / f"first-run-{args.theme}.png")))
    state = {"shot": False}

    def ask() -> None:
        if not w.model_loaded:
            QTimer.singleShot(100, ask)
            return
        w.input.setPlainText("Write a Python function that checks whether a number is prime, then explain it briefly.")
        w.send_message()
        QTimer.singleShot(100, wait)

    def wait() -> None:
        if w.request_id and len(w.answer) > 250 and not state["shot"]:
            w.grab().save(str(out / f"main-window-{args.theme}-streaming.png"))
            state["shot"] = True
        if w.request_id:
            QTimer.singleShot(50, wait)
            return
        w.grab().save(str(out / f"main-window-{args.theme}.png"))
        settings = w.open_settings()
        settings.resize(640, 700)
        app.processEvents()
        settings.grab().save(str(out / f"settings-{args.theme}.png"))
        settings.close()
        grab_with_switcher_open(app, w, out / f"model-switcher-{args.theme}.png")
        if args.theme == "light":
            manager()
        else:
            finish()

    def manager() -> None:
        from tests.hf_server import HubServer

        hub = HubServer()
        hub.add_repo("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", {"SmolLM2-135M-Instruct.Q4_1.gguf": model})
        hub.__enter__()
        os.environ["HF_ENDPOINT"] = hub.url
        d = w.open_model_manager()
        d.resize(820, 520)
        d.search.setText("SmolLM2")
        d.run_search()
        grabbed = {"done": False}

        def on_progress(pr) -> None:
            if not grabbed["done"] and pr.done > 0.4 * pr.total:
                grabbed["done"] = True
                d.grab().save(str(out / "model-manager-downloading.png"))
                d.cancel.set()

        def pick() -> None:
            if d.repos.count() and not d.files.count():
                d.repos.setCurrentRow(0)
            if not d.files.count():
                QTimer.singleShot(100, pick)
                return
            d.files.setCurrentRow(0)
            d.signals.progress.connect(on_progress)
            d.start_download()
            QTimer.singleShot(200, lambda: done(d, hub))

        def done(d, hub) -> None:
            if not grabbed["done"]:
                QTimer.singleShot(100, lambda: done(d, hub))
                return
            hub.__exit__()
            finish()

        QTimer.singleShot(100, pick)

    def finish() -> None:
        w.close()
        app.quit()

    QTimer.singleShot(0, ask)
    QTimer.singleShot(180_000, app.quit)
    app.exec()
    if args.theme == "light":
        remote_switcher(out)
    return 0


def message_versions(out: Path) -> int:
    """A chat with a regenerated answer (its versions paged "2/2"), a stopped answer with its mark and
    Continue, and a question being edited (the note, Send edit): the message actions."""
    tmp = scratch("specee-shots-versions-")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.theme import apply_theme
    from engine import protocol as p
    from engine.chats.store import ConversationStore
    from engine.models.default_model import ensure_default_model

    model = ensure_default_model()
    os.environ["SPECEE_DATA_DIR"] = str(tmp / "data")
    app = QApplication(sys.argv)
    apply_theme(app)
    w = MainWindow(model_path=model, sampling=p.Sampling.greedy(40), store=ConversationStore(tmp / "chats.db"))
    w.resize(1180, 760)
    w.show()
    w.start_engine()

    def when(ready, then) -> None:
        QTimer.singleShot(100, lambda: then() if ready() else when(ready, then))

    idle = lambda: w.model_loaded and not w.request_id  # noqa: E731

    def ask() -> None:
        w.input.setPlainText("Name a red fruit and say one thing about it.")
        w.send_message()
        when(idle, regenerate)

    def regenerate() -> None:
        w.sampling = replace(p.Sampling(max_tokens=40), seed=7)  # another answer, reproducibly
        w.regen_button.click()
        when(idle, story)

    def story() -> None:
        w.sampling = p.Sampling.greedy(400)
        w.input.setPlainText("Tell me a long story about a lighthouse keeper.")
        w.send_message()
        when(lambda: len(w.answer) > 160, stop)

    def stop() -> None:
        w.stop_button.click()
        when(idle, edit)

    def edit() -> None:
        w.panel.edit(2)
        app.processEvents()
        w.grab().save(str(out / "message-versions-light.png"))
        w.close()
        app.quit()

    when(lambda: w.model_loaded, ask)
    QTimer.singleShot(180_000, app.quit)
    app.exec()
    return 0


def chat_with_files(out: Path) -> int:
    """A question asked with a PDF (its chip on the message), a Markdown file waiting to go with the
    next one (its chip and count above the message box), and the chat's Generation dialog."""
    tmp = scratch("specee-shots-files-")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.theme import apply_theme
    from engine import protocol as p
    from engine.chats.store import ConversationStore
    from engine.models.default_model import ensure_default_model
    from tests.pdf_fixture import write_pdf

    model = ensure_default_model()
    os.environ["SPECEE_DATA_DIR"] = str(tmp / "data")
    pdf = write_pdf(tmp / "sourdough.pdf", ["Sourdough bread", "Feed the starter the night before.", "Bake 40 minutes at 230 C."])
    notes = tmp / "notes.md"
    notes.write_text("# Timings\n\n- rise: 4 hours\n- proof: overnight in the fridge\n")
    app = QApplication(sys.argv)
    apply_theme(app)
    w = MainWindow(model_path=model, sampling=p.Sampling.greedy(60), store=ConversationStore(tmp / "chats.db"))
    w.resize(1180, 760)
    w.show()
    w.start_engine()

    def when(ready, then) -> None:
        QTimer.singleShot(100, lambda: then() if ready() else when(ready, then))

    def ask() -> None:
        w.panel.attach_file(str(pdf))
        w.input.setPlainText("How long does the bread bake, and at what temperature?")
        when(lambda: w.chat.count is not None, lambda: (w.send_message(), when(lambda: not w.request_id, next_file)))

    def next_file() -> None:
        w.panel.attach_file(str(notes))
        w.input.setPlainText("And how long should it rise?")
        when(lambda: w.chat.count is not None, shoot)

    def shoot() -> None:
        app.processEvents()
        w.grab().save(str(out / "chat-with-file-light.png"))
        dialog = w.panel.open_generation()
        QTimer.singleShot(300, lambda: (dialog.grab().save(str(out / "generation-light.png")), w.close(), app.quit()))

    when(lambda: w.model_loaded, ask)
    QTimer.singleShot(180_000, app.quit)
    app.exec()
    return 0


def scratch(prefix: str) -> Path:
    """A folder for the screenshots' own data dir, removed when the script ends, and their own app
    cache (auto's decisions, logs): what the user's machine measured earlier never shows in them."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, tmp, True)
    user_cache = Path(os.environ.get("SPECEE_CACHE_DIR") or platformdirs.user_cache_dir("specee-chat"))
    os.environ.setdefault("SPECEE_NATIVE_CACHE", str(user_cache / "native"))  # the build stays shared
    os.environ["SPECEE_CACHE_DIR"] = str(tmp / "cache")
    return tmp


def remote_switcher(out: Path) -> int:
    """The switcher open on a remote engine's entry, after it answered (badge: remote · tok/s)."""
    import subprocess

    if "--remote-only" not in sys.argv:  # a fresh process: one QApplication (and palette) each
        cmd = [sys.executable, "-m", "tests.make_screenshots", "--out", str(out), "--remote-only"]
        return subprocess.run(cmd, check=True, cwd=ROOT).returncode
    tmp = scratch("specee-shots-remote-")
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.theme import apply_theme
    from engine import protocol as p
    from engine.chats.store import ConversationStore
    from engine.models.default_model import ensure_default_model
    from engine.remote.endpoints import Endpoint, EndpointRegistry
    from tests.remote_servers import build_llama_server, running_llama_server

    model = ensure_default_model()
    os.environ["SPECEE_DATA_DIR"] = str(tmp / "data")
    with running_llama_server(build_llama_server(), model, tmp / "server.log") as url:
        EndpointRegistry().add(Endpoint("lab-server", url))
        app = QApplication(sys.argv)
        app.setEffectEnabled(Qt.UIEffect.UI_AnimateCombo, False)
        apply_theme(app)
        w = MainWindow(model_path=model, sampling=p.Sampling.greedy(60), store=ConversationStore(tmp / "chats.db"))
        w.resize(1180, 760)
        w.show()
        w.start_engine()

        def pick() -> None:
            s = w.model_switch
            i = next((i for i in range(s.count()) if s.itemText(i).startswith("lab-server / ")), -1)
            if not w.model_loaded or i < 0:
                QTimer.singleShot(100, pick)
                return
            s.setCurrentIndex(i)
            s.activated.emit(i)
            QTimer.singleShot(100, ask)

        def ask() -> None:
            if not w.model_loaded:
                QTimer.singleShot(100, ask)
                return
            w.input.setPlainText("In one sentence: why run a model on another machine?")
            w.send_message()
            QTimer.singleShot(100, shoot)

        def shoot() -> None:
            if w.request_id:
                QTimer.singleShot(100, shoot)
                return
            grab_with_switcher_open(app, w, out / "model-switcher-remote-light.png")
            w.close()
            app.quit()

        QTimer.singleShot(0, pick)
        QTimer.singleShot(180_000, app.quit)
        app.exec()
    return 0


def grab_with_switcher_open(app, w, path: Path) -> None:
    """The window with its model switcher open: the popup is its own window, painted where it opens."""
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QPainter

    w.model_switch.showPopup()
    app.processEvents()
    popup = w.model_switch.view().window()
    shot = w.grab()
    painter = QPainter(shot)
    painter.drawPixmap(popup.pos() - w.mapToGlobal(QPoint(0, 0)), popup.grab())
    painter.end()
    shot.save(str(path))
    w.model_switch.hidePopup()


if __name__ == "__main__":
    sys.exit(main())
