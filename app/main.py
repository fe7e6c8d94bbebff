"""The chat window's start: one instance, the theme, the window, its engine. `specee-chat` (specee_entry.py)
runs it unless a flag asks for the worker, the server, the self-test or the version."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from app.single_instance import SingleInstance
from app.theme import apply_theme, startup_theme
from engine.settings import load_settings


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    running = QApplication.instance()
    app = running if isinstance(running, QApplication) else QApplication(argv)
    app.setApplicationName("SpecEE Chat")
    app.setOrganizationName("SpecEE Chat")
    instance = SingleInstance()
    if instance.signal_running():
        print("SpecEE Chat is already running: its window was brought to the front.", file=sys.stderr)
        return 0
    apply_theme(app, startup_theme(load_settings().theme))  # before any widget: no flash of the other theme
    window = MainWindow()

    def to_front() -> None:
        window.showNormal()
        window.raise_()
        window.activateWindow()

    instance.listen(to_front)
    window.show()
    window.start_engine()
    if "--screenshot" in argv[1:]:
        _screenshot_then_quit(app, window, argv[argv.index("--screenshot") + 1])
    return app.exec()


def _screenshot_then_quit(app: QApplication, window: MainWindow, path: str) -> None:
    """Installer smoke test: load, answer one question, save the window as PNG, quit."""
    from PySide6.QtCore import QTimer

    from engine import protocol as p

    window.sampling = p.Sampling.greedy(24)

    def ask() -> None:
        if not window.model_loaded:
            QTimer.singleShot(100, ask)
            return
        window.input.setPlainText("Say hello in one sentence.")
        window.send_message()
        QTimer.singleShot(100, done)

    def done() -> None:
        if window.request_id:
            QTimer.singleShot(100, done)
            return
        window.grab().save(path)
        window.close()
        app.quit()

    QTimer.singleShot(0, ask)
    QTimer.singleShot(120_000, app.quit)


if __name__ == "__main__":
    sys.exit(main())
